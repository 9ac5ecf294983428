"""Load a ``.pt2`` (torch.export.save) with its weights memory-mapped from the file.

``torch.export.load`` reads every weight into memory. A compile needs the weights' bytes only
where a pass reads one and where the parameter archive is written, so after loading, each
weight is swapped for a view of its record in the file, mapped read-only (the records are
stored uncompressed), and torch's copy is freed: the process holds the program and the pages
it touches, not a second copy of the model. The archive writer copies a mapped weight file to
file (core/params.py ``file_region``, runtime/session.py ``write_parameter_archive``), so
writing the archive reads no weight into memory either.

The weights then share the file's pages: the ``.pt2`` must not be rewritten while the program
(or a model compiled from it) is in use, as with any memory-mapped weights.

Only this module's imports are light (torch, no torch-mlir or IREE): ``cuvil compile`` loads
the program before the compiler's libraries, so the peak of loading is torch's alone.
"""

from __future__ import annotations

import mmap
import os
import warnings
import zipfile

from cuvil_mlir.core.diagnostics import ImportError_, require_file

# the weights' description torch.export.save writes into the archive (one per program name)
WEIGHTS_CONFIG = "data/weights/model_weights_config.json"
WEIGHTS_DIR = "data/weights/"
# smaller records stay torch's copies: mapping pays off for weights, not for scalars and biases
MIN_MAPPED_BYTES = 1 << 16


def load(path: str | os.PathLike, *, mapped: bool = True):
    """The ExportedProgram saved at ``path``; ``mapped``: its weights are views of the file."""
    import torch

    path = require_file(path, "model file")
    if not zipfile.is_zipfile(path):
        raise ImportError_(f"{path} is not a model: expected a .pt2 archive written by torch.export.save")
    try:
        program = torch.export.load(str(path))
    except Exception as e:
        raise ImportError_(f"{path} is not a loadable torch.export program: {type(e).__name__}: {e}") from e
    if mapped:
        map_weights(program, path)
    return program


def map_weights(program, path) -> int:
    """Swap ``program``'s parameters (and buffers it never mutates) for read-only views of their
    records in the ``.pt2`` at ``path``, each checked against the loaded tensor (contiguous, the
    record's size, its first, middle and last elements' bytes). Returns the bytes now mapped; a weight whose
    record cannot be matched (compressed, another layout, an older archive) keeps torch's copy."""
    import json

    import torch

    from cuvil_mlir.core import params

    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if n.endswith(WEIGHTS_CONFIG)]
        if len(names) != 1:
            return 0
        root = names[0][: -len(WEIGHTS_CONFIG)]
        try:
            config = json.loads(z.read(names[0]))["config"]
        except (KeyError, ValueError):
            return 0
        records = {}
        for fqn, meta in config.items():
            if not isinstance(meta, dict) or meta.get("use_pickle") or "path_name" not in meta:
                continue
            info = _stored(z, root + WEIGHTS_DIR + meta["path_name"])
            if info is not None:
                records[fqn] = info
    mutated = set(program.graph_signature.buffers_to_mutate.values())
    state = program.state_dict
    candidates = {fqn: t for fqn, t in state.items() if fqn in records and fqn not in mutated and isinstance(t, torch.Tensor)
                  and t.device.type == "cpu" and t.layout == torch.strided and t.is_contiguous() and t.numel() > 0
                  and t.untyped_storage().nbytes() >= MIN_MAPPED_BYTES}
    if not candidates:
        return 0
    with open(path, "rb") as f:
        whole = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        params.register_mapped_file(whole, path)
        return _swap(state, candidates, records, whole, f.fileno())


def _swap(state: dict, candidates: dict, records: dict, whole: mmap.mmap, fd: int) -> int:
    """Put views of ``whole`` in ``state`` for the ``candidates`` whose records match (read with
    ``pread``: touching the mapping to check would bring its pages into this process)."""
    import torch

    flat_views: dict[int, torch.Tensor] = {}  # record offset -> the record as one flat tensor (tied weights share it)
    mapped = {}  # record offset -> size (a record tied weights share counts once)
    for fqn, tensor in candidates.items():
        offset, size = records[fqn]
        storage = tensor.untyped_storage()
        if storage.nbytes() != size or offset + size > len(whole):
            continue
        flat = flat_views.get(offset)
        if flat is None or flat.dtype != tensor.dtype:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # the mapping is read-only, as the weights are
                flat = torch.frombuffer(whole, dtype=tensor.dtype, count=size // tensor.element_size(), offset=offset)
            flat_views[offset] = flat
        if not all(os.pread(fd, len(want), offset + at) == want for at, want in _samples(tensor)):
            continue
        view = flat.as_strided(tensor.shape, tensor.stride(), tensor.storage_offset())
        state[fqn] = torch.nn.Parameter(view, requires_grad=tensor.requires_grad) if isinstance(tensor, torch.nn.Parameter) else view
        mapped[offset] = size
    return sum(mapped.values())


def _stored(z: zipfile.ZipFile, name: str) -> tuple[int, int] | None:
    """(offset of the data in the file, size) of an uncompressed zip entry, else None."""
    try:
        info = z.getinfo(name)
    except KeyError:
        return None
    if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
        return None
    from cuvil_mlir.runtime.parameters import data_offset

    return data_offset(z.fp, info.header_offset), info.file_size


def _samples(tensor) -> list[tuple[int, bytes]]:
    """(byte offset in its storage, bytes) of a contiguous tensor's first, middle and last
    elements: where the file's record must hold the same bytes."""
    import torch

    flat = tensor.detach().reshape(-1)
    n, size = flat.numel(), tensor.element_size()
    return [((tensor.storage_offset() + i) * size, flat[i:i + 1].view(torch.uint8).numpy().tobytes()) for i in (0, n // 2, n - 1)]

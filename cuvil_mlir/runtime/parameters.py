"""The external parameters of a compiled program (docs/package-format.md, "Parameters").

One set per program, shared by every target's module: the modules read parameter ``key`` of
scope ``model`` (``#stream.parameter.named<"model"::key>``), and a ``Session`` gives them a
parameter provider over this set. Two forms:

- in memory, right after compiling: ``key -> numpy array`` (views of the model's own weights
  and the arrays the precision passes computed; nothing is copied);
- an IREE parameter archive (``.irpa``) inside a package file, at a page-aligned offset and
  stored uncompressed: mapped read-only, so loading reads only the pages a device upload touches.
"""

from __future__ import annotations

import hashlib
import mmap
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cuvil_mlir.core.diagnostics import PackageError
from cuvil_mlir.core.params import ParameterArrays, entry_tag

SCOPE = "model"  # the scope the compiler writes (cuvil_mlir/core/params.py SCOPE)
ARCHIVE_NAME = "parameters/model.irpa"
ALIGNMENT = 4096  # where the archive starts in a package: a page, so it maps without a copy
COPY_CHUNK = 4 << 20  # how much of an archive is in memory at once while it is copied into a package


@dataclass
class Parameters:
    """In memory (``arrays``) or an archive of ``length`` bytes at ``offset`` in ``path``."""

    arrays: Mapping[str, np.ndarray] | None = None  # a dict, or core/params.py ParameterArrays (computes derived ones when read)
    path: Path | None = None
    offset: int = 0
    length: int = 0
    sha256: str = ""
    scope: str = SCOPE
    abstract: bool = False  # compiled from stub weights (core/params.py stub_weights): shapes, no values
    _map: mmap.mmap | None = field(default=None, repr=False)

    @classmethod
    def in_memory(cls, arrays: Mapping[str, np.ndarray], abstract: bool = False) -> "Parameters":
        return cls(arrays=arrays if isinstance(arrays, ParameterArrays) else dict(arrays), abstract=abstract)

    def require_values(self) -> None:
        if self.abstract:
            raise PackageError("this program was compiled from stub weights (no values): save it with "
                               "save(path, parameters='none') and load it with load(path, parameters=...)")

    @property
    def nbytes(self) -> int:
        if self.arrays is None:
            return self.length
        if isinstance(self.arrays, ParameterArrays):
            return self.arrays.nbytes  # without computing the derived ones
        return sum(a.nbytes for a in self.arrays.values())

    def view(self) -> memoryview:
        """The archive's bytes, mapped read-only (mapped once, kept while this object lives)."""
        if self._map is None:
            with open(self.path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            if self._map.size() < self.offset + self.length:
                raise PackageError(f"{self.path} is truncated: its parameter archive needs {self.offset + self.length} bytes, "
                                   f"the file has {self._map.size()}")
        return memoryview(self._map)[self.offset:self.offset + self.length]

    def verify(self) -> None:
        """Check the archive against its sha256 (reads every byte once, through the mapping)."""
        digest = hashlib.sha256()
        data = self.view()
        step = 64 << 20
        for start in range(0, len(data), step):
            digest.update(data[start:start + step])
        if digest.hexdigest() != self.sha256:
            raise PackageError(f"{self.path} is corrupt: {ARCHIVE_NAME} fails its sha256 check (tampered with or damaged)")

    def write_archive(self, out, scratch: Path) -> str:
        """Write the archive's bytes to the binary file ``out``; returns their sha256. In-memory
        parameters are written by IREE's archive writer to ``scratch`` first (then copied and removed)."""
        self.require_values()
        digest = hashlib.sha256()
        if self.arrays is None:
            data = self.view()
            for start in range(0, len(data), COPY_CHUNK):
                out.write(data[start:start + COPY_CHUNK])
                digest.update(data[start:start + COPY_CHUNK])
            return digest.hexdigest()
        from cuvil_mlir.runtime import session

        try:
            session.write_parameter_archive(self.arrays, scratch)
            chunk = bytearray(COPY_CHUNK)  # one buffer, reused: the copy holds COPY_CHUNK bytes at most
            with open(scratch, "rb") as f:
                while n := f.readinto(chunk):
                    out.write(memoryview(chunk)[:n])
                    digest.update(memoryview(chunk)[:n])
        finally:
            scratch.unlink(missing_ok=True)
        return digest.hexdigest()


def aligned_extra(header_offset: int, name: str, zip64: bool) -> bytes:
    """A zip extra field (id 0xD935, as Android's zipalign uses) that makes the data of a stored
    entry named ``name`` whose local header starts at ``header_offset`` begin at a multiple of
    ALIGNMENT (the local header is 30 bytes, the name, the extra, 20 more with zip64)."""
    start = header_offset + 30 + len(name.encode()) + (20 if zip64 else 0) + 4
    pad = -start % ALIGNMENT
    return b"\x35\xd9" + pad.to_bytes(2, "little") + b"\0" * pad


def data_offset(fp, header_offset: int) -> int:
    """Where the data of the zip entry whose local header is at ``header_offset`` starts."""
    fp.seek(header_offset)
    header = fp.read(30)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise PackageError("the parameter archive's zip entry has no local header")
    return header_offset + 30 + int.from_bytes(header[26:28], "little") + int.from_bytes(header[28:30], "little")



# ---------------------------------------------------------------------------------------
# Parameters supplied at load time (a package saved without its archive), checked against
# what the package records its modules need (metadata "parameters": "entries").


def supplied(value, entries: dict[str, dict]) -> Parameters:
    """``load(..., parameters=value)``: an ``.irpa`` path or a mapping ``key -> array``, checked
    against ``entries`` (key -> ``{"shape", "dtype"}``): every key present, of the right byte size,
    and of the right shape and dtype (an array's own; an archive entry's metadata when it has
    some, as archives cuvil writes do). A ``PackageError`` names each key that is wrong."""
    from cuvil_mlir.runtime import session

    if isinstance(value, dict):
        problems = [_array_problem(key, value.get(key), want) for key, want in entries.items()]
        _raise_if(problems, "the arrays given")
        return Parameters.in_memory({key: value[key] for key in entries})
    path = Path(value)
    if not path.is_file():
        raise PackageError(f"parameters={str(value)!r}: no such file (expected an IREE parameter archive, .irpa)")
    found = session.archive_entries(path)  # key -> (byte length, metadata)
    problems = [_archive_problem(key, found.get(key), want) for key, want in entries.items()]
    _raise_if(problems, str(path))
    return Parameters(path=path, offset=0, length=path.stat().st_size)


def _nbytes(want: dict) -> int:
    return int(np.prod(want["shape"], dtype=np.int64)) * _dtype(want["dtype"]).itemsize


def _dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _array_problem(key: str, array, want: dict) -> str | None:
    if array is None:
        return f"{key}: missing (the module needs {entry_tag(want['shape'], want['dtype'])})"
    array = np.asarray(array)
    if list(array.shape) != list(want["shape"]) or array.dtype != _dtype(want["dtype"]):
        return f"{key}: {entry_tag(array.shape, array.dtype)} given, the module needs {entry_tag(want['shape'], want['dtype'])}"
    return None


def _archive_problem(key: str, found, want: dict) -> str | None:
    need = entry_tag(want["shape"], want["dtype"])
    if found is None:
        return f"{key}: missing (the module needs {need})"
    length, tag = found
    if tag and tag != need:
        return f"{key}: the archive holds {tag}, the module needs {need}"
    if length != _nbytes(want):
        return f"{key}: the archive holds {length} bytes, the module needs {_nbytes(want)} ({need})"
    return None


def _raise_if(problems, origin: str) -> None:
    problems = [p for p in problems if p is not None]
    if problems:
        shown = "\n  ".join(problems[:20]) + (f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else "")
        raise PackageError(f"the parameters in {origin} do not fit this package's modules ({len(problems)} problem(s)):\n  {shown}")


# ---------------------------------------------------------------------------------------
# Parameters generated from a seed: the weights of a package compiled elsewhere, made where it
# runs (a multi-GB model whose modules travel without their weights).


def source_keys(description: dict) -> dict[str, dict]:
    """The keys ``generate`` draws (key -> ``{"shape", "dtype"}``): the entries without a recipe
    and the recipes' sources. Raises ``PackageError`` when an entry is a weight a pass computed
    without recording how (``derived.*`` with no recipe): such a package needs its archive."""
    entries = description.get("entries")
    if entries is None:
        raise PackageError("this package records no parameter entries (compiled by an older cuvil-mlir): it needs its archive")
    opaque = [k for k, e in entries.items() if k.startswith("derived.") and "recipe" not in e]
    opaque += [k for k in description.get("sources", {}) if k.startswith("derived.")]
    if opaque:
        raise PackageError(f"{len(opaque)} parameter(s) were computed by a pass that records no recipe "
                           f"({', '.join(opaque[:5])}): they cannot be generated, ship the archive")
    out = {k: {"shape": e["shape"], "dtype": e["dtype"]} for k, e in entries.items() if "recipe" not in e}
    out.update(description.get("sources", {}))
    return out


def draw(key: str, shape, dtype: str, seed: int) -> np.ndarray:
    """The generated value of source weight ``key``: a float tensor of two or more dims is
    N(0, 1/fan_in) (fan_in: its last dim; embeddings and linear weights keep activations at
    unit scale), a 1-D one 1 + 0.02 N(0, 1) (norm weights), each from its own stream seeded by
    (``seed``, crc32 of the key), so it does not depend on the other keys."""
    dt = _dtype(dtype)
    if dt.kind != "f" and dt.name != "bfloat16":
        raise PackageError(f"parameter {key} ({entry_tag(shape, dtype)}) is not a float tensor: it cannot be generated")
    rng = np.random.default_rng([seed, zlib.crc32(key.encode())])
    values = rng.standard_normal(tuple(shape), dtype=np.float32)
    if len(shape) >= 2:
        values *= np.float32(1.0 / np.sqrt(shape[-1]))
    else:
        values = 1.0 + np.float32(0.02) * values
    return values.astype(dt)


def generate(description: dict, seed: int, *, workers: int = 8) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(entries, sources): every parameter the modules read, and the source weights it was
    computed from (``draw``; give them to the reference model), for a package's
    ``metadata["parameters"]``. Derived entries are computed with their recipes."""
    from concurrent.futures import ThreadPoolExecutor

    from cuvil_mlir.core.params import evaluate

    wanted = source_keys(description)
    with ThreadPoolExecutor(workers) as pool:  # numpy's generators release the GIL
        drawn = pool.map(lambda kv: (kv[0], draw(kv[0], kv[1]["shape"], kv[1]["dtype"], seed)), wanted.items())
        sources = dict(drawn)
    entries = {}
    for key, entry in description["entries"].items():
        value = evaluate(entry["recipe"], sources.__getitem__) if "recipe" in entry else sources[key]
        if list(value.shape) != list(entry["shape"]) or value.dtype != _dtype(entry["dtype"]):
            raise PackageError(f"parameter {key}: its recipe gives {entry_tag(value.shape, value.dtype)}, "
                               f"the module needs {entry_tag(entry['shape'], entry['dtype'])}")
        entries[key] = np.ascontiguousarray(value)
    return entries, sources

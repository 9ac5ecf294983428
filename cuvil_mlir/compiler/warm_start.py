"""Warm starts without export: the jit finds a cached module for a call before tracing it.

A cache key (cuvil_mlir/compiler/fingerprint.py) needs the exported program, and exporting GPT-2 124M
takes ~1.7 s, longer than loading its compiled module (~1 s). So when the jit compiles a
call of an nn.Module it also records a *call record* under a key computed without export:

    call key   the toolchain and options (as in the cache key), the call's signature, the
               module tree (each submodule's path, class, training flag, plain attributes and
               the plain fields of its other attributes, e.g. a Hugging Face config; a
               GraphModule's code) and every parameter and buffer (name, dtype, shape, sha256)
    record     the cache key it compiled to, the result's pytree spec and dtypes, and the
               sha256 of every Python source file that ran while exporting it (cProfile's record), except
               torch's, cuvil-mlir's (the toolchain covers them) and the standard library's

A later call (this process or another) with the same call key whose recorded files are
unchanged loads the entry straight away. Anything else (a changed file, a missing entry, a
record that does not parse) goes the exported way. Not eligible, so always exported: calls
of functions (their globals are not a module tree), ``dynamic=True``, modules with hooks,
and exports that ran code with no source file (``exec``'d or generated code other than
dataclass methods) or ran under another profiler.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import sysconfig
from importlib.util import find_spec
from pathlib import Path

from cuvil_mlir.compiler import fingerprint
RECORD_VERSION = 1
_PLAIN = (bool, int, float, str, type(None))
_CONTAINERS = (tuple, list, dict)


def call_key(fn, call, options) -> str | None:
    """The key of calling module ``fn`` with ``call`` under jit ``options``, or None when the
    call is not eligible."""
    import torch

    if options.dynamic or not isinstance(fn, torch.nn.Module):
        return None
    modules = []
    for path, m in fn.named_modules(remove_duplicate=False):
        if m._forward_hooks or m._forward_pre_hooks or getattr(m, "_backward_hooks", None):
            return None
        modules.append(_describe_module(path, m, torch))
    tensors = [(name, str(t.dtype), list(t.shape), fingerprint.tensor_digest(t))
               for name, t in (*fn.named_parameters(remove_duplicate=False), *fn.named_buffers(remove_duplicate=False))]
    pipeline = options.pipeline_options()
    parts = {
        "version": RECORD_VERSION,
        "options": fingerprint.options_parts(pipeline),
        "patterns": [fingerprint.pass_digest(p) for p in pipeline.patterns],
        "toolchain": fingerprint.toolchain_parts(pipeline.target),
        "call": [call.coarse, [list(s) for s in call.shapes]],
        "modules": modules,
        "tensors": tensors,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=repr).encode()).hexdigest()


def _describe_module(path: str, m, torch) -> list:
    cls = type(m)
    plain, others = [], []
    for k, v in sorted(vars(m).items()):
        if isinstance(v, _PLAIN):
            plain.append((k, repr(v)))
        elif k.startswith("_") or isinstance(v, (torch.Tensor, torch.nn.Module)):
            continue
        elif isinstance(v, _CONTAINERS + (set, frozenset)):
            others.append((k, _canonical(v)))
        else:  # a config-like object: its public plain fields (private ones hold hashes and caches)
            fields = sorted((a, _canonical(b)) for a, b in getattr(v, "__dict__", {}).items()
                            if not a.startswith("_") and isinstance(b, _PLAIN + _CONTAINERS + (set, frozenset)))
            others.append((k, f"{type(v).__module__}.{type(v).__qualname__}", fields))
    code = m.code if isinstance(m, torch.fx.GraphModule) else ""
    return [path, f"{cls.__module__}.{cls.__qualname__}", m.training, plain, others, code]


def _canonical(v) -> str:
    """Text for a value that is the same in every process: plain values by repr, containers
    element by element (sets sorted), anything else by its type (never an address)."""
    if isinstance(v, _PLAIN):
        return repr(v)
    if isinstance(v, dict):
        return "{" + ",".join(f"{_canonical(k)}:{_canonical(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (set, frozenset)):
        return "{" + ",".join(sorted(_canonical(x) for x in v)) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_canonical(x) for x in v) + "]"
    return f"<{type(v).__module__}.{type(v).__qualname__}>"


# ---------------------------------------------------------------------------------------
# Which source files an export ran.


class Sources:
    """Collects the source files of the Python code called while it is active."""

    def __init__(self):
        self.files: set[str] = set()
        self.unknown: set[str] = set()  # code without a file: the record is not written
        self.ok = True

    @contextlib.contextmanager
    def recording(self):
        """Record while active. cProfile (C) rather than a Python profile hook: the hook's call
        per Python call made GPT-2's export ~3x slower, cProfile's bookkeeping much less."""
        import cProfile

        if sys.getprofile() is not None:  # someone profiles: do not take their hook
            self.ok = False
            yield self
            return
        profiler = cProfile.Profile()
        profiler.enable()
        try:
            yield self
        finally:
            profiler.disable()
            codes = {entry.code for entry in profiler.getstats()}
            self._classify({c.co_filename for c in codes if not isinstance(c, str)})  # str: a builtin

    def _classify(self, names: set[str]) -> None:
        toolchain, stdlib, site_packages = _roots()
        for name in names:
            if name.startswith("<"):
                if not _generated_by(name, toolchain):
                    self.unknown.add(name)
                continue
            path = str(Path(name).resolve())
            in_stdlib = path.startswith(stdlib) and not path.startswith(site_packages)
            if not (path.startswith(toolchain) or in_stdlib):
                self.files.add(path)

    def digests(self) -> dict[str, str] | None:
        if not self.ok or self.unknown:
            return None
        out = {}
        for path in sorted(self.files):
            digest = _file_sha(path)
            if digest is None:
                return None
            out[path] = digest
        return out


def _roots() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(torch's and cuvil-mlir's folders, the standard library's, the site-packages folders)."""
    import os
    import site

    import torch

    toolchain = [Path(torch.__file__).parent, Path(__file__).resolve().parents[1]]  # torch, cuvil_mlir/
    for package in fingerprint.SOURCE_PACKAGES[1:]:
        spec = find_spec(package)
        toolchain += [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    paths = sysconfig.get_paths()
    packages = {paths["purelib"], paths["platlib"], *site.getsitepackages(), site.getusersitepackages()}

    def prefixes(dirs):
        return tuple(str(Path(d).resolve()) + "/" for d in dirs)

    return prefixes(toolchain), prefixes([Path(os.__file__).parent]), prefixes(packages)


def _generated_by(name: str, toolchain: tuple[str, ...]) -> bool:
    """Code without a file that is known not to carry state of its own: dataclass and
    namedtuple methods ("<string>"), frozen stdlib modules, and the code torch's tracer
    generates ("<eval_with_key>.3 from .../torch/fx/...: the module tree holds a
    GraphModule's code itself)."""
    if name.startswith(("<frozen ", "<string>")):
        return True
    origin = name.partition(" from ")[2]
    return name.startswith("<eval_with_key>") and str(Path(origin.rpartition(":")[0]).resolve()).startswith(toolchain)


def _file_sha(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


# ---------------------------------------------------------------------------------------
# Records.


def make_record(compile_key: str, sources: Sources, out_spec, out_template, out_dtypes, tensor_slot) -> dict | None:
    """The record of one compiled call, or None when it cannot be written (a result leaf or
    spec that does not serialize, code without a file)."""
    import torch

    files = sources.digests()
    if files is None:
        return None
    try:
        spec = torch.utils._pytree.treespec_dumps(out_spec)
    except Exception:  # noqa: BLE001 - a pytree node type without a serialized name
        return None
    template = []
    for leaf in out_template:
        if leaf is tensor_slot:
            template.append({"tensor": True})
        elif isinstance(leaf, _PLAIN):
            template.append({"value": leaf})
        else:
            return None
    return {"version": RECORD_VERSION, "compile_key": compile_key, "out_spec": spec, "out_template": template,
            "out_dtypes": [str(d).removeprefix("torch.") for d in out_dtypes], "files": files}


def read_record(data: dict, tensor_slot):
    """``(compile_key, out_spec, out_template, out_dtypes)`` of a record whose files are
    unchanged, else None."""
    import torch

    try:
        if data.get("version") != RECORD_VERSION:
            return None
        for path, digest in data["files"].items():
            if _file_sha(path) != digest:
                return None
        spec = torch.utils._pytree.treespec_loads(data["out_spec"])
        template = [tensor_slot if leaf.get("tensor") else leaf["value"] for leaf in data["out_template"]]
        dtypes = [getattr(torch, d) for d in data["out_dtypes"]]
        return data["compile_key"], spec, template, dtypes
    except Exception:  # noqa: BLE001 - a record we cannot use is a miss, never an error
        return None

"""Cache keys: a stable hash of everything that changes what a compile produces.

    compile_key(program, options) -> (key, parts)

``parts`` (human-readable, stored beside a cache entry) and ``key`` (the sha256 of ``parts``
with the hashes below) cover:

  program     the exported program's graph (every node: op, target, arguments, dtype/shape/
              stride of its value, the nn.Module it came from; the graph signature, range
              constraints and pytree specs) and its weights (state dict and constants: name,
              dtype, shape and a sha256 of the bytes)
  options     every target's ``cache_key()`` (kind, options, IREE flags, stages), the opt level,
              the precision policy, the calibration, disabled passes and patterns
  patterns    the user's PatternSets: each pattern's name, root, benefit, and a hash of the file
              its function is defined in (or its code object) and its closure's simple values
  toolchain   the versions of torch, torch-mlir, IREE (compiler and runtime), Python and
              cuvil-mlir, a hash of every source file of cuvil-mlir (the built-in pattern sets
              and passes included), and for ``cpu``/host targets the host CPU (its ISA flags)

Weights are hashed with sha256 on up to 4 threads (hashlib releases the GIL), once per tensor
version: a tensor whose ``_version`` and storage are unchanged is not hashed again in this
process.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import marshal
import platform
import weakref
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from pathlib import Path

from cuvil_mlir.core.versions import __version__
DISTRIBUTIONS = ("torch", "torch-mlir", "iree-base-compiler", "iree-base-runtime")
# cuvil-mlir's packages: their source is part of the toolchain (a changed built-in pattern
# changes what a compile produces even at the same version number)
SOURCE_PACKAGES = ("cuvil_mlir", "cuvil_mlir.dialects", "cuvil_mlir.lowering", "cuvil_mlir.targets")


def compile_key(program, options) -> tuple[str, dict]:
    """The cache key of compiling the ExportedProgram ``program`` with pipeline ``options``."""
    parts = {
        "program": {"graph": graph_digest(program), "weights": weights_digest(program)},
        "options": options_parts(options),
        "patterns": [pass_digest(p) for p in options.patterns],
        "toolchain": toolchain_parts(options.target),
    }
    return _sha(json.dumps(parts, sort_keys=True).encode()), parts


# ---------------------------------------------------------------------------------------
# The program: graph and weights.


def graph_digest(program) -> str:
    """A hash of the exported program without its weights' values."""
    lines = [str(program.graph_signature), _range_constraints(program),
             str(program.call_spec.in_spec), str(program.call_spec.out_spec)]
    lines += _graph_lines(program.graph_module, "")
    return _sha("\n".join(lines).encode())


def _graph_lines(gm, prefix: str) -> list[str]:
    import torch

    lines = []
    for node in gm.graph.nodes:
        args = _fmt((node.args, node.kwargs))
        lines.append(f"{prefix}{node.name}={node.op}:{_target(node.target)}{args} :: {_fmt_val(node.meta.get('val'))}"
                     f" @ {_innermost_module(node)}")
        if node.op == "get_attr":  # a subgraph of a higher-order op (cond, while_loop, wrap_with_*)
            sub = getattr(gm, str(node.target), None)
            if isinstance(sub, torch.fx.GraphModule):
                lines += _graph_lines(sub, f"{prefix}{node.target}.")
    return lines


def _range_constraints(program) -> str:
    return ";".join(sorted(f"{k}:{v}" for k, v in program.range_constraints.items()))


def _target(target) -> str:
    if isinstance(target, str):
        return target
    if hasattr(target, "_schema") or type(target).__name__.startswith("OpOverload"):
        return str(target)  # aten.linear.default
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    return f"{getattr(target, '__module__', '')}.{name}" if name else repr(target)


def _fmt(value) -> str:
    """Arguments as text with no object addresses: nodes by name, containers recursively."""
    import torch

    if isinstance(value, torch.fx.Node):
        return f"%{value.name}"
    if isinstance(value, (list, tuple)):
        inner = ",".join(_fmt(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_fmt(v)}" for k, v in value.items()) + "}"
    if isinstance(value, slice):
        return f"slice({_fmt(value.start)},{_fmt(value.stop)},{_fmt(value.step)})"
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return repr(value)
    return _target(value) if callable(value) else f"{type(value).__name__}:{value!r}"


def _fmt_val(val) -> str:
    import torch

    if isinstance(val, torch.Tensor):
        return f"{val.dtype}{list(val.shape)}/{list(val.stride())}/{val.device.type}"
    if isinstance(val, (list, tuple)):
        return "(" + ",".join(_fmt_val(v) for v in val) + ")"
    return "" if val is None else f"{type(val).__name__}:{val}"


def _innermost_module(node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    return str(list(stack.values())[-1][0]) if stack else ""


def weights_digest(program) -> str:
    """A hash of every weight of the program: state dict and constants, name, dtype, shape, bytes."""
    import torch

    named = sorted({**program.state_dict, **program.constants}.items())
    tensors = list({id(t): t for _, t in named if isinstance(t, torch.Tensor)}.values())  # tied weights once
    with ThreadPoolExecutor(max_workers=4) as pool:
        digests = dict(zip(map(id, tensors), pool.map(tensor_digest, tensors)))
    lines = []
    for name, value in named:
        if isinstance(value, torch.Tensor):
            lines.append(f"{name}:{value.dtype}{list(value.shape)}:{digests[id(value)]}")
        else:  # a script object or another constant: its repr is the best we have
            lines.append(f"{name}:{type(value).__name__}:{value!r}")
    return _sha("\n".join(lines).encode())


# id(tensor) -> (weak reference, (version, data_ptr), digest): a weight is hashed again only
# after it changed. Keyed by id, not a WeakKeyDictionary: that compares tensors with ==.
_DIGESTS: dict[int, tuple] = {}


def tensor_digest(t) -> str:
    """sha256 of a tensor's bytes (its dtype and shape are hashed by the caller)."""
    stamp = (t._version, t.data_ptr())
    known = _DIGESTS.get(id(t))
    if known is not None and known[0]() is t and known[1] == stamp:
        return known[2]
    digest = _sha(_tensor_bytes(t))
    if len(_DIGESTS) > 100_000:  # forget the dead
        for key in [k for k, v in _DIGESTS.items() if v[0]() is None]:
            _DIGESTS.pop(key, None)
    try:
        _DIGESTS[id(t)] = (weakref.ref(t), stamp, digest)
    except TypeError:  # not weak-referenceable
        pass
    return digest


def _tensor_bytes(t):
    import torch

    data = t.detach()
    if data.is_sparse or data.is_quantized:
        data = data.to_dense() if data.is_sparse else data.int_repr()
    data = data.cpu().contiguous().reshape(-1)
    if data.numel() == 0:
        return b""
    return memoryview(data.view(torch.uint8).numpy())


# ---------------------------------------------------------------------------------------
# Options and patterns.


def options_parts(options) -> dict:
    from cuvil_mlir.compiler import precision
    from cuvil_mlir.targets import parse_targets

    targets = parse_targets(options.target, opt_level=options.opt_level)
    calibration = options.calibration
    return {
        "targets": [{"spec": t.spec, "key": t.cache_key()} for t in targets],
        "opt_level": options.opt_level,
        "precision": precision.parse_policy(options.precision).spec,
        "calibration": None if calibration is None else (
            calibration.to_json() if hasattr(calibration, "to_json") else repr(calibration)),
        "disabled_passes": sorted(options.disabled_passes),
        "disabled_patterns": sorted(options.disabled_patterns),
        "params": options.params,
    }


def pass_digest(p) -> dict:
    """A user pass (PatternSet or FunctionPass) as data: its patterns and the hash of their code."""
    patterns = getattr(p, "patterns", None)
    if patterns is not None:
        return {"name": p.name, "patterns": [{"name": pat.name, "root": pat.root, "benefit": pat.benefit,
                                              "code": function_digest(pat.fn)} for pat in patterns]}
    return {"name": p.name, "code": function_digest(getattr(p, "run", p))}


def function_digest(fn) -> str:
    """A hash of a function's code: the file it is defined in (helpers beside it count), else
    its code object; plus its qualified name and the simple values its closure holds."""
    fn = inspect.unwrap(fn) if callable(fn) else fn
    code = getattr(fn, "__code__", None)
    parts = [getattr(fn, "__module__", "") or "", getattr(fn, "__qualname__", "") or type(fn).__name__]
    source = _source_file_digest(fn)
    if source is not None:
        parts.append(source)
    elif code is not None:
        parts.append(_sha(marshal.dumps(code)))
    else:
        parts.append(repr(fn))
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        simple = value is None or isinstance(value, (bool, int, float, str, tuple, frozenset))
        parts.append(repr(value) if simple else type(value).__qualname__)
    return _sha("|".join(parts).encode())


def _source_file_digest(fn) -> str | None:
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        return None
    if not path:
        return None
    return _file_digest(Path(path))


def _file_digest(path: Path) -> str | None:
    try:
        return _sha(path.read_bytes())
    except OSError:
        return None


# ---------------------------------------------------------------------------------------
# The toolchain.


def toolchain_parts(target_spec: str) -> dict:
    parts = {"versions": versions(), "python": platform.python_version(), "source": source_digest()}
    if _targets_host_cpu(target_spec):
        parts["host_cpu"] = host_cpu_digest()
    return parts


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    out = {"cuvil-mlir": __version__}
    for dist in DISTRIBUTIONS:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "none"
    return out


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """A hash of every Python source file of cuvil-mlir (paths and contents)."""
    h = hashlib.sha256()
    for package in SOURCE_PACKAGES:
        spec = find_spec(package)
        for root in (spec.submodule_search_locations or []) if spec else []:
            for path in sorted(Path(root).rglob("*.py")):
                h.update(f"{package}/{path.relative_to(root)}\0".encode())
                h.update(path.read_bytes())
    return h.hexdigest()


def _targets_host_cpu(target_spec: str) -> bool:
    from cuvil_mlir.targets import parse_targets

    return any(t.kind == "cpu" and t.arch == "host" for t in parse_targets(target_spec))


@functools.lru_cache(maxsize=1)
def host_cpu_digest() -> str:
    """What LLVM's ``host`` CPU resolves from: the architecture and the CPU's ISA flags."""
    from cuvil_mlir.runtime import hostcpu
    flags = hostcpu.host_cpu_flags()
    return _sha(f"{hostcpu.host_arch()}|{' '.join(sorted(flags or ()))}".encode())[:16]


def _sha(data) -> str:
    return hashlib.sha256(data).hexdigest()

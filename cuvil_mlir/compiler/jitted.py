"""``@cuvil_mlir.jit``: compile on the first call of each input signature, reuse it after,
run eager PyTorch when compiling (or the device) fails.

    @cuvil_mlir.jit(target="cpu", precision="fp16")
    class MLP(nn.Module): ...            # every instance is jitted

    fast = cuvil_mlir.jit(model, target="cpu")          # an instance: a callable wrapper
    y = fast(x)                                          # compiles for x's signature, then runs
    print(fast.cuvil_jit.explain())                      # signatures, compiled or eager, why

A signature is the call's pytree structure, its non-tensor arguments (by value: they are
specialized) and every tensor's dtype, device and shape (with ``dynamic=True`` the shape is
exported with ``Dim.AUTO`` and matched against the exported program's symbolic dims and
their ranges). Compiles go through the on-disk cache (cuvil_mlir/compiler/cache.py) unless
``cache=False``.

Staleness. The compiled module holds the weights as constants. Before every call the jitted
object's state stamp is compared with the one its entry was compiled at: for a module, every
submodule's identity, hooks and plain attributes (numbers, strings, flags) and every
parameter and buffer's identity, storage and version counter (``_version``, bumped by every
in-place write: ``optimizer.step()``, ``load_state_dict``, ``p.data.mul_()``); for a function,
the tensors, modules and plain values its globals and closure name. A changed stamp compiles
again (one of ``max_compiles``); the disk cache key includes a hash of the weights, so
switching back to earlier weights is a cache hit.

Inference only: outputs carry no autograd graph, so a call whose inputs require grad (with
grad mode on), or a module in training mode, runs eager. So does a program that mutates its
inputs or buffers. Each reason is warned once (``JitWarning``, one line); ``fallback="error"``
raises it instead.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import threading
import time
import warnings
from dataclasses import dataclass, field

from cuvil_mlir.core.diagnostics import CuvilError, RuntimeFailure

FALLBACKS = ("eager", "error")
DEFAULT_MAX_COMPILES = 8
_MAX_RECORDED = 256  # signatures remembered per jitted object (eager ones beyond the limit are not)
_PLAIN = (bool, int, float, str, type(None))


class JitWarning(RuntimeWarning):
    """A jitted call runs in eager PyTorch; the message says why."""


class JitError(CuvilError):
    """``fallback="error"``: a call could not be compiled or run (the message says why)."""


@dataclass(frozen=True)
class JitOptions:
    target: str = "cpu"
    opt_level: int = 3
    precision: str = "fp32"
    calibration: object = None
    patterns: tuple = ()
    disabled_passes: tuple = ()
    disabled_patterns: tuple = ()
    fallback: str = "eager"  # or "error"
    dynamic: bool = False  # export every tensor dim with Dim.AUTO
    cache: object = True  # True (CUVIL_CACHE_DIR / ~/.cache/cuvil-mlir), False, a folder or a Cache
    max_compiles: int = DEFAULT_MAX_COMPILES  # then new signatures run eager

    def __post_init__(self):
        from cuvil_mlir.compiler import precision
        from cuvil_mlir.targets import parse_targets

        if self.fallback not in FALLBACKS:
            raise CuvilError(f"jit: fallback must be one of {', '.join(FALLBACKS)}, got {self.fallback!r}")
        if not isinstance(self.max_compiles, int) or self.max_compiles < 1:
            raise CuvilError(f"jit: max_compiles must be an integer >= 1, got {self.max_compiles!r}")
        parse_targets(self.target, opt_level=self.opt_level)  # a typo fails here, not at the first call
        precision.parse_policy(self.precision)
        for name in ("patterns", "disabled_passes", "disabled_patterns"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def pipeline_options(self):
        from cuvil_mlir.compiler.pipeline import Options

        return Options(target=self.target, opt_level=self.opt_level, patterns=self.patterns,
                       disabled_passes=self.disabled_passes, disabled_patterns=self.disabled_patterns,
                       precision=self.precision, calibration=self.calibration)


@dataclass
class JitEntry:
    """One input signature of a jitted object: compiled or eager, and why."""

    signature: str  # e.g. "float32[8, 64]"
    status: str  # "compiled" or "eager"
    reason: str = ""  # why eager
    cache: str = ""  # compiled: "hit", "hit (call record)" (found without export), "waited" (another process
    # compiled it), "miss", "off"
    seconds: float = 0.0  # export + compile (or cache load)
    times: dict = field(default_factory=dict)  # the parts of ``seconds``: export, key, compile or load
    calls: int = 0
    key: str | None = None  # the cache key
    _match: object = field(default=None, repr=False)
    _run: object = field(default=None, repr=False)
    _stamp: object = field(default=None, repr=False)


# ---------------------------------------------------------------------------------------
# The public entry point.


def jit(fn=None, *, target: str = "cpu", opt_level: int = 3, precision: str = "fp32", calibration=None,
        fallback: str = "eager", dynamic: bool = False, cache=True, max_compiles: int = DEFAULT_MAX_COMPILES,
        patterns=(), disabled_passes=(), disabled_patterns=()):
    """Decorate an ``nn.Module`` class (its instances are jitted), or wrap an instance or a
    function of tensors; ``@jit``, ``@jit(...)`` and ``jit(obj, ...)`` all work."""
    options = JitOptions(target, opt_level, precision, calibration, patterns, disabled_passes, disabled_patterns,
                         fallback, dynamic, cache, max_compiles)
    if fn is None:
        return lambda f: _apply(f, options)
    return _apply(fn, options)


def _apply(fn, options: JitOptions):
    import torch

    if isinstance(fn, type) and issubclass(fn, torch.nn.Module):
        return _jitted_class(fn, options)
    if callable(fn):  # an nn.Module instance or a function
        return Jitted(fn, options)
    raise CuvilError(f"jit: expected an nn.Module class, an nn.Module or a function, got {type(fn).__name__}")


class Jitted:
    """A jitted module instance or function. Attributes not its own are the wrapped object's
    (``jitted.eval()``, ``jitted.load_state_dict(...)``); ``jitted.eager`` is the object itself."""

    def __init__(self, fn, options: JitOptions):
        self.eager = fn
        self.cuvil_jit = JitState(fn, options, name=_name_of(fn))
        if not _is_module(fn):
            functools.update_wrapper(self, fn, updated=())  # a function's name and docstring

    def __call__(self, *args, **kwargs):
        return self.cuvil_jit(*args, **kwargs)

    def __getattr__(self, name):
        if name in ("eager", "cuvil_jit"):  # not set yet (copying): do not recurse
            raise AttributeError(name)
        return getattr(self.eager, name)

    def __repr__(self) -> str:
        return f"cuvil_mlir.jit({self.cuvil_jit.name}, target={self.cuvil_jit.options.target!r})"


def _jitted_class(cls, options: JitOptions):
    """A subclass of ``cls`` whose instances dispatch their calls through a JitState each."""

    def __call__(self, *args, **kwargs):
        if _in_eager():  # exporting or running this very module eagerly
            return cls.__call__(self, *args, **kwargs)
        return self.cuvil_jit(*args, **kwargs)

    def cuvil_jit(self) -> JitState:
        state = self.__dict__.get("_cuvil_jit_state")
        if state is None:
            state = self.__dict__["_cuvil_jit_state"] = JitState(self, options, name=cls.__name__, eager=cls.__call__)
        return state

    def __getstate__(self):  # copies and pickles do not take the compiled modules along
        state = dict(cls.__getstate__(self))
        state.pop("_cuvil_jit_state", None)
        return state

    namespace = {"__call__": __call__, "cuvil_jit": property(cuvil_jit), "__getstate__": __getstate__,
                 "__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__}
    return type(cls.__name__, (cls,), namespace)


# ---------------------------------------------------------------------------------------
# Dispatch: one JitState per jitted object.


class JitState:
    """The signatures a jitted object has seen, their compiled modules, and what happened."""

    def __init__(self, fn, options: JitOptions, *, name: str, eager=None, check_training: bool = True,
                 weights_need_grad: bool = False, call_records: bool = True):
        self.fn = fn
        self.options = options
        self.name = name
        self.serial = next(_SERIALS)  # creation order
        self.compiles = 0
        self.events: collections.deque[str] = collections.deque(maxlen=100)
        self._eager_call = eager  # how to run fn eagerly (a jitted class: nn.Module.__call__ of the base)
        self._entries: dict[str, list[JitEntry]] = {}
        self._warned: set[str] = set()
        self._check_training = check_training
        self._weights_need_grad = weights_need_grad  # torch.compile: weights that require grad run eager
        self._call_records = call_records  # warm starts without export (cuvil_mlir/compiler/warm_start.py)
        self._lock = threading.RLock()

    @property
    def entries(self) -> list[JitEntry]:
        return [e for group in self._entries.values() for e in group]

    def explain(self) -> str:
        lines = [f"{self.name}: {self.compiles} compile(s) of at most {self.options.max_compiles}, target {self.options.target}"]
        for e in self.entries:
            how = f"compiled (cache {e.cache}, {e.seconds:.2f} s)" if e.status == "compiled" else f"eager: {e.reason}"
            lines.append(f"  ({e.signature}): {how}; {e.calls} call(s)")
        lines += [f"  {event}" for event in self.events]
        return "\n".join(lines)

    def __call__(self, *args, **kwargs):
        import torch

        why = self._call_reason(args, kwargs)
        if why is not None:
            self._fallback(why, why)
            return self._eager(args, kwargs)
        try:
            call = _Call.of(args, kwargs, torch)
        except _Unsupported as e:
            self._fallback(str(e), str(e))
            return self._eager(args, kwargs)
        stamp = _stamp(self.fn)
        entry = self._find(call)
        if entry is not None and entry.status == "compiled" and entry._stamp != stamp:
            self.events.append(f"({entry.signature}): the weights or attributes changed since it was compiled: compiling again")
            self._entries[call.coarse].remove(entry)
            entry = None
        if entry is None:
            with self._lock:
                entry = self._find(call) or self._build(call, stamp)
        entry.calls += 1
        if entry.status == "eager":
            return self._eager(args, kwargs)
        try:
            return entry._run(call)
        except RuntimeFailure as e:  # the device: no such device here, the module failed to load or run
            entry.status, entry.reason, entry._run = "eager", _one_line(e.message), None
            self._fallback(f"({entry.signature}): {entry.reason}", entry.signature, error=e)
            return self._eager(args, kwargs)

    # --- per call ------------------------------------------------------------------------

    def _call_reason(self, args, kwargs) -> str | None:
        import torch

        if self._check_training and _is_module(self.fn) and self.fn.training:
            return "the module is in training mode (jit compiles inference: call .eval())"
        if torch.is_grad_enabled():
            leaves = torch.utils._pytree.tree_leaves((args, kwargs))
            if any(isinstance(t, torch.Tensor) and t.requires_grad for t in leaves):
                return "an input requires grad (jit compiles inference: outputs carry no autograd graph)"
            if self._weights_need_grad and any(p.requires_grad for p in self.fn.parameters()):
                return "grad mode is on and weights require grad (cuvil compiles inference: use torch.no_grad())"
        return None

    def _find(self, call) -> JitEntry | None:
        for entry in self._entries.get(call.coarse, ()):
            if entry._match(call.shapes):
                return entry
        return None

    def _record(self, call, entry: JitEntry) -> JitEntry:
        if len(self.entries) < _MAX_RECORDED:
            self._entries.setdefault(call.coarse, []).append(entry)
        return entry

    def _eager(self, args, kwargs):
        with _eager_mode():
            if self._eager_call is not None:
                return self._eager_call(self.fn, *args, **kwargs)
            return self.fn(*args, **kwargs)

    def _fallback(self, message: str, once_key: str, error: Exception | None = None) -> None:
        if self.options.fallback == "error":
            if isinstance(error, CuvilError):
                raise error
            raise JitError(f"jit: {self.name}: {message}") from error
        if once_key in self._warned:
            return
        self._warned.add(once_key)
        warnings.warn(f"cuvil jit: {self.name} runs in eager PyTorch: {_one_line(message)}", JitWarning,
                      stacklevel=_caller_stacklevel())

    # --- compiling one signature ---------------------------------------------------------

    def _build(self, call, stamp) -> JitEntry:
        signature = call.describe()
        if self.compiles >= self.options.max_compiles:
            entry = self._record(call, JitEntry(signature, "eager", f"recompile limit reached ({self.options.max_compiles} "
                                                "compiles; raise jit(max_compiles=...))", _match=call.exact_match()))
            self._fallback(entry.reason, "recompile limit")
            return entry
        self.compiles += 1
        start = time.perf_counter()
        try:
            compiled = _compile_call(self.fn, call, self.options, self._eager_call, self._call_records)
        except Exception as e:  # noqa: BLE001 - any failure to compile falls back (or raises, with fallback="error")
            reason = _one_line(e.message if isinstance(e, CuvilError) else f"{type(e).__name__}: {e}")
            entry = self._record(call, JitEntry(signature, "eager", reason, _match=call.exact_match(),
                                                seconds=time.perf_counter() - start))
            self.events.append(f"({signature}): compile failed: {reason}")
            self._fallback(f"({signature}): {reason}", signature, error=e)
            return entry
        entry = JitEntry(signature, "compiled", cache=compiled.cache_status, seconds=time.perf_counter() - start,
                         times=compiled.times, key=compiled.key, _match=compiled.match, _run=compiled.run, _stamp=stamp)
        self.events.append(f"({signature}): compiled (cache {entry.cache}, {entry.seconds:.2f} s)")
        return self._record(call, entry)


# ---------------------------------------------------------------------------------------
# One call's signature.


class _Unsupported(Exception):
    pass


@dataclass
class _Call:
    leaves: list  # the pytree leaves of (args, kwargs)
    spec: object  # their TreeSpec
    tensor_positions: list[int]
    coarse: str  # structure, plain values, tensors' dtype/device/rank: the shapes are matched per entry
    shapes: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, args, kwargs, torch) -> "_Call":
        leaves, spec = torch.utils._pytree.tree_flatten((args, kwargs))
        positions, parts = [], [str(spec)]
        for i, leaf in enumerate(leaves):
            if isinstance(leaf, torch.Tensor):
                positions.append(i)
                parts.append(f"{i}:{leaf.dtype}:{leaf.device}:{leaf.dim()}")
            elif isinstance(leaf, _PLAIN) or isinstance(leaf, (torch.dtype, torch.device)):
                parts.append(f"{i}={type(leaf).__name__}:{leaf!r}")
            else:
                raise _Unsupported(f"argument {i} is a {type(leaf).__name__}; jit compiles calls of tensors and Python scalars")
        shapes = tuple(tuple(leaves[i].shape) for i in positions)
        return cls(leaves, spec, positions, "|".join(parts), shapes)

    @property
    def tensors(self) -> list:
        return [self.leaves[i] for i in self.tensor_positions]

    def describe(self) -> str:
        out = []
        for i, leaf in enumerate(self.leaves):
            if i in self.tensor_positions:
                device = "" if leaf.device.type == "cpu" else f"@{leaf.device}"
                out.append(f"{str(leaf.dtype).removeprefix('torch.')}{list(leaf.shape)}{device}")
            else:
                out.append(repr(leaf))
        return ", ".join(out)

    def exact_match(self):
        shapes = self.shapes
        return lambda got: got == shapes


# ---------------------------------------------------------------------------------------
# Export and compile one call.


@dataclass
class _Compiled:
    run: object  # call -> outputs (the eager structure)
    match: object  # shapes -> bool
    cache_status: str
    key: str | None
    times: dict


def _compile_call(fn, call: _Call, options: JitOptions, eager_call, warm: bool = True) -> _Compiled:
    """Export the call and compile it through the cache; first, when ``warm``, look for a
    call record (cuvil_mlir/compiler/warm_start.py) that names its entry without exporting."""
    import torch

    from cuvil_mlir.compiler import cache as cache_mod
    from cuvil_mlir.compiler import warm_start
    from cuvil_mlir.compiler.importers import fx

    cache = cache_mod.resolve(options.cache)
    times = {}
    start = time.perf_counter()
    key = warm_start.call_key(fn, call, options) if warm and cache is not None else None
    if key is not None:
        times["call key"] = time.perf_counter() - start
        found = _from_call_record(cache, key, call, times)
        if found is not None:
            return found

    start = time.perf_counter()
    flat = _flat_call()(fn, call, eager_call)
    tensors = tuple(call.tensors)
    dynamic_shapes = None
    if options.dynamic:
        dynamic_shapes = {"tensors": tuple({d: torch.export.Dim.AUTO for d in range(t.dim())} for t in tensors)}
    sources = warm_start.Sources()
    try:
        with _eager_mode(), sources.recording() if key is not None else contextlib.nullcontext():
            program = fx.to_exported_program(flat, tensors, dynamic_shapes=dynamic_shapes)
        _check_exportable(program, flat)
        out_spec, out_template = flat.out_spec, flat.out_template
    finally:
        _RESULTS.pop(id(flat), None)
    _strip_module_prefix(program, flat.TARGET)
    times["export"] = time.perf_counter() - start
    compiled, status, compile_key = cache_mod.compile_exported(program, options.pipeline_options(), cache, seconds=times)
    out_dtypes = _output_dtypes(program)
    run = _runner(compiled, call, out_spec, out_template, out_dtypes)
    if key is not None:
        record = warm_start.make_record(compile_key, sources, out_spec, out_template, out_dtypes, _TENSOR)
        if record is not None:
            cache.put_record(key, record)
    return _Compiled(run, _shape_matcher(program, call), status, compile_key, {k: round(v, 3) for k, v in times.items()})


def _from_call_record(cache, key: str, call: _Call, times: dict) -> _Compiled | None:
    from cuvil_mlir.compiler import warm_start
    data = cache.get_record(key)
    parsed = warm_start.read_record(data, _TENSOR) if data is not None else None
    if parsed is None:
        return None
    compile_key, out_spec, out_template, out_dtypes = parsed
    start = time.perf_counter()
    compiled = cache.get(compile_key)
    if compiled is None:
        return None
    times["load"] = time.perf_counter() - start
    run = _runner(compiled, call, out_spec, out_template, out_dtypes)
    return _Compiled(run, call.exact_match(), "hit (call record)", compile_key, {k: round(v, 3) for k, v in times.items()})


def _runner(compiled, call: _Call, out_spec, out_template, out_dtypes):
    """call -> the compiled module's results, in the structure, dtypes and device eager gives."""
    import torch

    n_inputs = len(compiled.signature.inputs)
    if n_inputs != len(call.tensor_positions):
        raise CuvilError(f"the compiled function takes {n_inputs} input(s), the call has {len(call.tensor_positions)} tensor(s)")
    in_dtypes = [_torch_dtype(s.dtype) for s in compiled.signature.inputs]

    def run(c: _Call):
        args = [t if t.dtype == d else t.to(d) for t, d in zip(c.tensors, in_dtypes)]  # io=fp16 policies
        result = compiled(*args)
        outs = list(result) if isinstance(result, tuple) else [result]
        device = args[0].device if args else torch.device("cpu")
        outs = iter(o.to(device=device, dtype=d) if (o.dtype != d or device.type != "cpu") else o for o, d in zip(outs, out_dtypes))
        leaves = [next(outs) if slot is _TENSOR else slot for slot in out_template]
        return torch.utils._pytree.tree_unflatten(leaves, out_spec)

    return run


_TENSOR = object()  # a tensor's slot in a leaves template
# id(FlatCall) -> (out_spec, template) of what its forward returned. Not an attribute of the
# module: non-strict export restores the module's attributes (lists included) after tracing.
_RESULTS: dict[int, tuple] = {}


def _flat_call_class():
    import torch

    class FlatCall(torch.nn.Module):
        """Calls the jitted object with one call's tensors (its other leaves fixed) and
        returns the tensor leaves of the result, recording the rest of the result's structure."""

        TARGET = "jitted"

        def __init__(self, fn, call: _Call, eager_call):
            super().__init__()
            if isinstance(fn, torch.nn.Module):
                self.add_module(self.TARGET, fn)
            else:
                self._fn = fn  # a function: the tensors it reaches become the program's constants
            self._eager_call = eager_call
            self._spec = call.spec
            self._template = [_TENSOR if i in call.tensor_positions else leaf for i, leaf in enumerate(call.leaves)]

        @property
        def out_spec(self):
            return _RESULTS.get(id(self), (None, None))[0]

        @property
        def out_template(self):
            return _RESULTS.get(id(self), (None, None))[1]

        def forward(self, *tensors):
            given = iter(tensors)
            leaves = [next(given) if slot is _TENSOR else slot for slot in self._template]
            args, kwargs = torch.utils._pytree.tree_unflatten(leaves, self._spec)
            target = getattr(self, self.TARGET) if self.TARGET in self._modules else self._fn
            out = self._eager_call(target, *args, **kwargs) if self._eager_call is not None else target(*args, **kwargs)
            out_leaves, out_spec = torch.utils._pytree.tree_flatten(out)
            _RESULTS[id(self)] = (out_spec, [_TENSOR if isinstance(o, torch.Tensor) else o for o in out_leaves])
            symbolic = [o for o in out_leaves if isinstance(o, (torch.SymInt, torch.SymFloat, torch.SymBool))]
            if symbolic:
                raise CuvilError(f"the result holds a symbolic size ({symbolic[0]}): jit compiles results of tensors and constants")
            return tuple(o for o in out_leaves if isinstance(o, torch.Tensor))

    return FlatCall


@functools.lru_cache(maxsize=1)
def _flat_call():
    return _flat_call_class()  # an nn.Module subclass: made on first use, so importing jit does not import torch


def _strip_module_prefix(program, prefix: str) -> None:
    """Module paths as the user's model names them (``fc1``, not ``jitted.fc1``): locations,
    provenance and per-module precision options (``keep_paths``, ``skip``) read them."""
    import re

    pattern = re.compile(rf"^(L\['self'\]\.?)?{re.escape(prefix)}(\.|$)")
    graphs = [program.graph_module, *(m for m in program.graph_module.modules() if hasattr(m, "graph"))]
    for gm in graphs:
        for node in gm.graph.nodes:
            stack = node.meta.get("nn_module_stack")
            if not stack:
                continue
            node.meta["nn_module_stack"] = {k: (pattern.sub("", path), kind) for k, (path, kind) in stack.items()
                                            if pattern.sub("", path) or not pattern.match(path)}


def _check_exportable(program, flat) -> None:
    sig = program.graph_signature
    mutated = list(sig.buffers_to_mutate.values()) + list(sig.user_inputs_to_mutate.values())
    if mutated:
        raise CuvilError(f"the program writes to its inputs or buffers ({', '.join(mutated[:3])}): jit compiles pure functions")
    if flat.out_spec is None:
        raise CuvilError("the program was exported without running its forward")


def _output_dtypes(program) -> list:
    import torch

    by_name = {n.name: n for n in program.graph.nodes}
    out = []
    for spec in program.graph_signature.output_specs:
        name = getattr(spec.arg, "name", None)
        val = by_name[name].meta.get("val") if name in by_name else None
        if isinstance(val, torch.Tensor):
            out.append(val.dtype)
    return out


def _torch_dtype(name: str):
    import torch

    return {"bfloat16": torch.bfloat16}.get(name) or getattr(torch, name)


def _shape_matcher(program, call: _Call):
    """shapes -> whether the compiled program takes them: exact for static exports; with
    ``dynamic=True`` every symbolic dim within its range, equal symbols equal."""
    import torch

    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    patterns = []
    for name in program.graph_signature.user_inputs:
        val = placeholders[name].meta.get("val")
        patterns.append(tuple(val.shape) if isinstance(val, torch.Tensor) else ())
    if all(isinstance(d, int) for p in patterns for d in p):
        static = tuple(patterns)
        return lambda got: got == static
    ranges = {}
    for sym, vr in program.range_constraints.items():
        ranges[str(sym)] = (_bound(vr.lower), _bound(vr.upper))

    def match(shapes) -> bool:
        if len(shapes) != len(patterns):
            return False
        bound: dict[str, int] = {}
        for pattern, shape in zip(patterns, shapes):
            if len(pattern) != len(shape):
                return False
            for want, got in zip(pattern, shape):
                if isinstance(want, int):
                    if want != got:
                        return False
                    continue
                text = str(want)
                if text in bound and bound[text] != got:
                    return False
                lo, hi = ranges.get(text, (None, None))
                if (lo is not None and got < lo) or (hi is not None and got > hi):
                    return False
                bound[text] = got
        return all(_expression_holds(p, bound) for p in patterns)

    return match


def _bound(value):
    if not getattr(value, "is_finite", True):
        return None  # int_oo: unbounded
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None


def _expression_holds(pattern, bound) -> bool:
    """Dims that are expressions of symbols (``2*s0``) are only checked once every symbol is bound."""
    import sympy

    for want in pattern:
        if isinstance(want, int) or str(want) in bound:
            continue
        expr = sympy.sympify(str(want))
        if not expr.free_symbols <= {sympy.Symbol(s) for s in bound}:
            return False
    return True


# ---------------------------------------------------------------------------------------
# State stamps: has anything the compiled module depends on changed?


def _stamp(fn):
    import torch

    if isinstance(fn, torch.nn.Module):
        return _module_stamp(fn, torch)
    code = getattr(fn, "__code__", None)
    values = []
    if code is not None:
        globals_ = getattr(fn, "__globals__", {})
        values += [(name, globals_[name]) for name in code.co_names if name in globals_]
    for i, cell in enumerate(getattr(fn, "__closure__", None) or ()):
        try:
            values.append((i, cell.cell_contents))
        except ValueError:
            pass
    out = []
    for name, value in values:
        if isinstance(value, torch.Tensor):
            out.append((name, id(value), value.data_ptr(), value._version))
        elif isinstance(value, torch.nn.Module):
            out.append((name, _module_stamp(value, torch)))
        elif isinstance(value, _PLAIN):
            out.append((name, value))
    return tuple(out)


def _module_stamp(module, torch):
    parts = []
    for m in module.modules():
        plain = tuple((k, v) for k, v in m.__dict__.items() if isinstance(v, _PLAIN) and k != "training")
        hooks = (tuple(m._forward_hooks), tuple(m._forward_pre_hooks))
        parts.append((id(m), m.training, plain, hooks))
    for t in (*module.parameters(), *module.buffers()):
        parts.append((id(t), t.data_ptr(), t._version))
    return tuple(parts)


# ---------------------------------------------------------------------------------------
# Helpers.

_LOCAL = threading.local()
_SERIALS = itertools.count()


@contextlib.contextmanager
def _eager_mode():
    """While set, a jitted class's instances run as their base class (exporting, eager fallback)."""
    depth = getattr(_LOCAL, "eager", 0)
    _LOCAL.eager = depth + 1
    try:
        yield
    finally:
        _LOCAL.eager = depth


def _in_eager() -> bool:
    return getattr(_LOCAL, "eager", 0) > 0


def _caller_stacklevel() -> int:
    """The stacklevel of the first frame outside this file and the torch.compile backend
    (the user's call), for warnings."""
    import sys

    frame, level = sys._getframe(1), 1
    ours = (__file__, __file__.replace("jitted.py", "dynamo_backend.py"))
    while frame is not None and (frame.f_code.co_filename in ours or "/torch/_dynamo/" in frame.f_code.co_filename
                                 or frame.f_code.co_filename.endswith("torch/nn/modules/module.py")):
        frame, level = frame.f_back, level + 1
    return level


def _is_module(fn) -> bool:
    try:
        import torch
    except ImportError:
        return False
    return isinstance(fn, torch.nn.Module)


def _name_of(fn) -> str:
    if _is_module(fn):
        return type(fn).__name__
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _one_line(text: str, limit: int = 600) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + " ..."

"""The pattern-authoring adapter: rewrite patterns as small Python functions.

A pattern is ``fn(op, rewriter) -> replacement | None``: return ``None`` when the op does
not match (the IR is untouched), else the value (or list of values) that replaces the
op's results. Match fully before building anything. The adapter hides the upstream
conventions: the upstream callback returns truthy for "no match", new ops must be
built under ``rewriter.ip``, and a pattern set needs a live context when frozen::

    patterns = PatternSet("fuse-linear-epilogue")

    @patterns.add("torch.aten.gelu")
    def gelu_into_linear(op, rewriter):
        \"\"\"gelu(cuvil.linear(x, w, b)) -> cuvil.linear(x, w, b) {activation = "gelu"}\"\"\"
        lin = defining_op(op.operands[0], "cuvil.linear")
        if lin is None or ...:
            return None
        return build_linear(...)

Matcher helpers below are pure reads of the IR; builder helpers create torch ops at the
current insertion point.
"""

from __future__ import annotations

import inspect
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Sequence

from cuvil_mlir.core import params
from cuvil_mlir.core.diagnostics import location_text, module_path
from cuvil_mlir.core.ir import elements_array, elements_attr, ir, rewrite
from cuvil_mlir.core.options import Configurable
from cuvil_mlir.core.tensor_types import TensorInfo, dtype_of_numpy, numpy_dtype, tensor_info, vtensor_type_text

PatternFn = Callable[[object, object], object]


@dataclass
class Pattern:
    name: str
    root: str
    fn: PatternFn
    benefit: int = 1
    when: Callable[[object], bool] | None = None  # registered only for the options it returns True for

    @property
    def takes_options(self) -> bool:
        """``fn(op, rewriter, options)``: the pattern reads its pass's options."""
        required = [p for p in inspect.signature(self.fn).parameters.values()
                    if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
        return len(required) == 3

    def enabled(self, options) -> bool:
        return self.when is None or self.when(options)

    @property
    def rewrite_doc(self) -> str:
        return (self.fn.__doc__ or "").strip().splitlines()[0] if self.fn.__doc__ else ""


@dataclass
class Example:
    """A program for the differential checker (cuvil_mlir.eval.testing.check_pattern).

    ``build(rng)`` takes a ``numpy.random.Generator`` and returns ``(program, args)``: a torch
    callable or ``nn.Module`` and example tensors, with shapes drawn from ``rng`` (edge sizes
    included). With ``matches=True`` the pattern must fire on the imported program and leave
    its numerics unchanged; with ``matches=False`` (a near miss) it must leave the IR untouched.
    A lossy rewrite (quantization, demotion) declares ``rtol``, the relative error it may add."""

    pattern: str
    build: Callable
    matches: bool = True
    name: str = ""
    rtol: float | None = None


@dataclass
class PatternSet(Configurable):
    """A named set of patterns; it is also a pass (its name is the pass name).

    A pass with options gives their defaults, an instance of a frozen dataclass
    (cuvil_mlir.core.options): ``PatternSet("quantize-weights", options=QuantizeWeightsOptions())``.
    A pattern that takes a third argument, ``fn(op, rewriter, options)``, is called with the
    configured options; ``add(root, when=...)`` registers a pattern for some configurations only.
    ``patterns`` are the patterns of this configuration, ``registered`` all of them."""

    name: str
    patterns: list[Pattern] = field(default_factory=list)
    description: str = ""
    examples: list[Example] = field(default_factory=list)
    options: object | None = None
    registered: list[Pattern] = field(default_factory=list, repr=False)

    def __post_init__(self):
        if not self.registered:
            self.registered = list(self.patterns)

    def example(self, pattern: str, *, matches: bool = True, rtol: float | None = None):
        """Decorator: register ``build(rng) -> (program, args)`` as an example of ``pattern``
        (``matches=False``: a near miss it must not rewrite; ``rtol``: the error a lossy rewrite
        may add). Every built-in pattern has at least one matching example; the checker runs
        them all in CI."""

        def decorate(build: Callable) -> Callable:
            self.examples.append(Example(pattern, build, matches, build.__name__, rtol))
            return build

        return decorate

    def only(self, *pattern_names: str) -> "PatternSet":
        """The set reduced to ``pattern_names`` (same pass name)."""
        self._check_names(pattern_names)
        return self._subset(lambda p: p.name in pattern_names)

    def without(self, *pattern_names: str) -> "PatternSet":
        """The set less ``pattern_names`` (same pass name)."""
        self._check_names(pattern_names)
        return self._subset(lambda p: p.name not in pattern_names)

    def _check_names(self, pattern_names) -> None:
        unknown = set(pattern_names) - {p.name for p in self.patterns}
        if unknown:
            raise KeyError(f"pattern set '{self.name}' has no pattern(s) {sorted(unknown)}")

    def _subset(self, keep) -> "PatternSet":
        return replace(self, patterns=[p for p in self.patterns if keep(p)], registered=[p for p in self.registered if keep(p)])

    def _configured(self, options) -> "PatternSet":
        return replace(self, options=options, patterns=[p for p in self.registered if p.enabled(options)])

    def add(self, root: str, *, benefit: int = 1, name: str | None = None, when: Callable[[object], bool] | None = None):
        """Decorator: register ``fn`` as a pattern rooted at op name ``root`` (``when(options)``:
        only in the configurations it holds for)."""

        def decorate(fn: PatternFn) -> PatternFn:
            pattern = Pattern(name or fn.__name__, root, fn, benefit, when)
            if (pattern.takes_options or when is not None) and self.options is None:
                raise TypeError(f"pattern '{pattern.name}' reads options, but pass '{self.name}' has none (PatternSet(options=...))")
            self.registered.append(pattern)
            if pattern.enabled(self.options):
                self.patterns.append(pattern)
            return fn

        return decorate

    def apply(self, module: ir.Module, *, max_iterations: int = 20) -> "Firings":
        """Apply greedily (with folding) to ``module``; returns how often each pattern fired
        (and where: ``.sites``)."""
        fired = Firings()
        with module.context:
            rps = rewrite.RewritePatternSet()
            for pattern in self.patterns:
                rps.add(pattern.root, _adapt(pattern, fired, self.options), benefit=pattern.benefit)
            config = rewrite.GreedyRewriteConfig()
            config.max_iterations = max_iterations
            rewrite.apply_patterns_and_fold_greedily(module, rps.freeze(), config)
        return fired


class Firings(Counter):
    """How often each pattern of a pass fired; ``sites[pattern][module path]`` says where (the
    nn.Module the rewritten op came from, "" for the model's own forward)."""

    def __init__(self):
        super().__init__()
        self.sites: dict[str, Counter] = {}

    def record(self, pattern: str, loc) -> None:
        self[pattern] += 1
        self.sites.setdefault(pattern, Counter())[module_path(loc)] += 1


class PatternFailure(Exception):
    """An exception escaped a pattern; carries the pattern and the op it was matching."""

    def __init__(self, pattern: Pattern, op_text: str, location: str, cause: BaseException):
        super().__init__(f"pattern '{pattern.name}' raised {type(cause).__name__}: {cause} while matching {op_text} at {location}")
        self.pattern = pattern
        self.cause = cause


def _adapt(pattern: Pattern, fired: Firings, options):
    extra = (options,) if pattern.takes_options else ()

    def callback(op, rewriter) -> bool:
        try:
            with rewriter.ip, op.location:
                replacement = pattern.fn(op, rewriter, *extra)
        except PatternFailure:
            raise
        except Exception as e:  # surface where it happened, not a bare binding traceback
            raise PatternFailure(pattern, op.operation.name, location_text(op.location), e) from e
        if replacement is None:
            return True  # upstream convention: truthy = no match
        values = list(replacement) if isinstance(replacement, (list, tuple)) else [replacement]
        values = [v.result if isinstance(v, ir.OpView) else v for v in values]
        producers = [defining_op(v) for v in op.operands]
        made = defining_op(values[0]) if values else None
        loc = made.location if made is not None else op.location  # where the replacement says it is
        rewriter.replace_op(op, values)
        erase_dead(producers, rewriter.erase_op)
        fired.record(pattern.name, loc)
        return False

    return callback


def _is_value_semantic(op) -> bool:
    """A torch/cuvil op that only computes values (no mutation, no side effects)."""
    name = op.operation.name
    if name.startswith("torch.runtime.") or name.endswith("_") or "overwrite" in name or name == "torch.prim.Print":
        return False
    if not (name.startswith(("torch.aten.", "torch.prim.", "torch.prims.", "torch.constant.", "torch.vtensor.", "cuvil."))):
        return False
    return all(not str(r.type).startswith("!torch.tensor") for r in op.results)


def erase_dead(producers, erase=lambda op: op.operation.erase()) -> None:
    """Erase producers a rewrite left unused, and theirs in turn (``erase``: the rewriter's
    erase_op inside a pattern). MLIR's driver only erases ops it knows are side-effect free,
    and torch ops do not declare that, so a pattern that consumes a chain (e.g.
    ``mul(l, sigmoid(l))``) would otherwise leave the chain behind."""
    work = []
    for p in producers:  # an op may feed several operands: visit it once
        if p is not None and p not in work:
            work.append(p)
    while work:
        op = work.pop()
        if not _is_value_semantic(op) or any(num_uses(r) for r in op.results):
            continue
        operands = [defining_op(v) for v in op.operands]
        erase(op)
        work.extend(p for p in operands if p is not None and p not in work)


# ---------------------------------------------------------------------------------------
# Matchers: pure reads of the IR.


def op_name(op) -> str:
    return op.operation.name if op is not None else ""


def defining_op(value, name: str | Sequence[str] | None = None):
    """The op that defines ``value`` (as its OpView), if it is named ``name``; else None."""
    owner = value.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)):
        return None  # a block argument
    view = owner.opview if isinstance(owner, ir.Operation) else owner
    if name is None:
        return view
    names = (name,) if isinstance(name, str) else tuple(name)
    return view if view.operation.name in names else None


def num_uses(value) -> int:
    return sum(1 for _ in value.uses)


def has_one_use(value) -> bool:
    return num_uses(value) == 1


def info(value) -> TensorInfo | None:
    """Shape and dtype of a ``!torch.vtensor`` value (None for other types)."""
    return tensor_info(value.type)


def is_none(value) -> bool:
    return str(value.type) == "!torch.none"


def const_int(value) -> int | None:
    op = defining_op(value, "torch.constant.int")
    return ir.IntegerAttr(op.attributes["value"]).value if op is not None else None


def const_float(value) -> float | None:
    """A torch float or int constant as a Python float."""
    op = defining_op(value, ("torch.constant.float", "torch.constant.int"))
    if op is None:
        return None
    attr = op.attributes["value"]
    return ir.FloatAttr(attr).value if op.operation.name == "torch.constant.float" else float(ir.IntegerAttr(attr).value)


def const_bool(value) -> bool | None:
    op = defining_op(value, "torch.constant.bool")
    return ir.BoolAttr(op.attributes["value"]).value if op is not None else None


def const_str(value) -> str | None:
    op = defining_op(value, "torch.constant.str")
    return ir.StringAttr(op.attributes["value"]).value if op is not None else None


def const_int_list(value) -> list[int] | None:
    """Values of a ``torch.prim.ListConstruct`` of int constants."""
    op = defining_op(value, "torch.prim.ListConstruct")
    if op is None:
        return None
    items = [const_int(v) for v in op.operands]
    return None if any(i is None for i in items) else items


def is_constant_tensor(value) -> bool:
    """A weight-like constant: a literal or an external parameter (core/params.py), possibly
    seen through transposes and dtype casts."""
    op = defining_op(value)
    while op is not None and op.operation.name in _VIEW_LIKE:
        op = defining_op(op.operands[0])
    return op is not None and (op.operation.name == "torch.vtensor.literal" or params.parameter_key(op) is not None)


_VIEW_LIKE = ("torch.aten.permute", "torch.aten.t", "torch.aten.transpose.int", "torch.prims.convert_element_type",
              "torch.aten.to.dtype", "torch.aten.mul.Scalar")


def transposed_2d_source(value):
    """If ``value`` is a 2-D transpose of X (permute [1,0], t, transpose 0 1), return X."""
    op = defining_op(value, ("torch.aten.permute", "torch.aten.t", "torch.aten.transpose.int"))
    if op is None or info(op.operands[0]) is None or info(op.operands[0]).rank != 2:
        return None
    name = op.operation.name
    if name == "torch.aten.t":
        return op.operands[0]
    if name == "torch.aten.permute" and const_int_list(op.operands[1]) == [1, 0]:
        return op.operands[0]
    if name == "torch.aten.transpose.int" and {const_int(op.operands[1]) % 2, const_int(op.operands[2]) % 2} == {0, 1}:
        return op.operands[0]
    return None


# ---------------------------------------------------------------------------------------
# Builders: create ops at the current insertion point (inside a pattern: before the root).


def vtensor_type(shape: Iterable[int], dtype: str) -> ir.Type:
    return ir.Type.parse(vtensor_type_text(tuple(shape), dtype))


def build(name: str, operands: Sequence, result_type, attributes: dict | None = None) -> ir.Value:
    """Create a single-result op by name (generic builder)."""
    op = ir.Operation.create(name, results=[result_type], operands=list(operands), attributes=attributes or {})
    return op.result


# The ``name`` of a torch.operator that stands for IREE's ``util.optimization_barrier`` (torch-mlir's
# context has no util dialect; targets/iree.py swaps in the real op at the hand-off to IREE).
BARRIER_OP = "util.optimization_barrier"


def optimization_barrier(value: ir.Value) -> ir.Value:
    """``value`` through an optimization barrier: IREE neither fuses nor propagates layout
    changes (transposes) across it, so the producer and its consumers compile as separate dispatches."""
    return build("torch.operator", [value], value.type, {"name": ir.StringAttr.get(BARRIER_OP)})


def torch_int(v: int) -> ir.Value:
    return build("torch.constant.int", [], ir.Type.parse("!torch.int"), {"value": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)})


def torch_float(v: float) -> ir.Value:
    return build("torch.constant.float", [], ir.Type.parse("!torch.float"), {"value": ir.FloatAttr.get(ir.F64Type.get(), v)})


def torch_bool(v: bool) -> ir.Value:
    return build("torch.constant.bool", [], ir.Type.parse("!torch.bool"), {"value": ir.BoolAttr.get(v)})


def torch_str(v: str) -> ir.Value:
    return build("torch.constant.str", [], ir.Type.parse("!torch.str"), {"value": ir.StringAttr.get(v)})


def torch_none() -> ir.Value:
    return build("torch.constant.none", [], ir.Type.parse("!torch.none"))


def torch_int_list(values: Sequence[int]) -> ir.Value:
    return build("torch.prim.ListConstruct", [torch_int(v) for v in values], ir.Type.parse("!torch.list<int>"))


def optional_operand(value):
    """``None`` for a ``!torch.none`` value (an absent optional tensor), else the value."""
    return None if value is None or is_none(value) else value


def transpose_2d(value) -> ir.Value:
    """``aten.permute(value, [1, 0])`` of a 2-D tensor."""
    t = info(value)
    return build("torch.aten.permute", [value, torch_int_list([1, 0])], vtensor_type(t.shape[::-1], t.dtype))


# ---------------------------------------------------------------------------------------
# Weights: read constant tensors as numpy and build new ones (folding, concatenation,
# conversion, quantization). The importer stores weights as dense elements so they can be read.

def literal_array(value):
    """The numpy array of a ``torch.vtensor.literal`` value, or of an external parameter in the
    active store (None if ``value`` is neither, or its data cannot be read)."""
    op = defining_op(value)
    if op is None:
        return None
    if op.operation.name == "torch.vtensor.literal":
        return elements_array(op.attributes["value"])
    key = params.parameter_key(op)
    store = params.current()
    return None if key is None or store is None else store.get(key)


def literal_recipe(value) -> dict | None:
    """The recipe of a value that is an external parameter (``{"op": "param", "key": ...}``, or
    the recipe of a derived one, so recipes read only source weights) or a small literal (its
    bytes), else None (core/params.py)."""
    op = defining_op(value)
    if op is not None and op.operation.name == "torch.vtensor.literal":
        array = elements_array(op.attributes["value"])  # a small constant: its bytes go into the recipe
        return None if array is None or array.nbytes >= params.MIN_PARAMETER_BYTES else params.value(array)
    key = params.parameter_key(op)
    store = params.current()
    if key is not None and store is not None and key in store.recipes:
        return store.recipes[key]
    return params.param(key)


def literal(array, dtype: str | None = None, *, recipe: dict | None = None) -> ir.Value:
    """A ``torch.vtensor.literal`` holding ``array``; ``dtype`` (vtensor name: f32, f16, bf16, si8,
    ...) defaults to the array's own. ``recipe``: how ``array`` is computed from parameters
    (core/params.py; e.g. ``params.concat([literal_recipe(q), literal_recipe(k)])``), recorded
    when the literal becomes a derived parameter, so the package can be rebuilt from its sources."""
    import numpy as np

    array = np.asarray(array)
    dtype = dtype or dtype_of_numpy(array.dtype)
    if dtype is None:
        raise ValueError(f"no vtensor dtype for numpy dtype {array.dtype}; pass dtype=")
    store = params.current()
    if store is not None and dtype in params.PARAMETER_DTYPES and array.size * array.itemsize >= params.MIN_PARAMETER_BYTES:
        # a weight of an external-parameter compile: into the store, referenced by its key
        stored = array.astype(numpy_dtype(dtype), copy=False)
        return params.reference(store.add_derived(stored, params.cast(recipe, stored.dtype)), vtensor_type(array.shape, dtype))
    return build("torch.vtensor.literal", [], vtensor_type(array.shape, dtype), {"value": elements_attr(array, dtype)})

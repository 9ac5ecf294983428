"""Pass ``demote-precision{dtype=f16|bf16,keep=...,keep_paths=...}``: compute in a 16-bit float
type, keeping sensitive ops in fp32. Test: tests/lowering/precision/demote-precision.mlir.

Each demoted op is rebuilt on 16-bit operands with a 16-bit result, and its result is widened
back to f32 for its users::

    op(x : f32) : f32   ->   convert(op16(convert(x, f16)) : f16, f32)

so every op not demoted (and the model's inputs and outputs) keeps its f32 values, and the
cast pairs between two demoted ops, ``convert(convert(x16, f32), f16)``, fold away
(``fold_cast_pair``; exact: widening a 16-bit float is lossless). Constant weights and
biases are converted ahead of time: the literal becomes a 16-bit literal. Casts sink through
data movement (view, permute, slice, ...) so chains of demoted ops stay 16-bit.

Op kinds (``KINDS``): linear, conv2d, attention, matmul, elementwise are demoted; softmax,
norm, reduction, exp, log are kept in fp32 by default. ``keep`` replaces the kept kinds
(``keep=softmax:norm`` demotes reductions, exp and log too; ``keep=none`` demotes all).
An elementwise op that feeds a kept op stays fp32 as well (the squares of a hand-written
RMSNorm would overflow f16). ``keep_paths`` keeps every op of the named nn.Modules (the
module path torch.export records in each op's location, ``cuvil_mlir.core.diagnostics.module_path``):
an entry matches a module path that equals it or ends with ``.<entry>``; ``*`` is a wildcard
(``lm_head``, ``h.0.attn``, ``h.0.*``; ``<forward>`` names the ops of the model's own forward;
lowering/common.py ``path_matches``). Only f32 ops are demoted; an op with a constant weight
beyond the f16 range (65504) stays f32 under f16. List options are separated by ``:``
in a pass spec (``keep=softmax:norm``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

import numpy as np

from cuvil_mlir.core.ir import ir
from cuvil_mlir.core import params
from cuvil_mlir.core.patterns import PatternSet, defining_op, info, literal, literal_array, literal_recipe, vtensor_type
from cuvil_mlir.dialects import cuvil
from cuvil_mlir.lowering.common import CASTS, constant_weight, constant_weight_recipe, conv_attributes, convert, in_paths

NAME = "demote-precision"
HALF_DTYPES = ("f16", "bf16")
F16_MAX = 65504.0

# Op kinds a policy demotes or keeps: kind -> the torch / Cuvil ops of that kind.
KINDS: dict[str, tuple[str, ...]] = {
    "linear": ("cuvil.linear",),
    "conv2d": ("cuvil.conv2d",),
    "attention": ("cuvil.attention",),
    "matmul": ("torch.aten.mm", "torch.aten.bmm", "torch.aten.matmul"),
    "elementwise": tuple(f"torch.aten.{n}" for n in (
        "add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "add.Scalar", "sub.Scalar", "mul.Scalar",
        "div.Scalar", "rsub.Scalar", "neg", "relu", "gelu", "silu", "sigmoid", "tanh", "pow.Tensor_Scalar",
    )),
    "softmax": ("torch.aten.softmax.int", "torch.aten._softmax", "torch.aten.log_softmax.int"),
    "norm": ("cuvil.norm", "torch.aten.layer_norm", "torch.aten.rms_norm"),
    "reduction": tuple(f"torch.aten.{n}" for n in (
        "sum", "sum.dim_IntList", "mean", "mean.dim", "var.correction", "var.dim", "std.correction", "amax",
    )),
    "exp": ("torch.aten.exp", "torch.aten.exp2", "torch.aten.expm1"),
    "log": ("torch.aten.log", "torch.aten.log1p", "torch.aten.log2", "torch.aten.log10"),
}
Kind = Literal[tuple(KINDS)]  # an op kind: a key of KINDS
DEFAULT_KEEP = ("softmax", "norm", "reduction", "exp", "log")
# Ops that only move data: a cast sinks through them exactly.
DATA_MOVEMENT = tuple(f"torch.aten.{n}" for n in (
    "view", "reshape", "permute", "transpose.int", "t", "unsqueeze", "squeeze.dim", "slice.Tensor", "select.int",
    "expand", "broadcast_to", "flatten.using_ints", "clone", "contiguous",
))


@dataclass(frozen=True)
class DemotePrecisionOptions:
    """``dtype``: the 16-bit float type; ``keep``: the op kinds that stay f32 (replacing the
    default list; none: demote every kind); ``keep_paths``: module paths whose ops all stay f32."""

    dtype: Literal[HALF_DTYPES] = "f16"
    keep: tuple[Kind, ...] = DEFAULT_KEEP
    keep_paths: tuple[str, ...] = ()


DESCRIPTION = "compute linear/conv/attention/matmul/elementwise ops in f16 or bf16; softmax, norms, reductions, exp, log stay f32"
patterns = PatternSet(NAME, description=DESCRIPTION, options=DemotePrecisionOptions())


# ---------------------------------------------------------------------------------------
# Matchers and builders.


def _is_float32(value) -> bool:
    t = info(value)
    return t is not None and t.dtype == "f32"


def _is_tensor(value) -> bool:
    return str(value.type).startswith("!torch.vtensor")


def _widened_from(value, half: str):
    """x when ``value`` is ``convert(x : half, f32)`` (or the model's own ``to.dtype``), else None."""
    op = defining_op(value, CASTS)
    if op is None or not _is_float32(value):
        return None
    source = op.operands[0]
    return source if info(source) is not None and info(source).dtype == half else None


def _fits(array, half: str) -> bool:
    return half == "bf16" or not np.isfinite(array).all() or float(np.abs(array).max(initial=0.0)) <= F16_MAX


def to_half(value, half: str):
    """``value`` (f32) as ``half``: the 16-bit source of a widening cast, a 16-bit literal for
    a constant, else a cast."""
    source = _widened_from(value, half)
    if source is not None:
        return source
    array = literal_array(value)
    if array is not None:
        return literal(np.asarray(array, dtype=np.float32), half, recipe=params.cast(literal_recipe(value), np.float32))
    return convert(value, half)


def _weight_to_half(value, half: str):
    """A constant weight (also through a 2-D transpose) as a 16-bit literal in the op's layout."""
    array = constant_weight(value)
    if array is None:
        return to_half(value, half)
    return literal(np.asarray(array, dtype=np.float32), half, recipe=params.cast(constant_weight_recipe(value), np.float32))


def _weights_fit(values, half: str) -> bool:
    """No constant among ``values`` overflows ``half`` (only f16 has a small range)."""
    for v in values:
        array = None if v is None else constant_weight(v)
        if array is not None and not _fits(np.asarray(array, dtype=np.float32), half):
            return False
    return True


def _half_type(value, half: str):
    t = info(value)
    return vtensor_type(t.shape, half)


def _widen(value):
    return convert(value, "f32")


def _demote_generic(op, half: str):
    """op(x...) -> convert(op(x16...) : half, f32): tensor operands cast, others unchanged."""
    operands = [to_half(v, half) if _is_tensor(v) else v for v in op.operands]
    attributes = {a.name: a.attr for a in op.attributes}
    new = ir.Operation.create(op.operation.name, results=[_half_type(op.result, half)], operands=operands,
                              attributes=attributes)
    return _widen(new.result)


def _generic_demotable(op, half: str) -> bool:
    """One f32 tensor result; every tensor operand f32 (integer or boolean tensors: no), and no
    constant operand beyond ``half``'s range (a -1e9 mask would become -inf in f16)."""
    if len(op.results) != 1 or not _is_float32(op.results[0]):
        return False
    tensors = [v for v in op.operands if _is_tensor(v)]
    if not all(_is_float32(v) for v in tensors):
        return False
    constants = [literal_array(v) for v in tensors]
    return all(_fits(np.asarray(c, dtype=np.float32), half) for c in constants if c is not None)


# ---------------------------------------------------------------------------------------
# The patterns. A kind's patterns are registered only where it is demoted (``when``).


def _demoted(kind: str):
    """Decorator: the pattern for every op of ``kind``, in configurations that demote it."""

    def decorate(fn):
        for root in KINDS[kind]:
            patterns.add(root, name=fn.__name__, when=lambda options: kind not in options.keep)(fn)
        return fn

    return decorate


@functools.cache
def _kept_ops(keep: tuple[str, ...]) -> frozenset[str]:
    return frozenset(name for kind in keep for name in KINDS[kind])


def _weighted_operands(op, options: DemotePrecisionOptions):
    """(x16, W16, b16) of an f32 linear/conv2d to demote (constants as 16-bit literals), else None."""
    half = options.dtype
    if not (_is_float32(op.input) and _is_float32(op.result)) or in_paths(op, options.keep_paths):
        return None
    if not _weights_fit([op.weight, op.bias], half):
        return None
    bias = None if op.bias is None else _weight_to_half(op.bias, half)
    return to_half(op.input, half), _weight_to_half(op.weight, half), bias


@_demoted("linear")
def demote_linear(op, rewriter, options: DemotePrecisionOptions):
    """cuvil.linear(x, W, b) : f32 -> convert(cuvil.linear(x16, W16, b16) : f16, f32)   (W, b literals converted ahead)"""
    operands = _weighted_operands(op, options)
    if operands is None:
        return None
    return _widen(cuvil.linear(_half_type(op.result, options.dtype), *operands, activation=cuvil.activation_of(op)))


@_demoted("conv2d")
def demote_conv2d(op, rewriter, options: DemotePrecisionOptions):
    """cuvil.conv2d(x, W, b) : f32 -> convert(cuvil.conv2d(x16, W16, b16) : f16, f32)"""
    operands = _weighted_operands(op, options)
    if operands is None:
        return None
    y = cuvil.conv2d(_half_type(op.result, options.dtype), *operands, **conv_attributes(op), activation=cuvil.activation_of(op))
    return _widen(y)


@_demoted("attention")
def demote_attention(op, rewriter, options: DemotePrecisionOptions):
    """cuvil.attention(q, k, v, mask) : f32 -> convert(cuvil.attention(q16, k16, v16, mask16) : f16, f32)   (i1 mask kept)"""
    half = options.dtype
    if not all(_is_float32(v) for v in (op.q, op.k, op.v, op.result)) or in_paths(op, options.keep_paths):
        return None
    mask = op.mask
    if mask is not None and info(mask).dtype not in ("i1", "f32"):
        return None
    if mask is not None and info(mask).dtype == "f32":
        mask = to_half(mask, half)
    y = cuvil.attention(_half_type(op.result, half), to_half(op.q, half), to_half(op.k, half), to_half(op.v, half),
                        mask, scale=ir.FloatAttr(op.attributes["scale"]).value,
                        is_causal=ir.BoolAttr(op.attributes["is_causal"]).value)
    return _widen(y)


@_demoted("norm")
def demote_norm(op, rewriter, options: DemotePrecisionOptions):
    """cuvil.norm(x, w, b) : f32 -> convert(cuvil.norm(x16, w16, b16) : f16, f32)   (only when norm is not kept)"""
    if op.operation.name != "cuvil.norm":
        return _demote_op(op, options)
    half = options.dtype
    if not (_is_float32(op.x) and _is_float32(op.result)) or in_paths(op, options.keep_paths):
        return None
    weight = None if op.weight is None else to_half(op.weight, half)
    bias = None if op.bias is None else to_half(op.bias, half)
    y = cuvil.norm(_half_type(op.result, half), to_half(op.x, half), weight, bias,
                   kind=ir.StringAttr(op.attributes["kind"]).value, eps=ir.FloatAttr(op.attributes["eps"]).value,
                   normalized_shape=list(ir.DenseI64ArrayAttr(op.attributes["normalized_shape"])))
    return _widen(y)


def _demote_op(op, options: DemotePrecisionOptions):
    """op(x...) : f32 -> convert(op(x16...) : f16, f32)   (matmul, elementwise, and kinds not kept)"""
    half = options.dtype
    if not _generic_demotable(op, half) or in_paths(op, options.keep_paths):
        return None
    if op.operation.name in KINDS["elementwise"] and any(use.owner.name in _kept_ops(options.keep) for use in op.result.uses):
        return None  # it feeds a kept op (x*x of a hand-written norm): compute it at the kept op's precision
    return _demote_generic(op, half)


def _generic_pattern(kind: str):
    """The pattern of a kind whose ops are rebuilt as they are (``_demote_op``), named demote_<kind>."""

    def pattern(op, rewriter, options: DemotePrecisionOptions):
        return _demote_op(op, options)

    pattern.__name__ = pattern.__qualname__ = f"demote_{kind}"
    pattern.__doc__ = f"{kind} op(x...) : f32 -> convert(op(x16...) : f16, f32)"
    return pattern


for _kind in ("matmul", "elementwise", "softmax", "reduction", "exp", "log"):
    _demoted(_kind)(_generic_pattern(_kind))


def fold_cast_pair(op, rewriter):
    """convert(convert(x : f16, f32), f16) -> x   (widening a 16-bit float is exact; to.dtype too)"""
    inner = defining_op(op.operands[0], CASTS)
    if inner is None:
        return None
    source, middle, out = info(inner.operands[0]), info(op.operands[0]), info(op.result)
    if source is None or middle is None or out is None:
        return None
    if source.dtype not in HALF_DTYPES or out.dtype != source.dtype or middle.dtype not in ("f32", "f64"):
        return None
    return inner.operands[0]


def sink_cast(op, rewriter, options: DemotePrecisionOptions):
    """view(convert(x16, f32)) -> convert(view(x16), f32)   (data movement: permute, slice, ... as well)"""
    half = options.dtype
    if len(op.results) != 1 or not _is_float32(op.result):
        return None
    source = _widened_from(op.operands[0], half)
    if source is None or any(_is_tensor(v) and info(v).dtype.startswith("f") for v in op.operands[1:]):
        return None
    attributes = {a.name: a.attr for a in op.attributes}
    new = ir.Operation.create(op.operation.name, results=[_half_type(op.result, half)],
                              operands=[source, *op.operands[1:]], attributes=attributes)
    return _widen(new.result)


for _root in CASTS:
    patterns.add(_root, name="fold_cast_pair")(fold_cast_pair)
for _root in DATA_MOVEMENT:
    patterns.add(_root, name="sink_cast")(sink_cast)


# ---------------------------------------------------------------------------------------
# Examples for the differential checker (default options: f16).

RTOL_F16 = 1e-2  # what one demoted op may add, relative to the largest output (max norm)


@patterns.example("demote_linear", rtol=RTOL_F16)
def _mlp(rng):
    import torch

    d_in, d_out = int(rng.integers(1, 65)), int(rng.integers(1, 65))
    return torch.nn.Sequential(torch.nn.Linear(d_in, d_out), torch.nn.GELU()).eval(), (torch.randn(int(rng.integers(1, 5)), d_in),)


@patterns.example("demote_linear", matches=False, rtol=RTOL_F16)
def _half_model(rng):
    """Already f16: nothing to demote."""
    import torch

    d = int(rng.integers(2, 33))
    return torch.nn.Linear(d, d).eval().half(), (torch.randn(3, d).half(),)


@patterns.example("demote_conv2d", rtol=RTOL_F16)
def _conv(rng):
    import torch

    c_in, c_out = int(rng.integers(1, 9)), int(rng.integers(1, 9))
    return torch.nn.Conv2d(c_in, c_out, 3, padding=1).eval(), (torch.randn(1, c_in, 6, 6),)


@patterns.example("demote_attention", rtol=RTOL_F16)
def _attention(rng):
    """q, k through a layer norm (kept f32): scores stay in range at every input scale."""
    import torch
    import torch.nn.functional as F

    length, e = int(rng.integers(1, 9)), int(rng.integers(2, 17))

    def attend(q, k, v):
        q, k = F.layer_norm(q, (e,)), F.layer_norm(k, (e,))
        return F.scaled_dot_product_attention(q, k, v, is_causal=bool(rng.integers(0, 2)))

    shape = (1, 2, length, e)
    return attend, (torch.randn(shape), torch.randn(shape), torch.randn(shape))


@patterns.example("demote_matmul", rtol=RTOL_F16)
def _matmul(rng):
    import torch
    import torch.nn.functional as F

    m, k, n = (int(rng.integers(1, 17)) for _ in range(3))
    return (lambda a, b: torch.matmul(F.layer_norm(a, (k,)), b)), (torch.randn(m, k), torch.randn(k, n))


@patterns.example("demote_elementwise", rtol=RTOL_F16)
def _elementwise(rng):
    import torch
    import torch.nn.functional as F

    n = int(rng.integers(1, 33))
    return (lambda x, y: F.silu(x) * 0.5 + torch.tanh(y) - x), (torch.randn(3, n), torch.randn(3, n))


@patterns.example("demote_elementwise", matches=False, rtol=RTOL_F16)
def _integer_add(rng):
    """Integer tensors are not demoted."""
    import torch

    n = int(rng.integers(1, 17))
    return (lambda a, b: (a + b) * 2), (torch.randint(0, 9, (n,)), torch.randint(0, 9, (n,)))


@patterns.example("demote_elementwise", matches=False, rtol=RTOL_F16)
def _squares_into_mean(rng):
    """x * x feeding a kept reduction (a hand-written norm's sum of squares) stays f32."""
    import torch

    n = int(rng.integers(1, 33))
    return (lambda x: (x * x).sum(-1, keepdim=True)), (torch.randn(2, n),)


@patterns.example("fold_cast_pair")
def _cast_pair(rng):
    """An f16 model that widens and narrows back (exact: folded)."""
    import torch

    n = int(rng.integers(1, 33))
    return (lambda x: (x.float().half() * 2).float().half()), (torch.randn(2, n).half(),)


@patterns.example("fold_cast_pair", matches=False)
def _narrow_then_widen(rng):
    """f32 -> f16 -> f32 rounds: it must stay."""
    import torch

    n = int(rng.integers(1, 33))
    return (lambda x: x.half().float() + 1), (torch.randn(2, n),)


@patterns.example("sink_cast")
def _linear_view_linear(rng):
    import torch

    d = 2 * int(rng.integers(1, 9))
    fc1, fc2 = torch.nn.Linear(d, d), torch.nn.Linear(d // 2, 3)
    return (lambda x: fc2(fc1(x).view(x.shape[0], 2, d // 2))), (torch.randn(int(rng.integers(1, 4)), d),)


PASS = patterns

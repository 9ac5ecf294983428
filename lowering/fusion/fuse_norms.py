"""Pass ``fuse-norms``: hand-written RMSNorm and LayerNorm -> ``cuvil.norm``.

Matches the forms torch.export and torch-mlir's FX importer really produce: ``mean`` arrives
as ``sum.dim_IntList / N`` (``mean.dim`` and ``sum * (1/N)`` are matched too), ``aten.var``
and ``aten.var_mean`` as a float64 mean of squared deviations cast back, and common
subexpressions are not merged (two identical ``x - mean`` ops are one value here).

RMSNorm, kind "rms" (HF Llama / Mistral / T5LayerNorm, Gemma with a foldable ``1 + w``)::

    x * rsqrt(mean(x², dims, keepdim) + eps) [* w]      (w either side of the multiply)
        x² as pow(x, 2) or x * x;  rsqrt as rsqrt, reciprocal(sqrt), pow(·, -0.5);
        or x / sqrt(...), sqrt as sqrt or pow(·, 0.5)

LayerNorm, kind "layer"::

    (x - mean(x)) * rsqrt(var + eps) [* w] [+ b]        (or / sqrt(var + eps))
        var: mean((x - mean(x))²) over the same dims, computed in x's dtype or in a wider
        float type and cast back (aten.var / var_mean with correction 0)

``dims`` must be the trailing dims of x (static sizes; N their element count, which is the
proof), keepdim true unless every kept dim has size 1, eps a constant >= 0 (``add.Scalar`` or
a one-element literal; no add means eps 0). The weight and bias must have the normalized
shape, optionally with leading 1s (reshaped; constants are folded, e.g. Gemma's ``1 + w``).

Mixed precision is kept: with the fp32 upcast of HF models (``x.to(float32)`` ... ``.to(input
dtype)``) cuvil.norm works on the upcast value and the cast back stays after it; a weight
multiplied after the cast is converted to the norm's dtype and fused (one rounding instead of
two). T5's ``x16 * rsqrt(var32)`` (promoted to fp32) normalizes the upcast x.

Left alone: reductions over other than the trailing dims, keepdim false where it changes the
broadcast, non-constant or negative eps, unbiased variance (divisor N - 1), eps added outside
the square root, any intermediate (mean, variance, rsqrt, ...) with a use outside the norm,
a norm computed in a narrower type than its input, a weight or bias of another shape (the
multiply or add stays; the normalization itself still fuses). RMSNorm of a centered input is
a LayerNorm and left to the layer patterns.
Test: tests/lowering/fusion/fuse-norms.mlir.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from cuvil_mlir.core import params
from cuvil_mlir.core.tensor_types import FLOAT_WIDTH, numpy_dtype
from cuvil_mlir.dialects import cuvil
from cuvil_mlir.lowering.common import CASTS, convert, float_cast, uses_inside
from cuvil_mlir.core.patterns import (
    PatternSet, build, const_bool, const_float, const_int_list, defining_op, info, is_none, literal,
    literal_array, literal_recipe, num_uses, op_name, torch_int_list, vtensor_type,
)

patterns = PatternSet("fuse-norms", description="hand-written RMSNorm / LayerNorm -> cuvil.norm")

_EXACT = {("f16", "f32"), ("f16", "f64"), ("bf16", "f32"), ("bf16", "f64"), ("f32", "f64")}  # lossless conversions


@dataclass
class _Match:
    kind: str  # "rms" | "layer"
    x: object  # the normalized value
    eps: float
    shape: list[int]  # normalized_shape: x's trailing dims
    ops: list = field(default_factory=list)  # every op the fused norm replaces
    weight: object = None
    bias: object = None
    cast: object = None  # a float cast between the normalization and its weight / bias

    @property
    def dtype(self) -> str:
        return info(self.x).dtype


# ---------------------------------------------------------------------------------------
# The patterns: one per root op; each matches the largest norm ending at its root.


@patterns.add("torch.aten.mul.Tensor")
def rms_norm(op, rewriter):
    """x * rsqrt(mean(x²) + eps) [* w]  (also x / sqrt(...) * w) -> cuvil.norm(x, w) {kind = "rms"}"""
    return _fuse(op, "rms")


@patterns.add("torch.aten.div.Tensor")
def rms_norm_div(op, rewriter):
    """x / sqrt(mean(x²) + eps) -> cuvil.norm(x) {kind = "rms"}"""
    return _fuse(op, "rms")


@patterns.add("torch.aten.add.Tensor")
def layer_norm_affine(op, rewriter):
    """(x - mean(x)) * rsqrt(var(x) + eps) [* w] + b -> cuvil.norm(x, w, b) {kind = "layer"}"""
    return _fuse(op, "layer")


@patterns.add("torch.aten.mul.Tensor")
def layer_norm(op, rewriter):
    """(x - mean(x)) * rsqrt(var(x) + eps) [* w]  (also / sqrt(...) * w) -> cuvil.norm(x, w) {kind = "layer"}"""
    return _fuse(op, "layer")


@patterns.add("torch.aten.div.Tensor")
def layer_norm_div(op, rewriter):
    """(x - mean(x)) / sqrt(var(x) + eps) -> cuvil.norm(x) {kind = "layer"}"""
    return _fuse(op, "layer")


def _fuse(op, kind: str):
    m = _match_at(op, kind)
    if m is None or _grows_into_user(op, kind):
        return None
    return _build(m, op)


def _match_at(op, kind: str) -> _Match | None:
    """The largest norm of ``kind`` whose last op is ``op`` (all checks included)."""
    name = op_name(op)
    m = None
    if name == "torch.aten.add.Tensor" and kind == "layer":
        m = _affine(op)
    elif name == "torch.aten.mul.Tensor":
        m = _weighted(op, kind)
    if m is None and name in ("torch.aten.mul.Tensor", "torch.aten.div.Tensor"):
        m = _core(op.result, kind)
    if m is None or not uses_inside(m.ops, op):
        return None
    return m


def _grows_into_user(op, kind: str) -> bool:
    """True when the only user of ``op`` (or, through a float cast, its user) ends a larger
    norm that contains ``op``: that root fuses it (the greedy driver's order must not matter)."""
    value = op.result
    for _ in range(2):
        if num_uses(value) != 1:
            return False
        user = next(iter(value.uses)).owner
        bigger = _match_at(user, kind)
        if bigger is not None and any(o.operation == op.operation for o in bigger.ops):
            return True
        if op_name(user) not in CASTS:
            return False
        value = user.result
    return False


# ---------------------------------------------------------------------------------------
# Epilogues: weight multiply and bias add, possibly behind a cast of the normalization.


def _weighted(op, kind: str) -> _Match | None:
    """mul(norm, w) or mul(w, norm), norm possibly cast (e.g. HF's ``w * h.to(input dtype)``)."""
    lhs, rhs = op.operands
    for t, w in ((lhs, rhs), (rhs, lhs)):
        m = _below_cast(t, kind)
        if m is None or not _param_fits(w, m) or w == t:
            continue
        if info(op.result) != info(t):  # the weight neither broadcasts nor promotes the result
            continue
        m.weight = w
        m.ops.append(op)
        return m
    return None


def _affine(op) -> _Match | None:
    """add(norm [* w], b) or add(b, norm [* w]) with alpha 1."""
    lhs, rhs, alpha = op.operands
    if const_float(alpha) != 1.0:
        return None
    for s, b in ((lhs, rhs), (rhs, lhs)):
        producer = defining_op(s, "torch.aten.mul.Tensor")
        m = _weighted(producer, "layer") if producer is not None else None
        m = m or _below_cast(s, "layer")
        if m is None or not _param_fits(b, m) or info(op.result) != info(s):
            continue
        m.bias = b
        m.ops.append(op)
        return m
    return None


def _below_cast(value, kind: str) -> _Match | None:
    """The normalization ``value`` is, or is a float cast of (to a type no wider than its own)."""
    cast = float_cast(value)
    m = _core(cast.operands[0] if cast is not None else value, kind)
    if m is None or cast is None:
        return m
    if FLOAT_WIDTH[info(cast.result).dtype] > FLOAT_WIDTH[m.dtype]:
        return None  # an upcast after the norm: the weight would be rounded to the narrower type
    m.cast = cast
    m.ops.append(cast)
    return m


def _param_fits(p, m: _Match) -> bool:
    """A weight/bias of the normalized shape (leading 1s allowed) whose dtype converts exactly
    to the norm's."""
    t = info(p)
    if t is None or t.dtype not in FLOAT_WIDTH or not (t.dtype == m.dtype or (t.dtype, m.dtype) in _EXACT):
        return False
    k = len(m.shape)
    return k <= t.rank <= info(m.x).rank and list(t.shape[t.rank - k:]) == m.shape and all(d == 1 for d in t.shape[:t.rank - k])


# ---------------------------------------------------------------------------------------
# The normalizations.


def _core(value, kind: str) -> _Match | None:
    return _rms_core(value) if kind == "rms" else _layer_core(value)


def _rms_core(value) -> _Match | None:
    """x * rsqrt(mean(x²) + eps) -> _Match; T5's ``x16 * rsqrt(mean(x32²))`` normalizes x32."""
    for a, den, ops in _scaled_by_rsqrt(defining_op(value)):
        with_eps = _plus_eps(den)
        mean = _mean(with_eps[0]) if with_eps is not None else None
        squared = _square(mean[0]) if mean is not None else None
        if squared is None:
            continue
        (ms, eps, eps_ops), (_, dims, mean_ops), (xs, sq_ops) = with_eps, mean, squared
        if _same(xs, a):
            x, extra = a, ([] if xs == a or defining_op(xs) is None else [defining_op(xs)])
        elif _upcast_source(xs) is not None and _same(_upcast_source(xs), a):
            x, extra = xs, []
        else:
            continue
        centered = _centered(x)
        if info(ms).dtype != info(x).dtype or info(value) != info(x) or (centered is not None and centered[1] == dims):
            continue  # a norm in another type than x's; or of a centered x: a LayerNorm
        shape = _normalized_shape(x, dims)
        if shape is None:
            continue
        return _Match("rms", x, eps, shape, [*ops, *eps_ops, *mean_ops, *sq_ops, *extra])
    return None


def _layer_core(value) -> _Match | None:
    """(x - mean(x)) * rsqrt(mean((x - mean(x))²) + eps) -> _Match"""
    for c, den, ops in _scaled_by_rsqrt(defining_op(value)):
        centered, with_eps = _centered(c), _plus_eps(den)
        if centered is None or with_eps is None:
            continue
        (x, dims, c_ops), (var, eps, eps_ops) = centered, with_eps
        var_ops = _variance(var, x, dims)
        if var_ops is None or info(var).dtype != info(x).dtype or info(value) != info(x):
            continue
        shape = _normalized_shape(x, dims)
        if shape is None:
            continue
        return _Match("layer", x, eps, shape, [*ops, *c_ops, *eps_ops, *var_ops])
    return None


def _variance(value, x, dims):
    """Ops of ``value = mean((x - mean(x))², dims)``, possibly of x upcast and cast back (the
    importer's form of aten.var / var_mean with correction 0); None if it is not."""
    ops = []
    cast = float_cast(value)
    if cast is not None:
        ops.append(cast)
        value = cast.operands[0]
    mean = _mean(value)
    squared = _square(mean[0]) if mean is not None else None
    centered = _centered(squared[0]) if squared is not None else None
    if centered is None or mean[1] != dims or centered[1] != dims:
        return None
    x2 = centered[0]
    if not _same(x2, x):
        source = _upcast_source(x2)
        if source is None or not _same(source, x):
            return None
        ops.append(defining_op(x2))
    return [*ops, *mean[2], *squared[1], *centered[2]]


def _normalized_shape(x, dims) -> list[int] | None:
    """x's sizes at ``dims`` if they are its trailing dims (static, float x)."""
    t = info(x)
    if t is None or t.dtype not in FLOAT_WIDTH or dims != list(range(t.rank - len(dims), t.rank)):
        return None
    return [t.shape[d] for d in dims]


# ---------------------------------------------------------------------------------------
# Pieces. Each returns what it matched and the ops it consumed, or None.


def _scaled_by_rsqrt(op):
    """(numerator, radicand, ops) for mul(n, rsqrt(r)) either way round, or div(n, sqrt(r))."""
    name = op_name(op)
    if name == "torch.aten.mul.Tensor":
        lhs, rhs = op.operands
        for n, inv in ((lhs, rhs), (rhs, lhs)):
            r = _rsqrt(inv)
            if r is not None:
                yield n, r[0], [op, *r[1]]
    elif name == "torch.aten.div.Tensor":
        r = _sqrt(op.operands[1])
        if r is not None:
            yield op.operands[0], r[0], [op, *r[1]]


def _rsqrt(value):
    """rsqrt(r), reciprocal(sqrt(r)), pow(r, -0.5) -> (r, ops)"""
    op = defining_op(value)
    name = op_name(op)
    if name == "torch.aten.rsqrt":
        return op.operands[0], [op]
    if name == "torch.aten.pow.Tensor_Scalar" and const_float(op.operands[1]) == -0.5:
        return op.operands[0], [op]
    if name == "torch.aten.reciprocal":
        r = _sqrt(op.operands[0])
        return None if r is None else (r[0], [op, *r[1]])
    return None


def _sqrt(value):
    """sqrt(r), pow(r, 0.5) -> (r, ops)"""
    op = defining_op(value)
    if op_name(op) == "torch.aten.sqrt":
        return op.operands[0], [op]
    if op_name(op) == "torch.aten.pow.Tensor_Scalar" and const_float(op.operands[1]) == 0.5:
        return op.operands[0], [op]
    return None


def _plus_eps(value):
    """v + eps -> (v, eps, ops), eps a constant >= 0: add.Scalar, or add.Tensor with a
    one-element literal. A value that is no add is v + 0; an add of anything else is None."""
    op = defining_op(value)
    name = op_name(op)
    if name == "torch.aten.add.Scalar":
        v, eps, alpha = op.operands
        e, a = const_float(eps), const_float(alpha)
        return _eps_ok(v, None if e is None or a is None else e * a, op)
    if name == "torch.aten.add.Tensor":
        lhs, rhs, alpha = op.operands
        if const_float(alpha) != 1.0:
            return None
        for v, e in ((lhs, rhs), (rhs, lhs)):
            arr = literal_array(e)
            if arr is not None and arr.size == 1:
                return _eps_ok(v, float(arr.reshape(-1)[0]), op)
        return None
    return value, 0.0, []


def _eps_ok(v, eps, op):
    if eps is None or not math.isfinite(eps) or eps < 0 or info(op.result) != info(v):
        return None
    return v, eps, [op]


def _mean(value):
    """mean(src, dims) -> (src, sorted dims, ops): mean.dim, sum.dim_IntList / N or * (1/N)
    with N the number of reduced elements."""
    op = defining_op(value)
    name = op_name(op)
    if name == "torch.aten.mean.dim":
        src, dims, keepdim, dtype = op.operands
        reduced = _reduced_dims(src, dims, keepdim, dtype)
        return None if reduced is None else (src, reduced, [op])
    if name not in ("torch.aten.div.Scalar", "torch.aten.mul.Scalar"):
        return None
    total, divisor = defining_op(op.operands[0], "torch.aten.sum.dim_IntList"), const_float(op.operands[1])
    if total is None or divisor is None:
        return None
    src, dims, keepdim, dtype = total.operands
    reduced = _reduced_dims(src, dims, keepdim, dtype)
    if reduced is None:
        return None
    count = math.prod(info(src).shape[d] for d in reduced)
    if name == "torch.aten.div.Scalar" and divisor != count:
        return None  # e.g. N - 1: an unbiased variance
    if name == "torch.aten.mul.Scalar" and abs(divisor * count - 1.0) > 1e-9:
        return None
    return src, reduced, [op, total]


def _reduced_dims(src, dims, keepdim, dtype):
    """Sorted non-negative dims of a reduction over static dims of a float tensor, or None.
    keepdim false is accepted only where it does not change the broadcast (kept dims all 1)."""
    t, d, keep = info(src), const_int_list(dims), const_bool(keepdim)
    if t is None or t.dtype not in FLOAT_WIDTH or not d or keep is None or not is_none(dtype):
        return None
    if any(not -t.rank <= i < t.rank for i in d):
        return None
    reduced = sorted({i % t.rank for i in d})
    if len(reduced) != len(d) or any(t.shape[i] < 0 for i in reduced):
        return None
    if not keep and any(t.shape[i] != 1 for i in range(t.rank) if i not in reduced):
        return None
    return reduced


def _square(value):
    """pow(s, 2) or s * s -> (s, ops)"""
    op = defining_op(value)
    name = op_name(op)
    if name == "torch.aten.pow.Tensor_Scalar" and const_float(op.operands[1]) == 2.0:
        return op.operands[0], [op]
    if name == "torch.aten.mul.Tensor" and _same(op.operands[0], op.operands[1]):
        return op.operands[0], [op]
    return None


def _centered(value):
    """x - mean(x, dims) (alpha 1) -> (x, dims, ops)"""
    op = defining_op(value, "torch.aten.sub.Tensor")
    if op is None or const_float(op.operands[2]) != 1.0:
        return None
    x, m = op.operands[:2]
    mean = _mean(m)
    if mean is None or not _same(mean[0], x):
        return None
    return x, mean[1], [op, *mean[2]]


def _upcast_source(value):
    """v when ``value`` is a lossless float upcast of v (f16/bf16 -> f32/f64, f32 -> f64)."""
    cast = float_cast(value)
    if cast is None or (info(cast.operands[0]).dtype, info(value).dtype) not in _EXACT:
        return None
    return cast.operands[0]


def _same(a, b, depth: int = 4) -> bool:
    """``a`` and ``b`` are one value, or results of identical ops on identical operands (the
    importer does not merge common subexpressions: ``x - mean`` may appear twice)."""
    if a == b:
        return True
    pa, pb = defining_op(a), defining_op(b)
    if depth == 0 or pa is None or pb is None or a.type != b.type:
        return False
    if op_name(pa) != op_name(pb) or a.result_number != b.result_number or len(pa.operands) != len(pb.operands):
        return False
    attrs_a = {n.name: n.attr for n in pa.attributes}
    attrs_b = {n.name: n.attr for n in pb.attributes}
    if attrs_a.keys() != attrs_b.keys() or any(attrs_a[k] != attrs_b[k] for k in attrs_a):
        return False
    return all(_same(x, y, depth - 1) for x, y in zip(pa.operands, pb.operands))


# ---------------------------------------------------------------------------------------
# The replacement.


def _build(m: _Match, root):
    dtype, out = m.dtype, info(root.result)
    weight = None if m.weight is None else _as_param(m.weight, m.shape, dtype)
    bias = None if m.bias is None else _as_param(m.bias, m.shape, dtype)
    norm_type = root.result.type if m.cast is None else vtensor_type(out.shape, dtype)
    y = cuvil.norm(norm_type, m.x, weight, bias, kind=m.kind, eps=m.eps, normalized_shape=m.shape)
    if m.cast is None:
        return y
    return build(m.cast.operation.name, [y, *m.cast.operands[1:]], root.result.type)  # the model's own cast back


def _as_param(value, shape, dtype: str):
    """``value`` with ``shape`` and ``dtype``: constants folded into a literal, else view/convert."""
    t = info(value)
    if list(t.shape) == shape and t.dtype == dtype:
        return value
    array = _constant_array(value)
    if array is not None:
        recipe = params.reshape(_constant_recipe(value), shape)
        return literal(array.astype("float64").reshape(shape), dtype, recipe=recipe)
    if list(t.shape) != shape:
        value = build("torch.aten.view", [value, torch_int_list(shape)], vtensor_type(shape, t.dtype))
    if t.dtype != dtype:
        value = convert(value, dtype)
    return value


def _constant_array(value):
    """The numpy value of a literal, possibly through float casts and ``add.Scalar`` (Gemma's
    ``1 + w``), computed in the IR's dtypes; None if it is not constant or not readable."""
    import numpy as np

    arr = literal_array(value)
    if arr is not None:
        return arr
    op = defining_op(value)
    if op_name(op) in CASTS and float_cast(value) is not None:
        base = _constant_array(op.operands[0])
        return None if base is None else base.astype(numpy_dtype(info(value).dtype))
    if op_name(op) == "torch.aten.add.Scalar":
        base = _constant_array(op.operands[0])
        c, alpha = const_float(op.operands[1]), const_float(op.operands[2])
        if base is None or c is None or alpha is None or info(value) is None:
            return None
        return (np.asarray(base, dtype=np.float64) + c * alpha).astype(numpy_dtype(info(value).dtype))
    return None


def _constant_recipe(value) -> dict | None:
    """How ``_constant_array(value)`` is computed from external parameters (core/params.py),
    or None (a ``1 + w`` has no recipe)."""
    recipe = literal_recipe(value)
    op = defining_op(value)
    if recipe is None and op_name(op) in CASTS and float_cast(value) is not None:
        recipe = params.cast(_constant_recipe(op.operands[0]), numpy_dtype(info(value).dtype))
    return recipe


# ---------------------------------------------------------------------------------------
# Examples for the differential checker: shapes, eps and weights drawn from the seed.


def _module(forward, **params):
    """An eval-mode nn.Module running ``forward(self, x)`` with ``params`` as parameters."""
    import torch

    class Norm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for name, value in params.items():
                self.register_parameter(name, torch.nn.Parameter(value, requires_grad=False))

        def forward(self, x):
            return forward(self, x)

    return Norm().eval()


def _draw(rng, dtype=None, min_s: int = 1):
    """(d, eps, x) with x of shape [b, s, d], s >= min_s."""
    d, b, s = int(rng.integers(1, 65)), int(rng.integers(1, 3)), int(rng.integers(min_s, 9))
    eps = float(rng.choice([1e-5, 1e-6, 1e-12]))
    return d, eps, _rand(rng, b, s, d, dtype=dtype)


def _rand(rng, *shape, dtype=None):
    import torch

    return torch.from_numpy(rng.standard_normal(shape).astype("float32")).to(dtype or torch.float32)


@patterns.example("rms_norm")
def _llama_rms_norm(rng):
    """HF LlamaRMSNorm in fp32: ``w * (x * rsqrt(mean(x²) + eps))``."""
    import torch

    d, eps, x = _draw(rng)

    def forward(self, h):
        h32 = h.to(torch.float32)
        h32 = h32 * torch.rsqrt(h32.pow(2).mean(-1, keepdim=True) + eps)
        return self.weight * h32.to(h.dtype)

    return _module(forward, weight=_rand(rng, d)), (x,)


@patterns.example("rms_norm")
def _llama_rms_norm_fp16(rng):
    """HF LlamaRMSNorm on fp16 with its fp32 upcast: cuvil.norm in fp32, the cast back kept."""
    import torch

    d, eps, x = _draw(rng, torch.float16)

    def forward(self, h):
        h32 = h.to(torch.float32)
        h32 = h32 * torch.rsqrt(h32.pow(2).mean(-1, keepdim=True) + eps)
        return self.weight * h32.to(h.dtype)

    return _module(forward, weight=_rand(rng, d, dtype=torch.float16)), (x,)


@patterns.example("rms_norm")
def _t5_rms_norm_fp16(rng):
    """T5LayerNorm on fp16: variance in fp32, ``x16 * rsqrt(var32)`` promoted, weight last."""
    import torch

    d, eps, x = _draw(rng, torch.float16)

    def forward(self, h):
        variance = h.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return self.weight * (h * torch.rsqrt(variance + eps)).to(torch.float16)

    return _module(forward, weight=_rand(rng, d, dtype=torch.float16)), (x,)


@patterns.example("rms_norm")
def _gemma_rms_norm(rng):
    """Gemma: ``x * rsqrt(sum(x*x)/N + eps) * (1 + w)``, normalized over the last two dims."""
    d, eps, x = _draw(rng)

    def forward(self, h):
        ms = (h * h).sum((-2, -1), keepdim=True) / (h.shape[-2] * h.shape[-1])
        return h * (ms + eps) ** -0.5 * (1.0 + self.weight)

    return _module(forward, weight=_rand(rng, x.shape[1], d)), (x,)


@patterns.example("rms_norm")
def _rms_norm_weight_other_shape(rng):
    """A [s, d] 'weight' is not the norm's: the normalization fuses, the multiply stays."""
    import torch

    d, eps, x = _draw(rng, min_s=2)

    def forward(self, h):
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * self.scale

    return _module(forward, scale=_rand(rng, x.shape[1], d)), (x,)


@patterns.example("rms_norm", matches=False)
def _rms_over_other_dim(rng):
    """The mean over dim 1 of [b, s, d] normalizes no trailing dims."""
    import torch

    _, eps, x = _draw(rng)
    return (lambda h: h * torch.rsqrt(h.pow(2).mean(1, keepdim=True) + eps)), (x,)


@patterns.example("rms_norm", matches=False)
def _rms_variance_reused(rng):
    """The mean of squares is also an output."""
    import torch

    _, eps, x = _draw(rng)

    def fn(h):
        ms = h.pow(2).mean(-1, keepdim=True)
        return h * torch.rsqrt(ms + eps), ms

    return fn, (x,)


@patterns.example("rms_norm", matches=False)
def _rms_eps_not_constant(rng):
    """eps is an input."""
    import torch

    _, _, x = _draw(rng)
    return (lambda h, e: h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + e.abs())), (x, torch.tensor(1e-5))


@patterns.example("rms_norm", matches=False)
def _rms_keepdim_false(rng):
    """keepdim=False on a square [d, d] input: the mean broadcasts along the wrong dim."""
    import torch

    d = int(rng.integers(2, 17))
    return (lambda h: h * torch.rsqrt(h.pow(2).mean(-1) + 1e-6)), (_rand(rng, d, d),)


@patterns.example("rms_norm_div")
def _rms_norm_div(rng):
    """``x / sqrt(sum(x²)/N + eps)`` without weight."""
    import torch

    _, eps, x = _draw(rng)
    return (lambda h: h / torch.sqrt(h.pow(2).sum(-1, keepdim=True) / h.shape[-1] + eps)), (x,)


@patterns.example("rms_norm_div", matches=False)
def _rms_eps_outside_sqrt(rng):
    """``x / (sqrt(mean(x²)) + eps)`` is not an RMSNorm."""
    import torch

    _, eps, x = _draw(rng)
    return (lambda h: h / (torch.sqrt(h.pow(2).mean(-1, keepdim=True)) + eps)), (x,)


def _layer_norm_forward(variance: str, rsqrt: bool):
    import torch

    def forward(self, h):
        dims = self.dims
        mean = h.mean(dims, keepdim=True)
        if variance == "var":
            var = h.var(dims, keepdim=True, unbiased=False)
        elif variance == "var_mean":
            var, mean = torch.var_mean(h, dims, keepdim=True, correction=0)
        else:
            var = ((h - mean) ** 2).mean(dims, keepdim=True)
        y = (h - mean) * torch.rsqrt(var + self.eps) if rsqrt else (h - mean) / torch.sqrt(var + self.eps)
        if hasattr(self, "weight"):
            y = y * self.weight
        return y + self.bias if hasattr(self, "bias") else y

    return forward


def _layer_norm_module(rng, variance: str, rsqrt: bool, weight: bool, bias: bool, dims=(-1,), dtype=None):
    d, eps, x = _draw(rng, dtype)
    shape = tuple(x.shape[len(x.shape) + i] for i in dims)
    params = {}
    if weight:
        params["weight"] = _rand(rng, *shape, dtype=dtype)
    if bias:
        params["bias"] = _rand(rng, *shape, dtype=dtype)
    module = _module(_layer_norm_forward(variance, rsqrt), **params)
    module.eps, module.dims = eps, dims
    return module, (x,)


@patterns.example("layer_norm_affine")
def _layer_norm_var(rng):
    """``(x - mean) / sqrt(var(unbiased=False) + eps) * w + b``."""
    return _layer_norm_module(rng, "var", rsqrt=False, weight=True, bias=True)


@patterns.example("layer_norm_affine")
def _layer_norm_var_mean_last_two(rng):
    """var_mean over the last two dims, rsqrt, affine."""
    return _layer_norm_module(rng, "var_mean", rsqrt=True, weight=True, bias=True, dims=(-2, -1))


@patterns.example("layer_norm_affine")
def _layer_norm_fp16(rng):
    """fp16 mean((x - mean)²), rsqrt, affine."""
    import torch

    return _layer_norm_module(rng, "squares", rsqrt=True, weight=True, bias=True, dtype=torch.float16)


@patterns.example("layer_norm_affine", matches=False)
def _layer_norm_unbiased(rng):
    """An unbiased variance (divisor N - 1) is not LayerNorm's."""
    import torch

    _, eps, x = _draw(rng)
    x = _rand(rng, *x.shape[:-1], int(rng.integers(2, 65)))

    def forward(self, h):
        y = (h - h.mean(-1, keepdim=True)) / torch.sqrt(h.var(-1, keepdim=True) + eps)
        return y * self.weight + self.bias

    return _module(forward, weight=_rand(rng, x.shape[-1]), bias=_rand(rng, x.shape[-1])), (x,)


@patterns.example("layer_norm_affine", matches=False)
def _layer_norm_bias_other_shape(rng):
    """A [s, d] bias is not the norm's (the add root leaves it; layer_norm fuses the rest)."""
    d, eps, x = _draw(rng, min_s=2)

    def forward(self, h):
        y = (h - h.mean(-1, keepdim=True)) / (h.var(-1, keepdim=True, unbiased=False) + eps).sqrt()
        return y * self.weight + self.shift

    return _module(forward, weight=_rand(rng, d), shift=_rand(rng, x.shape[1], d)), (x,)


@patterns.example("layer_norm")
def _layer_norm_weight_only(rng):
    """mean((x - mean)²), ``/ sqrt``, weight, no bias."""
    return _layer_norm_module(rng, "squares", rsqrt=False, weight=True, bias=False)


@patterns.example("layer_norm")
def _layer_norm_plain_rsqrt(rng):
    """No affine, rsqrt: the root is the normalization's multiply."""
    return _layer_norm_module(rng, "var", rsqrt=True, weight=False, bias=False)


@patterns.example("layer_norm", matches=False)
def _layer_norm_variance_reused(rng):
    """The variance is also an output."""
    import torch

    _, eps, x = _draw(rng)

    def fn(h):
        mean = h.mean(-1, keepdim=True)
        var = ((h - mean) ** 2).mean(-1, keepdim=True)
        return (h - mean) * torch.rsqrt(var + eps), var

    return fn, (x,)


@patterns.example("layer_norm", matches=False)
def _layer_norm_mixed_dims(rng):
    """Mean over the last dim, variance over the last two: not one normalization."""
    import torch

    _, eps, x = _draw(rng)

    def fn(h):
        c = h - h.mean(-1, keepdim=True)
        return c * torch.rsqrt((c * c).mean((-2, -1), keepdim=True) + eps)

    return fn, (x,)


@patterns.example("layer_norm_div")
def _layer_norm_div(rng):
    """``(x - mean) / sqrt(var + eps)``, no affine."""
    return _layer_norm_module(rng, "var", rsqrt=False, weight=False, bias=False)


@patterns.example("layer_norm_div", matches=False)
def _layer_norm_std(rng):
    """``(x - mean) / (std + eps)`` puts eps outside the square root."""
    _, eps, x = _draw(rng)
    return (lambda h: (h - h.mean(-1, keepdim=True)) / (h.std(-1, keepdim=True, unbiased=False) + eps)), (x,)


PASS = patterns

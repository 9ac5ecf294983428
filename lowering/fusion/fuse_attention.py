"""Pass ``fuse-attention``: hand-written attention -> ``cuvil.attention``.

Matches the forms torch.export and torch-mlir's FX importer really produce from
``softmax(q @ k.transpose(-2, -1) * scale + mask) @ v`` (HF's "eager" attention, hand-written
modules)::

    matmul      4-D and higher: view(bmm(view(a, [N, m, k]), view(b, [N, k, n])), [..., m, n]);
                3-D: the same with identity views, or a bare bmm;  2-D: mm;  aten.matmul
    kᵀ          permute / transpose.int swapping the last two dims (aten.t in 2-D), possibly
                broadcast over batch dims (broadcast_to / expand: the broadcast is kept on k);
                or view(transpose(view(k, [N, s, d])), [..., d, s]) (torch.onnx's SDPA)
    scale       mul.Scalar / div.Scalar, or mul.Tensor / div.Tensor by a one-element literal, on
                the scores, on q or on k (all multiplied); none means 1
    mask        after the scale: add.Tensor of a float mask (either order); masked_fill.Scalar /
                .Tensor, where.self (either branch), where.ScalarOther / ScalarSelf with a fill of
                -inf or about finfo.min; several are added up
    softmax     over the last dim: softmax.int, _softmax, or max.dim/amax, sub, exp, sum, div;
                with HF's upcast (to fp32 before, back to the input dtype after) dropped
    dropout     aten.dropout with train=false is skipped (export removes it in eval anyway)
    NaN guard   where(p != p, 0, p) after the softmax (torch.onnx's SDPA) is dropped where no
                row can be wholly masked: no mask, constant masks that keep a key in every
                row (causal), or masks with a finite fill (finfo.min); else nothing fires

A mask that folds to a constant (HF's masking utils, a sliced ``tril`` buffer, ``triu(ones)``
compares; see lowering/common.py ``fold``) is classified: all-keep masks are dropped, a top-left-aligned lower
triangle becomes ``is_causal = true``, anything else stays an operand. Boolean masks become
additive float masks ``where(keep, 0, fill)``: exact for -inf fills, and for finfo.min
wherever a row keeps at least one key.

Left alone: softmax over another dim, a non-constant or non-positive scale, a scale applied
after the mask, any intermediate (scores, weights, ...) with a use outside the attention
(e.g. attention weights returned), a value matmul whose left operand is not the softmax,
batch dims that do not match (e.g. a value matrix shared across the batch), q, k, v of
different dtypes, a mask of another dtype than the scores.
Test: tests/lowering/fusion/fuse-attention.mlir.
"""

from __future__ import annotations

import math

import numpy as np

from cuvil_mlir.core.tensor_types import FLOAT_WIDTH, numpy_dtype
from cuvil_mlir.dialects import cuvil
from cuvil_mlir.lowering.common import float_cast, fold, uses_inside
from cuvil_mlir.core.patterns import (
    PatternSet, build, const_bool, const_float, const_int, const_int_list, defining_op, info, is_none, literal,
    literal_array, op_name, torch_int, torch_int_list, vtensor_type,
)

patterns = PatternSet("fuse-attention", description="hand-written attention (matmul, scale, mask, softmax, matmul) -> cuvil.attention")

_MOST_NEGATIVE = {"bf16": -3.3895313892515355e38, "f16": -65504.0, "f32": -3.4028234663852886e38, "f64": -1.7976931348623157e308}


class _Match:
    """What an attention matched. (A plain class: a dataclass needs its module in sys.modules,
    which a file loaded by ``cuvil check-patterns path.py`` is not.)"""

    def __init__(self, q, k, *, scale: float, ops: list, k_broadcast: list | None):
        self.q, self.k, self.v = q, k, None
        self.scale = scale
        self.masks = []  # (kind, value, fill): kind "add" | "keep" | "drop"
        self.nan_guard = False  # where(p != p, 0, p) after the softmax
        self.ops = ops  # the ops the attention replaces
        self.k_broadcast = k_broadcast  # k's shape after the broadcast that kᵀ carried


@patterns.add("torch.aten.view", name="attention")
@patterns.add("torch.aten.bmm", name="attention")
@patterns.add("torch.aten.mm", name="attention")
@patterns.add("torch.aten.matmul", name="attention")
def attention(op, rewriter):
    """matmul(softmax(matmul(q, kᵀ) · scale + mask), v) -> cuvil.attention(q, k, v, mask) {scale, is_causal}"""
    m = _match(op)
    if m is None:
        return None
    causal, masks = _classify_masks(m)
    if m.nan_guard and not all(_keeps_every_row(m, *mask) for mask in masks):
        return None  # a row the mask may wholly remove: softmax gives NaN there, the guard 0
    return _build(m, op, causal, masks)


# ---------------------------------------------------------------------------------------
# Matching: value matmul <- softmax <- masks <- scale <- score matmul.


def _match(root) -> _Match | None:
    mm = _matmul(root)
    if mm is None:
        return None
    p, v, mm_ops = mm
    guarded, guard_ops = _nan_guarded(_skip_dropout(p))
    soft = _softmax(guarded)
    if soft is None:
        return None
    x, soft_ops = soft
    m = _scores(x)
    if m is None:
        return None
    m.v, m.ops = v, [*m.ops, *soft_ops, *guard_ops, *mm_ops]
    m.nan_guard = bool(guard_ops)
    if defining_op(p, "torch.aten.dropout") is not None:
        m.ops.append(defining_op(p))
    if not _fits(m, root) or not uses_inside(m.ops, root):
        return None
    return m


def _matmul(op):
    """(a, b, ops) of a batched matmul ending at ``op``: view(bmm(view(a), view(b))), bmm, mm,
    aten.matmul; a and b of one rank with equal batch dims."""
    name = op_name(op)
    if name == "torch.aten.view":
        return _flattened_bmm(op)
    if name not in ("torch.aten.bmm", "torch.aten.mm", "torch.aten.matmul"):
        return None
    a, b = op.operands[:2]
    ta, tb = info(a), info(b)
    if ta is None or tb is None or ta.rank != tb.rank or ta.rank < 2 or ta.shape[:-2] != tb.shape[:-2]:
        return None
    if name == "torch.aten.mm" and ta.rank != 2:
        return None
    return a, b, [op]


def _flattened_bmm(view):
    """view(bmm(view(a, [N, m, k]), view(b, [N, k, n])), a.shape[:-1] + [n]) -> (a, b, ops)"""
    bmm = defining_op(view.operands[0], "torch.aten.bmm")
    if bmm is None:
        return None
    fa, fb = (defining_op(x, "torch.aten.view") for x in bmm.operands)
    if fa is None or fb is None:
        return None
    a, b = fa.operands[0], fb.operands[0]
    ta, tb, out = info(a), info(b), info(view.result)
    if ta is None or tb is None or out is None or ta.rank < 3 or ta.rank != tb.rank:
        return None
    if ta.shape[:-2] != tb.shape[:-2] or any(d < 0 for d in ta.shape[:-2]):
        return None
    n = math.prod(ta.shape[:-2])
    if info(fa.result).shape != (n, *ta.shape[-2:]) or info(fb.result).shape != (n, *tb.shape[-2:]):
        return None
    if out.shape != (*ta.shape[:-1], tb.shape[-1]):
        return None
    return a, b, [view, bmm, fa, fb]


def _nan_guarded(value):
    """(p, ops) for value = where(p != p, 0, p) (torch.onnx's SDPA zeroes the NaN rows a
    fully masked softmax gives), else (value, [])."""
    where = defining_op(value, "torch.aten.where.self")
    if where is None:
        return value, []
    cond, zero, p = where.operands
    ne = defining_op(cond, "torch.aten.ne.Tensor")
    arr = literal_array(zero) if info(zero) is not None else None
    if ne is None or list(ne.operands) != [p, p] or arr is None or arr.size != 1 or float(arr.reshape(-1)[0]) != 0.0:
        return value, []
    if info(p) != info(value):
        return value, []
    return p, [where, ne]


def _skip_dropout(value):
    op = defining_op(value, "torch.aten.dropout")
    return op.operands[0] if op is not None and const_bool(op.operands[2]) is False else value


def _softmax(value):
    """(x, ops) for value = softmax(x, -1), with an upcast before and a cast back after it
    (x and value of one dtype)."""
    ops = []
    down = float_cast(value)
    inner = value
    if down is not None:
        ops.append(down)
        inner = down.operands[0]
    core = _softmax_core(inner)
    if core is None:
        return None
    x, core_ops = core
    ops += core_ops
    up = float_cast(x)
    if up is not None and down is not None:
        ops.append(up)
        x = up.operands[0]
    tx, tv, ti = info(x), info(value), info(inner)
    if tx.dtype != tv.dtype or tx.dtype not in FLOAT_WIDTH or FLOAT_WIDTH.get(ti.dtype, 0) < FLOAT_WIDTH[tx.dtype]:
        return None
    return x, ops


def _softmax_core(value):
    """softmax.int(x, -1), _softmax(x, -1, false), or exp(x - max(x)) / sum(exp(x - max(x)))"""
    op = defining_op(value)
    name = op_name(op)
    if name == "torch.aten.softmax.int" and _is_last_dim(op.operands[0], op.operands[1]):
        return op.operands[0], [op]
    if name == "torch.aten._softmax" and _is_last_dim(op.operands[0], op.operands[1]) and const_bool(op.operands[2]) is False:
        return op.operands[0], [op]
    if name != "torch.aten.div.Tensor":
        return None
    e, total = op.operands
    s = defining_op(total, "torch.aten.sum.dim_IntList")
    exp = defining_op(e, "torch.aten.exp")
    if s is None or exp is None or s.operands[0] != e or not _reduces_last(s.operands[0], s.operands[1], s.operands[2]):
        return None
    if not is_none(s.operands[3]):
        return None
    sub = defining_op(exp.operands[0], "torch.aten.sub.Tensor")
    if sub is None or const_float(sub.operands[2]) != 1.0:
        return None
    x, mx = sub.operands[:2]
    peak = defining_op(mx, ("torch.aten.max.dim", "torch.aten.amax"))
    if peak is None or peak.operands[0] != x or mx != peak.results[0]:
        return None
    if op_name(peak) == "torch.aten.max.dim" and not (_is_last_dim(x, peak.operands[1]) and const_bool(peak.operands[2])):
        return None
    if op_name(peak) == "torch.aten.amax" and not _reduces_last(x, peak.operands[1], peak.operands[2]):
        return None
    return x, [op, s, exp, sub, peak]


def _is_last_dim(x, dim) -> bool:
    d = const_int(dim)
    return d is not None and _is_last(x, d)


def _is_last(x, d: int) -> bool:
    t = info(x)
    return t is not None and -t.rank <= d < t.rank and d % t.rank == t.rank - 1


def _reduces_last(x, dims, keepdim) -> bool:
    d = const_int_list(dims)
    return d is not None and len(d) == 1 and const_bool(keepdim) is True and _is_last(x, d[0])


def _scores(value, scaled: bool = False) -> _Match | None:
    """The masked, scaled scores matmul(q, kᵀ) · scale + mask that ``value`` is."""
    op = defining_op(value)
    name = op_name(op)
    if not name:
        return None
    if not scaled:
        for s, mask, kind, fill in _mask_ops(op):
            m = _scores(s)
            if m is not None:
                m.masks.append((kind, mask, fill))
                m.ops.append(op)
                return m
    factor = _scale_op(op)
    if factor is not None:
        m = _scores(op.operands[0], scaled=True)
        if m is not None:
            m.scale *= factor
            m.ops.append(op)
        return m
    mm = _matmul(op)
    if mm is None:
        return None
    q, kt, ops = mm
    q, q_scale = _unscaled(q)
    k = _untransposed(kt)
    if k is None:
        return None
    k, k_shape, k_scale = k
    return _Match(q, k, scale=q_scale * k_scale, ops=list(ops), k_broadcast=k_shape)


def _mask_ops(op):
    """(scores, mask, kind, fill) readings of a masking op: kind "add" (mask added), "keep"
    (scores kept where mask is true) or "drop" (fill where mask is true)."""
    name = op_name(op)
    out = info(op.result)
    if name == "torch.aten.add.Tensor" and const_float(op.operands[2]) == 1.0:
        a, b = op.operands[:2]
        for s, m in ((a, b), (b, a)):
            if info(s) == out and _mask_fits(m, out, float_mask=True):
                yield s, m, "add", None
    elif name in ("torch.aten.masked_fill.Scalar", "torch.aten.masked_fill.Tensor"):
        s, m, fill = op.operands
        f = _fill_value(fill, out)
        if f is not None and info(s) == out and _mask_fits(m, out):
            yield s, m, "drop", f
    elif name == "torch.aten.where.self":
        c, a, b = op.operands
        for s, fill, kind in ((a, b, "keep"), (b, a, "drop")):
            f = _fill_value(fill, out)
            if f is not None and info(s) == out and _mask_fits(c, out):
                yield s, c, kind, f
    elif name in ("torch.aten.where.ScalarOther", "torch.aten.where.ScalarSelf"):
        c, a, b = op.operands
        s, fill, kind = (a, b, "keep") if name.endswith("Other") else (b, a, "drop")
        f = _fill_value(fill, out)
        if f is not None and info(s) == out and _mask_fits(c, out):
            yield s, c, kind, f


def _mask_fits(mask, out, float_mask: bool = False) -> bool:
    """A mask that broadcasts to the scores ``out`` (no more dims), i1 or of out's dtype."""
    t = info(mask)
    if t is None or t.rank > out.rank or t.dtype != (out.dtype if float_mask else "i1"):
        return False
    return all(a in (1, b) for a, b in zip(t.shape[::-1], out.shape[::-1]))


def _fill_value(value, out) -> float | None:
    """-inf or about finfo.min of the scores' dtype: a torch float or a one-element literal."""
    f = const_float(value)
    if f is None:
        arr = literal_array(value) if str(value.type).startswith("!torch.vtensor") else None
        f = float(arr.reshape(-1)[0]) if arr is not None and arr.size == 1 else None
    if f is None or out is None or out.dtype not in _MOST_NEGATIVE:
        return None
    return f if f == -math.inf or f <= 0.5 * _MOST_NEGATIVE[out.dtype] else None


def _scale_op(op) -> float | None:
    """The constant factor of mul/div.Scalar, or mul/div.Tensor by a one-element literal."""
    name = op_name(op)
    if name in ("torch.aten.mul.Scalar", "torch.aten.div.Scalar"):
        c = const_float(op.operands[1])
    elif name in ("torch.aten.mul.Tensor", "torch.aten.div.Tensor"):
        arr = literal_array(op.operands[1])
        c = float(arr.reshape(-1)[0]) if arr is not None and arr.size == 1 else None
        if c is not None and info(op.result) != info(op.operands[0]):
            return None  # the constant promotes or broadcasts the scores
    else:
        return None
    if c is None or c == 0 or not math.isfinite(c):
        return None
    return 1.0 / c if name.startswith("torch.aten.div") else c


def _unscaled(value):
    """(x, c) for value = x · c with a constant c (mul/div by a scalar), else (value, 1)."""
    op = defining_op(value)
    c = _scale_op(op) if op is not None else None
    if c is None or info(op.result) != info(op.operands[0]):
        return value, 1.0
    return op.operands[0], c


def _untransposed(kt):
    """(k, broadcast shape or None, scale) for kt = [broadcast(]transpose(k · c)[)], the
    transpose over the last two dims."""
    shape = None
    b = defining_op(kt, ("torch.aten.broadcast_to", "torch.aten.expand"))
    if b is not None:
        shape = list(info(kt).shape)
        kt = b.operands[0]
    kt, outer = _unscaled(kt)
    t = defining_op(kt, ("torch.aten.permute", "torch.aten.transpose.int", "torch.aten.t"))
    if t is not None and _swaps_last_two(t):
        k = t.operands[0]
    else:
        k = _flattened_transpose(kt)
        if k is None:
            return None
    k, inner = _unscaled(k)
    if shape is not None:
        if info(k).rank != len(shape):
            return None
        shape[-2:] = shape[-1], shape[-2]
    return k, shape, outer * inner


def _flattened_transpose(kt):
    """k for kt = view(transpose(view(k, [N, s, d]), 1, 2), [..., d, s]), N the product of k's
    batch dims: kᵀ as torch.onnx's scaled_dot_product_attention writes it (after torch-mlir's
    ONNX lowering of Reshape / Transpose / Reshape); static shapes only."""
    outer = defining_op(kt, "torch.aten.view")
    t = defining_op(outer.operands[0], ("torch.aten.transpose.int", "torch.aten.permute")) if outer is not None else None
    if t is None or info(t.operands[0]) is None or info(t.operands[0]).rank != 3 or not _swaps_last_two(t):
        return None
    inner = defining_op(t.operands[0], "torch.aten.view")
    if inner is None:
        return None
    k = inner.operands[0]
    ks, flat, out = info(k), info(inner.result), info(kt)
    if ks is None or out is None or ks.rank < 3 or not ks.is_static or not out.is_static:
        return None
    if list(flat.shape) != [math.prod(ks.shape[:-2]), *ks.shape[-2:]]:
        return None
    if list(out.shape) != [*ks.shape[:-2], ks.shape[-1], ks.shape[-2]]:
        return None
    return k


def _swaps_last_two(t) -> bool:
    rank = info(t.operands[0]).rank
    name = op_name(t)
    if name == "torch.aten.t":
        return rank == 2
    if name == "torch.aten.transpose.int":
        a, b = const_int(t.operands[1]), const_int(t.operands[2])
        return a is not None and b is not None and {a % rank, b % rank} == {rank - 2, rank - 1}
    perm = const_int_list(t.operands[1])
    return perm is not None and [p % rank for p in perm] == [*range(rank - 2), rank - 1, rank - 2]


def _fits(m: _Match, root) -> bool:
    """q, k, v of one float dtype and rank, equal batch dims, positive scale, result = root's."""
    q, v, out = info(m.q), info(m.v), info(root.result)
    k_shape = m.k_broadcast or list(info(m.k).shape)
    k = info(m.k)
    if q is None or v is None or k is None or out is None or m.scale <= 0:
        return False
    if not (q.dtype == k.dtype == v.dtype == out.dtype) or q.dtype not in FLOAT_WIDTH:
        return False
    if not (q.rank == len(k_shape) == v.rank == out.rank):
        return False
    if list(q.shape[:-2]) != list(k_shape[:-2]) or q.shape[:-2] != v.shape[:-2]:
        return False
    return k_shape[-2] == v.shape[-2] and k_shape[-1] == q.shape[-1]


# ---------------------------------------------------------------------------------------
# Masks: constant ones are folded and classified (all-keep, causal); the rest become one
# additive float mask.


def _classify_masks(m: _Match):
    """(is_causal, the mask terms still to apply): constant terms that mask nothing are
    dropped, a constant top-left-aligned lower triangle over [L, S] sets is_causal."""
    length, source = info(m.q).shape[-2], (m.k_broadcast or list(info(m.k).shape))[-2]
    causal, rest = False, []
    for kind, value, fill in m.masks:
        arr = fold(value)
        keep = None if arr is None else _keep_array(kind, arr, info(m.q).dtype)
        if keep is not None and keep.all():
            continue
        if keep is not None and length > 0 and source > 0 and _is_tril(keep, length, source):
            causal = True
            continue
        rest.append((kind, value, fill))
    return causal, rest


def _keeps_every_row(m: _Match, kind: str, value, fill) -> bool:
    """No row of the scores is wholly masked by this term (so softmax has no NaN row): a
    constant that keeps a key in every row, or a keep/drop mask with a finite fill."""
    arr = fold(value)
    keep = None if arr is None else _keep_array(kind, arr, info(m.q).dtype)
    if keep is not None:
        return bool(np.all(np.any(keep, axis=-1))) if keep.ndim else bool(keep)
    return kind != "add" and fill is not None and math.isfinite(fill)


def _is_tril(keep, length: int, source: int) -> bool:
    """keep, broadcast to [..., L, S], is the top-left-aligned lower triangle (torch's is_causal)."""
    shape = _broadcast_shape(keep.shape, (length, source))
    if tuple(shape[-2:]) != (length, source):
        return False
    try:
        full = np.broadcast_to(keep, shape)
    except ValueError:
        return False
    return bool((full == np.tril(np.ones((length, source), dtype=bool))).all())


def _keep_array(kind: str, arr, dtype: str):
    """The boolean keep-array of a constant mask term, or None when an additive mask holds
    values other than 0 and about -inf (a bias, not a mask)."""
    if kind == "keep":
        return arr.astype(bool)
    if kind == "drop":
        return ~arr.astype(bool)
    values = arr.astype(np.float64)
    negative = values <= 0.5 * _MOST_NEGATIVE.get(dtype, -math.inf)
    if not ((values == 0) | negative).all():
        return None
    return values == 0


def _additive(kind: str, value, fill: float, dtype: str):
    """A float mask for one term: the added mask itself, or where(mask, 0, fill) / where(mask, fill, 0)."""
    if kind == "add":
        return value
    # one-element [1] literals: the literal helper does not build rank-0 ones
    zero, fill_v = literal(_scalar(0.0, dtype), dtype), literal(_scalar(fill, dtype), dtype)
    on_true, on_false = (zero, fill_v) if kind == "keep" else (fill_v, zero)
    shape = _broadcast_shape(info(value).shape, [1])
    return build("torch.aten.where.self", [value, on_true, on_false], vtensor_type(shape, dtype))


def _scalar(v: float, dtype: str):
    return np.array([v], dtype=np.float32).astype(numpy_dtype(dtype)) if dtype == "bf16" else np.array([v], dtype=numpy_dtype(dtype))


def _broadcast_shape(a, b):
    a, b = list(a), list(b)
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + a, [1] * (n - len(b)) + b
    return [y if x == 1 else x for x, y in zip(a, b)]


# ---------------------------------------------------------------------------------------
# The replacement.


def _build(m: _Match, root, causal: bool, masks):
    dtype = info(m.q).dtype
    k = m.k
    if m.k_broadcast is not None and list(info(k).shape) != m.k_broadcast:
        k = build("torch.aten.broadcast_to", [k, torch_int_list(m.k_broadcast)], vtensor_type(m.k_broadcast, dtype))
    mask = None
    for kind, value, fill in masks:
        term = _additive(kind, value, fill, dtype)
        if mask is None:
            mask = term
            continue
        shape = _broadcast_shape(info(mask).shape, info(term).shape)
        mask = build("torch.aten.add.Tensor", [mask, term, torch_int(1)], vtensor_type(shape, dtype))
    rank = info(m.q).rank
    if mask is not None and info(mask).rank < rank:  # the mask with q's rank (leading 1s)
        shape = [1] * (rank - info(mask).rank) + list(info(mask).shape)
        mask = build("torch.aten.view", [mask, torch_int_list(shape)], vtensor_type(shape, dtype))
    return cuvil.attention(root.result.type, m.q, k, m.v, mask, scale=m.scale, is_causal=causal)



# ---------------------------------------------------------------------------------------
# Examples for the differential checker: shapes and scales drawn from the seed.


def _draw(rng, rank: int = 4, dtype=None, same_length: bool = False):
    """q [.., L, E], k [.., S, E], v [.., S, Ev] with leading dims [B, H] (rank 4) or [B]."""
    import torch

    lead = [int(rng.integers(1, 3)), int(rng.integers(1, 4))][: rank - 2]
    length, e, ev = int(rng.integers(1, 9)), int(rng.integers(1, 17)), int(rng.integers(1, 17))
    source = length if same_length else int(rng.integers(1, 9))

    def rand(*shape):
        return torch.from_numpy(rng.standard_normal(shape).astype("float32")).to(dtype or torch.float32)

    return rand(*lead, length, e), rand(*lead, source, e), rand(*lead, source, ev)


def _keep_mask(rng, *shape):
    """A random boolean keep-mask [..., L, S] that keeps key 0 in every row."""
    import torch

    keep = rng.random(shape) > 0.4
    keep[..., 0] = True
    return torch.from_numpy(keep)


@patterns.example("attention")
def _hand_written(rng):
    """``softmax(q @ k.transpose(-2, -1) / math.sqrt(d)) @ v`` on [B, H, L, E]."""
    import torch

    q, k, v = _draw(rng)
    d = q.shape[-1]
    return (lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1) @ v), (q, k, v)


@patterns.example("attention")
def _causal_triu_masked_fill(rng):
    """3-D, ``masked_fill(triu(ones, 1), -inf)`` built in forward: folds to is_causal."""
    import torch

    q, k, v = _draw(rng, rank=3, same_length=True)
    n = q.shape[-2]

    def fn(q, k, v):
        scores = torch.matmul(q, k.transpose(1, 2)) * float(rng.uniform(0.1, 1.0))
        scores = scores.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1), float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    return fn, (q, k, v)


@patterns.example("attention")
def _gpt2_bias_buffer(rng):
    """Old GPT-2: a registered ``tril`` buffer sliced to [L, S], ``where(mask, w, finfo.min)``,
    scale by division by a 0-d constant, on q and on the scores."""
    import torch

    q, k, v = _draw(rng, same_length=True)

    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("bias", torch.tril(torch.ones(16, 16, dtype=torch.bool)).view(1, 1, 16, 16))

        def forward(self, q, k, v):
            n = q.shape[-2]
            w = torch.matmul(q * 0.5, k.transpose(-1, -2)) / torch.full([], math.sqrt(q.shape[-1]))
            w = torch.where(self.bias[:, :, :n, :n], w, torch.finfo(w.dtype).min)
            return torch.matmul(torch.nn.functional.softmax(w, dim=-1), v)

    return Attention().eval(), (q, k, v)


@patterns.example("attention")
def _boolean_mask_input(rng):
    """A boolean keep-mask input [B, 1, L, S]: ``where(mask, scores, finfo.min)``."""
    import torch

    q, k, v = _draw(rng)
    mask = _keep_mask(rng, q.shape[0], 1, q.shape[-2], k.shape[-2])

    def fn(q, k, v, m):
        return torch.where(m, q @ k.transpose(-2, -1) * 0.25, torch.finfo(torch.float32).min).softmax(-1) @ v

    return fn, (q, k, v, mask)


@patterns.example("attention")
def _additive_and_causal(rng):
    """BERT-style additive padding mask [B, 1, 1, S] plus a constant causal where; k scaled."""
    import torch

    q, k, v = _draw(rng, same_length=True)
    n = q.shape[-2]
    pad = torch.zeros(q.shape[0], 1, 1, n)
    pad[..., n // 2 + 1:] = torch.finfo(torch.float32).min

    def fn(q, k, v, pad):
        causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
        scores = q @ (k * 0.3).transpose(-2, -1) + pad
        return torch.where(causal, scores, float("-inf")).softmax(-1) @ v

    return fn, (q, k, v, pad)


@patterns.example("attention")
def _fp16_upcast_softmax(rng):
    """HF eager in fp16: ``softmax(w, -1, dtype=float32).to(q.dtype)``."""
    import torch

    q, k, v = _draw(rng, dtype=torch.float16)
    fn = lambda q, k, v: torch.nn.functional.softmax(q @ k.transpose(2, 3) * 0.125, dim=-1, dtype=torch.float32).to(q.dtype) @ v  # noqa: E731
    return fn, (q, k, v)


@patterns.example("attention")
def _broadcast_kv_2d(rng):
    """One shared k/v head broadcast by the matmul; and a 2-D [L, E] attention (mm)."""
    import torch

    q, k, v = _draw(rng)
    k, v = k[:, :1], v[:, :1]
    q2 = q[0, 0]

    def fn(q, k, v, q2):
        a = torch.softmax(q @ k.transpose(-2, -1) * 0.5, dim=-1) @ v
        b = torch.softmax(q2 @ k[0, 0].T * 0.5, dim=-1) @ v[0, 0]
        return a, b

    return fn, (q, k, v, q2)


@patterns.example("attention", matches=False)
def _softmax_over_queries(rng):
    """softmax over dim -2 is not attention's."""
    import torch

    q, k, v = _draw(rng, same_length=True)
    return (lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-2) @ v), (q, k, v)


@patterns.example("attention", matches=False)
def _weights_returned(rng):
    """The attention weights are also an output."""
    import torch

    q, k, v = _draw(rng)

    def fn(q, k, v):
        p = torch.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-1)
        return p @ v, p

    return fn, (q, k, v)


@patterns.example("attention", matches=False)
def _scale_is_input(rng):
    """The scale is a tensor input, not a constant."""
    import torch

    q, k, v = _draw(rng)
    return (lambda q, k, v, s: torch.softmax(q @ k.transpose(-2, -1) / s, dim=-1) @ v), (q, k, v, torch.tensor(2.0))


@patterns.example("attention", matches=False)
def _weights_modified(rng):
    """The value matmul reads softmax * 0.5, not the softmax."""
    import torch

    q, k, v = _draw(rng)
    return (lambda q, k, v: (torch.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-1) * 0.5) @ v), (q, k, v)


@patterns.example("attention", matches=False)
def _value_shared_across_batch(rng):
    """A 2-D value matrix for a 3-D batch: the batch dims do not fit one attention."""
    import torch

    q, k, v = _draw(rng, rank=3)
    return (lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-1) @ v[0]), (q, k, v)


@patterns.example("attention", matches=False)
def _scale_after_mask(rng):
    """(scores + mask) * scale scales the mask too: left alone."""
    import torch

    q, k, v = _draw(rng)
    mask = torch.randn(1, 1, q.shape[-2], k.shape[-2])
    return (lambda q, k, v, m: torch.softmax((q @ k.transpose(-2, -1) + m) * 0.25, dim=-1) @ v), (q, k, v, mask)



def _torch_onnx_sdpa(rng, *, mask_input: bool):
    """scaled_dot_product_attention as torch.onnx exports it (opset 18+), as an ONNX model:
    q and kᵀ each scaled by sqrt(scale), kᵀ as Reshape / Transpose / Reshape, a mask added,
    Softmax, the NaN guard (IsNaN, Where 0), MatMul by v. The mask: a constant causal triangle
    of -inf, or (``mask_input``) an additive float mask input."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    b, h, length, d = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(1, 9)), int(rng.choice([8, 16]))
    scale = np.array(float(rng.uniform(0.5, 1.0)) / math.sqrt(math.sqrt(d)), np.float32)
    init = {"s": scale, "flat": np.array([b * h, length, d], np.int64), "back": np.array([b, h, d, length], np.int64),
            "zero": np.array(0.0, np.float32)}
    shape = [b, h, length, d]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "qkv"]
    if mask_input:
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [b, 1, length, length]))
    else:
        init["mask"] = np.triu(np.full((length, length), -np.inf, np.float32), 1)
    nodes = [helper.make_node("Mul", ["q", "s"], ["qs"]), helper.make_node("Reshape", ["k", "flat"], ["kf"]),
             helper.make_node("Transpose", ["kf"], ["kft"], perm=[0, 2, 1]), helper.make_node("Reshape", ["kft", "back"], ["kt"]),
             helper.make_node("Mul", ["kt", "s"], ["kts"]), helper.make_node("MatMul", ["qs", "kts"], ["scores"]),
             helper.make_node("Add", ["scores", "mask"], ["masked"]), helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
             helper.make_node("IsNaN", ["p"], ["nan"]), helper.make_node("Where", ["nan", "zero", "p"], ["pg"]),
             helper.make_node("MatMul", ["pg", "v"], ["out"])]
    graph = helper.make_graph(nodes, "main", inputs, [helper.make_tensor_value_info("out", TensorProto.FLOAT, shape)],
                              [numpy_helper.from_array(a, n) for n, a in init.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    args = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
    if mask_input:
        args.append(np.where(rng.random((b, 1, length, length)) < 0.3, -np.inf, 0.0).astype(np.float32))
    return model, tuple(args)


@patterns.example("attention")
def _torch_onnx_causal_sdpa(rng):
    return _torch_onnx_sdpa(rng, mask_input=False)


@patterns.example("attention", matches=False)
def _torch_onnx_sdpa_input_mask(rng):
    """The NaN guard with a mask input that may remove a whole row: left alone."""
    return _torch_onnx_sdpa(rng, mask_input=True)


PASS = patterns

"""What the passes share: the one module a pass may import besides core/ and dialects/.

A pass never imports another pass (tests/python/test_layering.py): a helper two passes need
lives here, once. Matchers are pure reads of the IR; builders create torch ops at the current
insertion point (inside a pattern: before the root op). Example helpers build the torch
programs of the differential checker's examples (they import torch when called).
"""

from __future__ import annotations

import math
from fnmatch import fnmatchcase

import numpy as np

from cuvil_mlir.core.diagnostics import module_path
from cuvil_mlir.core.ir import ir
from cuvil_mlir.core.patterns import (
    build, const_float, const_int, defining_op, info, is_none, literal, literal_array, literal_recipe, op_name,
    torch_int, transposed_2d_source, vtensor_type,
)
from cuvil_mlir.core import params
from cuvil_mlir.core.tensor_types import FLOAT_WIDTH, MLIR_TO_NUMPY, TORCH_DTYPE_CODE

# The sm_90 linear kernel's shape contract, which lower-cuvil-to-kernels checks and the passes
# that hand it ops (conv1x1-as-linear) respect: K and the out features multiples of this (TMA
# needs 16-byte rows of 16-bit elements).
KERNEL_ALIGN_ELEMENTS = 8

# ---------------------------------------------------------------------------------------
# Casts.

CASTS = ("torch.aten.to.dtype", "torch.prims.convert_element_type")  # the two ops torch casts dtypes with


def float_cast(value):
    """The cast op (to.dtype / convert_element_type) between float types defining ``value``, else None."""
    op = defining_op(value, CASTS)
    if op is None or info(op.operands[0]) is None or info(value) is None:
        return None
    return op if info(op.operands[0]).dtype in FLOAT_WIDTH and info(value).dtype in FLOAT_WIDTH else None


def convert(value, dtype: str):
    """``prims.convert_element_type(value, dtype)`` (dtype: a vtensor element type name)."""
    t = info(value)
    return build("torch.prims.convert_element_type", [value, torch_int(TORCH_DTYPE_CODE[dtype])], vtensor_type(t.shape, dtype))


# ---------------------------------------------------------------------------------------
# Matching several ops as one.


def uses_inside(ops, root) -> bool:
    """Every result of ``ops`` (but ``root``'s) is used only by ``ops`` or ``root``: replacing
    ``root`` by one fused op then computes nothing twice."""
    inside = {o.operation for o in ops} | {root.operation}
    for o in ops:
        if o.operation == root.operation:
            continue
        for r in o.results:
            if any(u.owner.operation not in inside for u in r.uses):
                return False
    return True


def conv_attributes(op) -> dict:
    """stride, padding, dilation, groups of a cuvil.conv2d (or qconv2d) as Python values (for its builder)."""
    out = {name: list(ir.DenseI64ArrayAttr(op.attributes[name])) for name in ("stride", "padding", "dilation")}
    return {**out, "groups": ir.IntegerAttr(op.attributes["groups"]).value}


FORWARD = "<forward>"  # the module-path entry that names the ops of the model's own forward (path "")


def in_paths(op, entries) -> bool:
    """Whether ``op`` comes from an nn.Module that ``entries`` names (``path_matches``; none when empty)."""
    return bool(entries) and path_matches(module_path(op.location), entries)


def path_matches(path: str, entries) -> bool:
    """Whether module path ``path`` (``cuvil_mlir.core.diagnostics.module_path``) is named by one of
    ``entries``: equal, a dotted suffix, or an ``fnmatch`` pattern of either; ``<forward>``: the
    model's own ops. demote-precision's ``keep_paths`` and the quantize passes' ``skip``."""
    if not path:
        return FORWARD in entries
    return any(fnmatchcase(path, e) or fnmatchcase(path, "*." + e) for e in entries)


# ---------------------------------------------------------------------------------------
# Constant weights: read as numpy, and new literals built from them.


def constant_array(value):
    """The numpy value of a literal or of a 2-D transpose of one (as raised ``mm`` weights are)."""
    array = literal_array(value)
    if array is not None:
        return array
    source = transposed_2d_source(value)
    array = literal_array(source) if source is not None else None
    return None if array is None else array.T


def constant_recipe(value) -> dict | None:
    """How ``constant_array(value)`` is computed from external parameters (core/params.py), or None."""
    recipe = literal_recipe(value)
    if recipe is not None:
        return recipe
    source = transposed_2d_source(value)
    return None if source is None else params.transpose(literal_recipe(source))


def constant_weight(value) -> np.ndarray | None:
    """The float weight ``value`` holds, read from a literal (or a 2-D transpose of one, or an
    exact float upcast of either: a half model exported on the CPU gets its ``addmm`` weights
    as ``to.dtype(f16 literal, f32)``), in ``value``'s own layout and dtype; None when it is not
    a readable constant float tensor."""
    t = info(value)
    if t is None or t.dtype not in FLOAT_WIDTH or not t.is_static:
        return None
    array = _literal_or_upcast(value)
    if array is None:
        source = transposed_2d_source(value)
        array = None if source is None else _literal_or_upcast(source)
        array = None if array is None else np.ascontiguousarray(array.T)
    if array is None or tuple(array.shape) != t.shape:
        return None
    return array


def _literal_or_upcast(value) -> np.ndarray | None:
    array = literal_array(value)
    if array is not None:
        return array
    cast = defining_op(value, CASTS)
    if cast is None:
        return None
    src, dst = info(cast.operands[0]), info(value)
    if src is None or src.dtype not in FLOAT_WIDTH or FLOAT_WIDTH[src.dtype] > FLOAT_WIDTH[dst.dtype]:
        return None  # only widening casts are exact
    array = literal_array(cast.operands[0])
    return None if array is None else np.asarray(array, dtype=np.float64 if dst.dtype == "f64" else np.float32)


def constant_weight_recipe(value) -> dict | None:
    """How ``constant_weight(value)`` is computed from external parameters, or None."""
    recipe = _literal_or_upcast_recipe(value)
    if recipe is None:
        source = transposed_2d_source(value)
        recipe = None if source is None else params.transpose(_literal_or_upcast_recipe(source))
    return recipe


def _literal_or_upcast_recipe(value) -> dict | None:
    recipe = literal_recipe(value)
    cast = None if recipe is not None else defining_op(value, CASTS)
    if cast is None:
        return recipe
    return params.cast(literal_recipe(cast.operands[0]), np.float64 if info(value).dtype == "f64" else np.float32)


def concat_rows(values):
    """The constant tensors ``values`` stacked along dim 0: one new literal when all can be
    read, else an ``aten.cat`` of them (constant too: IREE evaluates it at compile time)."""
    t = info(values[0])
    shape = [sum(info(v).shape[0] for v in values), *t.shape[1:]]
    arrays = [constant_array(v) for v in values]
    if all(a is not None for a in arrays):
        recipe = params.concat([constant_recipe(v) for v in values], axis=0)
        return literal(np.concatenate(arrays, axis=0), dtype=t.dtype, recipe=recipe)
    parts = build("torch.prim.ListConstruct", list(values), ir.Type.parse("!torch.list<vtensor>"))
    return build("torch.aten.cat", [parts, torch_int(0)], vtensor_type(shape, t.dtype))


def concat_biases(biases, rows):
    """The biases stacked (a missing one as zeros of its ``rows``), or None if all are missing."""
    if all(b is None for b in biases):
        return None
    dtype = next(info(b).dtype for b in biases if b is not None)
    zeros = [literal(np.zeros(n, dtype=np.float32), dtype=dtype, recipe=params.zeros([n], np.float32)) for n in rows]
    return concat_rows([b if b is not None else z for b, z in zip(biases, zeros)])


# ---------------------------------------------------------------------------------------
# Quantization arithmetic (numpy; pure functions).


def quantize_per_channel(w: np.ndarray, qmax: int = 127) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-output-channel (axis 0) quantization: ``(q int8, scale float32 [O])``."""
    flat = np.asarray(w, dtype=np.float32).reshape(w.shape[0], -1)
    scale = np.abs(flat).max(axis=1) / qmax
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)  # an all-zero channel: any scale
    q = np.clip(np.rint(flat / scale[:, None]), -qmax, qmax).astype(np.int8)
    return q.reshape(w.shape), scale


# ---------------------------------------------------------------------------------------
# Constant folding (numpy) of tensor expressions: HF's masking utils build their masks from
# aranges, compares, cumsum and indexing; torch.export turns triu/tril into arange compares.

_FOLD_LIMIT = 1 << 20  # elements: larger tensors are left as they are
_FOLDABLE = ("i1", "si64", "si32", "si8", "ui8", "f16", "f32", "f64")  # element types the folder computes in


def fold(value, limit: int | None = None):
    """The numpy value of ``value`` when it is computed from constants only by the ops
    ``_FOLDERS`` knows (None otherwise). Shared subexpressions are folded once. ``limit``:
    the most elements a folded tensor may have (default _FOLD_LIMIT)."""
    return _fold_value(value, 48, {}, _FOLD_LIMIT if limit is None else limit)


def _fold_value(value, depth: int, memo: dict, limit: int = _FOLD_LIMIT):
    if value in memo:
        return memo[value]
    t = info(value)
    op = defining_op(value)
    folder = _FOLDERS.get(op_name(op)) if op is not None else None
    arr = None
    if folder is not None and t is not None and t.dtype in _FOLDABLE and all(d >= 0 for d in t.shape) \
            and math.prod(t.shape) <= limit and depth > 0:
        try:
            arr = folder(op, lambda v: _fold_value(v, depth - 1, memo, limit))
        except (ValueError, IndexError, TypeError, OverflowError):
            arr = None
        if arr is not None:
            arr = np.asarray(arr)
            arr = arr.astype(MLIR_TO_NUMPY[t.dtype]) if arr.shape == tuple(t.shape) else None
    memo[value] = arr
    return arr


def _operands(op, sub):
    arrays = [sub(v) for v in op.operands]
    return None if any(a is None for a in arrays) else arrays


def _num(value, sub):
    """A number operand: a torch constant or a folded tensor."""
    c = const_float(value)
    if c is not None:
        return int(c) if defining_op(value, "torch.constant.int") is not None else c
    return sub(value) if str(value.type).startswith("!torch.vtensor") else None


def _binary(fn):
    def fold(op, sub):
        a, b = _num(op.operands[0], sub), _num(op.operands[1], sub)
        return None if a is None or b is None else fn(a, b)

    return fold


def _with_alpha(sign):
    def fold(op, sub):
        a, b, alpha = _num(op.operands[0], sub), _num(op.operands[1], sub), const_float(op.operands[2])
        if a is None or b is None or alpha is None:
            return None
        return a + sign * (b * alpha if alpha != 1 else b)

    return fold


def _fold_arange(op, sub):
    ints = [const_int(v) for v in op.operands]
    name = op_name(op)
    if name == "torch.aten.arange":
        start, end, step = 0, ints[0], 1
    elif name == "torch.aten.arange.start":
        start, end, step = ints[0], ints[1], 1
    else:
        start, end, step = ints[:3]
    if None in (start, end, step):
        return None
    return np.arange(start, end, step)


def _fold_slice(op, sub):
    x = sub(op.operands[0])
    dim, start, end, step = (None if is_none(v) else const_int(v) for v in op.operands[1:5])
    if x is None or dim is None or (step or 1) < 1:
        return None
    index = [slice(None)] * x.ndim
    index[dim] = slice(start, end, step)
    return x[tuple(index)]


def _fold_where(op, sub):
    c, a, b = (_num(v, sub) for v in op.operands)
    return None if c is None or a is None or b is None else np.where(c, a, b)


def _fold_list(value, sub):
    op = defining_op(value, "torch.prim.ListConstruct")
    return None if op is None else _operands(op, sub)


def _fold_index(op, sub):
    x, idx = sub(op.operands[0]), _fold_list(op.operands[1], sub)
    return None if x is None or idx is None else x[tuple(idx)]


def _fold_cat(op, sub):
    parts, dim = _fold_list(op.operands[0], sub), const_int(op.operands[1])
    return None if parts is None or dim is None else np.concatenate(parts, axis=dim)


def _fold_cumsum(op, sub):
    x, dim = sub(op.operands[0]), const_int(op.operands[1])
    return None if x is None or dim is None else np.cumsum(x, axis=dim)


def _fold_same_shape(op, sub):
    """view / reshape / broadcast / casts: the result's shape and dtype come from its type."""
    x = sub(op.operands[0])
    if x is None:
        return None
    shape = tuple(info(op.result).shape)
    if op_name(op) in ("torch.aten.broadcast_to", "torch.aten.expand"):
        return np.broadcast_to(x, shape)
    if op_name(op) in ("torch.aten.view", "torch.aten.reshape", "torch.aten._unsafe_view", "torch.aten.unsqueeze"):
        return x.reshape(shape)
    return x  # a cast: fold converts to the result dtype


def _fold_tri(fn):
    def fold(op, sub):
        x, diagonal = sub(op.operands[0]), const_int(op.operands[1])
        return None if x is None or diagonal is None else fn(x, diagonal)

    return fold


def _folders():
    table = {
        "torch.vtensor.literal": lambda op, sub: literal_array(op.result),
        "torch.operator": lambda op, sub: literal_array(op.result),  # an external parameter (core/params.py)
        "torch.aten.arange": _fold_arange, "torch.aten.arange.start": _fold_arange, "torch.aten.arange.start_step": _fold_arange,
        "torch.aten.slice.Tensor": _fold_slice,
        "torch.aten.where.self": _fold_where, "torch.aten.where.ScalarOther": _fold_where,
        "torch.aten.where.ScalarSelf": _fold_where, "torch.aten.where.Scalar": _fold_where,
        "torch.aten.index.Tensor_hacked_twin": _fold_index, "torch.aten.cat": _fold_cat, "torch.aten.cumsum": _fold_cumsum,
        "torch.aten.add.Tensor": _with_alpha(1), "torch.aten.add.Scalar": _with_alpha(1),
        "torch.aten.sub.Tensor": _with_alpha(-1), "torch.aten.sub.Scalar": _with_alpha(-1),
        "torch.aten.mul.Tensor": _binary(np.multiply), "torch.aten.mul.Scalar": _binary(np.multiply),
        "torch.aten.logical_not": lambda op, sub: None if sub(op.operands[0]) is None else ~sub(op.operands[0]).astype(bool),
        "torch.aten.bitwise_not": lambda op, sub: None if sub(op.operands[0]) is None else np.invert(sub(op.operands[0])),
        "torch.aten.triu": _fold_tri(np.triu), "torch.aten.tril": _fold_tri(np.tril),
    }
    for name, fn in (("eq", np.equal), ("ne", np.not_equal), ("ge", np.greater_equal), ("gt", np.greater),
                     ("le", np.less_equal), ("lt", np.less)):
        table[f"torch.aten.{name}.Tensor"] = table[f"torch.aten.{name}.Scalar"] = _binary(fn)
    for name, fn in (("and", np.logical_and), ("or", np.logical_or), ("xor", np.logical_xor)):
        table[f"torch.aten.logical_{name}"] = _binary(fn)
    for name, fn in (("and", np.bitwise_and), ("or", np.bitwise_or), ("xor", np.bitwise_xor)):
        table[f"torch.aten.bitwise_{name}.Tensor"] = _binary(fn)
    for name in ("view", "reshape", "_unsafe_view", "unsqueeze", "broadcast_to", "expand", "to.dtype"):
        table[f"torch.aten.{name}"] = _fold_same_shape
    table["torch.prims.convert_element_type"] = _fold_same_shape
    return table


_FOLDERS = _folders()


# ---------------------------------------------------------------------------------------
# Examples for the differential checker.


def draw_dim(rng, low: int, high: int) -> int:
    """A size in [low, high], the edges drawn as often as the inside."""
    pick = int(rng.integers(0, 4))
    return low if pick == 0 else high if pick == 1 else int(rng.integers(low, high + 1))


def pt2e_quantized_layer(kind: str, rng, *, weight_zero_point: int = 0):
    """A linear (``kind="linear"``) or 3x3 conv2d quantized as ``convert_pt2e`` writes it: a
    quantize/dequantize pair on the input, a dequantized int8 per-channel weight."""
    import torch
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)

    qd = torch.ops.quantized_decomposed

    class Quantized(torch.nn.Module):
        def __init__(self, layer):
            super().__init__()
            self.layer = layer
            w = layer.weight.detach()
            scale = w.abs().flatten(1).amax(1).clamp_min(1e-8) / 127
            shape = (-1,) + (1,) * (w.dim() - 1)
            self.register_buffer("wq", torch.clamp(torch.round(w / scale.reshape(shape)), -127, 127).to(torch.int8))
            self.register_buffer("ws", scale)
            self.register_buffer("wz", torch.full((w.shape[0],), weight_zero_point, dtype=torch.int64))
            self.sx, self.zx = float(rng.uniform(0.01, 0.05)), int(rng.integers(-20, 20))

        def forward(self, x):
            xq = qd.quantize_per_tensor(x, self.sx, self.zx, -128, 127, torch.int8)
            xd = qd.dequantize_per_tensor(xq, self.sx, self.zx, -128, 127, torch.int8)
            wd = qd.dequantize_per_channel(self.wq, self.ws, self.wz, 0, -127, 127, torch.int8)
            if isinstance(self.layer, torch.nn.Linear):
                return torch.nn.functional.linear(xd, wd, self.layer.bias)
            return torch.nn.functional.conv2d(xd, wd, self.layer.bias, padding=1)

    if kind == "linear":
        d_in, d_out = int(rng.integers(2, 33)), int(rng.integers(1, 33))
        return Quantized(torch.nn.Linear(d_in, d_out)).eval(), (torch.randn(3, d_in),)
    c_in, c_out = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    return Quantized(torch.nn.Conv2d(c_in, c_out, 3, padding=1)).eval(), (torch.randn(1, c_in, 6, 6),)

"""Pass ``quantize-weights{bits=8|4,group=N}``: weight-only quantization of ``cuvil.linear``
and ``cuvil.conv2d`` with constant float weights. Test: tests/lowering/precision/quantize-weights.mlir.

The weight literal is replaced by a quantized literal plus its scales, and a dequantization
(torch ops) right before the op, on the weight only; activations stay in the model's dtype:

    bits=8   per output channel, symmetric: q = round(w / s) in [-127, 127], s = max|w| / 127;
             q is an si8 literal of the weight's shape, s a [O, 1, ...] literal in the weight's
             dtype; dequant: convert_element_type(q) * s.
    bits=4   group-wise along the input features (conv: along I*kh*kw), symmetric: q in
             [-8, 7], s = max|w| / 7 per (output channel, group); stored as u = q + 8 (0..15),
             two per byte: byte i of a group holds element i (low nibble) and element
             i + group/2 (high nibble), a [O, G, 1, group/2] ui8 literal. Dequant: one broadcast
             shift by [0, 4] and ``& 15`` give [O, G, 2, group/2], then (u - 8) * s, then a view
             back to the weight's shape. IREE turns the chain into one elementwise dispatch.

``skip`` (module paths, ``:``-separated, matched as demote-precision's ``keep_paths``) leaves
the layers of those nn.Modules in float (``skip=lm_head``).

Group size (int4): ``group`` (default 128) is clamped to the input features; when the input
features are not a multiple of it, the layer falls back to one group per output channel; a
layer whose group would be odd (odd input features) is quantized to int8 instead (two
nibbles per byte need an even group). Weights read through a 2-D transpose (``mm`` against a
[K, N] constant) are quantized in the op's [N, K] layout.
"""

from __future__ import annotations

import numpy as np

from cuvil_mlir.core.diagnostics import CuvilError
from cuvil_mlir.dialects import cuvil
from cuvil_mlir.core.ir import ir
from cuvil_mlir.core.passes import ConfigurablePass
from cuvil_mlir.core.patterns import (
    PatternSet, build, defining_op, info, literal, literal_array, torch_int, torch_int_list, transposed_2d_source,
    vtensor_type,
)

NAME = "quantize-weights"
DEFAULT_GROUP = 128
FLOAT_DTYPES = ("f32", "f16", "bf16", "f64")
# torch's ScalarType numbers (the dtype operand of convert_element_type / to.dtype)
TORCH_DTYPE_CODE = {"ui8": 0, "si8": 1, "si32": 3, "si64": 4, "f16": 5, "f32": 6, "f64": 7, "bf16": 15}


# ---------------------------------------------------------------------------------------
# Quantization math (numpy; pure functions, also used by quantize-static).


def quantize_per_channel(w: np.ndarray, qmax: int = 127) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-output-channel (axis 0) quantization: ``(q int8, scale float32 [O])``."""
    flat = np.asarray(w, dtype=np.float32).reshape(w.shape[0], -1)
    scale = np.abs(flat).max(axis=1) / qmax
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)  # an all-zero channel: any scale
    q = np.clip(np.rint(flat / scale[:, None]), -qmax, qmax).astype(np.int8)
    return q.reshape(w.shape), scale


def quantize_int4_groups(w2d: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int4 per (row, group of ``group`` columns): ``(packed uint8 [N, G, 1, group/2],
    scale float32 [N, G, 1, 1])`` in the layout the module docstring describes."""
    n, k = w2d.shape
    grouped = np.asarray(w2d, dtype=np.float32).reshape(n, k // group, group)
    scale = np.abs(grouped).max(axis=2, keepdims=True) / 7
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    u = (np.clip(np.rint(grouped / scale), -8, 7) + 8).astype(np.uint8)
    half = group // 2
    packed = (u[:, :, :half] | (u[:, :, half:] << 4)).astype(np.uint8)
    return packed[:, :, None, :], scale[..., None]


def int4_group_size(in_features: int, group: int) -> int | None:
    """The group an int4 layer with ``in_features`` uses (None: quantize it to int8)."""
    g = min(group, in_features)
    if in_features % g:
        g = in_features  # not a multiple: one group per output channel
    return g if g % 2 == 0 else None


# ---------------------------------------------------------------------------------------
# Builders of the dequantization (torch ops at the insertion point).


def convert(value, dtype: str):
    t = info(value)
    return build("torch.prims.convert_element_type", [value, torch_int(TORCH_DTYPE_CODE[dtype])], vtensor_type(t.shape, dtype))


def dequant_int8(q: np.ndarray, scale: np.ndarray, dtype: str):
    """``convert(q) * scale`` with ``scale`` broadcast over all but dim 0."""
    result = vtensor_type(q.shape, dtype)
    s = literal(scale.reshape((q.shape[0],) + (1,) * (q.ndim - 1)).astype(_numpy_dtype(dtype)), dtype)
    return build("torch.aten.mul.Tensor", [convert(literal(q, "si8"), dtype), s], result)


def dequant_int4(packed: np.ndarray, scale: np.ndarray, shape, dtype: str):
    """Unpack ``packed`` [N, G, 1, g/2] (see the module docstring), ``(u - 8) * scale``, view to ``shape``."""
    n, groups, _, half = packed.shape
    wide = (n, groups, 2, half)
    shifts = literal(np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1), "ui8")
    nibbles = build("torch.aten.bitwise_right_shift.Tensor", [literal(packed, "ui8"), shifts], vtensor_type(wide, "ui8"))
    nibbles = build("torch.aten.bitwise_and.Scalar", [nibbles, torch_int(15)], vtensor_type(wide, "ui8"))
    centered = build("torch.aten.sub.Scalar", [convert(nibbles, dtype), torch_int(8), torch_int(1)], vtensor_type(wide, dtype))
    s = literal(scale.astype(_numpy_dtype(dtype)), dtype)
    w = build("torch.aten.mul.Tensor", [centered, s], vtensor_type(wide, dtype))
    return build("torch.aten.view", [w, torch_int_list(list(shape))], vtensor_type(shape, dtype))


def _numpy_dtype(dtype: str):
    if dtype == "bf16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return {"f32": np.float32, "f16": np.float16, "f64": np.float64}[dtype]


# ---------------------------------------------------------------------------------------
# Matching a constant float weight.


def constant_weight(value) -> np.ndarray | None:
    """The float weight ``value`` holds, read from a literal (or a 2-D transpose of one, or an
    exact float upcast of either: a half model exported on the CPU gets its ``addmm`` weights
    as ``to.dtype(f16 literal, f32)``), in ``value``'s own layout and dtype; None when it is not
    a readable constant float tensor."""
    t = info(value)
    if t is None or t.dtype not in FLOAT_DTYPES or not t.is_static:
        return None
    array = _literal_or_upcast(value)
    if array is None:
        source = transposed_2d_source(value)
        array = None if source is None else _literal_or_upcast(source)
        array = None if array is None else np.ascontiguousarray(array.T)
    if array is None or tuple(array.shape) != t.shape:
        return None
    return array


_WIDTH = {"bf16": 16, "f16": 16, "f32": 32, "f64": 64}
_CASTS = ("torch.aten.to.dtype", "torch.prims.convert_element_type")


def _literal_or_upcast(value) -> np.ndarray | None:
    array = literal_array(value)
    if array is not None:
        return array
    cast = defining_op(value, _CASTS)
    if cast is None:
        return None
    src, dst = info(cast.operands[0]), info(value)
    if src is None or src.dtype not in _WIDTH or _WIDTH[src.dtype] > _WIDTH[dst.dtype]:
        return None  # only widening casts are exact
    array = literal_array(cast.operands[0])
    return None if array is None else np.asarray(array, dtype=np.float64 if dst.dtype == "f64" else np.float32)


def _quantized_weight(w: np.ndarray, dtype: str, bits: int, group: int):
    """The dequantization chain of ``w`` (its [O, ...] layout kept)."""
    g = int4_group_size(int(np.prod(w.shape[1:])), group) if bits == 4 else None
    if g is None:
        return dequant_int8(*quantize_per_channel(w), dtype)
    packed, scale = quantize_int4_groups(np.asarray(w, dtype=np.float32).reshape(w.shape[0], -1), g)
    return dequant_int4(packed, scale, w.shape, dtype)


def conv_attributes(op) -> dict:
    """stride, padding, dilation, groups of a cuvil.conv2d as Python values (for its builder)."""
    out = {name: list(ir.DenseI64ArrayAttr(op.attributes[name])) for name in ("stride", "padding", "dilation")}
    return {**out, "groups": ir.IntegerAttr(op.attributes["groups"]).value}


def make(bits: str = "8", group: str = str(DEFAULT_GROUP), skip: str = "none") -> PatternSet:
    from cuvil_mlir.core.diagnostics import module_path
    from cuvil_mlir.lowering.precision.demote_precision import path_matches, split_list

    nbits, ngroup, skipped = int(bits), int(group), split_list(skip)
    patterns = PatternSet(NAME, description=DESCRIPTION, examples=EXAMPLES)

    @patterns.add("cuvil.linear")
    def quantize_linear(op, rewriter):
        """cuvil.linear(x, W) -> cuvil.linear(x, dequant(q, s))   (W constant float; q si8 / packed int4)"""
        w = constant_weight(op.weight)
        if w is None or (skipped and path_matches(module_path(op.location), skipped)):
            return None
        dequant = _quantized_weight(w, info(op.weight).dtype, nbits, ngroup)
        return cuvil.linear(op.result.type, op.input, dequant, op.bias, activation=cuvil.activation_of(op))

    @patterns.add("cuvil.conv2d")
    def quantize_conv2d(op, rewriter):
        """cuvil.conv2d(x, W) -> cuvil.conv2d(x, dequant(q, s))   (W constant float; per output channel / group)"""
        w = constant_weight(op.weight)
        if w is None or (skipped and path_matches(module_path(op.location), skipped)):
            return None
        dequant = _quantized_weight(w, info(op.weight).dtype, nbits, ngroup)
        return cuvil.conv2d(
            op.result.type, op.input, dequant, op.bias,
            **conv_attributes(op), activation=cuvil.activation_of(op),
        )

    return patterns


DESCRIPTION = "weight-only int8 (per channel) / int4 (group-wise) for cuvil.linear and cuvil.conv2d"
EXAMPLES: list = []  # shared by every configuration of the pass (the checker runs the default one)
_examples = PatternSet(NAME, examples=EXAMPLES)


def _lossy(pattern: str, rtol: float, *, matches: bool = True):
    """Register an example with the error the checker allows (quantization is lossy by
    design; relative to the largest output: int8 ~1e-2, int4 ~1e-1 on random weights)."""
    return _examples.example(pattern, matches=matches, rtol=rtol)


@_lossy("quantize_linear", 0.05)
def _upcast_half_weight(rng):
    """A half weight used in f32 (a half model's addmm exported on the CPU reads like this)."""
    import torch

    class Upcast(torch.nn.Module):
        def __init__(self, d_in, d_out, transposed):
            super().__init__()
            self.transposed = transposed  # GPT-2's Conv1D: x @ W[in, out]
            self.register_buffer("w", torch.randn(d_in, d_out).half() if transposed else torch.randn(d_out, d_in).half())

        def forward(self, x):
            return x @ self.w.float() if self.transposed else torch.nn.functional.linear(x, self.w.float())

    d_in, d_out = int(rng.integers(2, 65)), int(rng.integers(1, 65))
    return Upcast(d_in, d_out, bool(rng.integers(0, 2))).eval(), (torch.randn(3, d_in),)


@_lossy("quantize_linear", 0.05)
def _mlp_example(rng):
    import torch

    d_in, d_out = int(rng.integers(2, 65)), int(rng.integers(1, 65))
    return torch.nn.Sequential(torch.nn.Linear(d_in, d_out), torch.nn.ReLU()).eval(), (torch.randn(3, d_in),)


@_lossy("quantize_linear", 0.05, matches=False)
def _activation_matmul(rng):
    """Both sides are activations (attention scores): no constant weight to quantize."""
    import torch

    k = int(rng.integers(2, 33))
    return (lambda a, b: torch.matmul(a, b)), (torch.randn(4, k), torch.randn(k, 5))


@_lossy("quantize_conv2d", 0.05)
def _conv_example(rng):
    import torch

    c_in, c_out = int(rng.integers(1, 9)), int(rng.integers(1, 9))
    return torch.nn.Conv2d(c_in, c_out, 3, padding=1).eval(), (torch.randn(1, c_in, 6, 6),)


class _QuantizeWeightsPass(ConfigurablePass):
    """``bits`` is 8 or 4; ``group`` any positive even integer (the listed values are examples)."""

    def configure(self, given: dict[str, str]):
        self.check_known(given)
        bits, group = given.get("bits", "8"), given.get("group", str(DEFAULT_GROUP))
        if bits not in ("8", "4"):
            raise CuvilError(f"pass '{self.name}': option bits={bits} is not one of 8, 4")
        if not group.isdigit() or int(group) < 2 or int(group) % 2:
            raise CuvilError(f"pass '{self.name}': option group={group} must be a positive even integer (e.g. 32, 64, 128)")
        return self.make(bits=bits, group=group, skip=given.get("skip", "none"))


PASS = _QuantizeWeightsPass(NAME, make, {"bits": ("8", "4"), "group": (str(DEFAULT_GROUP), "32", "64", "256"), "skip": ("none", "lm_head")},
                            DESCRIPTION)

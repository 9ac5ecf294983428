"""Pass ``quantize-weights{bits=8|4,group=N,skip=P}``: weight-only quantization of ``cuvil.linear``
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

``skip`` (module paths, ``:``-separated, matched as demote-precision's ``keep_paths``:
lowering/common.py ``path_matches``) leaves the layers of those nn.Modules in float (``skip=lm_head``).

Group size (int4): ``group`` (default 128) is clamped to the input features; when the input
features are not a multiple of it, the layer falls back to one group per output channel; a
layer whose group would be odd (odd input features) is quantized to int8 instead (two
nibbles per byte need an even group). Weights read through a 2-D transpose (``mm`` against a
[K, N] constant) are quantized in the op's [N, K] layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from cuvil_mlir.core.patterns import PatternSet, build, info, literal, torch_int, torch_int_list, vtensor_type
from cuvil_mlir.core.tensor_types import numpy_dtype
from cuvil_mlir.dialects import cuvil
from cuvil_mlir.lowering.common import constant_weight, conv_attributes, convert, in_paths, quantize_per_channel

NAME = "quantize-weights"
DEFAULT_GROUP = 128


@dataclass(frozen=True)
class QuantizeWeightsOptions:
    """``bits``: 8 (per output channel) or 4 (group-wise); ``group``: the int4 group size, a
    positive even integer; ``skip``: module paths whose layers stay in float."""

    bits: Literal[8, 4] = 8
    group: int = DEFAULT_GROUP
    skip: tuple[str, ...] = ()

    def __post_init__(self):
        if isinstance(self.group, int) and (self.group < 2 or self.group % 2):
            raise ValueError(f"option group={self.group} must be a positive even integer (e.g. 32, 64, 128)")


DESCRIPTION = "weight-only int8 (per channel) / int4 (group-wise) for cuvil.linear and cuvil.conv2d"
patterns = PatternSet(NAME, description=DESCRIPTION, options=QuantizeWeightsOptions())


# ---------------------------------------------------------------------------------------
# Quantization math (numpy; pure functions).


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


def dequant_int8(q: np.ndarray, scale: np.ndarray, dtype: str):
    """``convert(q) * scale`` with ``scale`` broadcast over all but dim 0."""
    result = vtensor_type(q.shape, dtype)
    s = literal(scale.reshape((q.shape[0],) + (1,) * (q.ndim - 1)).astype(numpy_dtype(dtype)), dtype)
    return build("torch.aten.mul.Tensor", [convert(literal(q, "si8"), dtype), s], result)


def dequant_int4(packed: np.ndarray, scale: np.ndarray, shape, dtype: str):
    """Unpack ``packed`` [N, G, 1, g/2] (see the module docstring), ``(u - 8) * scale``, view to ``shape``."""
    n, groups, _, half = packed.shape
    wide = (n, groups, 2, half)
    shifts = literal(np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1), "ui8")
    nibbles = build("torch.aten.bitwise_right_shift.Tensor", [literal(packed, "ui8"), shifts], vtensor_type(wide, "ui8"))
    nibbles = build("torch.aten.bitwise_and.Scalar", [nibbles, torch_int(15)], vtensor_type(wide, "ui8"))
    centered = build("torch.aten.sub.Scalar", [convert(nibbles, dtype), torch_int(8), torch_int(1)], vtensor_type(wide, dtype))
    s = literal(scale.astype(numpy_dtype(dtype)), dtype)
    w = build("torch.aten.mul.Tensor", [centered, s], vtensor_type(wide, dtype))
    return build("torch.aten.view", [w, torch_int_list(list(shape))], vtensor_type(shape, dtype))


def _quantized_weight(w: np.ndarray, dtype: str, bits: int, group: int):
    """The dequantization chain of ``w`` (its [O, ...] layout kept)."""
    g = int4_group_size(int(np.prod(w.shape[1:])), group) if bits == 4 else None
    if g is None:
        return dequant_int8(*quantize_per_channel(w), dtype)
    packed, scale = quantize_int4_groups(np.asarray(w, dtype=np.float32).reshape(w.shape[0], -1), g)
    return dequant_int4(packed, scale, w.shape, dtype)


# ---------------------------------------------------------------------------------------
# The patterns.


def _dequantized_weight(op, options: QuantizeWeightsOptions):
    """The dequantization chain replacing ``op``'s constant float weight; None when it has none
    or ``op`` is skipped."""
    w = constant_weight(op.weight)
    if w is None or in_paths(op, options.skip):
        return None
    return _quantized_weight(w, info(op.weight).dtype, options.bits, options.group)


@patterns.add("cuvil.linear")
def quantize_linear(op, rewriter, options: QuantizeWeightsOptions):
    """cuvil.linear(x, W) -> cuvil.linear(x, dequant(q, s))   (W constant float; q si8 / packed int4)"""
    dequant = _dequantized_weight(op, options)
    if dequant is None:
        return None
    return cuvil.linear(op.result.type, op.input, dequant, op.bias, activation=cuvil.activation_of(op))


@patterns.add("cuvil.conv2d")
def quantize_conv2d(op, rewriter, options: QuantizeWeightsOptions):
    """cuvil.conv2d(x, W) -> cuvil.conv2d(x, dequant(q, s))   (W constant float; per output channel / group)"""
    dequant = _dequantized_weight(op, options)
    if dequant is None:
        return None
    return cuvil.conv2d(op.result.type, op.input, dequant, op.bias, **conv_attributes(op), activation=cuvil.activation_of(op))


# ---------------------------------------------------------------------------------------
# Examples for the differential checker (default options). Quantization is lossy by design:
# ``rtol`` is the error the checker allows, relative to the largest output (int8 ~1e-2, int4
# ~1e-1 on random weights).


@patterns.example("quantize_linear", rtol=0.05)
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


@patterns.example("quantize_linear", rtol=0.05)
def _mlp_example(rng):
    import torch

    d_in, d_out = int(rng.integers(2, 65)), int(rng.integers(1, 65))
    return torch.nn.Sequential(torch.nn.Linear(d_in, d_out), torch.nn.ReLU()).eval(), (torch.randn(3, d_in),)


@patterns.example("quantize_linear", matches=False, rtol=0.05)
def _activation_matmul(rng):
    """Both sides are activations (attention scores): no constant weight to quantize."""
    import torch

    k = int(rng.integers(2, 33))
    return (lambda a, b: torch.matmul(a, b)), (torch.randn(4, k), torch.randn(k, 5))


@patterns.example("quantize_conv2d", rtol=0.05)
def _conv_example(rng):
    import torch

    c_in, c_out = int(rng.integers(1, 9)), int(rng.integers(1, 9))
    return torch.nn.Conv2d(c_in, c_out, 3, padding=1).eval(), (torch.randn(1, c_in, 6, 6),)


PASS = patterns

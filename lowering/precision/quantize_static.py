"""Pass ``quantize-static{skip=P}``: static int8 for ``cuvil.linear`` / ``cuvil.conv2d`` with constant
float weights and a calibrated input range. Test: tests/lowering/precision/quantize-static.mlir.

    cuvil.linear(x, W, b) {cuvil.input_range = array<f64: lo, hi>}
        -> cuvil.qlinear(x, Wq, ws, b) {input_scale, input_zero_point}

An input that is a clamp with constant bounds (``torch.clamp``, ReLU6, Hardtanh) needs no
calibration: its range is the clamp's.

Weights: symmetric int8 per output channel (lowering/common.py ``quantize_per_channel``).
Inputs: affine int8 per tensor from the range, widened to include 0 (so that 0, e.g. a
convolution's padding, is exact): ``scale = (hi - lo) / 255``, ``zero_point = round(-128 -
lo / scale)``. ``lower-cuvil-to-torch`` turns the quantized ops into an integer matmul
(``aten._int_mm``, int32 accumulation) or an int32 convolution, then one float rescale.

The range is a discardable attribute, ``cuvil.input_range``, so the pass runs on a file.
In a compile, ``with_calibration(ranges, options)`` first attaches the ranges of a calibration
(cuvil_mlir.calibrate) to the ops they were measured at, found by ``quantizable_ops``: the
linear/conv ops with a constant float weight, in program order, each keyed by its index,
kind, input shape and weight shape. A calibration that does not fit the module is an error.
``skip`` (module paths, ``:``-separated, matched as demote-precision's ``keep_paths``) leaves
the layers of those nn.Modules in float.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from cuvil_mlir.core.diagnostics import CuvilError, location_text
from cuvil_mlir.core.ir import ir
from cuvil_mlir.core.passes import FunctionPass
from cuvil_mlir.core.patterns import PatternSet, const_float, defining_op, info, literal, literal_array
from cuvil_mlir.dialects import cuvil
from cuvil_mlir.lowering.common import constant_weight, conv_attributes, in_paths, quantize_per_channel

NAME = "quantize-static"
RANGE_ATTR = "cuvil.input_range"
QUANTIZABLE = ("cuvil.linear", "cuvil.conv2d")


@dataclass(frozen=True)
class QuantizeStaticOptions:
    """``skip``: module paths whose layers stay in float."""

    skip: tuple[str, ...] = ()


DESCRIPTION = "static int8 (calibrated input range) for cuvil.linear and cuvil.conv2d"
patterns = PatternSet(NAME, description=DESCRIPTION, options=QuantizeStaticOptions())


@dataclass(frozen=True)
class OpKey:
    """Where a calibration range was measured: the op's position among the quantizable ops
    of the module after the "fused" stage, its kind and its shapes."""

    index: int
    kind: str  # "linear" | "conv2d"
    input_shape: tuple[int, ...]
    weight_shape: tuple[int, ...]

    def describe(self) -> str:
        return f"#{self.index} cuvil.{self.kind} (input {list(self.input_shape)}, weight {list(self.weight_shape)})"


def input_qparams(lo: float, hi: float) -> tuple[float, int]:
    """(scale, zero_point) of affine int8 covering [lo, hi] and 0."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = (hi - lo) / 255.0
    if not np.isfinite(scale) or scale <= 0:
        return 1.0, 0  # an all-zero input: any scale represents it
    return scale, int(np.clip(np.rint(-128.0 - lo / scale), -128, 127))


def _ops_in_order(op):
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child
                yield from _ops_in_order(child)


def quantizable_ops(module: ir.Module) -> list:
    """The linear/conv ops static int8 applies to, in program order (see OpKey)."""
    out = []
    for op in _ops_in_order(module.operation):
        view = op.opview if isinstance(op, ir.Operation) else op
        if view.operation.name in QUANTIZABLE and _fits(view):
            out.append(view)
    return out


def _fits(op) -> bool:
    x = info(op.operands[0])
    return x is not None and x.dtype in cuvil.FLOAT_DTYPES and constant_weight(op.operands[1]) is not None


def op_key(index: int, op) -> OpKey:
    return OpKey(index, op.operation.name.removeprefix("cuvil."), tuple(info(op.operands[0]).shape), tuple(info(op.operands[1]).shape))


def annotate(module: ir.Module, ranges: Sequence[tuple[OpKey, float, float]]) -> int:
    """Attach each range to the op it was measured at; fails when the module's quantizable
    ops are not the ones the calibration saw. Returns the number of ops annotated."""
    ops = quantizable_ops(module)
    keys = [op_key(i, op) for i, op in enumerate(ops)]
    expected = [key for key, _, _ in ranges]
    if keys != expected:
        raise CuvilError(_mismatch(keys, expected, ops))
    with module.context:
        for op, (_, lo, hi) in zip(ops, ranges):
            op.attributes[RANGE_ATTR] = ir.DenseF64ArrayAttr.get([float(lo), float(hi)])
    return len(ops)


def _mismatch(keys: list[OpKey], expected: list[OpKey], ops) -> str:
    head = "the calibration does not fit this model (calibrate it with the same model, input shapes, target and passes)"
    for i, (got, want) in enumerate(zip(keys, expected)):
        if got != want:
            return f"{head}: quantizable op {got.describe()} at {location_text(ops[i].location)}; the calibration has {want.describe()}"
    return f"{head}: the module has {len(keys)} quantizable linear/conv ops, the calibration {len(expected)}"


def _input_range(op) -> tuple[float, float] | None:
    """The calibrated range, else the range a clamp of the input guarantees."""
    if RANGE_ATTR not in op.attributes:
        return clamped_range(op.operands[0])
    values = list(ir.DenseF64ArrayAttr(op.attributes[RANGE_ATTR]))
    return (values[0], values[1]) if len(values) == 2 else None


def clamped_range(value) -> tuple[float, float] | None:
    """[lo, hi] of ``aten.clamp(x, lo, hi)`` or of ``minimum(maximum(x, lo), hi)`` with 0-d
    constant bounds (how ReLU6 and Hardtanh arrive): a range known without calibration."""
    op = defining_op(value, "torch.aten.clamp")
    if op is not None:
        lo, hi = const_float(op.operands[1]), const_float(op.operands[2])
        return (lo, hi) if lo is not None and hi is not None and lo <= hi else None
    outer = defining_op(value, "torch.aten.minimum")
    hi, inner = _scalar_and_other(outer) if outer is not None else (None, None)
    inner = defining_op(inner, "torch.aten.maximum") if inner is not None else None
    lo, _ = _scalar_and_other(inner) if inner is not None else (None, None)
    return (lo, hi) if lo is not None and hi is not None and lo <= hi else None


def _scalar_and_other(op):
    """For a binary op with one 0-d constant operand: (its value, the other operand)."""
    for const, other in ((op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])):
        a = literal_array(const) if info(const) is not None and info(const).rank == 0 else None
        if a is not None and a.dtype.kind == "f":
            return float(a), other
    return None, None


def _quantized_weight(op):
    w = constant_weight(op.weight)
    q, scale = quantize_per_channel(w)
    return literal(q, "si8"), literal(scale.astype(np.float32), "f32")


def _quantize(op, options: QuantizeStaticOptions):
    """(scale, zero point, Wq, ws) when ``op`` is to be quantized, else None."""
    bounds = _input_range(op)
    if bounds is None or not _fits(op) or in_paths(op, options.skip):
        return None
    return (*input_qparams(*bounds), *_quantized_weight(op))


@patterns.add("cuvil.linear")
def static_linear(op, rewriter, options: QuantizeStaticOptions):
    """cuvil.linear(x, W, b) {cuvil.input_range} -> cuvil.qlinear(x, Wq, ws, b) {input_scale, input_zero_point}"""
    q = _quantize(op, options)
    if q is None:
        return None
    scale, zero_point, wq, ws = q
    return cuvil.qlinear(op.result.type, op.input, wq, ws, op.bias, input_scale=scale, input_zero_point=zero_point,
                         activation=cuvil.activation_of(op))


@patterns.add("cuvil.conv2d")
def static_conv2d(op, rewriter, options: QuantizeStaticOptions):
    """cuvil.conv2d(x, W, b) {cuvil.input_range} -> cuvil.qconv2d(x, Wq, ws, b) {input_scale, input_zero_point}"""
    q = _quantize(op, options)
    if q is None:
        return None
    scale, zero_point, wq, ws = q
    return cuvil.qconv2d(op.result.type, op.input, wq, ws, op.bias, input_scale=scale, input_zero_point=zero_point,
                         **conv_attributes(op), activation=cuvil.activation_of(op))


PASS = patterns


def with_calibration(ranges: Sequence[tuple[OpKey, float, float]], options: QuantizeStaticOptions = QuantizeStaticOptions()) -> FunctionPass:
    """The pass a compile with precision int8 runs: annotate the calibrated ranges, then rewrite
    (every quantizable op but those of ``options.skip``)."""
    ranges = list(ranges)
    configured = patterns.with_options(options)

    def run(module: ir.Module) -> Counter:
        annotate(module, ranges)
        return configured.apply(module)

    return FunctionPass(NAME, run, DESCRIPTION)


# ---------------------------------------------------------------------------------------
# Examples for the differential checker: inputs behind a clamp (no calibration needed). The
# rewrite is lossy by design; ``rtol`` is the error the checker allows (relative to the
# largest output), above the ~1e-2 int8 weights and activations give on these layers.


@patterns.example("static_linear", rtol=0.05)
def _clamped_linear(rng):
    import torch

    d_in, d_out = int(rng.integers(2, 49)), int(rng.integers(1, 33))
    return torch.nn.Sequential(torch.nn.Hardtanh(-2.0, 3.0), torch.nn.Linear(d_in, d_out)).eval(), (torch.randn(4, d_in),)


@patterns.example("static_linear", matches=False, rtol=0.05)
def _unclamped_linear(rng):
    """No calibration and no clamp: the input range is unknown, nothing to quantize with."""
    import torch

    d_in = int(rng.integers(2, 33))
    return torch.nn.Linear(d_in, 5).eval(), (torch.randn(2, d_in),)


@patterns.example("static_conv2d", rtol=0.05)
def _clamped_conv(rng):
    import torch

    c_in, c_out = int(rng.integers(1, 7)), int(rng.integers(1, 7))
    return torch.nn.Sequential(torch.nn.ReLU6(), torch.nn.Conv2d(c_in, c_out, 3, padding=1)).eval(), (torch.randn(1, c_in, 6, 6),)

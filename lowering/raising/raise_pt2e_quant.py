"""Pass ``raise-pt2e-quant``: PyTorch PT2E-quantized linear/conv (quantize/dequantize pairs
around the op) -> ``cuvil.qlinear`` / ``cuvil.qconv2d``, so they run as integer matmuls
instead of fake quantization. Test: tests/lowering/raising/raise-pt2e-quant.mlir.

PT2E (``prepare_pt2e`` / ``convert_pt2e``, e.g. torchao's XNNPACK quantizer) writes
``quantized_decomposed`` ops, which torch-mlir imports as ``torch.quantized_decomposed.*``:

    cuvil.linear(dequantize_per_tensor(quantize_per_tensor(x, sx, zx)),
                 dequantize_per_channel(Wq, ws, 0, axis 0), b)
        -> cuvil.qlinear(x, Wq, ws, b) {input_scale = sx, input_zero_point = zx}

Matched: the input pair per tensor, int8 [-128, 127] or uint8 [0, 255] (the zero point is
shifted by -128: the same grid); the weight int8 symmetric (zero points all 0), per output
channel (axis 0) or per tensor, as a constant (``convert_pt2e``'s folded weight) or as
``quantize_per_channel``/``quantize_per_tensor`` of a constant float weight. Not matched
(left as fake quantization, which IREE compiles): restricted ranges, non-zero weight zero
points, scales given as tensors (the ``.tensor`` overloads), dynamic quantization. A
quantize/dequantize pair on an op's output stays: the next quantized op absorbs it (it reads
the pair's input), and a final one keeps the model's rounding of its output.
"""

from __future__ import annotations

import numpy as np

from cuvil_mlir.core.patterns import PatternSet, const_float, const_int, defining_op, info, literal, literal_array
from cuvil_mlir.core.tensor_types import TORCH_DTYPE_CODE
from cuvil_mlir.dialects import cuvil
from cuvil_mlir.lowering.common import conv_attributes, pt2e_quantized_layer

NAME = "raise-pt2e-quant"
QD = "torch.quantized_decomposed."
INT8, UINT8 = TORCH_DTYPE_CODE["si8"], TORCH_DTYPE_CODE["ui8"]  # the dtype operand of the quantized_decomposed ops

patterns = PatternSet(NAME, description="PT2E quantize/dequantize pairs around linear/conv -> cuvil.qlinear/qconv2d")


def _activation_qparams(value):
    """For ``dequantize_per_tensor(quantize_per_tensor(x, s, z, ...))`` with matching int8/uint8
    full-range parameters: ``(x, s, z as int8)``; else None."""
    dq = defining_op(value, QD + "dequantize_per_tensor")
    if dq is None:
        return None
    q = defining_op(dq.operands[0], QD + "quantize_per_tensor")
    if q is None:
        return None
    params = [_scalar_params(op.operands[1:6]) for op in (q, dq)]
    if params[0] is None or params[0] != params[1]:
        return None
    scale, zero_point, qmin, qmax, dtype = params[0]
    if (dtype, qmin, qmax) == (INT8, -128, 127):
        return q.operands[0], scale, zero_point
    if (dtype, qmin, qmax) == (UINT8, 0, 255):
        return q.operands[0], scale, zero_point - 128
    return None


def _scalar_params(values):
    scale, zero_point, qmin, qmax, dtype = values
    out = (const_float(scale), const_int(zero_point), const_int(qmin), const_int(qmax), const_int(dtype))
    return None if any(v is None for v in out) or out[0] <= 0 else out


def _weight_qparams(value):
    """For a dequantized symmetric int8 constant weight: ``(Wq int8 array, scales float32 [O])``."""
    dq = defining_op(value, (QD + "dequantize_per_channel", QD + "dequantize_per_tensor"))
    if dq is None:
        return None
    per_channel = dq.operation.name.endswith("per_channel")
    if per_channel:
        scales, zero_points = literal_array(dq.operands[1]), literal_array(dq.operands[2])
        axis, qmin, qmax, dtype = (const_int(v) for v in dq.operands[3:7])
        if scales is None or zero_points is None or axis != 0 or np.any(zero_points != 0):
            return None
    else:
        params = _scalar_params(dq.operands[1:6])
        if params is None or params[1] != 0:
            return None
        scale, _, qmin, qmax, dtype = params
    if dtype != INT8 or qmin is None or qmin < -128 or qmax is None or qmax > 127:
        return None
    q = _int8_weight(dq.operands[0], dq.operation.name.replace("dequantize", "quantize"))
    if q is None:
        return None
    channels = q.shape[0]
    scales = scales if per_channel else np.full(channels, scale)
    if scales.shape != (channels,):
        return None
    return q, np.asarray(scales, dtype=np.float32)


def _int8_weight(value, quantize_name: str):
    """The int8 weight: a constant, or the same-parameter quantize of a constant float weight."""
    q = literal_array(value)
    if q is not None:
        return q if q.dtype == np.int8 else None
    op = defining_op(value, quantize_name)
    if op is None:
        return None
    w = literal_array(op.operands[0])
    if w is None:
        return None
    if quantize_name.endswith("per_channel"):
        scales, zero_points = literal_array(op.operands[1]), literal_array(op.operands[2])
        axis, qmin, qmax = (const_int(v) for v in op.operands[3:6])
        if scales is None or zero_points is None or axis != 0 or np.any(zero_points != 0) or qmin is None or qmax is None:
            return None
        shape = (-1,) + (1,) * (w.ndim - 1)
        return np.clip(np.rint(w.astype(np.float32) * (1.0 / scales.astype(np.float32)).reshape(shape)), qmin, qmax).astype(np.int8)
    params = _scalar_params(op.operands[1:6])
    if params is None or params[1] != 0:
        return None
    scale, _, qmin, qmax, _ = params
    return np.clip(np.rint(w.astype(np.float32) * np.float32(1.0 / scale)), qmin, qmax).astype(np.int8)


def _float_bias(op):
    b = op.bias
    return b if b is None or info(b).dtype == info(op.result).dtype else False


@patterns.add("cuvil.linear")
def pt2e_linear(op, rewriter):
    """cuvil.linear(dq(q(x, sx, zx)), dq(Wq, ws), b) -> cuvil.qlinear(x, Wq, ws, b) {sx, zx}"""
    act, weight, bias = _activation_qparams(op.input), _weight_qparams(op.weight), _float_bias(op)
    if act is None or weight is None or bias is False or info(act[0]) != info(op.input):
        return None
    x, scale, zero_point = act
    q, scales = weight
    return cuvil.qlinear(op.result.type, x, literal(q, "si8"), literal(scales, "f32"), bias,
                         input_scale=scale, input_zero_point=zero_point, activation=cuvil.activation_of(op))


@patterns.add("cuvil.conv2d")
def pt2e_conv2d(op, rewriter):
    """cuvil.conv2d(dq(q(x, sx, zx)), dq(Wq, ws), b) -> cuvil.qconv2d(x, Wq, ws, b) {sx, zx}"""
    act, weight, bias = _activation_qparams(op.input), _weight_qparams(op.weight), _float_bias(op)
    if act is None or weight is None or bias is False or info(act[0]) != info(op.input):
        return None
    x, scale, zero_point = act
    q, scales = weight
    return cuvil.qconv2d(op.result.type, x, literal(q, "si8"), literal(scales, "f32"), bias,
                         input_scale=scale, input_zero_point=zero_point, **conv_attributes(op), activation=cuvil.activation_of(op))


# ---------------------------------------------------------------------------------------
# Examples: the form convert_pt2e produces, written with the quantized_decomposed ops directly
# (lowering/common.py ``pt2e_quantized_layer``).


@patterns.example("pt2e_linear")
def _pt2e_linear(rng):
    return pt2e_quantized_layer("linear", rng)


@patterns.example("pt2e_linear", matches=False)
def _pt2e_asymmetric_weight(rng):
    """A weight with non-zero zero points: not the symmetric form qlinear takes."""
    return pt2e_quantized_layer("linear", rng, weight_zero_point=3)


@patterns.example("pt2e_conv2d")
def _pt2e_conv2d(rng):
    return pt2e_quantized_layer("conv2d", rng)


PASS = patterns

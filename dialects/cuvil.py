"""The Cuvil dialect: high-level ML ops on torch value tensors.

Ops are declared with the upstream ``ext`` (IRDL) Python DSL and work on
``!torch.vtensor`` values, so they can be raised from torch ops and lowered back to
torch ops that IREE's torch input pipeline compiles. Each op carries a verifier whose
errors name the op, its location and what is wrong. In this bindings version
Python-defined ops print in generic form::

    %y = "cuvil.linear"(%x, %w, %b) {activation = "gelu", operandSegmentSizes = array<i32: 1, 1, 1>}
         : (!torch.vtensor<[4,16],f32>, !torch.vtensor<[32,16],f32>, !torch.vtensor<[32],f32>)
         -> !torch.vtensor<[4,32],f32>
"""


from typing import Any

from cuvil_mlir.core.ir import ext, ir
from cuvil_mlir.core.tensor_types import FLOAT_WIDTH, TensorInfo, tensor_info

Operand = ext.Operand
Result = ext.Result

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "relu6")
# Gated (GLU-family) activations of cuvil.linear, each with the activation of its gate half:
# the op computes y = x · Wᵀ + b with 2F out features and returns act(y[..., :F]) * y[..., F:].
GATED_ACTIVATIONS = {"swiglu": "silu", "geglu": "gelu", "geglu_tanh": "gelu_tanh", "reglu": "relu"}
NORM_KINDS = ("layer", "rms")
FLOAT_DTYPES = tuple(FLOAT_WIDTH)  # bf16, f16, f32, f64


class Cuvil(ext.Dialect, name="cuvil"):
    pass


class VerifyError(Exception):
    """Raised inside a verifier; turned into an MLIR diagnostic at the op's location."""


def _verified(check):
    """Wrap a checker ``check(op)`` into the ``verify_invariants`` protocol of ``ext``."""

    def verify_invariants(op) -> bool:
        try:
            check(op)
        except VerifyError as e:
            op.location.emit_error(f"'{op.operation.name}' op {e}")
            return False
        except (ValueError, TypeError, KeyError) as e:  # an attribute of the wrong kind
            op.location.emit_error(f"'{op.operation.name}' op has a malformed attribute: {e}")
            return False
        return True

    return staticmethod(verify_invariants)


def _info(value, what: str) -> TensorInfo:
    info = tensor_info(value.type)
    if info is None:
        raise VerifyError(f"{what} must be a !torch.vtensor with known rank and dtype, got {value.type}")
    return info


def _str_attr(op, name: str) -> str:
    return ir.StringAttr(op.attributes[name]).value


def _check_choice(value: str, choices, what: str) -> None:
    if value not in choices:
        raise VerifyError(f"{what} must be one of {', '.join(choices)}; got '{value}'")


def _dims_compatible(a: int, b: int) -> bool:
    return a < 0 or b < 0 or a == b


def _check_dim(got: int, expected: int, what: str) -> None:
    if not _dims_compatible(got, expected):
        raise VerifyError(f"{what}: expected {expected}, got {got}")


class LinearOp(Cuvil.Operation, name="linear", traits=[ext.Pure]):
    """Fully connected layer with a fused epilogue: ``y = act(x · Wᵀ + b)``.

    ``input`` is ``[..., K]``, ``weight`` is ``[N, K]`` (torch's layout), ``bias`` is ``[N]``;
    the result is ``[..., N]``. ``activation`` is one of none, relu, gelu, gelu_tanh, silu,
    sigmoid, relu6 (``clamp(y, 0, 6)``), or a gated activation (swiglu, geglu, geglu_tanh, reglu: ``GATED_ACTIVATIONS``):
    then ``weight`` stacks the gate and up projections ``[W_g; W_u]`` (N = 2F, static) and the
    result is ``[..., F]``: ``act(y[..., :F]) * y[..., F:]`` with ``y = x · Wᵀ + b``.

        %y = "cuvil.linear"(%x, %w, %b) {activation = "relu", operandSegmentSizes = array<i32: 1, 1, 1>}
             : (!torch.vtensor<[8,64],f32>, !torch.vtensor<[128,64],f32>, !torch.vtensor<[128],f32>)
             -> !torch.vtensor<[8,128],f32>
    """

    result: Result[Any]
    input: Operand[Any]
    weight: Operand[Any]
    activation: ir.StringAttr
    bias: Operand[Any] | None = None

    def _check(op):
        activation = _str_attr(op, "activation")
        _check_choice(activation, ACTIVATIONS + tuple(GATED_ACTIVATIONS), "activation")
        x, w, y = _info(op.input, "input"), _info(op.weight, "weight"), _info(op.result, "result")
        if x.rank < 1:
            raise VerifyError(f"input must have rank >= 1, got rank {x.rank}")
        if w.rank != 2:
            raise VerifyError(f"weight must have rank 2 ([out, in]), got rank {w.rank}")
        _check_dim(x.shape[-1], w.shape[1], "input's last dim must equal weight's dim 1 (in features)")
        if y.rank != x.rank:
            raise VerifyError(f"result rank must equal input rank {x.rank}, got {y.rank}")
        if activation in GATED_ACTIVATIONS:
            if w.shape[0] < 0 or w.shape[0] % 2:
                raise VerifyError(f"gated activation '{activation}' needs a static, even weight dim 0 (2 x out features), got {w.shape[0]}")
            _check_dim(y.shape[-1], w.shape[0] // 2, f"gated activation '{activation}': result's last dim must be half of weight's dim 0")
        else:
            _check_dim(y.shape[-1], w.shape[0], "result's last dim must equal weight's dim 0 (out features)")
        if op.bias is not None:
            b = _info(op.bias, "bias")
            if b.rank != 1:
                raise VerifyError(f"bias must have rank 1, got rank {b.rank}")
            _check_dim(b.shape[0], w.shape[0], "bias size must equal out features")
        if x.dtype != w.dtype:
            raise VerifyError(f"input and weight dtypes differ: {x.dtype} vs {w.dtype}")

    verify_invariants = _verified(_check)


class Conv2dOp(Cuvil.Operation, name="conv2d", traits=[ext.Pure]):
    """2-D convolution (NCHW, weight OIHW) with a fused activation.

    ``stride``, ``padding``, ``dilation`` are 2-element i64 arrays, ``groups`` an i64.

        %y = "cuvil.conv2d"(%x, %w, %b) {activation = "relu", dilation = array<i64: 1, 1>,
               groups = 1 : i64, padding = array<i64: 1, 1>, stride = array<i64: 1, 1>,
               operandSegmentSizes = array<i32: 1, 1, 1>}
             : (!torch.vtensor<[1,3,8,8],f32>, !torch.vtensor<[8,3,3,3],f32>, !torch.vtensor<[8],f32>)
             -> !torch.vtensor<[1,8,8,8],f32>
    """

    result: Result[Any]
    input: Operand[Any]
    weight: Operand[Any]
    stride: Any  # DenseI64ArrayAttr (IRDL has no constraint for it; the verifier checks)
    padding: Any  # DenseI64ArrayAttr (IRDL has no constraint for it; the verifier checks)
    dilation: Any  # DenseI64ArrayAttr (IRDL has no constraint for it; the verifier checks)
    groups: ir.IntegerAttr
    activation: ir.StringAttr
    bias: Operand[Any] | None = None

    def _check(op):
        _check_choice(_str_attr(op, "activation"), ACTIVATIONS, "activation")
        for name in ("stride", "padding", "dilation"):
            values = list(ir.DenseI64ArrayAttr(op.attributes[name]))
            if len(values) != 2:
                raise VerifyError(f"{name} must have 2 elements, got {len(values)}")
            if min(values) < (0 if name == "padding" else 1):
                raise VerifyError(f"{name} has an out-of-range value: {values}")
        groups = ir.IntegerAttr(op.attributes["groups"]).value
        x, w, y = _info(op.input, "input"), _info(op.weight, "weight"), _info(op.result, "result")
        for v, what in ((x, "input"), (w, "weight"), (y, "result")):
            if v.rank != 4:
                raise VerifyError(f"{what} must have rank 4, got rank {v.rank}")
        if groups < 1:
            raise VerifyError(f"groups must be >= 1, got {groups}")
        if x.shape[1] >= 0 and w.shape[1] >= 0 and x.shape[1] != w.shape[1] * groups:
            raise VerifyError(
                f"input channels ({x.shape[1]}) must equal weight dim 1 ({w.shape[1]}) x groups ({groups})"
            )
        _check_dim(y.shape[1], w.shape[0], "result channels must equal weight dim 0")
        if op.bias is not None:
            b = _info(op.bias, "bias")
            if b.rank != 1:
                raise VerifyError(f"bias must have rank 1, got rank {b.rank}")
            _check_dim(b.shape[0], w.shape[0], "bias size must equal output channels")

    verify_invariants = _verified(_check)


class AttentionOp(Cuvil.Operation, name="attention", traits=[ext.Pure]):
    """Scaled dot-product attention: ``softmax(q·kᵀ·scale + mask) · v``.

    ``q`` is ``[..., L, E]``, ``k`` is ``[..., S, E]``, ``v`` is ``[..., S, Ev]``; the result is
    ``[..., L, Ev]``. ``mask`` (optional) is additive (float) or boolean (true = keep) and
    broadcasts to ``[..., L, S]``. ``is_causal`` applies a lower-triangular mask.

        %o = "cuvil.attention"(%q, %k, %v) {is_causal = true, scale = 0.125 : f64,
               operandSegmentSizes = array<i32: 1, 1, 1, 0>}
             : (!torch.vtensor<[1,2,5,64],f32>, !torch.vtensor<[1,2,5,64],f32>,
                !torch.vtensor<[1,2,5,64],f32>) -> !torch.vtensor<[1,2,5,64],f32>
    """

    result: Result[Any]
    q: Operand[Any]
    k: Operand[Any]
    v: Operand[Any]
    scale: ir.FloatAttr
    is_causal: Any  # BoolAttr (checked by the verifier)
    mask: Operand[Any] | None = None

    def _check(op):
        q, k, v = _info(op.q, "q"), _info(op.k, "k"), _info(op.v, "v")
        y = _info(op.result, "result")
        if q.rank < 2 or not (q.rank == k.rank == v.rank == y.rank):
            raise VerifyError(f"q, k, v and result must have the same rank >= 2, got {q.rank}, {k.rank}, {v.rank}, {y.rank}")
        _check_dim(q.shape[-1], k.shape[-1], "q and k head dims must match")
        _check_dim(k.shape[-2], v.shape[-2], "k and v sequence lengths must match")
        _check_dim(y.shape[-2], q.shape[-2], "result sequence length must equal q's")
        _check_dim(y.shape[-1], v.shape[-1], "result head dim must equal v's")
        if not (q.dtype == k.dtype == v.dtype):
            raise VerifyError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
        if q.dtype not in FLOAT_DTYPES:
            raise VerifyError(f"q must be floating point, got {q.dtype}")
        if ir.FloatAttr(op.attributes["scale"]).value <= 0:
            raise VerifyError("scale must be > 0")
        if op.mask is not None:
            m = _info(op.mask, "mask")
            if m.dtype != "i1" and m.dtype != q.dtype:
                raise VerifyError(f"mask must be i1 or {q.dtype}, got {m.dtype}")

    verify_invariants = _verified(_check)


class NormOp(Cuvil.Operation, name="norm", traits=[ext.Pure]):
    """Normalization over the trailing ``normalized_shape`` dims.

    ``kind = "layer"``: ``(x - mean) / sqrt(var + eps) * weight + bias``;
    ``kind = "rms"``: ``x / sqrt(mean(x²) + eps) * weight`` (no bias).

        %y = "cuvil.norm"(%x, %g, %b) {eps = 1.0e-05 : f64, kind = "layer",
               normalized_shape = array<i64: 768>, operandSegmentSizes = array<i32: 1, 1, 1>}
             : (!torch.vtensor<[1,128,768],f32>, !torch.vtensor<[768],f32>, !torch.vtensor<[768],f32>)
             -> !torch.vtensor<[1,128,768],f32>
    """

    result: Result[Any]
    x: Operand[Any]
    kind: ir.StringAttr
    eps: ir.FloatAttr
    normalized_shape: Any  # DenseI64ArrayAttr (IRDL has no constraint for it; the verifier checks)
    weight: Operand[Any] | None = None
    bias: Operand[Any] | None = None

    def _check(op):
        kind = _str_attr(op, "kind")
        _check_choice(kind, NORM_KINDS, "kind")
        if ir.FloatAttr(op.attributes["eps"]).value < 0:
            raise VerifyError("eps must be >= 0")
        shape = list(ir.DenseI64ArrayAttr(op.attributes["normalized_shape"]))
        x, y = _info(op.x, "x"), _info(op.result, "result")
        if not shape or len(shape) > x.rank:
            raise VerifyError(f"normalized_shape {shape} must be non-empty and at most rank {x.rank}")
        for got, want in zip(x.shape[x.rank - len(shape):], shape):
            _check_dim(got, want, f"x's trailing dims must equal normalized_shape {shape}")
        if y.shape != x.shape and y.rank != x.rank:
            raise VerifyError(f"result shape must equal x's, got {y.shape} vs {x.shape}")
        if kind == "rms" and op.bias is not None:
            raise VerifyError("kind 'rms' takes no bias")
        for value, what in ((op.weight, "weight"), (op.bias, "bias")):
            if value is None:
                continue
            p = _info(value, what)
            if p.rank != len(shape) or any(not _dims_compatible(a, b) for a, b in zip(p.shape, shape)):
                raise VerifyError(f"{what} shape must equal normalized_shape {shape}, got {p.shape}")

    verify_invariants = _verified(_check)


OPS = (LinearOp, Conv2dOp, AttentionOp, NormOp)


# Builders: keyword-friendly constructors with plain Python attribute values.


def linear(result_type, input, weight, bias=None, *, activation: str = "none"):
    return LinearOp(result_type, input, weight, ir.StringAttr.get(activation), bias=bias).result


def conv2d(result_type, input, weight, bias=None, *, stride, padding, dilation, groups: int, activation: str = "none"):
    return Conv2dOp(
        result_type, input, weight,
        ir.DenseI64ArrayAttr.get(list(stride)), ir.DenseI64ArrayAttr.get(list(padding)),
        ir.DenseI64ArrayAttr.get(list(dilation)), ir.IntegerAttr.get(ir.IntegerType.get_signless(64), groups),
        ir.StringAttr.get(activation), bias=bias,
    ).result


def attention(result_type, q, k, v, mask=None, *, scale: float, is_causal: bool):
    op = AttentionOp(result_type, q, k, v, ir.FloatAttr.get(ir.F64Type.get(), scale), ir.BoolAttr.get(True), mask=mask)
    # ext's builder drops falsy attributes (BoolAttr false reads as "absent"): set it afterwards.
    op.attributes["is_causal"] = ir.BoolAttr.get(is_causal)
    return op.result


def norm(result_type, x, weight=None, bias=None, *, kind: str, eps: float, normalized_shape):
    return NormOp(
        result_type, x, ir.StringAttr.get(kind), ir.FloatAttr.get(ir.F64Type.get(), eps),
        ir.DenseI64ArrayAttr.get(list(normalized_shape)), weight=weight, bias=bias,
    ).result


def activation_of(op) -> str:
    return ir.StringAttr(op.attributes["activation"]).value


def with_activation(op, activation: str):
    """A copy of a linear/conv2d op's result type and operands with another activation, at the
    op's own location (the fused op is still that layer: provenance and keep_paths name it)."""
    with op.location:
        if isinstance(op, LinearOp):
            return linear(op.result.type, op.input, op.weight, op.bias, activation=activation)
        return conv2d(
            op.result.type, op.input, op.weight, op.bias,
            stride=list(ir.DenseI64ArrayAttr(op.attributes["stride"])),
            padding=list(ir.DenseI64ArrayAttr(op.attributes["padding"])),
            dilation=list(ir.DenseI64ArrayAttr(op.attributes["dilation"])),
            groups=ir.IntegerAttr(op.attributes["groups"]).value, activation=activation,
        )


# ---------------------------------------------------------------------------------------
# Static int8: quantized linear / conv2d (written by quantize-static and raise-pt2e-quant).


def _check_quantized(op):
    """Shared checks of qlinear / qconv2d: si8 weight, f32 per-output-channel weight_scale,
    float input/result, input_scale > 0, input_zero_point in [-128, 127]."""
    x, w, s, y = _info(op.input, "input"), _info(op.weight, "weight"), _info(op.weight_scale, "weight_scale"), _info(op.result, "result")
    if w.dtype != "si8":
        raise VerifyError(f"weight must be si8, got {w.dtype}")
    if x.dtype not in FLOAT_DTYPES or y.dtype != x.dtype:
        raise VerifyError(f"input and result must have the same float dtype, got {x.dtype} and {y.dtype}")
    if s.rank != 1 or s.dtype != "f32":
        raise VerifyError(f"weight_scale must be a rank-1 f32 tensor, got rank {s.rank} {s.dtype}")
    _check_dim(s.shape[0], w.shape[0], "weight_scale size must equal weight dim 0 (output channels)")
    if ir.FloatAttr(op.attributes["input_scale"]).value <= 0:
        raise VerifyError("input_scale must be > 0")
    zero_point = ir.IntegerAttr(op.attributes["input_zero_point"]).value
    if not -128 <= zero_point <= 127:
        raise VerifyError(f"input_zero_point must be in [-128, 127], got {zero_point}")
    if op.bias is not None:
        b = _info(op.bias, "bias")
        if b.rank != 1 or b.dtype != x.dtype:
            raise VerifyError(f"bias must be a rank-1 {x.dtype} tensor, got rank {b.rank} {b.dtype}")
        _check_dim(b.shape[0], w.shape[0], "bias size must equal output channels")
    return x, w, y


class QLinearOp(Cuvil.Operation, name="qlinear", traits=[ext.Pure]):
    """Static int8 linear: ``y = act(dequant(quant(x)) · dequant(W)ᵀ + b)`` computed as an
    integer matmul with int32 accumulation.

    ``input`` (float ``[..., K]``) is quantized per tensor, affine: ``q = clamp(round(x /
    input_scale) + input_zero_point, -128, 127)``. ``weight`` is si8 ``[N, K]``, symmetric per
    output channel with ``weight_scale`` (f32 ``[N]``). ``bias`` (float ``[N]``) and
    ``activation`` (as ``cuvil.linear``, gated ones included) apply in float; the result has
    the input's dtype.

        %y = "cuvil.qlinear"(%x, %wq, %ws, %b) {activation = "none", input_scale = 0.02 : f64,
               input_zero_point = -3 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1>}
             : (!torch.vtensor<[8,64],f32>, !torch.vtensor<[32,64],si8>, !torch.vtensor<[32],f32>,
                !torch.vtensor<[32],f32>) -> !torch.vtensor<[8,32],f32>
    """

    result: Result[Any]
    input: Operand[Any]
    weight: Operand[Any]
    weight_scale: Operand[Any]
    input_scale: ir.FloatAttr
    input_zero_point: ir.IntegerAttr
    activation: ir.StringAttr
    bias: Operand[Any] | None = None

    def _check(op):
        activation = _str_attr(op, "activation")
        _check_choice(activation, ACTIVATIONS + tuple(GATED_ACTIVATIONS), "activation")
        x, w, y = _check_quantized(op)
        if w.rank != 2 or x.rank < 1 or y.rank != x.rank:
            raise VerifyError(f"expected input [..., K], weight [N, K], result [..., N]; got ranks {x.rank}, {w.rank}, {y.rank}")
        _check_dim(x.shape[-1], w.shape[1], "input's last dim must equal weight's dim 1 (in features)")
        out = w.shape[0] // 2 if activation in GATED_ACTIVATIONS and w.shape[0] >= 0 else w.shape[0]
        _check_dim(y.shape[-1], out, "result's last dim must equal the out features")

    verify_invariants = _verified(_check)


class QConv2dOp(Cuvil.Operation, name="qconv2d", traits=[ext.Pure]):
    """Static int8 2-D convolution (NCHW, weight OIHW si8), quantized like ``cuvil.qlinear``
    (per-tensor affine input, per-output-channel symmetric weight, int32 accumulation);
    ``stride``, ``padding``, ``dilation``, ``groups``, ``activation`` as ``cuvil.conv2d``.

        %y = "cuvil.qconv2d"(%x, %wq, %ws) {activation = "relu", dilation = array<i64: 1, 1>,
               groups = 1 : i64, input_scale = 0.05 : f64, input_zero_point = 0 : i64,
               padding = array<i64: 1, 1>, stride = array<i64: 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1, 0>}
             : (!torch.vtensor<[1,3,8,8],f32>, !torch.vtensor<[8,3,3,3],si8>, !torch.vtensor<[8],f32>)
             -> !torch.vtensor<[1,8,8,8],f32>
    """

    result: Result[Any]
    input: Operand[Any]
    weight: Operand[Any]
    weight_scale: Operand[Any]
    stride: Any  # DenseI64ArrayAttr (checked by the verifier)
    padding: Any  # DenseI64ArrayAttr (checked by the verifier)
    dilation: Any  # DenseI64ArrayAttr (checked by the verifier)
    groups: ir.IntegerAttr
    input_scale: ir.FloatAttr
    input_zero_point: ir.IntegerAttr
    activation: ir.StringAttr
    bias: Operand[Any] | None = None

    def _check(op):
        _check_choice(_str_attr(op, "activation"), ACTIVATIONS, "activation")
        x, w, y = _check_quantized(op)
        for v, what in ((x, "input"), (w, "weight"), (y, "result")):
            if v.rank != 4:
                raise VerifyError(f"{what} must have rank 4, got rank {v.rank}")
        for name in ("stride", "padding", "dilation"):
            if len(list(ir.DenseI64ArrayAttr(op.attributes[name]))) != 2:
                raise VerifyError(f"{name} must have 2 elements")
        groups = ir.IntegerAttr(op.attributes["groups"]).value
        if groups < 1 or (x.shape[1] >= 0 and w.shape[1] >= 0 and x.shape[1] != w.shape[1] * groups):
            raise VerifyError(f"input channels ({x.shape[1]}) must equal weight dim 1 ({w.shape[1]}) x groups ({groups})")
        _check_dim(y.shape[1], w.shape[0], "result channels must equal weight dim 0")

    verify_invariants = _verified(_check)


def _quant_attrs(input_scale: float, input_zero_point: int):
    return ir.FloatAttr.get(ir.F64Type.get(), input_scale), ir.IntegerAttr.get(ir.IntegerType.get_signless(64), input_zero_point)


def qlinear(result_type, input, weight, weight_scale, bias=None, *, input_scale: float, input_zero_point: int, activation: str = "none"):
    op = QLinearOp(result_type, input, weight, weight_scale, *_quant_attrs(input_scale, input_zero_point), ir.StringAttr.get(activation), bias=bias)
    # ext's builder drops falsy attributes (a zero point of 0 reads as "absent"): set it afterwards.
    op.attributes["input_zero_point"] = _quant_attrs(input_scale, input_zero_point)[1]
    return op.result


def qconv2d(result_type, input, weight, weight_scale, bias=None, *, input_scale: float, input_zero_point: int,
            stride, padding, dilation, groups: int, activation: str = "none"):
    scale, zero_point = _quant_attrs(input_scale, input_zero_point)
    op = QConv2dOp(
        result_type, input, weight, weight_scale,
        ir.DenseI64ArrayAttr.get(list(stride)), ir.DenseI64ArrayAttr.get(list(padding)),
        ir.DenseI64ArrayAttr.get(list(dilation)), ir.IntegerAttr.get(ir.IntegerType.get_signless(64), groups),
        scale, zero_point, ir.StringAttr.get(activation), bias=bias,
    )
    op.attributes["input_zero_point"] = zero_point
    return op.result


QUANTIZED_OPS = (QLinearOp, QConv2dOp)

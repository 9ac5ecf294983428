"""Pass ``raise-torch-to-cuvil``: recognize torch-dialect ops as Cuvil ops.

Covers the forms torch.export and torch-mlir's FX importer really produce: ``aten.linear``;
``aten.mm`` / ``aten.addmm`` / ``aten.matmul`` against a constant (often permuted) weight;
the separate bias ``add`` and the ``mul.Scalar`` by 1 that decomposed linears carry;
activations after a linear or conv; ``aten.convolution``; ``aten.scaled_dot_product_attention``;
``aten.layer_norm`` and ``aten.rms_norm``. Test: tests/lowering/raise-torch-to-cuvil.mlir.
"""

from __future__ import annotations

import math

from cuvil_mlir.dialects import cuvil
from cuvil_mlir.patterns import (
    PatternSet, const_bool, const_float, const_int, const_int_list, const_str, defining_op,
    has_one_use, info, is_constant_tensor, is_none, optional_operand, transpose_2d, transposed_2d_source,
)

patterns = PatternSet("raise-torch-to-cuvil", description="torch ops -> cuvil.linear/conv2d/attention/norm")

_EPS_BY_DTYPE = {"f32": 1.1920928955078125e-07, "f16": 0.0009765625, "bf16": 0.0078125, "f64": 2.220446049250313e-16}


@patterns.add("torch.aten.mul.Scalar")
def mul_by_one(op, rewriter):
    """mul.Scalar(x, 1) -> x"""
    x, scalar = op.operands
    if const_float(scalar) != 1.0 or x.type != op.result.type:
        return None
    return x


@patterns.add("torch.aten.linear")
def linear(op, rewriter):
    """aten.linear(x, w, b) -> cuvil.linear(x, w, b)"""
    x, w, b = op.operands
    if info(x) is None or info(w) is None or info(w).rank != 2 or info(op.result) is None:
        return None
    return cuvil.linear(op.result.type, x, w, optional_operand(b))


def _weight_out_in(wt):
    """For a [K, N] constant right-hand side, the [N, K] weight of the equivalent linear."""
    if not is_constant_tensor(wt):
        return None
    source = transposed_2d_source(wt)
    if source is not None:
        return source
    return transpose_2d(wt)


def _rhs_is_weight(wt) -> bool:
    return info(wt) is not None and info(wt).rank == 2 and is_constant_tensor(wt)


@patterns.add("torch.aten.mm")
def mm(op, rewriter):
    """aten.mm(x, permute(W)) -> cuvil.linear(x, W)   (W constant)"""
    x, wt = op.operands
    if not _rhs_is_weight(wt) or info(x) is None:
        return None
    return cuvil.linear(op.result.type, x, _weight_out_in(wt))


@patterns.add("torch.aten.matmul")
def matmul(op, rewriter):
    """aten.matmul(x[..., K], permute(W)) -> cuvil.linear(x, W)   (W constant)"""
    x, wt = op.operands
    if not _rhs_is_weight(wt) or info(x) is None or info(x).rank < 2:
        return None
    return cuvil.linear(op.result.type, x, _weight_out_in(wt))


@patterns.add("torch.aten.addmm")
def addmm(op, rewriter):
    """aten.addmm(b, x, permute(W), beta=1, alpha=1) -> cuvil.linear(x, W, b)"""
    b, x, wt, beta, alpha = op.operands
    if const_float(beta) != 1.0 or const_float(alpha) != 1.0 or not _rhs_is_weight(wt):
        return None
    if info(b) is None or info(b).rank != 1 or info(b).shape[0] != info(wt).shape[1]:
        return None
    return cuvil.linear(op.result.type, x, _weight_out_in(wt), b)


@patterns.add("torch.aten.add.Tensor")
def bias_add(op, rewriter):
    """add(cuvil.linear(x, W), b) -> cuvil.linear(x, W, b)   (b a 1-D constant of out features)"""
    lhs, rhs, alpha = op.operands
    if const_float(alpha) != 1.0:
        return None
    for lin_value, bias in ((lhs, rhs), (rhs, lhs)):
        lin = defining_op(lin_value, "cuvil.linear")
        if lin is None or lin.bias is not None or cuvil.activation_of(lin) != "none" or not has_one_use(lin_value):
            continue
        b = info(bias)
        out_features = info(lin.weight).shape[0]
        if b is None or b.shape != (out_features,) or b.dtype != info(lin_value).dtype or not is_constant_tensor(bias):
            continue
        if op.result.type != lin_value.type:
            continue
        return cuvil.linear(op.result.type, lin.input, lin.weight, bias)
    return None


def _fuse_activation(op, activation: str):
    producer = defining_op(op.operands[0], ("cuvil.linear", "cuvil.conv2d"))
    if producer is None or cuvil.activation_of(producer) != "none" or not has_one_use(op.operands[0]):
        return None
    if op.result.type != producer.result.type:
        return None
    return cuvil.with_activation(producer, activation)


@patterns.add("torch.aten.relu")
def relu_epilogue(op, rewriter):
    """relu(cuvil.linear|conv2d(...)) -> cuvil.linear|conv2d(...) {activation = "relu"}"""
    return _fuse_activation(op, "relu")


@patterns.add("torch.aten.silu")
def silu_epilogue(op, rewriter):
    """silu(cuvil.linear|conv2d(...)) -> cuvil.linear|conv2d(...) {activation = "silu"}"""
    return _fuse_activation(op, "silu")


@patterns.add("torch.aten.sigmoid")
def sigmoid_epilogue(op, rewriter):
    """sigmoid(cuvil.linear|conv2d(...)) -> cuvil.linear|conv2d(...) {activation = "sigmoid"}"""
    return _fuse_activation(op, "sigmoid")


@patterns.add("torch.aten.gelu")
def gelu_epilogue(op, rewriter):
    """gelu(cuvil.linear|conv2d(...), approximate) -> ... {activation = "gelu" | "gelu_tanh"}"""
    approximate = const_str(op.operands[1])
    activation = {"none": "gelu", "tanh": "gelu_tanh"}.get(approximate)
    return _fuse_activation(op, activation) if activation else None


@patterns.add("torch.aten.convolution")
def convolution(op, rewriter):
    """aten.convolution(x, w, b, stride, padding, dilation, false, [0, 0], groups) -> cuvil.conv2d"""
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = op.operands
    if info(x) is None or info(x).rank != 4 or info(w) is None or info(op.result) is None:
        return None
    attrs = [const_int_list(v) for v in (stride, padding, dilation, output_padding)]
    if any(a is None or len(a) != 2 for a in attrs) or const_bool(transposed) is not False:
        return None
    stride_v, padding_v, dilation_v, output_padding_v = attrs
    if output_padding_v != [0, 0] or const_int(groups) is None:
        return None
    return cuvil.conv2d(
        op.result.type, x, w, optional_operand(b),
        stride=stride_v, padding=padding_v, dilation=dilation_v, groups=const_int(groups),
    )


@patterns.add("torch.aten.scaled_dot_product_attention")
def sdpa(op, rewriter):
    """aten.scaled_dot_product_attention(q, k, v, mask, 0.0, causal, scale) -> cuvil.attention"""
    q, k, v, mask, dropout, is_causal, scale = op.operands[:7]
    enable_gqa = op.operands[7] if len(op.operands) > 7 else None
    if const_float(dropout) != 0.0 or const_bool(is_causal) is None:
        return None
    if enable_gqa is not None and const_bool(enable_gqa) is not False:
        return None
    qi, ki = info(q), info(k)
    if qi is None or ki is None or qi.shape[:-2] != ki.shape[:-2]:
        return None  # broadcasting / grouped heads stay with aten
    if is_none(scale):
        if qi.shape[-1] < 0:
            return None
        scale_v = 1.0 / math.sqrt(qi.shape[-1])
    else:
        scale_v = const_float(scale)
        if scale_v is None or scale_v <= 0:
            return None
    if optional_operand(mask) is not None and info(mask) is None:
        return None
    return cuvil.attention(op.result.type, q, k, v, optional_operand(mask), scale=scale_v, is_causal=const_bool(is_causal))


@patterns.add("torch.aten.layer_norm")
def layer_norm(op, rewriter):
    """aten.layer_norm(x, shape, w, b, eps) -> cuvil.norm {kind = "layer"}"""
    x, shape, w, b, eps = op.operands[:5]
    shape_v, eps_v = const_int_list(shape), const_float(eps)
    if shape_v is None or eps_v is None or info(x) is None:
        return None
    return cuvil.norm(op.result.type, x, optional_operand(w), optional_operand(b), kind="layer", eps=eps_v, normalized_shape=shape_v)


@patterns.add("torch.aten.rms_norm")
def rms_norm(op, rewriter):
    """aten.rms_norm(x, shape, w, eps) -> cuvil.norm {kind = "rms"}"""
    x, shape, w, eps = op.operands[:4]
    shape_v = const_int_list(shape)
    if shape_v is None or info(x) is None:
        return None
    eps_v = _EPS_BY_DTYPE.get(info(x).dtype) if is_none(eps) else const_float(eps)
    if eps_v is None:
        return None
    return cuvil.norm(op.result.type, x, optional_operand(w), kind="rms", eps=eps_v, normalized_shape=shape_v)
PASS = patterns

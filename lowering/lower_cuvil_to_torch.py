"""Pass ``lower-cuvil-to-torch{attention=sdpa|decomposed}``: every Cuvil op back to torch
ops IREE's torch input compiles.

``attention`` picks how ``cuvil.attention`` is lowered: ``sdpa`` (one
``aten.scaled_dot_product_attention``, which IREE turns into its fused attention kernel)
or ``decomposed`` (matmul, scale, mask, softmax, matmul). Which one IREE compiles depends
on the target and shapes (see docs/targets.md), so targets try them in order.
Test: tests/lowering/lower-cuvil-to-torch.mlir.
"""

from __future__ import annotations

import numpy as np

from cuvil_mlir.dialects import cuvil
from cuvil_mlir.ir import ir
from cuvil_mlir.passes import ConfigurablePass
from cuvil_mlir.patterns import (
    PatternSet, build, info, torch_bool, torch_float, torch_int, torch_int_list, torch_none, torch_str, vtensor_type,
)

NAME = "lower-cuvil-to-torch"
ATTENTION_LOWERINGS = ("sdpa", "decomposed")


def _or_none(value):
    return torch_none() if value is None else value


def _activation(x, activation: str):
    """Apply an epilogue activation as torch ops."""
    t = x.type
    if activation == "none":
        return x
    if activation in ("gelu", "gelu_tanh"):
        return build("torch.aten.gelu", [x, torch_str("tanh" if activation == "gelu_tanh" else "none")], t)
    return build(f"torch.aten.{activation}", [x], t)  # relu, silu, sigmoid


def linear(op, rewriter):
    """cuvil.linear(x, w, b) {activation} -> activation(aten.linear(x, w, b))"""
    y = build("torch.aten.linear", [op.input, op.weight, _or_none(op.bias)], op.result.type)
    return _activation(y, cuvil.activation_of(op))


def conv2d(op, rewriter):
    """cuvil.conv2d(x, w, b) {...} -> activation(aten.convolution(x, w, b, ...))"""
    lists = [torch_int_list(list(ir.DenseI64ArrayAttr(op.attributes[n]))) for n in ("stride", "padding", "dilation")]
    groups = torch_int(ir.IntegerAttr(op.attributes["groups"]).value)
    operands = [op.input, op.weight, _or_none(op.bias), *lists, torch_bool(False), torch_int_list([0, 0]), groups]
    y = build("torch.aten.convolution", operands, op.result.type)
    return _activation(y, cuvil.activation_of(op))


def attention_sdpa(op, rewriter):
    """cuvil.attention(q, k, v, mask) {scale, is_causal} -> aten.scaled_dot_product_attention"""
    scale = ir.FloatAttr(op.attributes["scale"]).value
    causal = ir.BoolAttr(op.attributes["is_causal"]).value
    operands = [op.q, op.k, op.v, _or_none(op.mask), torch_float(0.0), torch_bool(causal), torch_float(scale), torch_bool(False)]
    return build("torch.aten.scaled_dot_product_attention", operands, op.result.type)


def norm(op, rewriter):
    """cuvil.norm {kind = layer} -> aten.layer_norm;  {kind = rms} -> x * rsqrt(mean(x²) + eps) * w"""
    shape = list(ir.DenseI64ArrayAttr(op.attributes["normalized_shape"]))
    eps = ir.FloatAttr(op.attributes["eps"]).value
    if ir.StringAttr(op.attributes["kind"]).value == "layer":
        operands = [op.x, torch_int_list(shape), _or_none(op.weight), _or_none(op.bias), torch_float(eps), torch_bool(False)]
        return build("torch.aten.layer_norm", operands, op.result.type)
    return _rms_norm(op.x, op.weight, shape, eps, op.result.type)


def _rms_norm(x, weight, shape, eps, result_type):
    t = info(x)
    dims = list(range(t.rank - len(shape), t.rank))
    reduced = vtensor_type([1 if i in dims else d for i, d in enumerate(t.shape)], t.dtype)
    squared = build("torch.aten.mul.Tensor", [x, x], x.type)
    mean = build("torch.aten.mean.dim", [squared, torch_int_list(dims), torch_bool(True), torch_none()], reduced)
    shifted = build("torch.aten.add.Scalar", [mean, torch_float(eps), torch_int(1)], reduced)
    inv = build("torch.aten.rsqrt", [shifted], reduced)
    y = build("torch.aten.mul.Tensor", [x, inv], result_type)
    return y if weight is None else build("torch.aten.mul.Tensor", [y, weight], result_type)


def attention_decomposed(op, rewriter):
    """cuvil.attention(q, k, v, mask) -> matmul(softmax(matmul(q, kᵀ) · scale + mask), v)"""
    q, k, v = info(op.q), info(op.k), info(op.v)
    causal = ir.BoolAttr(op.attributes["is_causal"]).value
    length, source = q.shape[-2], k.shape[-2]
    if causal and (length < 0 or source < 0):
        return None  # the causal mask is built with static sizes; keep the op for the sdpa lowering
    scores_type = vtensor_type([*q.shape[:-1], source], q.dtype)
    kt = build("torch.aten.transpose.int", [op.k, torch_int(-2), torch_int(-1)], vtensor_type([*k.shape[:-2], k.shape[-1], source], k.dtype))
    scores = build("torch.aten.matmul", [op.q, kt], scores_type)
    scores = build("torch.aten.mul.Scalar", [scores, torch_float(ir.FloatAttr(op.attributes["scale"]).value)], scores_type)
    if op.mask is not None:
        scores = _apply_mask(scores, op.mask, scores_type)
    if causal:
        scores = build("torch.aten.where.ScalarOther", [_causal_keep_mask(length, source), scores, torch_float(float("-inf"))], scores_type)
    probs = build("torch.aten.softmax.int", [scores, torch_int(-1), torch_none()], scores_type)
    return build("torch.aten.matmul", [probs, op.v], op.result.type)


def _causal_keep_mask(length: int, source: int):
    """A constant [L, S] boolean mask, true on and below the diagonal (top-left aligned, as
    torch's is_causal). A literal rather than ones+tril: tril's index arithmetic needs 64-bit
    integers, which some Vulkan targets lack."""
    keep = np.tril(np.ones((length, source), dtype=bool))
    attr = ir.DenseElementsAttr.get(keep, type=ir.RankedTensorType.get([length, source], ir.IntegerType.get_signless(1)))
    return build("torch.vtensor.literal", [], vtensor_type([length, source], "i1"), {"value": attr})


def _apply_mask(scores, mask, scores_type):
    """Boolean masks keep where true; float masks are added."""
    if info(mask).dtype == "i1":
        return build("torch.aten.where.ScalarOther", [mask, scores, torch_float(float("-inf"))], scores_type)
    return build("torch.aten.add.Tensor", [scores, mask, torch_int(1)], scores_type)


def make(attention: str = "sdpa") -> PatternSet:
    patterns = PatternSet(NAME, description="cuvil ops -> torch ops for IREE's torch input")
    patterns.add("cuvil.linear", name="linear")(linear)
    patterns.add("cuvil.conv2d", name="conv2d")(conv2d)
    lower_attention = attention_sdpa if attention == "sdpa" else attention_decomposed
    patterns.add("cuvil.attention", name="attention")(lower_attention)
    patterns.add("cuvil.norm", name="norm")(norm)
    return patterns


PASS = ConfigurablePass(NAME, make, {"attention": ATTENTION_LOWERINGS}, "cuvil ops -> torch ops for IREE's torch input")

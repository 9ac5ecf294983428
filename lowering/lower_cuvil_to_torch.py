"""Pass ``lower-cuvil-to-torch``: every Cuvil op back to torch ops IREE's torch input compiles.

Test: tests/lowering/lower-cuvil-to-torch.mlir.
"""

from __future__ import annotations

from cuvil_mlir.dialects import cuvil
from cuvil_mlir.ir import ir
from cuvil_mlir.patterns import (
    PatternSet, build, info, torch_bool, torch_float, torch_int, torch_int_list, torch_none, torch_str, vtensor_type,
)

patterns = PatternSet("lower-cuvil-to-torch", description="cuvil ops -> torch ops for IREE's torch input")


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


@patterns.add("cuvil.linear")
def linear(op, rewriter):
    """cuvil.linear(x, w, b) {activation} -> activation(aten.linear(x, w, b))"""
    y = build("torch.aten.linear", [op.input, op.weight, _or_none(op.bias)], op.result.type)
    return _activation(y, cuvil.activation_of(op))


@patterns.add("cuvil.conv2d")
def conv2d(op, rewriter):
    """cuvil.conv2d(x, w, b) {...} -> activation(aten.convolution(x, w, b, ...))"""
    lists = [torch_int_list(list(ir.DenseI64ArrayAttr(op.attributes[n]))) for n in ("stride", "padding", "dilation")]
    groups = torch_int(ir.IntegerAttr(op.attributes["groups"]).value)
    operands = [op.input, op.weight, _or_none(op.bias), *lists, torch_bool(False), torch_int_list([0, 0]), groups]
    y = build("torch.aten.convolution", operands, op.result.type)
    return _activation(y, cuvil.activation_of(op))


@patterns.add("cuvil.attention")
def attention(op, rewriter):
    """cuvil.attention(q, k, v, mask) {scale, is_causal} -> aten.scaled_dot_product_attention"""
    scale = ir.FloatAttr(op.attributes["scale"]).value
    causal = ir.BoolAttr(op.attributes["is_causal"]).value
    operands = [op.q, op.k, op.v, _or_none(op.mask), torch_float(0.0), torch_bool(causal), torch_float(scale), torch_bool(False)]
    return build("torch.aten.scaled_dot_product_attention", operands, op.result.type)


@patterns.add("cuvil.norm")
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

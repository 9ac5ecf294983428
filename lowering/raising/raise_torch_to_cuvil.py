"""Pass ``raise-torch-to-cuvil``: recognize torch-dialect ops as Cuvil ops.

One torch op becomes one Cuvil op, for the forms torch.export and torch-mlir's FX importer
really produce: ``aten.linear``; ``aten.mm`` against a constant (often permuted) weight (torch.export always decomposes
``aten.matmul`` into view/mm/bmm, and the FX importer's table ``aten.addmm`` into mm, mul by
1 and add); ``aten.matmul`` against a constant 2-D weight (ONNX's MatMul, after torch-mlir's
ONNX lowering; its Gemm arrives as mm); the ``mul.Scalar`` by 1 that decomposed linears carry;
``aten.convolution``; ``aten.scaled_dot_product_attention``; ``aten.layer_norm`` and
``aten.rms_norm``. What follows a linear or conv (a separate bias add, the activation) is
left to fuse-linear-epilogue, so that fusion can be switched off on its own.
Test: tests/lowering/raising/raise-torch-to-cuvil.mlir.
"""

from __future__ import annotations

import math

from cuvil_mlir.dialects import cuvil
from cuvil_mlir.lowering.common import draw_dim
from cuvil_mlir.core.patterns import (
    PatternSet, const_bool, const_float, const_int, const_int_list,
    info, is_constant_tensor, is_none, optional_operand, transpose_2d, transposed_2d_source,
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
    """aten.matmul(x, W) -> cuvil.linear(x, Wᵀ)   (x of rank >= 2, W a constant [K, N]: ONNX's MatMul)"""
    x, wt = op.operands
    xi = info(x)
    if not _rhs_is_weight(wt) or xi is None or xi.rank < 2 or info(op.result) is None:
        return None
    return cuvil.linear(op.result.type, x, _weight_out_in(wt))


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


# ---------------------------------------------------------------------------------------
# Examples for the differential checker: torch programs whose import holds the op.


def _weights(rng, k: int, n: int):
    """A module holding ``w`` [K, N] and ``b`` [N] as parameters (literals after import)."""
    import torch

    module = torch.nn.Module()
    module.w = torch.nn.Parameter(torch.randn(k, n) / math.sqrt(k))
    module.b = torch.nn.Parameter(torch.randn(n))
    return module


def _with(params, fn):
    import torch

    class Program(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = params

        def forward(self, *args):
            return fn(self.p, *args)

    return Program().eval()


@patterns.example("mul_by_one")
def _batch_norm_eval(rng):
    """BatchNorm in eval() decomposes with a mul.Scalar by 1 of its inverse std."""
    import torch

    channels = draw_dim(rng, 1, 6)
    bn = torch.nn.BatchNorm2d(channels)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2)
    return bn.eval(), (torch.randn(1, channels, draw_dim(rng, 1, 5), draw_dim(rng, 1, 5)),)


@patterns.example("mul_by_one", matches=False)
def _mul_by_two(rng):
    import torch

    return (lambda x: torch.mul(x, 2.0)), (torch.randn(draw_dim(rng, 1, 4), draw_dim(rng, 1, 6)),)


@patterns.example("linear")
def _nn_linear(rng):
    import torch

    d_in, d_out = draw_dim(rng, 1, 32), draw_dim(rng, 1, 24)
    model = torch.nn.Linear(d_in, d_out, bias=bool(rng.integers(0, 2))).eval()
    return model, (torch.randn(draw_dim(rng, 1, 3), draw_dim(rng, 1, 5), d_in),)


@patterns.example("mm")
def _x_times_constant(rng):
    k, n = draw_dim(rng, 1, 24), draw_dim(rng, 1, 20)
    import torch

    transposed = bool(rng.integers(0, 2))  # x @ W.t() (a permute of [N, K]) or x @ W ([K, N])
    params = _weights(rng, n if transposed else k, k if transposed else n)
    program = _with(params, (lambda p, x: x @ p.w.t()) if transposed else (lambda p, x: x @ p.w))
    return program, (torch.randn(draw_dim(rng, 1, 5), k),)


@patterns.example("mm", matches=False)
def _product_of_activations(rng):
    import torch

    k = draw_dim(rng, 1, 16)
    return (lambda a, b: a @ b), (torch.randn(draw_dim(rng, 1, 4), k), torch.randn(k, draw_dim(rng, 1, 6)))


def _onnx_model(nodes, inputs, outputs, initializers, opset: int = 17):
    """An ONNX model (onnx.helper) of ``nodes``; inputs / outputs as (name, dtype, shape)."""
    from onnx import TensorProto, helper, numpy_helper

    types = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}

    def value(name, dtype, shape):
        return helper.make_tensor_value_info(name, types[dtype], shape)

    graph = helper.make_graph(nodes, "main", [value(*i) for i in inputs], [value(*o) for o in outputs],
                              [numpy_helper.from_array(a, name) for name, a in initializers.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@patterns.example("matmul")
def _onnx_matmul_by_weight(rng):
    """ONNX MatMul of a rank-3 or 4 activation by a constant [K, N] (torch.onnx's nn.Linear;
    in 2-D torch-mlir's ONNX lowering makes it an aten.mm)."""
    import numpy as np
    from onnx import helper

    k, n = draw_dim(rng, 1, 24), draw_dim(rng, 1, 20)
    lead = [draw_dim(rng, 1, 3) for _ in range(int(rng.integers(2, 4)))]
    w = (rng.standard_normal((k, n)) / math.sqrt(k)).astype(np.float32)
    model = _onnx_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")],
                        [("x", "float32", [*lead, k])], [("y", "float32", [*lead, n])], {"w": w})
    return model, (rng.standard_normal((*lead, k)).astype(np.float32),)


@patterns.example("matmul", matches=False)
def _onnx_matmul_of_activations(rng):
    import numpy as np
    from onnx import helper

    m, k, n = draw_dim(rng, 1, 5), draw_dim(rng, 1, 16), draw_dim(rng, 1, 6)
    model = _onnx_model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
                        [("a", "float32", [2, m, k]), ("b", "float32", [k, n])], [("y", "float32", [2, m, n])], {})
    return model, (rng.standard_normal((2, m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32))


@patterns.example("convolution")
def _conv2d(rng):
    import torch

    groups = int(rng.choice([1, 2]))
    c_in, c_out, k = groups * draw_dim(rng, 1, 3), groups * draw_dim(rng, 1, 4), int(rng.choice([1, 3]))
    conv = torch.nn.Conv2d(c_in, c_out, k, stride=int(rng.choice([1, 2])), padding=k // 2,
                           dilation=int(rng.choice([1, 2])) if k == 3 else 1, groups=groups, bias=bool(rng.integers(0, 2)))
    return conv.eval(), (torch.randn(1, c_in, draw_dim(rng, 5, 9), draw_dim(rng, 5, 9)),)


@patterns.example("convolution", matches=False)
def _transposed_conv2d(rng):
    import torch

    c_in, c_out = draw_dim(rng, 1, 3), draw_dim(rng, 1, 4)
    conv = torch.nn.ConvTranspose2d(c_in, c_out, 3, stride=2)
    return conv.eval(), (torch.randn(1, c_in, draw_dim(rng, 2, 5), draw_dim(rng, 2, 5)),)


@patterns.example("sdpa")
def _sdpa(rng):
    import torch

    heads, length, source, d = draw_dim(rng, 1, 4), draw_dim(rng, 1, 8), draw_dim(rng, 1, 8), int(rng.choice([8, 16]))
    causal = bool(rng.integers(0, 2)) and length == source
    scale = None if rng.integers(0, 2) else float(rng.uniform(0.05, 0.5))
    q, k, v = torch.randn(2, heads, length, d), torch.randn(2, heads, source, d), torch.randn(2, heads, source, d)

    def attend(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

    return attend, (q, k, v)


@patterns.example("layer_norm")
def _layer_norm(rng):
    import torch

    width = draw_dim(rng, 1, 48)
    norm = torch.nn.LayerNorm(width, elementwise_affine=bool(rng.integers(0, 2)))
    if norm.weight is not None:
        with torch.no_grad():
            norm.weight.normal_(), norm.bias.normal_()
    return norm.eval(), (torch.randn(draw_dim(rng, 1, 3), draw_dim(rng, 1, 5), width),)


@patterns.example("rms_norm")
def _rms_norm(rng):
    import torch

    width = draw_dim(rng, 1, 48)
    # eps=None (torch: finfo(dtype).eps) is raised right, but IREE's own aten.rms_norm takes
    # another default, so "before" would be the wrong side of the comparison on tiny inputs
    norm = torch.nn.RMSNorm(width, eps=float(rng.choice([1e-6, 1e-5])))
    with torch.no_grad():
        norm.weight.normal_()
    return norm.eval(), (torch.randn(draw_dim(rng, 1, 3), draw_dim(rng, 1, 5), width),)


PASS = patterns

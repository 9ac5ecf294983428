"""Pass ``lower-cuvil-to-torch{attention=sdpa|decomposed}``: every Cuvil op back to torch
ops IREE's torch input compiles.

``attention`` picks how ``cuvil.attention`` is lowered: ``sdpa`` (one
``aten.scaled_dot_product_attention``, which IREE turns into its fused attention kernel)
or ``decomposed`` (matmul, scale, mask, softmax, matmul). Which one IREE compiles depends
on the target and shapes (see docs/targets.md), so targets try them in order.
Test: tests/lowering/to_torch/lower-cuvil-to-torch.mlir.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from cuvil_mlir.core.ir import ir
from cuvil_mlir.core.patterns import (
    PatternSet, build, info, literal, optimization_barrier, torch_bool, transpose_2d, torch_float, torch_int, torch_int_list, torch_none, torch_str,
    transposed_2d_source, vtensor_type,
)
from cuvil_mlir.core.tensor_types import tensor_info
from cuvil_mlir.dialects import cuvil
from cuvil_mlir.lowering.common import constant_array, constant_recipe, convert, draw_dim, pt2e_quantized_layer

NAME = "lower-cuvil-to-torch"


@dataclass(frozen=True)
class LowerCuvilToTorchOptions:
    """``attention``: how ``cuvil.attention`` is lowered (one sdpa op, or matmul/softmax/matmul).
    ``pad_rows``, ``flatten``: see ``linear``."""

    attention: Literal["sdpa", "decomposed"] = "sdpa"
    pad_rows: int = 0  # a linear's out features (from PAD_FROM_ROWS on) padded to a multiple of this (0: never)
    # decomposed causal attention over more queries than this, static and as many as keys: one
    # attention per block of this many queries over the keys up to its end (0: never; see
    # ``_causal_blocks``)
    causal_block: int = 0
    flatten: bool = False  # a linear's input of rank > 2 viewed as [rows, K] (see ``linear``)


def _or_none(value):
    return torch_none() if value is None else value


def _activation(x, activation: str):
    """Apply an epilogue activation as torch ops."""
    t = x.type
    if activation == "none":
        return x
    if activation == "gelu_tanh":
        return _tanh_gelu(x)
    if activation == "gelu":
        return build("torch.aten.gelu", [x, torch_str("none")], t)
    if activation == "relu6":
        return build("torch.aten.clamp", [x, torch_float(0.0), torch_float(6.0)], t)
    return build(f"torch.aten.{activation}", [x], t)  # relu, silu, sigmoid


def _tanh_gelu(x):
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), written out: IREE 3.13's
    lowering of aten.gelu(approximate="tanh") is off by ~5e-5 (fp32, absolute) where this
    form is off by ~7e-7; an epilogue must not cost the accuracy the unfused model had."""
    t = x.type
    cube = build("torch.aten.mul.Tensor", [build("torch.aten.mul.Tensor", [x, x], t), x], t)
    inner = build("torch.aten.add.Tensor", [x, build("torch.aten.mul.Scalar", [cube, torch_float(0.044715)], t), torch_int(1)], t)
    th = build("torch.aten.tanh", [build("torch.aten.mul.Scalar", [inner, torch_float(math.sqrt(2.0 / math.pi))], t)], t)
    one_plus = build("torch.aten.add.Scalar", [th, torch_float(1.0), torch_int(1)], t)
    return build("torch.aten.mul.Tensor", [build("torch.aten.mul.Scalar", [x, torch_float(0.5)], t), one_plus], t)


# Linears with fewer out features are left as they are by pad_rows (padding them gains nothing measurable).
PAD_FROM_ROWS = 1024


def linear(op, rewriter, options):
    """cuvil.linear(x, w, b) {activation} -> activation(aten.linear(x, w, b));  gated: act(y[..., :F]) * y[..., F:]

    ``pad_rows`` (a target's choice): out features F >= PAD_FROM_ROWS that are not a multiple
    of it get zero rows of weight (and bias) appended, ``aten.constant_pad_nd`` of the constant,
    which IREE evaluates once (at compile time, or at load time for an external parameter), and
    the result is sliced back to F. llvm-cpu's matrix-vector code for a ragged F is much slower:
    GPT-2's lm_head (50257 x 768, f32) took 15.0 ms a call, 9.3 ms padded to 50272 (2 cores, AVX-512).

    ``flatten`` (a target's choice): an input of rank > 2 is viewed as [rows, K] and the result
    viewed back. torch-mlir lowers a 3-D aten.linear to a batch matmul against the weight
    broadcast over the batch; with the CPU's data tiling IREE materializes and packs that
    broadcast weight on every call (GPT-2's lm_head at batch 8: 8 x 768 x 50272 floats, 0.57 s a
    decode step)."""
    x, result = info(op.input), info(op.result)
    flat = options.flatten and x.rank > 2 and sum(d < 0 for d in x.shape[:-1]) <= 1
    if not flat:
        return _linear(op, op.input, list(result.shape), options)
    y = _linear(op, _as_rows(op.input), [_rows(x), result.shape[-1]], options)
    return _from_rows(y, x, op.result.type)


def _linear(op, x, shape: list, options):
    """The linear of ``op`` on input ``x`` (op's, or its rows flattened), a result of ``shape``."""
    dtype = info(op.result).dtype
    activation = cuvil.activation_of(op)
    if activation in cuvil.GATED_ACTIVATIONS:
        return _gated_linear(op, x, shape, cuvil.GATED_ACTIVATIONS[activation])
    weight, bias = _out_major(op.weight), op.bias
    rows = info(weight).shape[0]
    pad = -rows % options.pad_rows if options.pad_rows and rows >= PAD_FROM_ROWS else 0
    if pad:
        weight, bias = _pad_first_dim(weight, pad), None if bias is None else _pad_first_dim(bias, pad)
    y = build("torch.aten.linear", [x, weight, _or_none(bias)], vtensor_type([*shape[:-1], rows + pad], dtype))
    if pad:
        last = torch_int(len(shape) - 1)
        y = build("torch.aten.slice.Tensor", [y, last, torch_int(0), torch_int(rows), torch_int(1)], vtensor_type(shape, dtype))
    return _activation(y, activation)


def _pad_first_dim(value, pad: int):
    """``value`` with ``pad`` zero rows appended along dim 0."""
    t = info(value)
    widths = [0, 0] * (t.rank - 1) + [0, pad]  # constant_pad_nd lists (before, after) pairs from the last dim
    return build("torch.aten.constant_pad_nd", [value, torch_int_list(widths), torch_float(0.0)],
                 vtensor_type([t.shape[0] + pad, *t.shape[1:]], t.dtype))


def _out_major(weight):
    """A weight that is the transpose of a stored [in, out] constant (GPT-2's Conv1D, a raised
    ``mm``/``addmm``) as a constant of its own in [out, in] layout, as ``aten.linear`` reads
    it. With inline weights IREE would transpose it at compile time anyway; an external
    parameter it cannot, and its matrix-vector products then read the weight across rows
    (GPT-2 decode on the CPU: ~8x slower). The new constant is a derived parameter (recipe:
    the transpose of the source), the source stays out of the archive unless read elsewhere."""
    array = constant_array(weight) if transposed_2d_source(weight) is not None else None
    if array is None:
        return weight
    return literal(np.ascontiguousarray(array), dtype=info(weight).dtype, recipe=constant_recipe(weight))


def _gated_linear(op, x, shape: list, gate_activation: str):
    """One aten.linear with 2F out features, then gate_activation(first half) * second half."""
    dtype = info(op.result).dtype
    features, last = info(op.weight).shape[0] // 2, len(shape) - 1
    y = build("torch.aten.linear", [x, op.weight, _or_none(op.bias)], vtensor_type([*shape[:-1], 2 * features], dtype))
    half = vtensor_type([*shape[:-1], features], dtype)
    gate = build("torch.aten.slice.Tensor", [y, torch_int(last), torch_int(0), torch_int(features), torch_int(1)], half)
    up = build("torch.aten.slice.Tensor", [y, torch_int(last), torch_int(features), torch_int(2 * features), torch_int(1)], half)
    return build("torch.aten.mul.Tensor", [_activation(gate, gate_activation), up], half)


def conv2d(op, rewriter):
    """cuvil.conv2d(x, w, b) {...} -> activation(aten.convolution(x, w, b, ...))"""
    lists = [torch_int_list(list(ir.DenseI64ArrayAttr(op.attributes[n]))) for n in ("stride", "padding", "dilation")]
    groups = torch_int(ir.IntegerAttr(op.attributes["groups"]).value)
    operands = [op.input, op.weight, _or_none(op.bias), *lists, torch_bool(False), torch_int_list([0, 0]), groups]
    y = build("torch.aten.convolution", operands, op.result.type)
    return _activation(y, cuvil.activation_of(op))


def attention_sdpa(op, rewriter):
    """cuvil.attention(q, k, v, mask) {scale, is_causal} -> aten.scaled_dot_product_attention;
    a single query of static shape (a decode step: q is [B, H, 1, D]) is written out instead
    (``_single_query``)."""
    if _single_query(op) and all(d >= 0 for d in info(op.q).shape):
        return _single_query_attention(op, ir.BoolAttr(op.attributes["is_causal"]).value)
    scale = ir.FloatAttr(op.attributes["scale"]).value
    causal = ir.BoolAttr(op.attributes["is_causal"]).value
    operands = [op.q, op.k, op.v, _or_none(op.mask), torch_float(0.0), torch_bool(causal), torch_float(scale), torch_bool(False)]
    return build("torch.aten.scaled_dot_product_attention", operands, op.result.type)


# 16-bit floats whose reductions (norms, softmax) are computed in f32, as PyTorch's own kernels
# accumulate them. IREE's torch input reduces in the tensor's dtype: an fp16 LayerNorm of
# GPT-2's residual stream (d=768, values ~30) sums to ~2e4, where fp16's spacing is 16, and
# HF GPT-2 with 12 layers came out 0.19 (CPU) to 0.9 (H200) relative error from fp32 where
# torch fp16 is at 2e-3 (tests/python/test_reduction_precision.py).
WIDENED = {"f16": "f32", "bf16": "f32"}


def _as(value, dtype: str):
    """``value`` converted to ``dtype`` (None, and values already of that dtype, as they are)."""
    if value is None or info(value).dtype == dtype:
        return value
    return convert(value, dtype)


def norm(op, rewriter):
    """cuvil.norm {kind = layer} -> aten.layer_norm;  {kind = rms} -> x * rsqrt(mean(x²) + eps) * w;
    f16/bf16: computed in f32, the result converted back"""
    shape = list(ir.DenseI64ArrayAttr(op.attributes["normalized_shape"]))
    eps = ir.FloatAttr(op.attributes["eps"]).value
    result = info(op.result)
    compute = WIDENED.get(result.dtype, result.dtype)
    x, weight, bias = (_as(v, compute) for v in (op.x, op.weight, op.bias))
    wide = vtensor_type(result.shape, compute)
    if ir.StringAttr(op.attributes["kind"]).value == "layer":
        operands = [x, torch_int_list(shape), _or_none(weight), _or_none(bias), torch_float(eps), torch_bool(False)]
        y = build("torch.aten.layer_norm", operands, wide)
    else:
        y = _rms_norm(x, weight, shape, eps, wide)
    return _as(y, result.dtype)


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


def _single_query(op) -> bool:
    """A decode step's attention: one query row against the cache, q, k and v with the same
    leading dims (the key length may be dynamic unless causal). IREE 3.13 folds the unit query dim away and compiles an attention op without
    an M dimension, whose CUDA code faulted on an H100 (CUDA_ERROR_ILLEGAL_ADDRESS in every
    compile_causal_lm decode, 2026-12-05, benchmarks/results/generate-h200-2026-12-05.md); the
    written-out form (``_single_query_attention``) is memory-bound like the op."""
    q, k, v = info(op.q), info(op.k), info(op.v)
    causal = ir.BoolAttr(op.attributes["is_causal"]).value
    return q.rank == 4 and q.shape[-2] == 1 and q.shape[:-2] == k.shape[:-2] == v.shape[:-2] and not (causal and k.shape[-2] < 0)


def attention_decomposed(op, rewriter, options):
    """cuvil.attention(q, k, v, mask) -> matmul(softmax(matmul(q, kᵀ) · scale + mask), v)"""
    q, k = info(op.q), info(op.k)
    causal = ir.BoolAttr(op.attributes["is_causal"]).value
    length, source = q.shape[-2], k.shape[-2]
    if causal and (length < 0 or source < 0):
        return None  # the causal mask is built with static sizes; keep the op for the sdpa lowering
    if _single_query(op):
        return _single_query_attention(op, causal)
    block = options.causal_block
    if causal and op.mask is None and block and length == source > block and all(d >= 0 for d in q.shape):
        return optimization_barrier(_causal_blocks(op, block))
    # IREE would fold a transpose of the output (HF's attn_output.transpose(1, 2)) into the
    # batched matmul, and llvm-cpu's code for that form is 2-5x slower than the matmul plus a
    # separate transpose (benchmarks/iree_cpu/README.md): the barrier keeps them apart
    return optimization_barrier(_written_out_attention(op, op.q, op.k, op.v, op.mask, causal, 0, op.result.type))


def _written_out_attention(op, q, k, v, mask, causal: bool, offset: int, result_type):
    """softmax(q · kᵀ · scale + mask) · v; ``causal``: query i (at position offset + i) keeps
    keys 0 .. offset + i."""
    tq, tk = info(q), info(k)
    length, source = tq.shape[-2], tk.shape[-2]
    scores_type = vtensor_type([*tq.shape[:-1], source], tq.dtype)
    kt = build("torch.aten.transpose.int", [k, torch_int(-2), torch_int(-1)], vtensor_type([*tk.shape[:-2], tk.shape[-1], source], tk.dtype))
    scores = _batched_matmul(q, kt, scores_type)
    scores = build("torch.aten.mul.Scalar", [scores, torch_float(ir.FloatAttr(op.attributes["scale"]).value)], scores_type)
    if mask is not None:
        scores = _apply_mask(scores, mask, scores_type)
    if causal:
        keep = _causal_keep_mask(length, source, offset)
        scores = build("torch.aten.where.ScalarOther", [keep, scores, torch_float(float("-inf"))], scores_type)
    return _batched_matmul(_softmax(scores), v, result_type)


def _causal_blocks(op, block: int):
    """Causal attention of L queries over L keys as ceil(L / block) attentions: the queries of
    block j (positions j*block ..) over the keys 0 .. its last position, each with its own
    causal mask, the results concatenated. Half the products of the [L, L] form (the keys
    after a block are never multiplied) and score tensors of [block, <= L]: a long prefill
    chunk on the CPU (GPT-2, a 2048-token chunk: 12 x 2048 x 2048 fp32 scores per layer in
    the [L, L] form)."""
    q, v = info(op.q), info(op.v)
    length = q.shape[-2]
    dim = torch_int(q.rank - 2)

    def rows(x, start, stop):
        t = info(x)
        return build("torch.aten.slice.Tensor", [x, dim, torch_int(start), torch_int(stop), torch_int(1)],
                     vtensor_type([*t.shape[:-2], stop - start, t.shape[-1]], t.dtype))

    parts = []
    for start in range(0, length, block):
        stop = min(start + block, length)
        out_type = vtensor_type([*q.shape[:-2], stop - start, v.shape[-1]], info(op.result).dtype)
        parts.append(_written_out_attention(op, rows(op.q, start, stop), rows(op.k, 0, stop), rows(op.v, 0, stop), None,
                                            True, start, out_type))
    listed = build("torch.prim.ListConstruct", parts, ir.Type.parse("!torch.list<vtensor>"))
    return build("torch.aten.cat", [listed, dim], op.result.type)


def _single_query_attention(op, causal: bool):
    """One query per (batch, head) (a decode step against a KV cache): the two products as
    multiply-and-sum reductions over the 4-D keys and values as they are stored, where the
    matmul form needs kᵀ and [B*H, S, D] views: of a cache's filled prefix (a slice) IREE
    materializes both as copies of the whole cache every step (GPT-2 at batch 8: a fifth of
    the step). f16/bf16: computed in f32 (WIDENED), the result converted back."""
    q, v, result = info(op.q), info(op.v), info(op.result)
    source = info(op.k).shape[-2]
    compute = WIDENED.get(q.dtype, q.dtype)
    b, h, d, e = q.shape[0], q.shape[1], q.shape[3], v.shape[3]
    products = build("torch.aten.mul.Tensor", [_as(op.q, compute), _as(op.k, compute)], vtensor_type([b, h, source, d], compute))
    scores = _sum(products, -1, False, vtensor_type([b, h, source], compute))
    scores_type = vtensor_type([b, h, 1, source], compute)
    scores = build("torch.aten.unsqueeze", [scores, torch_int(2)], scores_type)
    scores = build("torch.aten.mul.Scalar", [scores, torch_float(ir.FloatAttr(op.attributes["scale"]).value)], scores_type)
    if op.mask is not None:
        scores = _apply_mask(scores, op.mask if info(op.mask).dtype == "i1" else _as(op.mask, compute), scores_type)
    if causal:  # the single query is position 0 (top-left aligned, as torch's is_causal): it sees key 0
        scores = build("torch.aten.where.ScalarOther", [_causal_keep_mask(1, source), scores, torch_float(float("-inf"))], scores_type)
    probs = build("torch.aten.softmax.int", [scores, torch_int(-1), torch_none()], scores_type)
    probs = build("torch.aten.transpose.int", [probs, torch_int(-2), torch_int(-1)], vtensor_type([b, h, source, 1], compute))
    weighted = build("torch.aten.mul.Tensor", [probs, _as(op.v, compute)], vtensor_type([b, h, source, e], compute))
    return _as(_sum(weighted, -2, True, vtensor_type([b, h, 1, e], compute)), result.dtype)


def _sum(x, dim: int, keepdim: bool, result_type):
    return build("torch.aten.sum.dim_IntList", [x, torch_int_list([dim]), torch_bool(keepdim), torch_none()], result_type)


def _softmax(scores):
    """softmax over the last dim; f16/bf16 scores: computed in f32 (WIDENED), converted back"""
    t = info(scores)
    compute = WIDENED.get(t.dtype, t.dtype)
    probs = build("torch.aten.softmax.int", [_as(scores, compute), torch_int(-1), torch_none()], vtensor_type(t.shape, compute))
    return _as(probs, t.dtype)


def _batched_matmul(a, b, result_type):
    """a @ b as mm (2-D), bmm (3-D) or the batch dims collapsed + bmm + expanded (equal,
    static batch dims; else aten.matmul): IREE's CPU code for a 4-D aten.matmul was ~50x
    slower than for the bmm (1x4x128x64 attention, 2026-12-03). Fully static: views; a
    dynamic matrix dim (a prefill chunk against a cache prefix): flatten / unflatten of the
    batch dims, which need no size of the matrix dims (a view's single -1 could not infer two
    dynamic ones)."""
    ta, tb, tr = info(a), info(b), tensor_info(result_type)
    if ta.rank == 2:
        return build("torch.aten.mm", [a, b], result_type)
    if ta.rank == 3:
        return build("torch.aten.bmm", [a, b], result_type)
    batch = ta.shape[:-2]
    if tb.shape[:-2] != batch or any(d < 0 for d in batch):
        return build("torch.aten.matmul", [a, b], result_type)
    n = int(np.prod(batch))
    if any(d < 0 for d in (*ta.shape, *tb.shape)):
        last = torch_int(ta.rank - 3)
        a3 = build("torch.aten.flatten.using_ints", [a, torch_int(0), last], vtensor_type([n, *ta.shape[-2:]], ta.dtype))
        b3 = build("torch.aten.flatten.using_ints", [b, torch_int(0), last], vtensor_type([n, *tb.shape[-2:]], tb.dtype))
        y3 = build("torch.aten.bmm", [a3, b3], vtensor_type([n, *tr.shape[-2:]], tr.dtype))
        return build("torch.aten.unflatten.int", [y3, torch_int(0), torch_int_list(batch)], result_type)
    a3 = build("torch.aten.view", [a, torch_int_list([n, *ta.shape[-2:]])], vtensor_type([n, *ta.shape[-2:]], ta.dtype))
    b3 = build("torch.aten.view", [b, torch_int_list([n, *tb.shape[-2:]])], vtensor_type([n, *tb.shape[-2:]], tb.dtype))
    y3 = build("torch.aten.bmm", [a3, b3], vtensor_type([n, ta.shape[-2], tb.shape[-1]], ta.dtype))
    return build("torch.aten.view", [y3, torch_int_list([*batch, ta.shape[-2], tb.shape[-1]])], result_type)


def _causal_keep_mask(length: int, source: int, offset: int = 0):
    """A constant [L, S] boolean mask, true on and below the diagonal (top-left aligned, as
    torch's is_causal), shifted right by ``offset`` (queries at positions offset ..). A literal
    rather than ones+tril: tril's index arithmetic needs 64-bit integers, which some Vulkan
    targets lack."""
    keep = np.tril(np.ones((length, source), dtype=bool), k=offset)
    attr = ir.DenseElementsAttr.get(keep, type=ir.RankedTensorType.get([length, source], ir.IntegerType.get_signless(1)))
    return build("torch.vtensor.literal", [], vtensor_type([length, source], "i1"), {"value": attr})


def _apply_mask(scores, mask, scores_type):
    """Boolean masks keep where true; float masks are added."""
    if info(mask).dtype == "i1":
        return build("torch.aten.where.ScalarOther", [mask, scores, torch_float(float("-inf"))], scores_type)
    return build("torch.aten.add.Tensor", [scores, mask, torch_int(1)], scores_type)


# ---------------------------------------------------------------------------------------
# Static int8 (cuvil.qlinear / cuvil.qconv2d): quantize the input to si8, an integer matmul or
# convolution with int32 accumulation, then one float multiply by input_scale * weight_scale.

def _quantize_input(x, scale: float, zero_point: int):
    """si8 clamp(round(x / scale) + zero_point, -128, 127), computed in x's dtype (as PyTorch's
    quantize_per_tensor: multiply by 1 / scale)."""
    t = x.type
    scaled = build("torch.aten.mul.Scalar", [x, torch_float(1.0 / scale)], t)
    shifted = build("torch.aten.add.Scalar", [build("torch.aten.round", [scaled], t), torch_int(zero_point), torch_int(1)], t)
    clamped = build("torch.aten.clamp", [shifted, torch_int(-128), torch_int(127)], t)
    return convert(clamped, "si8")


def _rescale(acc, op, shape_of_scale):
    """float(acc) * (input_scale * weight_scale), in f32, then the result's dtype, plus bias."""
    scale = ir.FloatAttr(op.attributes["input_scale"]).value
    dtype = info(op.result).dtype
    channel = build("torch.aten.mul.Scalar", [op.weight_scale, torch_float(scale)], op.weight_scale.type)
    channel = build("torch.aten.view", [channel, torch_int_list(shape_of_scale)], vtensor_type(shape_of_scale, "f32"))
    y = build("torch.aten.mul.Tensor", [convert(acc, "f32") if info(acc).dtype != "f32" else acc, channel], vtensor_type(info(acc).shape, "f32"))
    y = y if dtype == "f32" else convert(y, dtype)
    if op.bias is None:
        return y
    bias = build("torch.aten.view", [op.bias, torch_int_list(shape_of_scale)], vtensor_type(shape_of_scale, dtype))
    return build("torch.aten.add.Tensor", [y, bias, torch_int(1)], y.type)


def qlinear(op, rewriter):
    """cuvil.qlinear(x, Wq, ws, b) -> act((_int_mm(quant(x), Wqᵀ) - zp·Σₖ Wq) · sx·ws + b)"""
    x, w = info(op.input), info(op.weight)
    n = w.shape[0]
    zero_point = ir.IntegerAttr(op.attributes["input_zero_point"]).value
    q = _quantize_input(op.input, ir.FloatAttr(op.attributes["input_scale"]).value, zero_point)
    q = _as_rows(q) if x.rank != 2 else q
    acc = build("torch.aten._int_mm", [q, transpose_2d(op.weight)], vtensor_type([_rows(x), n], "si32"))
    acc = convert(acc, "f32")
    if zero_point:  # sum_k (q - zp) w = sum_k q w - zp * sum_k w
        wsum = build("torch.aten.sum.dim_IntList", [convert(op.weight, "si32"), torch_int_list([1]), torch_bool(False), torch_none()], vtensor_type([n], "si32"))
        correction = build("torch.aten.mul.Scalar", [convert(wsum, "f32"), torch_int(zero_point)], vtensor_type([n], "f32"))
        acc = build("torch.aten.sub.Tensor", [acc, correction, torch_int(1)], acc.type)
    y = _rescale(acc, op, [1, n])
    full = vtensor_type([*x.shape[:-1], n], info(op.result).dtype)
    if x.rank != 2:
        y = _from_rows(y, x, full)
    activation = cuvil.activation_of(op)
    if activation not in cuvil.GATED_ACTIVATIONS:
        return _activation(y, activation)
    half, last = n // 2, x.rank - 1
    half_type = op.result.type
    gate = build("torch.aten.slice.Tensor", [y, torch_int(last), torch_int(0), torch_int(half), torch_int(1)], half_type)
    up = build("torch.aten.slice.Tensor", [y, torch_int(last), torch_int(half), torch_int(n), torch_int(1)], half_type)
    return build("torch.aten.mul.Tensor", [_activation(gate, cuvil.GATED_ACTIVATIONS[activation]), up], op.result.type)


def _rows(x) -> int:
    """Rows of x flattened to [rows, K] (-1 when a leading dim is dynamic)."""
    lead = x.shape[:-1]
    return -1 if any(d < 0 for d in lead) else int(np.prod(lead, dtype=np.int64))


def _as_rows(value):
    """``value`` [..., K] viewed as [rows, K]."""
    t = info(value)
    return build("torch.aten.view", [value, torch_int_list([-1, t.shape[-1]])], vtensor_type([_rows(t), t.shape[-1]], t.dtype))


def _from_rows(y, x, result_type):
    """``y`` [rows, N] viewed back to x's leading dims: [..., N] (``result_type``)."""
    n = tensor_info(result_type).shape[-1]
    return build("torch.aten.view", [y, torch_int_list([d if d >= 0 else -1 for d in x.shape[:-1]] + [n])], result_type)


def qconv2d(op, rewriter):
    """cuvil.qconv2d(x, Wq, ws, b) -> act(convolution_i32(quant(x) - zp, Wq) · sx·ws + b)"""
    zero_point = ir.IntegerAttr(op.attributes["input_zero_point"]).value
    q = convert(_quantize_input(op.input, ir.FloatAttr(op.attributes["input_scale"]).value, zero_point), "si32")
    if zero_point:  # subtract before the convolution: its zero padding then stands for a real 0
        q = build("torch.aten.sub.Scalar", [q, torch_int(zero_point), torch_int(1)], q.type)
    lists = [torch_int_list(list(ir.DenseI64ArrayAttr(op.attributes[n]))) for n in ("stride", "padding", "dilation")]
    groups = torch_int(ir.IntegerAttr(op.attributes["groups"]).value)
    y = info(op.result)
    operands = [q, convert(op.weight, "si32"), torch_none(), *lists, torch_bool(False), torch_int_list([0, 0]), groups]
    acc = build("torch.aten.convolution", operands, vtensor_type(y.shape, "si32"))
    return _activation(_rescale(acc, op, [1, info(op.weight).shape[0], 1, 1]), cuvil.activation_of(op))


patterns = PatternSet(NAME, description="cuvil ops -> torch ops for IREE's torch input", options=LowerCuvilToTorchOptions())
patterns.add("cuvil.linear", name="linear")(linear)
patterns.add("cuvil.conv2d", name="conv2d")(conv2d)
patterns.add("cuvil.attention", name="attention", when=lambda options: options.attention == "sdpa")(attention_sdpa)
patterns.add("cuvil.attention", name="attention", when=lambda options: options.attention == "decomposed")(attention_decomposed)
patterns.add("cuvil.norm", name="norm")(norm)
patterns.add("cuvil.qlinear", name="qlinear")(qlinear)
patterns.add("cuvil.qconv2d", name="qconv2d")(qconv2d)
PASS = patterns


# ---------------------------------------------------------------------------------------
# Examples for the differential checker: torch programs that reach this pass as the Cuvil op
# (checked against PyTorch, since the lowering is what makes the Cuvil op runnable).


@patterns.example("linear")
def _linear_with_epilogue(rng):
    import torch

    d_in, d_out = draw_dim(rng, 1, 48), draw_dim(rng, 1, 40)
    act = [torch.nn.Identity(), torch.nn.ReLU(), torch.nn.GELU(), torch.nn.SiLU()][int(rng.integers(0, 4))]
    model = torch.nn.Sequential(torch.nn.Linear(d_in, d_out, bias=bool(rng.integers(0, 2))), act).eval()
    return model, (torch.randn(draw_dim(rng, 1, 3), draw_dim(rng, 1, 7), d_in) * float(rng.choice([1e-3, 1.0, 30.0])),)


@patterns.example("conv2d")
def _conv2d(rng):
    import torch

    groups = int(rng.choice([1, 2]))
    c_in, c_out = groups * draw_dim(rng, 1, 4), groups * draw_dim(rng, 1, 4)
    k = int(rng.choice([1, 3]))
    conv = torch.nn.Conv2d(c_in, c_out, k, stride=int(rng.choice([1, 2])), padding=k // 2, groups=groups)
    model = torch.nn.Sequential(conv, torch.nn.ReLU()).eval()
    return model, (torch.randn(1, c_in, draw_dim(rng, 3, 9), draw_dim(rng, 3, 9)),)


@patterns.example("attention")
def _attention(rng):
    import torch

    heads, length, source, d = draw_dim(rng, 1, 4), draw_dim(rng, 1, 9), draw_dim(rng, 1, 9), int(rng.choice([8, 16]))
    causal = bool(rng.integers(0, 2)) and length == source
    q = torch.randn(2, heads, length, d)
    k, v = torch.randn(2, heads, source, d), torch.randn(2, heads, source, d)
    return (lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)), (q, k, v)


@patterns.example("norm")
def _norm(rng):
    import torch

    width = draw_dim(rng, 1, 64)
    norm = torch.nn.LayerNorm(width) if rng.integers(0, 2) else torch.nn.RMSNorm(width, eps=1e-6)
    with torch.no_grad():
        norm.weight.normal_()
    return norm.eval(), (torch.randn(draw_dim(rng, 1, 4), draw_dim(rng, 1, 6), width) * float(rng.choice([1e-2, 1.0, 50.0])),)


# The integer ops come from PT2E-quantized programs (raise-pt2e-quant); the reference is their
# fake quantization, which rounds the same values, so the float tolerance holds.


@patterns.example("qlinear")
def _pt2e_linear(rng):
    return pt2e_quantized_layer("linear", rng)


@patterns.example("qconv2d")
def _pt2e_conv2d(rng):
    return pt2e_quantized_layer("conv2d", rng)

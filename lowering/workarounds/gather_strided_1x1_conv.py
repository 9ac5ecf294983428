"""Pass ``gather-strided-1x1-conv``: a strided 1x1 convolution becomes a gather of the input pixels
it reads and a 1x1 convolution of stride 1 (the cuda targets' workaround for issue 16)::

    %y = "cuvil.conv2d"(%x, %w, %b) {stride = [2, 2], padding = [0, 0], groups = 1, activation = "relu"}
        : ([1,32,16,16], [64,32,1,1], [64]) -> [1,64,8,8]
        ->
    %xf = torch.aten.view %x, [1, 32, 256]
    %xp = torch.aten.index_select %xf, 2, [0, 2, ..., 14, 32, 34, ..., 238]    // [1,32,64]: pixel (2i, 2j) = 32i + 2j
    %xs = torch.aten.view %xp, [1, 32, 8, 8]
    %y = "cuvil.conv2d"(%xs, %w, %b) {stride = [1, 1], padding = [0, 0], groups = 1, activation = "relu"}

Exact, in every dtype: a 1x1 kernel without padding reads input pixel (s*i, s*j) for output
(i, j), and nothing else; dilation does not matter with one tap. Why: IREE 3.13's CUDA MMA
codegen computes some fp16 1x1 stride-2 convolutions wrong (ResNet-18's downsample convs
c32->64 at 16x16 and c64->128 at 8x8: rel. L2 0.65-0.68 on the H200, with or without implicit
GEMM; only without MMA intrinsics right; docs/known-issues.md). IREE compiles a strided 1x1
conv as a matmul whose input is a strided load (``dispatch.tensor.load ... strides = [1, 2, 2]``);
the gather is a dispatch of its own that writes the picked pixels contiguously, so the matmul's
load has stride 1 (checked in IREE's executable sources for cuda): the dispatch of a 1x1
stride-1 conv. On the GPU: benchmarks/gpu/conv_fp16.py. ``x[:, :, ::2, ::2]`` as
``aten.slice.Tensor`` steps would not do: IREE folds them into the matmul's load, and the
dispatch is the strided one again.

Not rewritten: padding (the padded border is read), kernels other than 1x1, groups other than 1
(the bug was measured on groups = 1 only), dynamic channels, height or width (the indices are
constants; a dynamic batch is fine).
Test: tests/lowering/workarounds/gather-strided-1x1-conv.mlir.
"""

from __future__ import annotations

import numpy as np

from cuvil_mlir.core.patterns import PatternSet, build, info, literal, torch_int, torch_int_list, vtensor_type
from cuvil_mlir.dialects import cuvil
from cuvil_mlir.lowering.common import conv_attributes

patterns = PatternSet("gather-strided-1x1-conv", description="strided 1x1 cuvil.conv2d -> gather of every s-th pixel + 1x1 conv2d of stride 1 (issue 16)")


def _every_nth_pixel(x, sh: int, sw: int):
    """``x[:, :, ::sh, ::sw]`` of a static-HxW ``x``, as one index_select of constant flat pixel
    indices over ``x`` viewed as [N, C, H*W] (one gather dispatch), viewed back."""
    n, c, h, w = info(x).shape
    rows, cols = np.arange(0, h, sh), np.arange(0, w, sw)
    indices = literal((rows[:, None] * w + cols[None, :]).reshape(-1).astype(np.int64), "si64")
    dtype = info(x).dtype
    flat = build("torch.aten.view", [x, torch_int_list([n if n >= 0 else -1, c, h * w])], vtensor_type([n, c, h * w], dtype))
    picked = build("torch.aten.index_select", [flat, torch_int(2), indices], vtensor_type([n, c, rows.size * cols.size], dtype))
    return build("torch.aten.view", [picked, torch_int_list([n if n >= 0 else -1, c, rows.size, cols.size])],
                 vtensor_type([n, c, rows.size, cols.size], dtype))


@patterns.add("cuvil.conv2d")
def gather_strided_1x1_conv(op, rewriter):
    """cuvil.conv2d(x, W[O,I,1,1], b) {stride = [sh, sw], padding = 0, groups = 1}
    -> cuvil.conv2d(view(index_select(view(x, [N, C, H*W]), 2, pixels), [N, C, H', W']), W, b) {stride = [1, 1]}"""
    attrs = conv_attributes(op)
    if attrs["stride"] == [1, 1] or attrs["padding"] != [0, 0] or attrs["groups"] != 1:
        return None
    w, x = info(op.weight), info(op.input)
    if w is None or x is None or list(w.shape[2:]) != [1, 1]:
        return None
    if min(x.shape[1:]) < 0:
        return None  # the pixel indices are constants
    x = _every_nth_pixel(op.input, *attrs["stride"])
    return cuvil.conv2d(op.result.type, x, op.weight, op.bias, stride=[1, 1], padding=[0, 0], dilation=[1, 1],
                        groups=1, activation=cuvil.activation_of(op))


def _conv(rng, *, kernel=1, stride=2, padding=0, groups=1, dtype=None, relu=True):
    """Conv2d (+ ReLU) on a random [1, C, H, W] input: ResNet's downsample shape by default."""
    import torch

    c_in = int(rng.integers(1, 9)) * groups
    c_out = int(rng.integers(1, 9)) * groups
    conv = torch.nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=padding, groups=groups)
    model = torch.nn.Sequential(conv, torch.nn.ReLU()) if relu else conv
    x = torch.randn(int(rng.integers(1, 3)), c_in, int(rng.integers(1, 12)), int(rng.integers(1, 12)))
    if dtype is not None:
        model, x = model.to(dtype), x.to(dtype)
    return model.eval(), (x,)


@patterns.example("gather_strided_1x1_conv")
def _downsample(rng):
    return _conv(rng)


@patterns.example("gather_strided_1x1_conv")
def _downsample_f16_without_relu(rng):
    import torch

    return _conv(rng, dtype=torch.float16, relu=False)


@patterns.example("gather_strided_1x1_conv")
def _uneven_strides(rng):
    """stride (3, 1): rows only, odd sizes included."""
    return _conv(rng, stride=(3, 1))


@patterns.example("gather_strided_1x1_conv", matches=False)
def _strided_3x3(rng):
    return _conv(rng, kernel=3, padding=1)


@patterns.example("gather_strided_1x1_conv", matches=False)
def _padded_1x1(rng):
    return _conv(rng, padding=1)


@patterns.example("gather_strided_1x1_conv", matches=False)
def _grouped_1x1(rng):
    return _conv(rng, groups=2)


@patterns.example("gather_strided_1x1_conv", matches=False)
def _stride_1(rng):
    return _conv(rng, stride=1)


PASS = patterns

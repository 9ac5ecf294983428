"""Pass ``slice-strided-1x1-conv``: a strided 1x1 convolution becomes a strided slice of its
input and a 1x1 convolution of stride 1 (the cuda targets' workaround for issue 16)::

    %y = "cuvil.conv2d"(%x, %w, %b) {stride = [2, 2], padding = [0, 0], groups = 1, activation = "relu"}
        : ([1,32,16,16], [64,32,1,1], [64]) -> [1,64,8,8]
        ->
    %xs = torch.aten.slice.Tensor %x, 2, 0, none, 2     // [1,32,8,16]
    %xs2 = torch.aten.slice.Tensor %xs, 3, 0, none, 2   // [1,32,8,8]
    %y = "cuvil.conv2d"(%xs2, %w, %b) {stride = [1, 1], padding = [0, 0], groups = 1, activation = "relu"}

Exact, in every dtype: a 1x1 kernel without padding reads input pixel (s*i, s*j) for output
(i, j), and nothing else; dilation does not matter with one tap. Why: IREE 3.13's CUDA MMA
codegen computes some fp16 1x1 stride-2 convolutions wrong (ResNet-18's downsample convs
c32->64 at 16x16 and c64->128 at 8x8: rel. L2 0.65-0.68 on the H200, with or without implicit
GEMM; only without MMA intrinsics right), while 1x1 stride-1 convolutions are right
(docs/known-issues.md). Not rewritten: padding (the padded border is read), kernels other than
1x1, groups other than 1 (the bug was measured on groups = 1 only).
Test: tests/lowering/workarounds/slice-strided-1x1-conv.mlir.
"""

from __future__ import annotations

from cuvil_mlir.core.patterns import PatternSet, build, info, torch_int, torch_none, vtensor_type
from cuvil_mlir.dialects import cuvil
from cuvil_mlir.lowering.common import conv_attributes

patterns = PatternSet("slice-strided-1x1-conv", description="strided 1x1 cuvil.conv2d -> strided slice + 1x1 conv2d of stride 1 (issue 16)")


def _strided_slice(x, dim: int, step: int):
    """``x[..., ::step, ...]`` along ``dim`` (end none: the whole dim, dynamic or not)."""
    shape = list(info(x).shape)
    shape[dim] = -1 if shape[dim] < 0 else -(-shape[dim] // step)
    operands = [x, torch_int(dim), torch_int(0), torch_none(), torch_int(step)]
    return build("torch.aten.slice.Tensor", operands, vtensor_type(shape, info(x).dtype))


@patterns.add("cuvil.conv2d")
def slice_strided_1x1_conv(op, rewriter):
    """cuvil.conv2d(x, W[O,I,1,1], b) {stride = [sh, sw], padding = 0, groups = 1}
    -> cuvil.conv2d(x[:, :, ::sh, ::sw], W, b) {stride = [1, 1]}"""
    attrs = conv_attributes(op)
    if attrs["stride"] == [1, 1] or attrs["padding"] != [0, 0] or attrs["groups"] != 1:
        return None
    w = info(op.weight)
    if w is None or info(op.input) is None or list(w.shape[2:]) != [1, 1]:
        return None
    x = op.input
    for dim, step in zip((2, 3), attrs["stride"]):
        x = x if step == 1 else _strided_slice(x, dim, step)
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


@patterns.example("slice_strided_1x1_conv")
def _downsample(rng):
    return _conv(rng)


@patterns.example("slice_strided_1x1_conv")
def _downsample_f16_without_relu(rng):
    import torch

    return _conv(rng, dtype=torch.float16, relu=False)


@patterns.example("slice_strided_1x1_conv")
def _uneven_strides(rng):
    """stride (3, 1): one slice, odd sizes included."""
    return _conv(rng, stride=(3, 1))


@patterns.example("slice_strided_1x1_conv", matches=False)
def _strided_3x3(rng):
    return _conv(rng, kernel=3, padding=1)


@patterns.example("slice_strided_1x1_conv", matches=False)
def _padded_1x1(rng):
    return _conv(rng, padding=1)


@patterns.example("slice_strided_1x1_conv", matches=False)
def _grouped_1x1(rng):
    return _conv(rng, groups=2)


@patterns.example("slice_strided_1x1_conv", matches=False)
def _stride_1(rng):
    return _conv(rng, stride=1)


PASS = patterns

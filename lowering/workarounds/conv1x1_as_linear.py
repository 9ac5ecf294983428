"""Pass ``conv1x1-as-linear``: a 16-bit 1x1 convolution with few input channels becomes a
linear over its (strided) pixels, channels last, so that the sm_90 kernel computes it (the cuda
targets with kernels: issue 16's workaround)::

    %y = "cuvil.conv2d"(%x, %w, %b) {stride = [2, 2], padding = [0, 0], groups = 1, activation = "relu"}
        : ([1,32,16,16], [64,32,1,1], [64]) -> [1,64,8,8]
        ->
    %xs = x[:, :, ::2, ::2]                                  // aten.slice.Tensor, H then W (stride 1: none)
    %p  = torch.aten.permute %xs, [0, 2, 3, 1]               // [1,8,8,32]: pixels x channels
    %y2 = "cuvil.linear"(%p, view(%w, [64, 32]), %b) {activation = "relu"}   // [1,8,8,64]
    %y  = torch.aten.permute %y2, [0, 3, 1, 2]               // [1,64,8,8]

Exact: a 1x1 kernel without padding reads input pixel (s*i, s*j) for output (i, j), all its
channels, and nothing else (dilation does not matter with one tap). Why: IREE 3.13's CUDA codegen
computes fp16 matmuls with a small reduction wrong through its MMA intrinsics. Measured on an
H100 (benchmarks/results/conv-fp16-h100-2026-12-06.md): 1x1 convs of 32 and 64 input channels
(ResNet-18 at width 32: c32->64 at 8x8 and 16x16, c64->128 at 4x4 and 8x8, stride 1 or 2) have
rel. L2 0.62-0.80 as IREE convs and as IREE matmuls alike; 128 input channels are right
(2e-4), as is every 3x3 and 7x7 conv (K = 9 C >= 288). The same convs as a linear through the
sm_90 Triton kernel (targets/cuda_kernels.py): 2e-4. So this pass runs only where that kernel
does (``lower-cuvil-to-kernels`` comes next and claims the linear); a cuda target without it
(sm_80/86/89, ``kernels=off``) has no workaround (docs/known-issues.md).

Rewritten: cuvil.conv2d with a 1x1 kernel, no padding, groups 1, f16 or bf16, static shapes,
input channels fewer than 128 (``MAX_CHANNELS``) and both channel counts multiples of 8 (the
kernel's contract: 16-byte rows; a linear it would not take goes to IREE's matmul, as wrong as
the conv). Anything else is left alone.
Test: tests/lowering/workarounds/conv1x1-as-linear.mlir.
"""

from __future__ import annotations

from cuvil_mlir.core.patterns import PatternSet, build, info, torch_int, torch_int_list, vtensor_type
from cuvil_mlir.dialects import cuvil
from cuvil_mlir.lowering.common import KERNEL_ALIGN_ELEMENTS, conv_attributes

NAME = "conv1x1-as-linear"
MAX_CHANNELS = 128  # input channels from which IREE's fp16 MMA codegen was measured right

patterns = PatternSet(NAME, description="16-bit 1x1 cuvil.conv2d of < 128 input channels -> strided slice + channels-last "
                                        "cuvil.linear for the sm_90 kernel (issue 16)")


def _every_nth(x, dim: int, step: int):
    """``x`` sliced ``::step`` along ``dim`` (static size)."""
    shape = list(info(x).shape)
    size = shape[dim]
    shape[dim] = -(-size // step)
    return build("torch.aten.slice.Tensor", [x, torch_int(dim), torch_int(0), torch_int(size), torch_int(step)],
                 vtensor_type(shape, info(x).dtype))


@patterns.add("cuvil.conv2d")
def conv1x1_as_linear(op, rewriter):
    """cuvil.conv2d(x, W[O,I,1,1], b) {stride = [sh, sw], padding = 0, groups = 1}
    -> permute(cuvil.linear(permute(x[:, :, ::sh, ::sw], [0, 2, 3, 1]), view(W, [O, I]), b), [0, 3, 1, 2])"""
    attrs = conv_attributes(op)
    if attrs["padding"] != [0, 0] or attrs["groups"] != 1:
        return None
    w, x, y = info(op.weight), info(op.input), info(op.result)
    if w is None or x is None or y is None or list(w.shape[2:]) != [1, 1] or x.rank != 4:
        return None
    if x.dtype not in ("f16", "bf16") or w.dtype != x.dtype or any(d < 0 for d in (*x.shape, *y.shape)):
        return None
    c_out, c_in = w.shape[0], w.shape[1]
    if c_in >= MAX_CHANNELS or c_in % KERNEL_ALIGN_ELEMENTS or c_out % KERNEL_ALIGN_ELEMENTS:
        return None
    pixels = op.input
    for dim, step in ((2, attrs["stride"][0]), (3, attrs["stride"][1])):
        if step != 1:
            pixels = _every_nth(pixels, dim, step)
    n, _, h, wd = info(pixels).shape
    last = build("torch.aten.permute", [pixels, torch_int_list([0, 2, 3, 1])], vtensor_type([n, h, wd, c_in], x.dtype))
    weight = build("torch.aten.view", [op.weight, torch_int_list([c_out, c_in])], vtensor_type([c_out, c_in], w.dtype))
    out = cuvil.linear(vtensor_type([n, h, wd, c_out], y.dtype), last, weight, op.bias, activation=cuvil.activation_of(op))
    return build("torch.aten.permute", [out, torch_int_list([0, 3, 1, 2])], op.result.type)


def _conv(rng, *, kernel=1, stride=2, padding=0, groups=1, dtype=None, relu=True, c_in=None):
    """Conv2d (+ ReLU) on a random [N, C, H, W] input: ResNet's downsample shape by default
    (channel counts multiples of 8, fewer than 128 in)."""
    import torch

    dtype = dtype or torch.float16
    c_in = c_in or int(rng.integers(1, 8)) * 8 * groups
    c_out = int(rng.integers(1, 9)) * 8 * groups
    conv = torch.nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=padding, groups=groups)
    model = torch.nn.Sequential(conv, torch.nn.ReLU()) if relu else conv
    x = torch.randn(int(rng.integers(1, 3)), c_in, int(rng.integers(1, 12)), int(rng.integers(1, 12)))
    return model.to(dtype).eval(), (x.to(dtype),)


@patterns.example("conv1x1_as_linear")
def _downsample(rng):
    return _conv(rng)


@patterns.example("conv1x1_as_linear")
def _stride_1_without_relu(rng):
    return _conv(rng, stride=1, relu=False)


@patterns.example("conv1x1_as_linear")
def _uneven_strides_bf16(rng):
    """stride (3, 1): rows only, odd sizes included."""
    import torch

    return _conv(rng, stride=(3, 1), dtype=torch.bfloat16)


@patterns.example("conv1x1_as_linear", matches=False)
def _strided_3x3(rng):
    return _conv(rng, kernel=3, padding=1)


@patterns.example("conv1x1_as_linear", matches=False)
def _padded_1x1(rng):
    return _conv(rng, padding=1)


@patterns.example("conv1x1_as_linear", matches=False)
def _grouped_1x1(rng):
    return _conv(rng, groups=2)


@patterns.example("conv1x1_as_linear", matches=False)
def _wide_input(rng):
    """128 input channels: IREE's codegen is right there."""
    return _conv(rng, c_in=128)


@patterns.example("conv1x1_as_linear", matches=False)
def _fp32(rng):
    import torch

    return _conv(rng, dtype=torch.float32)


PASS = patterns

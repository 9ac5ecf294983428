"""Pass ``fuse-conv-bn``: fold an inference-form batch norm (and any other per-channel
affine chain) into the constant weights and bias of the ``cuvil.conv2d`` before it.

torch.export + torch-mlir's decompositions deliver ``BatchNorm2d`` in eval() as a chain of
per-channel ops on the conv result, with the running statistics as constants::

    sub(conv, mean[C,1,1]) * unsqueeze(reciprocal(sqrt(var + eps))) * gamma[C,1,1] + beta[C,1,1]

(for f16 models the chain runs in f32 and ends with a cast back to f16). The pattern walks
such a chain back to the conv, evaluates each constant operand in numpy (literals seen
through unsqueeze/view/sqrt/reciprocal/... of literals), and rebuilds the conv with
``w' = w * s`` per output channel and ``b' = b * s + t``, where the chain is ``y = s * conv + t``.
Training-mode BN (batch statistics computed from the conv) and statistics that are not
constants leave no constant operand, so nothing fires; nor when the conv's result (or an op
of the chain) has another use. The pattern is rooted at every op a chain may end with (BN's
last op is the ``add`` of beta, the ``mul`` by 1/sqrt(var + eps) without affine, a cast back
for f16 models; hand-written per-channel scales end with a scalar op) and fires only at the
chain's end. The activation after the BN is fused
later by ``fuse-linear-epilogue`` (one place for all epilogues).
Test: tests/lowering/fusion/fuse-conv-bn.mlir.
"""

from __future__ import annotations

import numpy as np

from cuvil_mlir.core.tensor_types import FLOAT_WIDTH, numpy_dtype
from cuvil_mlir.dialects import cuvil
from cuvil_mlir.lowering.common import CASTS, conv_attributes
from cuvil_mlir.core.ir import ir
from cuvil_mlir.core.patterns import PatternSet, const_float, defining_op, has_one_use, info, literal, literal_array

patterns = PatternSet("fuse-conv-bn", description="conv2d + per-channel affine chain (inference batch norm) -> conv2d with folded weights")

_BINARY = ("torch.aten.add.Tensor", "torch.aten.sub.Tensor", "torch.aten.mul.Tensor", "torch.aten.div.Tensor")
_SCALAR = ("torch.aten.add.Scalar", "torch.aten.sub.Scalar", "torch.aten.mul.Scalar", "torch.aten.div.Scalar")
_CHAIN_OPS = _BINARY + _SCALAR + CASTS
_RESHAPES = ("torch.aten.unsqueeze", "torch.aten.view", "torch.aten.reshape", "torch.aten.squeeze.dim")
_UNARY = ("torch.aten.sqrt", "torch.aten.rsqrt", "torch.aten.reciprocal", "torch.aten.neg")
_FOLDED = _RESHAPES + _UNARY + CASTS + _SCALAR + _BINARY  # the ops constant_value folds


def _round_to(array, dtype: str):
    """``array`` rounded to the vtensor dtype (as torch would store it), back in float64."""
    return np.asarray(array).astype(numpy_dtype(dtype)).astype(np.float64) if dtype in FLOAT_WIDTH else None


def constant_value(value, depth: int = 0):
    """The value of a constant tensor expression (literals through unsqueeze/view/sqrt/
    reciprocal/rsqrt/neg/casts/arithmetic of constants) as float64 numpy, else None."""
    t = info(value)
    op = defining_op(value)
    if op is None or t is None or depth > 16 or t.dtype not in FLOAT_WIDTH:
        return None
    name = op.operation.name
    array = literal_array(value)  # a literal or an external parameter
    if array is not None:
        return np.asarray(array).astype(np.float64)
    if name == "torch.vtensor.literal" or len(op.operands) == 0:
        return None  # unreadable: a literal it cannot read, a parameter without data (stub weights)
    if name not in _FOLDED:
        return None  # decided before reading the operand: it may be a large weight (an embedding table)
    args = [constant_value(v, depth + 1) if info(v) is not None else None for v in op.operands[:1]]
    if args[0] is None:
        return None
    x = args[0]
    if name in _RESHAPES:
        out = x.reshape(t.shape) if min(t.shape, default=0) >= 0 else None
    elif name in _UNARY:
        with np.errstate(all="ignore"):
            out = {"torch.aten.sqrt": np.sqrt, "torch.aten.rsqrt": lambda a: 1 / np.sqrt(a),
                   "torch.aten.reciprocal": lambda a: 1 / a, "torch.aten.neg": np.negative}[name](x)
    elif name in CASTS:
        out = x
    elif name in _SCALAR or name in _BINARY:
        other = const_float(op.operands[1]) if name in _SCALAR else constant_value(op.operands[1], depth + 1)
        alpha = const_float(op.operands[2]) if name.startswith(("torch.aten.add", "torch.aten.sub")) else 1.0
        if other is None or alpha is None:
            return None
        kind = name.split(".")[2]
        out = {"add": lambda: x + alpha * other, "sub": lambda: x - alpha * other,
               "mul": lambda: x * other, "div": lambda: x / other}[kind]()
    if out is None or tuple(np.shape(out)) != t.shape or not np.all(np.isfinite(out)):
        return None
    return _round_to(out, t.dtype)


def _is_per_channel(shape, channels: int) -> bool:
    """Whether a tensor of ``shape`` broadcasts against [N, C, H, W] along C only."""
    if len(shape) > 4:
        return False
    shape = (1,) * (4 - len(shape)) + tuple(shape)
    return shape[0] == 1 and shape[2] == 1 and shape[3] == 1 and shape[1] in (1, channels)


def _per_channel(array, channels: int):
    """A constant that broadcasts against [N, C, H, W] along C only, as a [C] vector."""
    if not _is_per_channel(array.shape, channels):
        return None
    return np.broadcast_to(array.reshape(-1), (channels,)).astype(np.float64)


def _step(op, channels: int):
    """(chain input, scale [C], shift [C]) when ``op`` is ``y = scale * input + shift`` per
    channel with the other operand constant; else None."""
    name = op.operation.name
    if name not in _CHAIN_OPS:
        return None
    x = op.operands[0]
    if name in CASTS:
        return (x, 1.0, 0.0) if info(op.result) is not None and info(op.result).dtype in FLOAT_WIDTH else None
    if name in _SCALAR:
        s = const_float(op.operands[1])
        alpha = const_float(op.operands[2]) if name in ("torch.aten.add.Scalar", "torch.aten.sub.Scalar") else 1.0
        if s is None or alpha is None or (name == "torch.aten.div.Scalar" and s == 0):
            return None
        kind = name.split(".")[2]
        if kind == "add":
            return x, 1.0, alpha * s
        if kind == "sub":
            return x, 1.0, -alpha * s
        return (x, s, 0.0) if kind == "mul" else (x, 1.0 / s, 0.0)  # div by a nonzero scalar (checked above)
    a, b = op.operands[0], op.operands[1]
    alpha = const_float(op.operands[2]) if name in ("torch.aten.add.Tensor", "torch.aten.sub.Tensor") else 1.0
    if alpha is None:
        return None
    for x, c, x_first in ((a, b, True), (b, a, False)):
        if defining_op(x) is None or x == c or info(c) is None or not _is_per_channel(info(c).shape, channels):
            continue  # the shape first: reading a large constant (a weight) as float64 is not free
        cv = constant_value(c)
        if cv is None or constant_value(x) is not None:
            continue
        c = _per_channel(cv, channels)
        if c is None:
            return None
        kind = name.split(".")[2]
        if kind == "add":
            return (x, 1.0, alpha * c) if x_first else (x, alpha, c)
        if kind == "sub":
            return (x, 1.0, -alpha * c) if x_first else (x, -alpha, c)
        if kind == "mul":
            return (x, c, 0.0)
        if kind == "div" and x_first and np.all(c != 0):
            return (x, 1.0 / c, 0.0)
        return None
    return None


def _match(root):
    """(conv op, scale [C], shift [C]) for the chain ending at ``root``, else None."""
    y = info(root.result)
    if y is None or y.rank != 4:
        return None
    channels = y.shape[1]
    scale, shift, affine_steps, op = np.ones(channels), np.zeros(channels), 0, root
    while True:
        if info(op.result) is None or info(op.result).shape != y.shape:
            return None
        step = _step(op, channels)
        if step is None:
            return None
        x, s, t = step
        # y = scale * (s * x + t) + shift: walking from the chain's end toward the conv, each step
        # is substituted inside the affine map built so far
        scale, shift = scale * s, shift + scale * t
        affine_steps += op.operation.name not in CASTS
        if not has_one_use(x):
            return None
        producer = defining_op(x)
        if producer is not None and producer.operation.name == "cuvil.conv2d":
            break
        if producer is None or producer.operation.name not in _CHAIN_OPS:
            return None
        op = producer
    conv = producer
    if cuvil.activation_of(conv) != "none" or affine_steps == 0 or info(conv.result).dtype != y.dtype:
        return None
    if literal_array(conv.weight) is None or (conv.bias is not None and literal_array(conv.bias) is None):
        return None
    if info(conv.weight).shape[0] != channels:
        return None
    return conv, scale, shift


def _sole_user(value):
    users = [use.owner for use in value.uses]
    return users[0] if len(users) == 1 else None


@patterns.add("torch.aten.add.Tensor", name="conv_bn")
@patterns.add("torch.aten.sub.Tensor", name="conv_bn")
@patterns.add("torch.aten.mul.Tensor", name="conv_bn")
@patterns.add("torch.aten.div.Tensor", name="conv_bn")
@patterns.add("torch.aten.add.Scalar", name="conv_bn")
@patterns.add("torch.aten.sub.Scalar", name="conv_bn")
@patterns.add("torch.aten.mul.Scalar", name="conv_bn")
@patterns.add("torch.aten.div.Scalar", name="conv_bn")
@patterns.add("torch.aten.to.dtype", name="conv_bn")
@patterns.add("torch.prims.convert_element_type", name="conv_bn")
def conv_bn(op, rewriter):
    """(conv2d(x, w, b) - mean) * gamma/sqrt(var+eps) + beta -> conv2d(x, w*s, b*s+t)   (constants)"""
    matched = _match(op)
    if matched is None:
        return None
    user = _sole_user(op.result)
    if isinstance(user, (ir.Operation, ir.OpView)) and user.name in _CHAIN_OPS and _match(user.opview if isinstance(user, ir.Operation) else user) is not None:
        return None  # the chain goes on: fold it whole at its last op
    conv, scale, shift = matched
    dtype = info(conv.result).dtype
    w = np.asarray(literal_array(conv.weight)).astype(np.float64)
    b = np.zeros(len(scale)) if conv.bias is None else np.asarray(literal_array(conv.bias)).astype(np.float64)
    np_dtype = numpy_dtype(dtype)
    new_w = literal((w * scale.reshape(-1, 1, 1, 1)).astype(np_dtype), dtype)
    new_b = literal((b * scale + shift).astype(np_dtype), dtype)
    return cuvil.conv2d(op.result.type, conv.input, new_w, new_b, **conv_attributes(conv))


def _bn_model(rng, *, conv_bias=True, groups=1, dtype=None, training=False, affine=True):
    import torch

    c_in = int(rng.integers(1, 5)) * groups
    c_out = c_in if groups > 1 else int(rng.integers(1, 9))
    bn = torch.nn.BatchNorm2d(c_out, affine=affine)
    model = torch.nn.Sequential(torch.nn.Conv2d(c_in, c_out, 3, padding=1, groups=groups, bias=conv_bias), bn)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2)
        if affine:
            bn.weight.uniform_(0.5, 2), bn.bias.uniform_(-1, 1)
    model = model.train() if training else model.eval()
    x = torch.randn(1, c_in, int(rng.integers(3, 9)), int(rng.integers(3, 9)))
    if dtype is not None:
        model, x = model.to(dtype), x.to(dtype)
    return model, (x,)


@patterns.example("conv_bn")
def _conv_bn(rng):
    return _bn_model(rng)


@patterns.example("conv_bn")
def _conv_without_bias_bn(rng):
    return _bn_model(rng, conv_bias=False)


@patterns.example("conv_bn")
def _depthwise_conv_bn(rng):
    return _bn_model(rng, groups=int(rng.integers(2, 5)))


@patterns.example("conv_bn")
def _conv_bn_f16(rng):
    import torch

    return _bn_model(rng, dtype=torch.float16)


@patterns.example("conv_bn")
def _conv_bn_without_affine(rng):
    """BatchNorm2d(affine=False): the chain ends at the multiply by 1/sqrt(var + eps)."""
    return _bn_model(rng, affine=False)


@patterns.example("conv_bn", matches=False)
def _conv_bn_training(rng):
    return _bn_model(rng, training=True)


@patterns.example("conv_bn", matches=False)
def _conv_bn_conv_also_returned(rng):
    import torch

    model, args = _bn_model(rng)

    class Both(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = model[0], model[1]

        def forward(self, x):
            y = self.conv(x)
            return self.bn(y), y

    return Both().eval(), args


PASS = patterns

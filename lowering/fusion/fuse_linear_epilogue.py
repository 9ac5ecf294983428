"""Pass ``fuse-linear-epilogue``: the bias add and the activation after a ``cuvil.linear`` /
``cuvil.conv2d`` become the op's own ``bias`` and ``activation``.

raise-torch-to-cuvil maps one torch op to one Cuvil op (``aten.linear`` and ``aten.addmm``
carry their bias; ``aten.mm`` / ``aten.matmul`` do not); this pass owns what follows the op,
so the ablation can switch epilogue fusion off on its own. Matched, as torch.export and the
FX importer write them:

- a bias add ``add.Tensor(y, b, 1)`` (either operand order) with ``b`` a constant ``[N]`` of
  the linear's dtype;
- ``relu``, ``silu``, ``sigmoid``, ``gelu`` (``approximate`` none or tanh);
- ReLU6 / ``hardtanh(0, 6)``, which arrive as ``minimum(6, maximum(y, 0))`` (either operand
  order, 0-d constants), or as ``clamp(y, 0, 6)`` / ``hardtanh(y, 0, 6)``;
- ``y * sigmoid(y)`` (a hand-written SiLU);
- hand-written GELU: ``0.5 * y * (1 + erf(y / sqrt(2)))`` and the tanh form of HF's
  NewGELU ``0.5 * y * (1 + tanh(sqrt(2/pi) * (y + 0.044715 * y^3)))``, products in any order.

``y`` may be the op's result seen through one reshape (``aten.view``: the ``[B*T, K]`` linear
of a 3-D matmul and HF GPT-2's ``Conv1D``): elementwise ops commute with it, and a bias does
when the reshape keeps the last dim. Nothing fires when an intermediate has another use, the
bias is not a constant ``[N]`` tensor, a dtype changes on the way, alpha is not 1, or the op
already has an activation. Test: tests/lowering/fusion/fuse-linear-epilogue.mlir.
"""

from __future__ import annotations

import math

from cuvil_mlir.dialects import cuvil
from cuvil_mlir.lowering.common import draw_dim
from cuvil_mlir.core.patterns import (
    PatternSet, build, const_float, const_str, defining_op, has_one_use, info, is_constant_tensor, literal_array, num_uses,
)

patterns = PatternSet("fuse-linear-epilogue", description="bias add + activation after cuvil.linear/conv2d -> its bias/activation")

_FUSIBLE = ("cuvil.linear", "cuvil.conv2d")
_RESHAPES = ("torch.aten.view", "torch.aten.reshape", "torch.aten._unsafe_view")
_SCALE_OPS = ("torch.aten.mul.Scalar", "torch.aten.div.Scalar", "torch.aten.mul.Tensor")


def _producer(value, kinds=_FUSIBLE, *, through_cast: bool = False):
    """(op, reshape, cast) when ``value`` is the result of a linear/conv2d without activation,
    directly or through one reshape, and (``through_cast``) one narrowing ``to.dtype`` from f32
    to f16/bf16 before it: the widened form of a 16-bit addmm/mm that torch.export's CPU
    decompositions write (matmul in f32, then cast), whose activation is then computed on the
    f32 result before the cast. Each link is the only use of the one before; reshape and cast
    are None where absent. The caller checks the uses of ``value`` itself."""
    reshape = defining_op(value, _RESHAPES)
    source = reshape.operands[0] if reshape is not None else value
    cast = defining_op(source, "torch.aten.to.dtype") if through_cast else None
    if cast is not None:
        wide, narrow = info(cast.operands[0]), info(source)
        if wide is None or narrow is None or wide.dtype != "f32" or narrow.dtype not in ("f16", "bf16") \
                or (reshape is not None and not has_one_use(source)):
            return None
        source = cast.operands[0]
    op = defining_op(source, kinds)
    if op is None or cuvil.activation_of(op) != "none":
        return None
    if (reshape is not None or cast is not None) and not has_one_use(source):
        return None
    return op, reshape, cast


def _rebuild(op, reshape, cast=None, *, activation: str | None = None, bias=None):
    """The op again, with a bias or an activation, and the cast and reshape after it (if any)."""
    if bias is not None:
        new = cuvil.linear(op.result.type, op.input, op.weight, bias)
    else:
        new = cuvil.with_activation(op, activation)
    if cast is not None:
        new = build(cast.operation.name, [new, *cast.operands[1:]], cast.result.type)
    return new if reshape is None else build(reshape.operation.name, [new, *reshape.operands[1:]], reshape.result.type)


def _fuse(root, value, activation: str, uses: int = 1):
    """``root`` computes ``activation(value)``: fuse it when ``value`` comes from a fusible op and
    has exactly ``uses`` uses (all inside the matched epilogue) and the type does not change."""
    matched = _producer(value, through_cast=True)
    if matched is None or num_uses(value) != uses or root.result.type != value.type:
        return None
    return _rebuild(*matched, activation=activation)


@patterns.add("torch.aten.add.Tensor")
def bias_add(op, rewriter):
    """add(cuvil.linear(x, W), b) -> cuvil.linear(x, W, b)   (b a constant [N]; also through a view)"""
    lhs, rhs, alpha = op.operands
    if const_float(alpha) != 1.0:
        return None
    for y, bias in ((lhs, rhs), (rhs, lhs)):
        matched = _producer(y, "cuvil.linear")
        if matched is None or matched[0].bias is not None or not has_one_use(y):
            continue
        lin = matched[0]
        n, b, yt = info(lin.weight).shape[0], info(bias), info(y)
        if b is None or b.shape != (n,) or b.dtype != yt.dtype or yt.shape[-1] != n or not is_constant_tensor(bias):
            continue
        if op.result.type != y.type:
            continue  # broadcasting or a dtype promotion
        return _rebuild(*matched, bias=bias)
    return None


@patterns.add("torch.aten.relu")
def relu_epilogue(op, rewriter):
    """relu(cuvil.linear|conv2d(...)) -> cuvil.linear|conv2d(...) {activation = "relu"}"""
    return _fuse(op, op.operands[0], "relu")


@patterns.add("torch.aten.silu")
def silu_epilogue(op, rewriter):
    """silu(cuvil.linear|conv2d(...)) -> cuvil.linear|conv2d(...) {activation = "silu"}"""
    return _fuse(op, op.operands[0], "silu")


@patterns.add("torch.aten.sigmoid")
def sigmoid_epilogue(op, rewriter):
    """sigmoid(cuvil.linear|conv2d(...)) -> cuvil.linear|conv2d(...) {activation = "sigmoid"}"""
    return _fuse(op, op.operands[0], "sigmoid")


@patterns.add("torch.aten.gelu")
def gelu_epilogue(op, rewriter):
    """gelu(cuvil.linear|conv2d(...), approximate) -> ... {activation = "gelu" | "gelu_tanh"}"""
    activation = {"none": "gelu", "tanh": "gelu_tanh"}.get(const_str(op.operands[1]))
    return _fuse(op, op.operands[0], activation) if activation else None


def _constant_scalar(value) -> float | None:
    """The single value of a constant tensor with one element (a 0-d literal), else None."""
    array = literal_array(value)
    return float(array.reshape(-1)[0]) if array is not None and array.size == 1 else None


def _both_orders(op):
    """The first two operands of ``op`` as (a, b) and (b, a)."""
    a, b = op.operands[0], op.operands[1]
    return (a, b), (b, a)


@patterns.add("torch.aten.minimum")
def relu6_epilogue(op, rewriter):
    """minimum(maximum(cuvil.linear|conv2d(...), 0), 6) -> ... {activation = "relu6"}"""
    for inner, six in _both_orders(op):
        clamp_low = defining_op(inner, "torch.aten.maximum")
        if clamp_low is None or _constant_scalar(six) != 6.0 or not has_one_use(inner):
            continue
        if inner.type != op.result.type:
            continue
        for y, zero in _both_orders(clamp_low):
            if _constant_scalar(zero) == 0.0:
                return _fuse(op, y, "relu6")
    return None


@patterns.add("torch.aten.clamp", name="relu6_epilogue")
@patterns.add("torch.aten.hardtanh", name="relu6_epilogue")
def relu6_clamp_epilogue(op, rewriter):
    """clamp|hardtanh(cuvil.linear|conv2d(...), 0, 6) -> ... {activation = "relu6"}"""
    x, low, high = op.operands[:3]
    if const_float(low) != 0.0 or const_float(high) != 6.0:
        return None
    return _fuse(op, x, "relu6")


@patterns.add("torch.aten.mul.Tensor")
def swish_epilogue(op, rewriter):
    """mul(y, sigmoid(y)), y = cuvil.linear|conv2d(...) -> ... {activation = "silu"}"""
    for y, gate in _both_orders(op):
        sigmoid = defining_op(gate, "torch.aten.sigmoid")
        if sigmoid is None or sigmoid.operands[0] != y or not has_one_use(gate):
            continue
        return _fuse(op, y, "silu", uses=2)
    return None


# ---------------------------------------------------------------------------------------
# Hand-written GELU. A product is read as (coefficient, tensor factors): mul.Tensor of two
# tensors, mul.Scalar / div.Scalar by a constant, through intermediates of one use.

_SQRT_HALF = 1.0 / math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _close(a: float | None, b: float) -> bool:
    return a is not None and abs(a - b) <= 1e-4 * abs(b)


def _product(value, *, root: bool = False):
    """(coefficient, [tensor factors]) of ``value`` read as a product; intermediates (all but
    the root) must have one use. Leaves are values not defined by a product op."""
    op = defining_op(value, _SCALE_OPS)
    if op is None or (not root and not has_one_use(value)) or info(value) is None:
        return 1.0, [value]
    if op.operation.name == "torch.aten.mul.Tensor":
        for x, c in ((op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])):
            scalar = _one_element(c)  # ONNX's scalars: one-element constant tensors
            if scalar is not None and scalar != 0.0 and info(x) == info(value):
                inner, factors = _product(x)
                return inner * scalar, factors
        ca, fa = _product(op.operands[0])
        cb, fb = _product(op.operands[1])
        return ca * cb, fa + fb
    scalar = const_float(op.operands[1])
    if scalar is None or scalar == 0.0:
        return 1.0, [value]
    c, factors = _product(op.operands[0])
    return (c * scalar if op.operation.name == "torch.aten.mul.Scalar" else c / scalar), factors


def _one_element(value) -> float | None:
    """The value of a one-element constant tensor (a 0-d or [1] literal), else None."""
    array = literal_array(value) if info(value) is not None else None
    return float(array.reshape(-1)[0]) if array is not None and array.size == 1 and array.dtype.kind == "f" else None


def _one_plus(value):
    """x for ``add.Scalar(x, 1, 1)`` (1 + x written either way), or ``add.Tensor`` of x and a
    one-element constant 1 (ONNX's form), else None."""
    op = defining_op(value, ("torch.aten.add.Scalar", "torch.aten.add.Tensor"))
    if op is None or not has_one_use(value) or const_float(op.operands[2]) != 1.0:
        return None
    if op.operation.name == "torch.aten.add.Scalar":
        return op.operands[0] if _close(const_float(op.operands[1]), 1.0) else None
    for x, one in ((op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])):
        if _close(_one_element(one), 1.0) and info(x) == info(value):
            return x
    return None


def _scaled(value, coefficient: float):
    """y for a product ``coefficient * y`` (one tensor factor), else None."""
    c, factors = _product(value)
    return factors[0] if len(factors) == 1 and _close(c, coefficient) and factors[0] != value else None


def _erf_gelu_input(value):
    """y for ``erf(y / sqrt(2))`` (or ``erf(y * 0.7071...)``), else None."""
    erf = defining_op(value, "torch.aten.erf")
    if erf is None or not has_one_use(value):
        return None
    return _scaled(erf.operands[0], _SQRT_HALF)


def _tanh_gelu_input(value):
    """y for ``tanh(sqrt(2/pi) * (y + 0.044715 * y^3))``, else None."""
    tanh = defining_op(value, "torch.aten.tanh")
    if tanh is None or not has_one_use(value):
        return None
    inner = _scaled(tanh.operands[0], _SQRT_2_OVER_PI)
    add = defining_op(inner, "torch.aten.add.Tensor") if inner is not None else None
    if add is None or not has_one_use(inner) or const_float(add.operands[2]) != 1.0:
        return None
    for y, cubic in _both_orders(add):
        cube = _scaled(cubic, 0.044715)
        power = defining_op(cube, "torch.aten.pow.Tensor_Scalar") if cube is not None else None
        if power is not None and has_one_use(cube) and const_float(power.operands[1]) == 3.0 and power.operands[0] == y:
            return y
    return None


@patterns.add("torch.aten.mul.Tensor", name="gelu_formula_epilogue")
@patterns.add("torch.aten.mul.Scalar", name="gelu_formula_epilogue")
@patterns.add("torch.aten.div.Scalar", name="gelu_formula_epilogue")
def gelu_formula_epilogue(op, rewriter):
    """0.5 * y * (1 + erf(y / sqrt2)) | NewGELU's tanh form, y = cuvil.linear|conv2d -> {activation = "gelu" | "gelu_tanh"}"""
    coefficient, factors = _product(op.result, root=True)
    if not _close(coefficient, 0.5) or len(factors) != 2:
        return None
    for y, bracket in (factors, factors[::-1]):
        inside = _one_plus(bracket)
        if inside is None:
            continue
        erf_of, tanh_of = _erf_gelu_input(inside), _tanh_gelu_input(inside)
        if erf_of is not None and erf_of == y:
            return _fuse(op, y, "gelu", uses=2)
        if tanh_of is not None and tanh_of == y:
            return _fuse(op, y, "gelu_tanh", uses=3)
    return None


# ---------------------------------------------------------------------------------------
# Examples for the differential checker: programs that reach this pass with the epilogue as
# separate ops after the raised linear/conv2d.


def _params(rng, bias_shape=None):
    """A module holding a weight ``w`` [K, N] and a bias ``b`` [N] (constants after export)."""
    import torch

    k, n = draw_dim(rng, 1, 24), draw_dim(rng, 1, 20)
    module = torch.nn.Module()
    module.w = torch.nn.Parameter(torch.randn(k, n) / math.sqrt(k))
    module.b = torch.nn.Parameter(torch.randn(*(bias_shape(n) if bias_shape else (n,))))
    return module, k


def _program(rng, body, *, rank: int = 2, bias_shape=None):
    """``body(module, x)`` over a [rows, K] (or [B, T, K]) input, as an nn.Module."""
    import torch

    params, k = _params(rng, bias_shape)

    class Program(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.params = params

        def forward(self, x):
            return body(self.params, x)

    shape = (draw_dim(rng, 1, 5), k) if rank == 2 else (draw_dim(rng, 1, 3), draw_dim(rng, 1, 5), k)
    return Program().eval(), (torch.randn(*shape),)


@patterns.example("bias_add")
def _mm_plus_bias(rng):
    return _program(rng, lambda p, x: x @ p.w + p.b)


@patterns.example("bias_add")
def _bias_plus_matmul_3d(rng):
    return _program(rng, lambda p, x: p.b + x @ p.w, rank=3)


@patterns.example("bias_add", matches=False)
def _bias_add_with_alpha(rng):
    import torch

    return _program(rng, lambda p, x: torch.add(x @ p.w, p.b, alpha=2.0))


@patterns.example("bias_add", matches=False)
def _bias_of_wrong_shape(rng):
    return _program(rng, lambda p, x: x @ p.w + p.b, bias_shape=lambda n: (1, n))


@patterns.example("bias_add", matches=False)
def _bias_not_constant(rng):
    import torch

    def body(p, x):
        return x @ p.w + torch.tanh(p.b * x.sum())

    return _program(rng, body)


@patterns.example("bias_add", matches=False)
def _bias_add_product_also_returned(rng):
    def body(p, x):
        y = x @ p.w
        return y + p.b, y

    return _program(rng, body)


def _linear_then(rng, act, *, bias=True, rank: int = 3):
    import torch

    d_in, d_out = draw_dim(rng, 1, 32), draw_dim(rng, 1, 24)
    model = torch.nn.Sequential(torch.nn.Linear(d_in, d_out, bias=bias), act).eval()
    shape = (draw_dim(rng, 1, 4), d_in) if rank == 2 else (draw_dim(rng, 1, 3), draw_dim(rng, 1, 5), d_in)
    return model, (torch.randn(*shape) * float(rng.choice([0.3, 1.0, 3.0])),)


def _conv_then(rng, act):
    import torch

    groups = int(rng.choice([1, 2]))
    c_in, c_out = groups * draw_dim(rng, 1, 3), groups * draw_dim(rng, 1, 4)
    model = torch.nn.Sequential(torch.nn.Conv2d(c_in, c_out, 3, padding=1, groups=groups), act).eval()
    return model, (torch.randn(1, c_in, draw_dim(rng, 3, 8), draw_dim(rng, 3, 8)) * 3.0,)


@patterns.example("relu_epilogue")
def _linear_relu(rng):
    import torch

    return _linear_then(rng, torch.nn.ReLU(), bias=bool(rng.integers(0, 2)))


@patterns.example("relu_epilogue")
def _conv_relu(rng):
    import torch

    return _conv_then(rng, torch.nn.ReLU())


@patterns.example("relu_epilogue", matches=False)
def _relu_after_a_dtype_change(rng):
    import torch

    lin = torch.nn.Linear(draw_dim(rng, 1, 16), draw_dim(rng, 1, 16))
    return (lambda x: torch.relu(lin(x).double())), (torch.randn(draw_dim(rng, 1, 4), lin.in_features),)


@patterns.example("relu_epilogue", matches=False)
def _relu_linear_also_returned(rng):
    import torch

    lin = torch.nn.Linear(draw_dim(rng, 1, 16), draw_dim(rng, 1, 16))

    def both(x):
        y = lin(x)
        return torch.relu(y), y

    return both, (torch.randn(draw_dim(rng, 1, 4), lin.in_features),)


@patterns.example("silu_epilogue")
def _linear_silu(rng):
    import torch

    return _linear_then(rng, torch.nn.SiLU())


@patterns.example("silu_epilogue")
def _conv_silu(rng):
    import torch

    return _conv_then(rng, torch.nn.SiLU())


@patterns.example("sigmoid_epilogue")
def _linear_sigmoid(rng):
    import torch

    return _linear_then(rng, torch.nn.Sigmoid(), rank=2)


@patterns.example("gelu_epilogue")
def _linear_gelu(rng):
    import torch

    return _linear_then(rng, torch.nn.GELU(approximate=str(rng.choice(["none", "tanh"]))))


@patterns.example("gelu_epilogue")
def _conv_gelu(rng):
    import torch

    return _conv_then(rng, torch.nn.GELU())


@patterns.example("gelu_epilogue", matches=False)
def _gelu_after_a_second_activation(rng):
    import torch

    return _linear_then(rng, torch.nn.Sequential(torch.nn.ReLU(), torch.nn.GELU()))


@patterns.example("relu6_epilogue")
def _linear_relu6(rng):
    import torch

    act = torch.nn.ReLU6() if rng.integers(0, 2) else torch.nn.Hardtanh(0.0, 6.0)
    return _linear_then(rng, act)


@patterns.example("relu6_epilogue")
def _conv_relu6(rng):
    import torch

    return _conv_then(rng, torch.nn.ReLU6())


@patterns.example("relu6_epilogue")
def _linear_clamp_0_6(rng):
    import torch

    return _linear_then(rng, _Lambda(lambda y: torch.clamp(y, 0.0, 6.0)))


@patterns.example("relu6_epilogue", matches=False)
def _linear_hardtanh_not_0_6(rng):
    import torch

    return _linear_then(rng, torch.nn.Hardtanh(0.0, 5.0))


class _Lambda:
    """An nn.Module running ``fn`` (built lazily so the pass imports without torch)."""

    def __new__(cls, fn):
        import torch

        class Fn(torch.nn.Module):
            def forward(self, x):
                return fn(x)

        return Fn()


@patterns.example("swish_epilogue")
def _linear_times_sigmoid(rng):
    import torch

    if rng.integers(0, 2):
        return _linear_then(rng, _Lambda(lambda y: y * torch.sigmoid(y)))
    return _linear_then(rng, _Lambda(lambda y: torch.sigmoid(y) * y))


@patterns.example("swish_epilogue", matches=False)
def _times_sigmoid_of_another_value(rng):
    import torch

    lin = torch.nn.Linear(draw_dim(rng, 1, 16), draw_dim(rng, 1, 16))
    return (lambda x: lin(x) * torch.sigmoid(lin(x) * 2.0)), (torch.randn(draw_dim(rng, 1, 4), lin.in_features),)


def _erf_gelu(y):
    import torch

    return 0.5 * y * (1.0 + torch.erf(y / math.sqrt(2.0)))


def _new_gelu(y):
    """HF transformers' NewGELUActivation, as GPT-2 writes it."""
    import torch

    return 0.5 * y * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * torch.pow(y, 3.0))))


@patterns.example("gelu_formula_epilogue")
def _linear_hand_written_erf_gelu(rng):
    import torch

    forms = [_erf_gelu, lambda y: y * (1.0 + torch.erf(y * _SQRT_HALF)) * 0.5]
    return _linear_then(rng, _Lambda(forms[int(rng.integers(0, len(forms)))]))


# No declared tolerance: the fused gelu_tanh epilogue is lowered to the same written-out
# form (lower-cuvil-to-torch), so the checker holds it to the unfused program's accuracy
# (IREE's aten.gelu(approximate="tanh") was off by ~5e-5 absolute: issue 13).
@patterns.example("gelu_formula_epilogue")
def _linear_new_gelu(rng):
    return _linear_then(rng, _Lambda(_new_gelu))


@patterns.example("gelu_formula_epilogue")
def _gpt2_conv1d_new_gelu(rng):
    """GPT-2's MLP: Conv1D (addmm of the flattened input, then a view) and NewGELU."""
    import torch

    def body(p, x):
        y = torch.addmm(p.b, x.view(-1, x.size(-1)), p.w).view(*x.shape[:-1], p.w.shape[1])
        return _new_gelu(y)

    return _program(rng, body, rank=3)


@patterns.example("gelu_formula_epilogue")
def _onnx_matmul_new_gelu(rng):
    """GPT-2's MLP as torch.onnx exports it: MatMul + Add, then NewGELU with its constants as
    0-d tensors (Mul / Pow / Add / Tanh nodes)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    k, n, rows = draw_dim(rng, 1, 24), draw_dim(rng, 1, 20), draw_dim(rng, 1, 4)
    consts = {"w": (rng.standard_normal((k, n)) / math.sqrt(k)).astype(np.float32), "b": rng.standard_normal(n).astype(np.float32),
              "half": np.array(0.5, np.float32), "three": np.array(3.0, np.float32), "c": np.array(0.044715, np.float32),
              "s": np.array(math.sqrt(2 / math.pi), np.float32), "one": np.array(1.0, np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["y"]),
             helper.make_node("Mul", ["y", "half"], ["hy"]), helper.make_node("Pow", ["y", "three"], ["y3"]),
             helper.make_node("Mul", ["y3", "c"], ["cy3"]), helper.make_node("Add", ["y", "cy3"], ["inner"]),
             helper.make_node("Mul", ["inner", "s"], ["arg"]), helper.make_node("Tanh", ["arg"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["bracket"]), helper.make_node("Mul", ["hy", "bracket"], ["out"])]
    graph = helper.make_graph(nodes, "main", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows, k])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, rows, n])],
                              [numpy_helper.from_array(a, name) for name, a in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, (rng.standard_normal((1, rows, k)).astype(np.float32),)


@patterns.example("gelu_formula_epilogue", matches=False)
def _gelu_formula_with_wrong_constant(rng):
    import torch

    return _linear_then(rng, _Lambda(lambda y: 0.5 * y * (1.0 + torch.erf(y / 1.2))))


@patterns.example("gelu_formula_epilogue", matches=False)
def _gelu_formula_intermediate_reused(rng):
    import torch

    def body(y):
        e = torch.erf(y / math.sqrt(2.0))
        return 0.5 * y * (1.0 + e), e

    return _linear_then(rng, _Lambda(body))


PASS = patterns

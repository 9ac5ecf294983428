"""Pass ``fuse-gated-ffn``: a gated feed-forward unit becomes one gated ``cuvil.linear``.

SwiGLU ``silu(x W_gᵀ) * (x W_uᵀ)`` (Llama, Mistral, Qwen), GeGLU ``gelu(x W_gᵀ) * (x W_uᵀ)``
(exact or tanh) and ReGLU, in either operand order, with or without biases, become
``cuvil.linear(x, [W_g; W_u], [b_g; b_u]) {activation = "swiglu" | "geglu" | "geglu_tanh" |
"reglu"}``: one matmul with 2F out features whose result is ``act(y[..., :F]) * y[..., F:]``
(lower-cuvil-to-torch emits one ``aten.linear``, two slices, the activation and the mul).
The gate is either a linear with the activation already fused (what raise-torch-to-cuvil and
fuse-linear-epilogue leave) or the activation op applied to a plain linear. A linear that
already packs both projections (Phi-3's ``gate_up_proj`` and ``chunk(2, -1)``) becomes the gated
form too, its halves swapped when the gate is the second one.
Test: tests/lowering/fusion/fuse-gated-ffn.mlir.
"""

from __future__ import annotations

from cuvil_mlir.dialects import cuvil
from cuvil_mlir.core import params
from cuvil_mlir.lowering.common import concat_biases, concat_rows, constant_array, constant_recipe
from cuvil_mlir.core.patterns import (
    PatternSet, const_int, const_str, defining_op, has_one_use, info, is_constant_tensor, literal, num_uses,
)

patterns = PatternSet("fuse-gated-ffn", description="act(x·W_gᵀ) * (x·W_uᵀ) -> cuvil.linear {activation = swiglu|geglu|...}")

# gate activation -> gated activation of the fused linear (swiglu for silu, ...)
_GATED_BY_GATE = {gate: gated for gated, gate in cuvil.GATED_ACTIVATIONS.items()}


@patterns.add("torch.aten.mul.Tensor")
def gated_ffn(op, rewriter):
    """mul(act(cuvil.linear(x, W_g, b_g)), cuvil.linear(x, W_u, b_u)) -> cuvil.linear(x, [W_g; W_u], [b_g; b_u]) {activation = "swiglu"|"geglu"|...}"""
    lhs, rhs = op.operands
    for gate_value, up_value in ((lhs, rhs), (rhs, lhs)):
        gate = _gate(gate_value)
        up = defining_op(up_value, "cuvil.linear")
        if gate is None or up is None or not _pairs(op, gate[0], up, up_value):
            continue
        gate_lin, activation = gate
        rows = [info(gate_lin.weight).shape[0]] * 2
        weight = concat_rows([gate_lin.weight, up.weight])
        bias = concat_biases([gate_lin.bias, up.bias], rows)
        return cuvil.linear(op.result.type, gate_lin.input, weight, bias, activation=_GATED_BY_GATE[activation])
    return None


def _gate(value):
    """(linear, activation) when ``value`` is act(x·Wᵀ + b) used only here: a linear with a
    fused gate activation, or aten.silu/gelu/relu of a plain linear."""
    if not has_one_use(value):
        return None
    lin = defining_op(value, "cuvil.linear")
    if lin is not None:
        activation = cuvil.activation_of(lin)
        return (lin, activation) if activation in _GATED_BY_GATE else None
    act = defining_op(value, ("torch.aten.silu", "torch.aten.relu", "torch.aten.gelu"))
    if act is None or act.result.type != act.operands[0].type:
        return None
    lin = defining_op(act.operands[0], "cuvil.linear")
    if lin is None or cuvil.activation_of(lin) != "none" or not has_one_use(act.operands[0]):
        return None
    if act.operation.name == "torch.aten.gelu":
        activation = {"none": "gelu", "tanh": "gelu_tanh"}.get(const_str(act.operands[1]))
        return (lin, activation) if activation else None
    return lin, act.operation.name.removeprefix("torch.aten.")


def _pairs(op, gate, up, up_value) -> bool:
    """``gate`` and ``up`` project the same input with constant weights of one shape and dtype,
    in ``op``'s block, and ``op`` multiplies them without broadcasting."""
    if cuvil.activation_of(up) != "none" or not has_one_use(up_value) or gate.input != up.input:
        return False
    if gate.operation.block != op.operation.block or up.operation.block != op.operation.block:
        return False
    wg, wu = info(gate.weight), info(up.weight)
    if wg is None or wu is None or wg.rank != 2 or wg != wu or min(wg.shape) < 0:
        return False
    if not (is_constant_tensor(gate.weight) and is_constant_tensor(up.weight)):
        return False
    for bias in (gate.bias, up.bias):
        if bias is not None and (info(bias) is None or info(bias).dtype != wg.dtype or not is_constant_tensor(bias)):
            return False
    return gate.result.type == up.result.type == op.result.type


@patterns.add("torch.aten.mul.Tensor")
def packed_gated_ffn(op, rewriter):
    """mul(act(y[..., :F]), y[..., F:]) with y = cuvil.linear(x, W, b), W [2F, K] -> cuvil.linear(x, W, b) {activation = "swiglu"|...}"""
    lhs, rhs = op.operands
    for gate_value, up_value in ((lhs, rhs), (rhs, lhs)):
        gate = _gate_of_slice(gate_value)
        up = defining_op(up_value, "torch.aten.slice.Tensor")
        if gate is None or up is None or not has_one_use(up_value):
            continue
        (gate_slice, activation), packed = gate, gate[0].operands[0]
        lin = defining_op(packed, "cuvil.linear")
        if lin is None or up.operands[0] != packed or not _packable(op, lin, gate_value, up_value):
            continue
        features = info(lin.weight).shape[0] // 2
        halves = (_slice_range(gate_slice, lin), _slice_range(up, lin))
        if halves == ((0, features), (features, 2 * features)):  # the gate is the first half (Phi-3)
            return cuvil.linear(op.result.type, lin.input, lin.weight, lin.bias, activation=_GATED_BY_GATE[activation])
        if halves == ((features, 2 * features), (0, features)):  # the gate is the second half: swap them
            swapped = [_swap_halves(v) for v in (lin.weight, lin.bias) if v is not None]
            if any(v is None for v in swapped):
                continue
            bias = swapped[1] if lin.bias is not None else None
            return cuvil.linear(op.result.type, lin.input, swapped[0], bias, activation=_GATED_BY_GATE[activation])
    return None


def _gate_of_slice(value):
    """(slice, activation) when ``value`` is aten.silu/gelu/relu of an aten.slice.Tensor, each used once."""
    act = defining_op(value, ("torch.aten.silu", "torch.aten.relu", "torch.aten.gelu"))
    if act is None or not has_one_use(value) or act.result.type != act.operands[0].type:
        return None
    part = defining_op(act.operands[0], "torch.aten.slice.Tensor")
    if part is None or not has_one_use(act.operands[0]):
        return None
    if act.operation.name == "torch.aten.gelu":
        activation = {"none": "gelu", "tanh": "gelu_tanh"}.get(const_str(act.operands[1]))
        return (part, activation) if activation else None
    return part, act.operation.name.removeprefix("torch.aten.")


def _packable(op, lin, gate_value, up_value) -> bool:
    """A plain linear with a static, even number of out features, read only by the two slices,
    in ``op``'s block; the halves and the product have one type."""
    w = info(lin.weight)
    if cuvil.activation_of(lin) != "none" or num_uses(lin.result) != 2 or w is None or w.shape[0] < 0 or w.shape[0] % 2:
        return False
    if lin.operation.block != op.operation.block:
        return False
    return gate_value.type == up_value.type == op.result.type


def _slice_range(part, lin):
    """(start, end) of a unit-step slice of ``lin``'s result along its last dim, else None."""
    _, dim, start, end, step = part.operands
    rank, rows = info(lin.result).rank, info(lin.weight).shape[0]
    dim_v, start_v, end_v = const_int(dim), const_int(start), const_int(end)
    if dim_v is None or dim_v % rank != rank - 1 or const_int(step) != 1 or start_v is None or end_v is None:
        return None
    start_v, end_v = (v + rows if v < 0 else v for v in (start_v, end_v))
    return max(0, min(start_v, rows)), max(0, min(end_v, rows))


def _swap_halves(value):
    """A literal with the two halves of ``value`` (along dim 0) swapped, or None if it cannot be read."""
    array = constant_array(value)
    if array is None:
        return None
    import numpy as np

    half, n = array.shape[0] // 2, array.shape[0]
    source = constant_recipe(value)
    recipe = params.concat([params.rows(source, half, n), params.rows(source, 0, half)])
    return literal(np.concatenate([array[half:], array[:half]], axis=0), dtype=info(value).dtype, recipe=recipe)



# Examples for the differential checker (cuvil_mlir.eval.pattern_check).


def _gated_mlp(rng, activation, *, gate_first=True, bias=False, same_input=True, gate_escapes=False):
    import torch

    d, f = int(rng.integers(1, 17)), int(rng.integers(1, 17))
    gate_act = {"silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu, "relu": torch.relu,
                "gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh")}[activation]

    class GatedMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate, self.up = torch.nn.Linear(d, f, bias=bias), torch.nn.Linear(d, f, bias=bias)

        def forward(self, x, z):
            g, u = gate_act(self.gate(x)), self.up(x if same_input else z)
            y = g * u if gate_first else u * g
            return (y, g) if gate_escapes else y

    x = torch.randn(int(rng.integers(1, 4)), int(rng.integers(1, 6)), d)
    return GatedMLP().eval(), (x, torch.randn_like(x))


@patterns.example("gated_ffn")
def _swiglu(rng):
    return _gated_mlp(rng, "silu", gate_first=bool(rng.integers(2)), bias=bool(rng.integers(2)))


@patterns.example("gated_ffn")
def _geglu(rng):
    return _gated_mlp(rng, str(rng.choice(["gelu", "gelu_tanh", "relu"])), gate_first=bool(rng.integers(2)), bias=True)


@patterns.example("gated_ffn", matches=False)
def _gate_and_up_read_different_inputs(rng):
    return _gated_mlp(rng, "silu", same_input=False)


@patterns.example("gated_ffn", matches=False)
def _gate_used_twice(rng):
    return _gated_mlp(rng, "silu", gate_escapes=True)



def _packed_mlp(rng, *, gate_first=True, packed_escapes=False):
    """Phi-3's MLP: one gate_up projection, chunked in two."""
    import torch

    d, f = int(rng.integers(1, 17)), int(rng.integers(1, 17))
    activation = [torch.nn.functional.silu, torch.nn.functional.gelu][int(rng.integers(2))]

    class PackedMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_up = torch.nn.Linear(d, 2 * f, bias=bool(rng.integers(2)))

        def forward(self, x):
            y = self.gate_up(x)
            g, u = y.chunk(2, dim=-1) if gate_first else reversed(y.chunk(2, dim=-1))
            out = u * activation(g)
            return (out, y) if packed_escapes else out

    return PackedMLP().eval(), (torch.randn(int(rng.integers(1, 4)), int(rng.integers(1, 6)), d),)


@patterns.example("packed_gated_ffn")
def _phi3_mlp(rng):
    return _packed_mlp(rng, gate_first=bool(rng.integers(2)))


@patterns.example("packed_gated_ffn", matches=False)
def _packed_projection_used_elsewhere(rng):
    return _packed_mlp(rng, packed_escapes=True)


PASS = patterns

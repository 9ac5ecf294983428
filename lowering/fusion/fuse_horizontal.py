"""Pass ``fuse-horizontal``: linears that read the same input become one wider linear.

Q, K and V projections (HF BERT, Llama), or any group of ``cuvil.linear`` ops with the same
input value, constant weights of the same in-features and dtype and the same (non-gated)
activation, are replaced by one ``cuvil.linear`` over the weights stacked along dim 0 and one
``aten.slice.Tensor`` per original along the last dim. A missing bias becomes zeros when
another member has one. Only linears in the same block are grouped, ordered as they appear
in it; the combined op is built before the first of them. Test: tests/lowering/fusion/fuse-horizontal.mlir.
"""

from __future__ import annotations

from functools import cmp_to_key

from cuvil_mlir.dialects import cuvil
from cuvil_mlir.lowering.common import concat_biases, concat_rows, constant_array
from cuvil_mlir.core.ir import ir
from cuvil_mlir.core.patterns import PatternSet, build, defining_op, info, is_constant_tensor, torch_int, vtensor_type

patterns = PatternSet("fuse-horizontal", description="cuvil.linears reading the same input -> one linear + slices")


@patterns.add("cuvil.linear")
def horizontal_linears(op, rewriter):
    """cuvil.linear(x, W_i, b_i) for i = 1..n -> slice_i(cuvil.linear(x, [W_1; ..; W_n], [b_1; ..; b_n]))"""
    group = _group_starting_at(op)
    if group is None:
        return None
    rows = [info(m.weight).shape[0] for m in group]
    weight = concat_rows([m.weight for m in group])
    bias = concat_biases([m.bias for m in group], rows)
    t = info(op.result)
    combined = cuvil.linear(vtensor_type([*t.shape[:-1], sum(rows)], t.dtype), op.input, weight, bias,
                            activation=cuvil.activation_of(op))
    slices, start = [], 0
    for member, n in zip(group, rows):
        operands = [combined, torch_int(t.rank - 1), torch_int(start), torch_int(start + n), torch_int(1)]
        slices.append(build("torch.aten.slice.Tensor", operands, member.result.type))
        start += n
    for member, value in zip(group[1:], slices[1:]):
        rewriter.replace_op(member, [value])
    return slices[0]


def _fusable(lin) -> bool:
    """A linear that can join a group: static [N, K] constant weight, constant or no bias,
    static in-features, an elementwise activation."""
    x, w = info(lin.input), info(lin.weight)
    if x is None or w is None or w.rank != 2 or min(w.shape) < 0 or x.shape[-1] < 0:
        return False
    if cuvil.activation_of(lin) in cuvil.GATED_ACTIVATIONS or not is_constant_tensor(lin.weight):
        return False
    if lin.bias is None:
        return True
    b = info(lin.bias)
    return b is not None and b.dtype == w.dtype and is_constant_tensor(lin.bias)


def _key(lin):
    """What members of one group share (besides the input value)."""
    w, y = info(lin.weight), info(lin.result)
    return cuvil.activation_of(lin), w.dtype, w.shape[1], y.dtype, y.shape[:-1]


def _group_starting_at(op):
    """The linears that fuse with ``op``, in IR order, if there are two or more and ``op`` is
    the first (the others wait for it); else None."""
    if not _fusable(op):
        return None
    block = op.operation.block
    members = []
    for use in op.input.uses:
        user = use.owner.opview if isinstance(use.owner, ir.Operation) else use.owner
        if user.operation.name != "cuvil.linear" or use.operand_number != 0 or user.operation.block != block:
            continue
        if all(m.operation != user.operation for m in members) and _fusable(user) and _key(user) == _key(op):
            members.append(user)
    members.sort(key=cmp_to_key(lambda a, b: -1 if a.operation.is_before_in_block(b.operation) else 1))
    if len(members) < 2 or members[0].operation != op.operation:
        return None
    # The combined op goes before `op`: a member whose constants cannot be folded into a new
    # literal must have them defined there already.
    members = [m for m in members if all(_available_before(v, op) for v in (m.weight, m.bias) if v is not None)]
    return members if len(members) >= 2 else None


def _available_before(value, op) -> bool:
    """``value`` can be read (as numpy) or is defined before ``op`` in its block or an enclosing one."""
    if constant_array(value) is not None:
        return True
    producer = defining_op(value)
    if producer is None:
        return True  # a block argument: it dominates everything in its block
    anchor = op.operation
    while anchor is not None:
        if anchor.block == producer.operation.block:
            return producer.operation.is_before_in_block(anchor)
        anchor = anchor.parent
    return False


# Examples for the differential checker (cuvil_mlir.eval.pattern_check).


def _projections(rng, *, n=None, same_input=True, relu_first=False):
    """``n`` (default 2-4) linears of one input (Q, K, V, ...) with random widths and biases;
    ``same_input=False``: the first reads x, the others z."""
    import torch

    d, n = int(rng.integers(1, 17)), n or int(rng.integers(2, 5))
    widths = [int(w) for w in rng.integers(1, 13, size=n)]
    biases = [bool(b) for b in rng.integers(2, size=n)]

    class Projections(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.ModuleList(torch.nn.Linear(d, w, bias=b) for w, b in zip(widths, biases))

        def forward(self, x, z):
            outs = [p(x if same_input or i == 0 else z) for i, p in enumerate(self.proj)]
            if relu_first:
                outs[0] = torch.relu(outs[0])
            return tuple(outs)

    x = torch.randn(int(rng.integers(1, 4)), int(rng.integers(1, 6)), d)
    return Projections().eval(), (x, torch.randn_like(x))


@patterns.example("horizontal_linears")
def _qkv(rng):
    return _projections(rng)


@patterns.example("horizontal_linears", matches=False)
def _different_inputs(rng):
    return _projections(rng, n=2, same_input=False)


@patterns.example("horizontal_linears", matches=False)
def _different_activations(rng):
    return _projections(rng, n=2, relu_first=True)


PASS = patterns

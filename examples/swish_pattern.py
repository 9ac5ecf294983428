"""A user's own pattern file: hand-written swish after a linear becomes the fused epilogue.

    cuvil compile model.pt2 --patterns examples/swish_pattern.py -o m.cuvilpkg
    cuvil-opt in.mlir --load-patterns examples/swish_pattern.py -p fuse-hand-written-swish
"""

from cuvil_mlir.dialects import cuvil
from cuvil_mlir.core.patterns import PatternSet, defining_op, num_uses

patterns = PatternSet("fuse-hand-written-swish", description="x * sigmoid(x) on a linear -> linear {silu}")


@patterns.add("torch.aten.mul.Tensor")
def swish_into_linear(op, rewriter):
    """mul(l, sigmoid(l)) with l = cuvil.linear(...) -> cuvil.linear(...) {activation = "silu"}"""
    for lin_value, gate in ((op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])):
        sig = defining_op(gate, "torch.aten.sigmoid")
        lin = defining_op(lin_value, "cuvil.linear")
        if sig is None or lin is None or sig.operands[0] != lin_value:
            continue
        if cuvil.activation_of(lin) != "none" or num_uses(lin_value) != 2 or num_uses(gate) != 1:
            continue
        if op.result.type != lin_value.type:
            continue
        return cuvil.with_activation(lin, "silu")
    return None

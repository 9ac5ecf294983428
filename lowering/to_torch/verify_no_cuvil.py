"""Pass ``verify-no-cuvil``: fail if any Cuvil op is left before the hand-off to IREE.

IREE's MLIR has no Cuvil dialect, so a Cuvil op that reaches it would be an opaque
parse failure; this check names the op and its location instead.
Test: tests/lowering/to_torch/verify-no-cuvil.mlir.
"""

from __future__ import annotations

from collections import Counter

from cuvil_mlir.core.diagnostics import LoweringError, location_text
from cuvil_mlir.core.ir import ir
from cuvil_mlir.core.passes import FunctionPass

NAME = "verify-no-cuvil"


def run(module: ir.Module) -> Counter:
    left = []

    def visit(op):
        if op.name.startswith("cuvil."):
            left.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if left:
        first = left[0]
        raise LoweringError(
            f"'{first.name}' at {location_text(first.location)} was not lowered: no pass in the pipeline "
            f"lowers it to torch ops ({len(left)} Cuvil op(s) left: {', '.join(sorted({o.name for o in left}))}); "
            "IREE cannot compile Cuvil ops"
        )
    return Counter()


PASS = FunctionPass(NAME, run, "fail if a Cuvil op reaches IREE")

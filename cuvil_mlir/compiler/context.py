"""The one factory for MLIR contexts: torch dialect registered, Cuvil dialect loaded."""

from __future__ import annotations

from cuvil_mlir.dialects.cuvil import Cuvil
from cuvil_mlir.core.ir import ir, new_torch_context


def make_context() -> ir.Context:
    ctx = new_torch_context()
    with ctx:
        Cuvil.load()
    return ctx

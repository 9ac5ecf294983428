"""The named stages of the pipeline, in order. A stage is where ``--emit``/``stage=`` can stop
and print the IR; targets list their passes per stage (targets/base.py)."""

from __future__ import annotations

from enum import Enum


class Stage(str, Enum):
    """A stage name; being a ``str``, ``Stage.CUVIL == "cuvil"`` and it prints as the name."""

    TORCH = "torch"  # torch-mlir's import: torch dialect, value semantics
    CUVIL = "cuvil"  # raised to Cuvil ops (user pattern sets run at its end)
    FUSED = "fused"  # the fusion passes
    PRECISION = "precision"  # the precision policy's passes (cuvil_mlir/compiler/precision.py)
    LOWERED = "lowered"  # Cuvil ops lowered back to torch ops and checked: what IREE receives

    def __str__(self) -> str:
        return self.value


def parse_stage(name: str) -> Stage:
    try:
        return Stage(name)
    except ValueError:
        from cuvil_mlir.core.diagnostics import CuvilError

        raise CuvilError(f"unknown stage '{name}'; stages: {', '.join(s.value for s in Stage)}") from None

"""Pass ``fuse-attention``. Test: tests/lowering/fuse-attention.mlir."""

from __future__ import annotations

from cuvil_mlir.patterns import PatternSet

patterns = PatternSet("fuse-attention", description="")
PASS = patterns

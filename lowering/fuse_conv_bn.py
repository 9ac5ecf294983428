"""Pass ``fuse-conv-bn``. Test: tests/lowering/fuse-conv-bn.mlir."""

from __future__ import annotations

from cuvil_mlir.patterns import PatternSet

patterns = PatternSet("fuse-conv-bn", description="")
PASS = patterns

"""Pass ``fuse-norms``. Test: tests/lowering/fuse-norms.mlir."""

from __future__ import annotations

from cuvil_mlir.patterns import PatternSet

patterns = PatternSet("fuse-norms", description="")
PASS = patterns

"""Pass ``fuse-horizontal``. Test: tests/lowering/fuse-horizontal.mlir."""

from __future__ import annotations

from cuvil_mlir.patterns import PatternSet

patterns = PatternSet("fuse-horizontal", description="")
PASS = patterns

"""Pass ``fuse-gated-ffn``. Test: tests/lowering/fuse-gated-ffn.mlir."""

from __future__ import annotations

from cuvil_mlir.patterns import PatternSet

patterns = PatternSet("fuse-gated-ffn", description="")
PASS = patterns

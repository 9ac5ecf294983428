"""Pass ``fuse-linear-epilogue``. Test: tests/lowering/fuse-linear-epilogue.mlir."""

from __future__ import annotations

from cuvil_mlir.patterns import PatternSet

patterns = PatternSet("fuse-linear-epilogue", description="")
PASS = patterns

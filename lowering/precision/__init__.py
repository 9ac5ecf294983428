"""Precision: the passes a precision policy runs (cuvil_mlir/compiler/precision.py)."""

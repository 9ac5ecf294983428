"""The bottom layer: the MLIR seam (ir), errors, tensor types, the pattern and pass API, stages."""

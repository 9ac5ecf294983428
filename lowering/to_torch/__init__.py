"""Lower: Cuvil ops back to torch ops for IREE, and the check that none is left."""

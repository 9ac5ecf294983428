"""Dialect declarations. Declarations know nothing of transforms (see lowering/)."""

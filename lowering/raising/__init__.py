"""Raise: torch ops to Cuvil ops, one op to one op."""

"""Workarounds: rewrites of Cuvil ops around a backend's bug, run only by the targets that have it."""

"""Targets as data. A target string a user types (``cpu``, ``cpu:znver4``) becomes a frozen,
validated options object with its IREE flags, runtime driver and the Cuvil passes it runs.

Each target kind lives in its own module (cpu.py, ...) and registers a parser in KINDS.
"""

from __future__ import annotations

from cuvil_mlir.diagnostics import CuvilError

from . import cpu

# kind -> parser of the part after "kind:" (None when absent) and the opt level.
KINDS = {
    "cpu": cpu.CpuTarget.parse,
}


def parse_target(spec: str, *, opt_level: int = 3):
    """``"cpu"`` / ``"cpu:znver4"`` -> a target object. Unknown names list the valid ones."""
    if not isinstance(spec, str) or not spec.strip():
        raise CuvilError(f"a target must be a non-empty string such as 'cpu', got {spec!r}")
    kind, _, arch = spec.strip().partition(":")
    if kind not in KINDS:
        raise CuvilError(f"unknown target '{spec}'; valid targets: {', '.join(sorted(KINDS))} (e.g. 'cpu', 'cpu:znver4')")
    if opt_level not in (0, 1, 2, 3):
        raise CuvilError(f"opt level must be 0, 1, 2 or 3, got {opt_level!r}")
    return KINDS[kind](arch or None, opt_level)

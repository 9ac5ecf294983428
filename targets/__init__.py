"""Targets as data. A target string a user types (``cpu``, ``cpu:znver4``, ``vmvx``) becomes
a frozen, validated options object (targets/base.py) with its IREE flags, runtime driver,
stages and fallbacks. Each kind lives in its own module and is listed in KINDS."""

from __future__ import annotations

from cuvil_mlir.diagnostics import CuvilError

from .base import Target
from .cpu import CpuTarget, VmvxTarget

KINDS: dict[str, type[Target]] = {
    "cpu": CpuTarget,
    "vmvx": VmvxTarget,
}


def parse_target(spec: str, *, opt_level: int = 3) -> Target:
    """``"cpu"`` / ``"cpu:znver4"`` -> a target object. Unknown names list the valid ones."""
    if not isinstance(spec, str) or not spec.strip():
        raise CuvilError(f"a target must be a non-empty string such as 'cpu', got {spec!r}")
    kind, _, arch = spec.strip().partition(":")
    if kind not in KINDS:
        raise CuvilError(f"unknown target '{spec}'; valid targets: {', '.join(sorted(KINDS))} (e.g. 'cpu', 'cpu:znver4')")
    if opt_level not in (0, 1, 2, 3):
        raise CuvilError(f"opt level must be 0, 1, 2 or 3, got {opt_level!r}")
    cls = KINDS[kind]
    try:
        return cls(arch=arch or cls.default_arch, opt_level=opt_level)
    except ValueError as e:
        raise CuvilError(f"target '{spec}': {e}") from e


def parse_targets(specs: str, *, opt_level: int = 3) -> list[Target]:
    """``"cuda:sm_86,vulkan,cpu"`` -> targets in order (a package holds one module per target)."""
    targets = [parse_target(s, opt_level=opt_level) for s in specs.split(",") if s.strip()]
    if not targets:
        raise CuvilError(f"no target given in '{specs}'")
    seen = set()
    for t in targets:
        if t.spec in seen:
            raise CuvilError(f"target '{t.spec}' is given twice in '{specs}'")
        seen.add(t.spec)
    return targets

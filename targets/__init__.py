"""Targets as data. A target string a user types (``cpu``, ``cpu:znver4``, ``cuda:h200``,
``rocm:gfx942``, ``vulkan``, ``cuda:h200{hopper-mode=target-description}``) becomes a frozen,
validated options object (targets/base.py) with its IREE flags, runtime driver, stages and
fallbacks. Each kind lives in its own module and is listed in KINDS; docs/targets.md says
what each one does and why."""

from __future__ import annotations

import re
from dataclasses import MISSING, fields

from cuvil_mlir.core.diagnostics import CuvilError
from cuvil_mlir.core.options import parse_value

from .base import NAME_FIELDS, Target
from .cpu import CpuTarget, VmvxTarget
from .cuda import CudaTarget
from .rocm import RocmTarget
from .vulkan import VulkanTarget

KINDS: dict[str, type[Target]] = {
    "cpu": CpuTarget,
    "vmvx": VmvxTarget,
    "cuda": CudaTarget,
    "rocm": RocmTarget,
    "vulkan": VulkanTarget,
}

# kind[:name][{option=value, ...}]
_SPEC = re.compile(r"^([a-z0-9]+)(?::([^{}]*))?(?:\{([^{}]*)\})?$")


def parse_target(spec: str, *, opt_level: int = 3) -> Target:
    """``"cpu"`` / ``"cuda:h200"`` / ``"cuda:h200{hopper-mode=target-description}"`` -> a
    target object. An unknown kind, name or option gets an error listing the valid ones."""
    if not isinstance(spec, str) or not spec.strip():
        raise CuvilError(f"a target must be a non-empty string such as 'cpu', got {spec!r}")
    m = _SPEC.match(spec.strip())
    if not m or m.group(1) not in KINDS:
        raise CuvilError(f"unknown target '{spec}'; valid targets: {_valid_targets()}")
    if opt_level not in (0, 1, 2, 3):
        raise CuvilError(f"opt level must be 0, 1, 2 or 3, got {opt_level!r}")
    cls = KINDS[m.group(1)]
    name = m.group(2) or cls.default_arch
    # an alias (a product name) becomes its arch; the name is kept as the product
    named = {"arch": cls.aliases[name], "product": name} if name in cls.aliases else {"arch": name}
    try:
        options = _parse_options(cls, m.group(3) or "")
        return cls(**named, opt_level=opt_level, **options)
    except ValueError as e:
        raise CuvilError(f"target '{spec}': {e}") from e


def parse_targets(specs: str, *, opt_level: int = 3) -> list[Target]:
    """``"cuda:sm_86,vulkan,cpu"`` -> targets in order (a package holds one module per target)."""
    parts = re.split(r",(?![^{]*\})", specs)  # commas inside {options} separate options, not targets
    targets = [parse_target(s, opt_level=opt_level) for s in parts if s.strip()]
    if not targets:
        raise CuvilError(f"no target given in '{specs}'")
    seen = set()
    for t in targets:
        if t.spec in seen:
            raise CuvilError(f"target '{t.spec}' is given twice in '{specs}'")
        seen.add(t.spec)
    return targets


def describe_targets() -> list[dict]:
    """Every kind, for ``cuvil targets``: its names, aliases, options, driver and what it needs."""
    out = []
    for kind, cls in KINDS.items():
        out.append({
            "kind": kind,
            "default": cls.default_arch,
            "archs": list(cls.archs),
            "aliases": dict(cls.aliases),
            "options": {f.name.replace("_", "-"): list(cls.choices.get(f.name, (f.default,))) for f in _option_fields(cls)},
            "driver": cls.driver,
            "needs": cls.needs,
        })
    return out


def _valid_targets() -> str:
    names = []
    for kind, cls in KINDS.items():
        listed = [*cls.archs, *cls.aliases]
        names.append(f"{kind}[:{'|'.join(listed)}]" if listed else kind)
    return ", ".join(names)


def _option_fields(cls: type[Target]):
    return [f for f in fields(cls) if f.name not in NAME_FIELDS and f.default is not MISSING]


def _parse_options(cls: type[Target], text: str) -> dict:
    """``"hopper-mode=target-description"`` -> {"hopper_mode": "target-description"}, converted
    to each field's type (the type of its default)."""
    known = {f.name.replace("_", "-"): f for f in _option_fields(cls)}
    out = {}
    for item in text.replace(",", " ").split():
        key, eq, value = item.partition("=")
        if not eq or not value:
            raise ValueError(f"malformed option '{item}' (expected option=value)")
        if key not in known:
            valid = ", ".join(f"{k}=<{'|'.join(cls.choices.get(f.name, (type(f.default).__name__,)))}>" for k, f in known.items())
            raise ValueError(f"unknown option '{item}'; {cls.kind} options: {valid or 'none'}")
        try:
            out[known[key].name] = parse_value(type(known[key].default), value)
        except ValueError as e:
            raise ValueError(f"option {item} {e}") from None
    return out

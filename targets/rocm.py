"""The ROCm target: IREE's rocm backend (HSACO code objects), run with the ``hip`` driver.
``rocm`` (gfx942), ``rocm:gfx90a``, ``rocm:mi300x``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import GpuTarget

# The gfx archs of IREE 3.13's ROCm table that matter for ML work (it also knows gfx1103,
# gfx1150, gfx1151: APUs). Not there: gfx906, gfx940/941, gfx1030, gfx1102.
ARCHS = ("gfx908", "gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1101", "gfx1200", "gfx1201")

# product -> arch; IREE 3.13 knows every one of these names and adds the chip's CU count and
# peak numbers, which change its tiling (gfx942 and mi300x give different code), so the
# product is passed to IREE as it is.
PRODUCTS = {
    "mi100": "gfx908",
    "mi210": "gfx90a",
    "mi250": "gfx90a",
    "mi250x": "gfx90a",
    "mi300x": "gfx942",
    "mi300a": "gfx942",
    "mi308x": "gfx942",
    "mi325x": "gfx942",
    "mi355x": "gfx950",
    "rx7900xtx": "gfx1100",
    "rx7900xt": "gfx1100",
    "w7900": "gfx1100",
    "rx9070xt": "gfx1201",
}


@dataclass(frozen=True)
class RocmTarget(GpuTarget):
    # gfx942 by default: MI300, the data-center GPU IREE tunes for (its default tuning spec).
    arch: str = "gfx942"

    kind: ClassVar[str] = "rocm"
    driver: ClassVar[str] = "hip"
    default_arch: ClassVar[str] = "gfx942"
    archs: ClassVar[tuple[str, ...]] = ARCHS
    aliases: ClassVar[dict[str, str]] = PRODUCTS
    needs: ClassVar[str] = "an AMD GPU of that arch and the ROCm/HIP runtime"

    def iree_flags(self) -> list[str]:
        return [
            "--iree-hal-target-device=hip",  # the device is "hip"; its executable format is rocm-hsaco-fb
            f"--iree-rocm-target={self.name}",  # not --iree-hip-target (no such flag in 3.13)
            f"--iree-opt-level=O{self.opt_level}",  # IREE's default is O0
        ]

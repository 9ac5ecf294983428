"""The CPU target: IREE's llvm-cpu backend, run with the ``local-task`` driver."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from cuvil_mlir.diagnostics import CuvilError

# Why each flag is here:
#  - IREE's default optimization level is O0; we pass the user's level (O3 by default).
#  - O2/O3 LayerNorm dispatches of GPT-2-width models exceed IREE's default 32 KiB stack
#    limit ("exceeded stack allocation limit"); 256 KiB makes them compile.
_STACK_LIMIT = 262144

_CPU_NAME = re.compile(r"^[a-z0-9][a-z0-9_.+-]*$")


@dataclass(frozen=True)
class CpuTarget:
    cpu: str = "host"
    opt_level: int = 3
    stack_allocation_limit: int = _STACK_LIMIT
    kind: str = field(default="cpu", init=False)
    driver: str = field(default="local-task", init=False)
    # The named stages after import, in order, and the passes each runs.
    stages: tuple[tuple[str, tuple[str, ...]], ...] = field(
        default=(
            ("cuvil", ("raise-torch-to-cuvil",)),
            ("lowered", ("lower-cuvil-to-torch", "verify-no-cuvil")),
        ),
        init=False,
    )

    def __post_init__(self):
        if not _CPU_NAME.match(self.cpu):
            raise ValueError(f"invalid LLVM CPU name '{self.cpu}'")

    @classmethod
    def parse(cls, arch: str | None, opt_level: int) -> "CpuTarget":
        try:
            return cls(cpu=arch or "host", opt_level=opt_level)
        except ValueError as e:
            raise CuvilError(f"target 'cpu:{arch}': {e}") from e

    @property
    def spec(self) -> str:
        return "cpu" if self.cpu == "host" else f"cpu:{self.cpu}"

    def iree_flags(self) -> list[str]:
        return [
            "--iree-hal-target-device=local",
            "--iree-hal-local-target-device-backends=llvm-cpu",
            f"--iree-llvmcpu-target-cpu={self.cpu}",
            f"--iree-opt-level=O{self.opt_level}",
            f"--iree-llvmcpu-stack-allocation-limit={self.stack_allocation_limit}",
        ]

    def cache_key(self) -> str:
        """Stable across processes: a hash of every field that changes the compiled module."""
        passes = [p for _, stage in self.stages for p in stage]
        text = "|".join([self.kind, self.cpu, str(self.opt_level), *self.iree_flags(), *passes])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

"""What every target is: a frozen, validated options object with its IREE flags, its
runtime driver, its ordered stages and the fallbacks it may try. Targets differ by data."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from typing import ClassVar

# After import, in order: the stage name and the passes it runs (pass specs, as cuvil-opt takes them).
DEFAULT_STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cuvil", ("raise-torch-to-cuvil",)),
    ("lowered", ("lower-cuvil-to-torch{attention=sdpa}", "verify-no-cuvil")),
)

# When IREE rejects a module, the pipeline retries with these pass specs swapped in, in
# order. Which attention form IREE compiles depends on target, dtype and shapes
# (docs/targets.md), so every target can fall back to the other one.
DEFAULT_FALLBACKS: tuple[tuple[str, str], ...] = (
    ("lower-cuvil-to-torch{attention=sdpa}", "lower-cuvil-to-torch{attention=decomposed}"),
)


@dataclass(frozen=True)
class Target:
    arch: str
    opt_level: int = 3

    kind: ClassVar[str] = ""
    driver: ClassVar[str] = ""
    default_arch: ClassVar[str] = ""
    stages: ClassVar[tuple[tuple[str, tuple[str, ...]], ...]] = DEFAULT_STAGES
    fallbacks: ClassVar[tuple[tuple[str, str], ...]] = DEFAULT_FALLBACKS

    @property
    def spec(self) -> str:
        return self.kind if self.arch == self.default_arch else f"{self.kind}:{self.arch}"

    def iree_flags(self) -> list[str]:
        raise NotImplementedError

    def variants(self) -> list[tuple[tuple[str, tuple[str, ...]], ...]]:
        """The stage lists to try in order: the stages, then each fallback swapped in."""
        out = [self.stages]
        for old, new in self.fallbacks:
            swapped = tuple((name, tuple(new if p == old else p for p in passes)) for name, passes in self.stages)
            if swapped not in out:
                out.append(swapped)
        return out

    def cache_key(self) -> str:
        """Stable across processes: a hash of everything that changes the compiled module."""
        parts = [self.kind, *(f"{f.name}={getattr(self, f.name)}" for f in fields(self)), *self.iree_flags()]
        parts += [p for _, passes in self.stages for p in passes]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]

"""What every target is: a frozen, validated options object with its IREE flags, its
runtime driver, its ordered stages and the fallbacks it may try. Targets differ by data."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from typing import ClassVar

from cuvil_mlir.core.stages import Stage

# After import, in order: the stage name and the passes it runs (pass specs, as cuvil-opt takes them).
# "precision" lists no passes of its own: the pipeline fills it from the compile's precision
# policy (cuvil_mlir/compiler/precision.py).
FUSION_PASSES: tuple[str, ...] = (
    "fuse-conv-bn", "fuse-norms", "fuse-attention", "fuse-linear-epilogue", "fuse-gated-ffn", "fuse-horizontal",
)
DEFAULT_STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    # raise-pt2e-quant reads the cuvil.linear/conv2d raise made of a PT2E-quantized op
    (Stage.CUVIL, ("raise-torch-to-cuvil", "raise-pt2e-quant")),
    (Stage.FUSED, FUSION_PASSES),
    (Stage.PRECISION, ()),
    (Stage.LOWERED, ("lower-cuvil-to-torch{attention=sdpa}", "verify-no-cuvil")),
)

# When IREE rejects a module, the pipeline retries with these pass specs swapped in, in
# order. Which attention form IREE compiles depends on target, dtype and shapes
# (docs/targets.md), so every target can fall back to the other one.
DEFAULT_FALLBACKS: tuple[tuple[str, str], ...] = (
    ("lower-cuvil-to-torch{attention=sdpa}", "lower-cuvil-to-torch{attention=decomposed}"),
)



def decomposed_attention(options: str = ""):
    """(stages, fallbacks) that lower attention written out (mm/bmm + softmax) first and IREE's
    attention op as the fallback, both with the lowering's further ``options`` (``"pad_rows=16"``):
    for targets where IREE compiles or runs its attention op worse (cpu: ~60x slower for one
    causal 4x128x64 attention on IREE 3.13; vulkan: f32 fails to compile)."""
    extra = f" {options}" if options else ""
    first, then = f"lower-cuvil-to-torch{{attention=decomposed{extra}}}", f"lower-cuvil-to-torch{{attention=sdpa{extra}}}"
    stages = tuple((name, (first, "verify-no-cuvil") if name == Stage.LOWERED else passes) for name, passes in DEFAULT_STAGES)
    return stages, ((first, then),)


DECOMPOSED_ATTENTION_STAGES, DECOMPOSED_ATTENTION_FALLBACKS = decomposed_attention()


# Fields that name the target rather than option it (an option is written name{option=value}).
NAME_FIELDS = ("arch", "opt_level", "product")


@dataclass(frozen=True)
class Target:
    arch: str
    opt_level: int = 3

    kind: ClassVar[str] = ""
    driver: ClassVar[str] = ""
    default_arch: ClassVar[str] = ""
    archs: ClassVar[tuple[str, ...]] = ()  # the canonical names (listed in errors and `cuvil targets`)
    aliases: ClassVar[dict[str, str]] = {}  # another name a user may type (a product: h200) -> its arch
    choices: ClassVar[dict[str, tuple[str, ...]]] = {}  # option field -> its allowed values, default first
    needs: ClassVar[str] = ""  # what running the module needs, in words
    stages: ClassVar[tuple[tuple[str, tuple[str, ...]], ...]] = DEFAULT_STAGES
    fallbacks: ClassVar[tuple[tuple[str, str], ...]] = DEFAULT_FALLBACKS
    # Whether the target computes float64. IREE demotes f64 to f32 by default, but its
    # function still declares f64 arguments and results backed by f32 storage ("buffer view
    # byte length 192 exceeds backing buffer 96"): a float64 model is garbage. Where True the
    # pipeline turns demotion off (--iree-input-demote-f64-to-f32=false; compiled and checked
    # on llvm-cpu and vmvx, compiled for cuda and rocm); where False a float64 input or output
    # is refused at compile time with what to do instead.
    holds_f64: ClassVar[bool] = True

    @property
    def name(self) -> str:
        """The name the target was asked for: its arch, or the alias (product) it came from."""
        return self.arch

    @property
    def spec(self) -> str:
        """The string parse_target() turns back into this target: kind[:name][{option=value,...}]."""
        options = self.options()
        if not options:
            return self.kind if self.name == self.default_arch else f"{self.kind}:{self.name}"
        return f"{self.kind}:{self.name}{{{','.join(f'{k}={v}' for k, v in options.items())}}}"

    def options(self) -> dict[str, str]:
        """The option fields (all but arch, opt_level, product) that differ from their defaults."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name not in NAME_FIELDS and value != f.default:
                out[f.name.replace("_", "-")] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    def iree_flags(self) -> list[str]:
        raise NotImplementedError

    def relaxed(self) -> list["Target"]:
        """The same target without an optional optimization IREE may fail on, to compile with
        when every lowering failed (before lower optimization levels are tried; the pipeline
        warns which one it used); none by default."""
        return []

    def peak(self) -> dict | None:
        """The device's datasheet peaks, ``{"tflops": {dtype: dense TFLOP/s}, "gbs": memory GB/s}``,
        for the profiler's share-of-peak columns; None where the target names no product."""
        return None

    def kernel_builder(self):
        """What fills the kernel functions lower-cuvil-to-kernels declares, at the hand-off to
        IREE (targets/iree.py): ``fn(symbol, spec) -> (function text | None, record)``; None
        for targets without kernels of their own."""
        return None

    def requirements(self) -> dict:
        """What the compiled module needs of the machine beyond its driver, recorded in the
        package and checked before loading (a CPU's instruction set: targets/cpu.py)."""
        return {}

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


@dataclass(frozen=True)
class GpuTarget(Target):
    """A GPU kind: its arch is one of ``archs``; a product name (``aliases``) resolves to its arch
    and is kept in ``product``, because IREE's table for a product adds its CU/SM count, which
    its heuristics use (ROCm code differs between gfx942 and mi300x)."""

    product: str = ""

    @property
    def name(self) -> str:
        return self.product or self.arch

    def __post_init__(self):
        if self.arch not in self.archs:
            raise ValueError(f"unknown {self.kind} arch '{self.arch}'; {self.valid_names()}")
        if self.product and self.aliases.get(self.product) != self.arch:
            raise ValueError(f"'{self.product}' is not a {self.kind} product with arch {self.arch}; {self.valid_names()}")
        for option, allowed in self.choices.items():
            if getattr(self, option) not in allowed:
                raise ValueError(f"{option.replace('_', '-')}={getattr(self, option)} is not one of {', '.join(allowed)}")

    @classmethod
    def valid_names(cls) -> str:
        products = ", ".join(f"{p} ({a})" for p, a in cls.aliases.items())
        return f"valid: {', '.join(cls.archs)}; or one of these names: {products}"

"""The CPU target: IREE's llvm-cpu backend (``cpu``, ``cpu:<llvm cpu name>``), run with the
``local-task`` driver; and ``vmvx``, IREE's portable reference backend."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import ClassVar

from .base import Target, decomposed_attention

# Why: O2/O3 LayerNorm dispatches of GPT-2-width models exceed IREE's default 32 KiB
# stack limit ("exceeded stack allocation limit"); 256 KiB makes them compile.
_STACK_LIMIT = 262144

# IREE's CPU attention kernel is far slower than attention written out (targets/base.py);
# a long causal attention written out per block of 128 queries (half the products, small score
# tensors); linears' out features padded to whole AVX-512 vectors of f32, their inputs flattened
# to 2-D (no broadcast weight for data tiling to pack; lower_cuvil_to_torch.linear)
STAGES, FALLBACKS = decomposed_attention("pad_rows=16 flatten=true causal_block=128")

_CPU_NAME = re.compile(r"^[a-z0-9][a-z0-9_.+-]*$")


@dataclass(frozen=True)
class CpuTarget(Target):
    arch: str = "host"
    stack_allocation_limit: int = _STACK_LIMIT
    # IREE's data tiling from global optimization: matmul operands packed into the tile layout of
    # its mmt4d kernels (weights once, at compile or load time). GPT-2's prefill at 128 tokens
    # ran 2x faster with it (the 128x3072 -> 768 linear 23 -> 11 ms); IREE's other path
    # (--iree-opt-data-tiling, from dispatch creation) fails on the KV-cache attention of a
    # causal LM ("unbounded stack allocations"). Where IREE fails with it, the pipeline
    # compiles again without (relaxed()).
    data_tiling: bool = True

    kind: ClassVar[str] = "cpu"
    driver: ClassVar[str] = "local-task"
    default_arch: ClassVar[str] = "host"
    archs: ClassVar[tuple[str, ...]] = ("host", "<LLVM CPU name: znver4, skylake-avx512, ...>")
    needs: ClassVar[str] = "nothing: IREE's local-task driver on this CPU (host) or one of that LLVM CPU name"
    stages: ClassVar[tuple[tuple[str, tuple[str, ...]], ...]] = STAGES
    fallbacks: ClassVar[tuple[tuple[str, str], ...]] = FALLBACKS

    def __post_init__(self):
        if not _CPU_NAME.match(self.arch):
            raise ValueError(f"invalid LLVM CPU name '{self.arch}' (e.g. host, znver4, skylake-avx512)")

    def iree_flags(self) -> list[str]:
        return [
            "--iree-hal-target-device=local",
            "--iree-hal-local-target-device-backends=llvm-cpu",
            f"--iree-llvmcpu-target-cpu={self.arch}",
            f"--iree-opt-level=O{self.opt_level}",
            f"--iree-llvmcpu-stack-allocation-limit={self.stack_allocation_limit}",
            *(["--iree-global-opt-data-tiling"] if self.data_tiling else []),
        ]

    def relaxed(self) -> list[Target]:
        return [replace(self, data_tiling=False)] if self.data_tiling else []

    def requirements(self) -> dict:
        """The executable format, CPU and instruction-set features IREE compiles for: a module
        built for another CPU would die with SIGILL (cuvil_mlir/runtime/hostcpu.py checks at load)."""
        from . import iree

        return iree.llvm_cpu_requirements(tuple(self.iree_flags()))


@dataclass(frozen=True)
class VmvxTarget(Target):
    """IREE's portable VM-based reference backend: slow, but independent of LLVM codegen."""

    arch: str = "generic"

    kind: ClassVar[str] = "vmvx"
    driver: ClassVar[str] = "local-task"
    default_arch: ClassVar[str] = "generic"
    archs: ClassVar[tuple[str, ...]] = ("generic",)
    needs: ClassVar[str] = "nothing: any CPU IREE's runtime runs on"

    def __post_init__(self):
        if self.arch != "generic":
            raise ValueError(f"vmvx has no architectures, got '{self.arch}'")

    def iree_flags(self) -> list[str]:
        return [
            "--iree-hal-target-device=local",
            "--iree-hal-local-target-device-backends=vmvx",
            f"--iree-opt-level=O{self.opt_level}",
        ]

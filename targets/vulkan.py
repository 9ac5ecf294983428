"""The Vulkan target: IREE's vulkan-spirv backend, run with the ``vulkan`` driver.
``vulkan`` (portable), ``vulkan:ampere``, ``vulkan:rdna3``, ``vulkan:lavapipe``, ``vulkan:h200``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import DECOMPOSED_ATTENTION_FALLBACKS, DECOMPOSED_ATTENTION_STAGES, GpuTarget

# The default: our own conservative description, because no IREE 3.13 Vulkan target is both
# safe everywhere and able to compile the e2e models. vp_android_baseline_2022 (SPIR-V 1.3,
# 32-bit only, no subgroup ops, 128 threads, 16 KiB) fails on causal attention (64-bit index
# math in the mask: "failed to legalize operation 'vector.broadcast'") and, at O0, on a LayerNorm
# that takes 16640 bytes of workgroup memory. "portable" is that profile plus 64-bit integer
# arithmetic (shaderInt64) and 32 KiB of workgroup memory: lavapipe reports both
# (vulkaninfo: shaderInt64 = true, maxComputeSharedMemorySize = 32768), as desktop NVIDIA, AMD
# and Intel GPUs do; some mobile GPUs lack shaderInt64. No subgroup ops, so no assumption on
# the device's subgroup size. 8- and 16-bit storage and fp16/int8 arithmetic are declared
# (lavapipe and desktop GPUs have them): with 32-bit-only storage a bool tensor's last partial
# word read as zeros, and fp16 models failed to compile ("vector.bitcast f32->f16") or gave NaN.
PORTABLE = (
    '#hal.device.target<"vulkan", [#hal.executable.target<"vulkan-spirv", "vulkan-spirv-fb", '
    '{iree_codegen.target_info = #iree_gpu.target<arch = "portable", features = "spirv:v1.3,cap:Shader", '
    "wgp = <compute = fp32|fp16|int64|int32|int16|int8, storage = b32|b16|b8, subgroup = none, subgroup_size_choices = [64], "
    "max_workgroup_sizes = [128, 128, 64], max_thread_count_per_workgroup = 128, "
    "max_workgroup_memory_bytes = 32768, max_workgroup_counts = [65535, 65535, 65535]>>}>]>"
)

# IREE 3.13 Vulkan target names (each tested here; docs/targets.md says which e2e models
# compile for which). llvmpipe is lavapipe's own description (SPIR-V 1.6, subgroup size 8):
# fastest there, wrong anywhere else. sm_90 / hopper are not among them: sm_90 segfaults the compiler.
ARCHS = (
    "portable", "llvmpipe", "vp_android_baseline_2022",
    "ampere", "turing", "ada", "rdna2", "rdna3", "valhall", "adreno",
)

# product (or other name) -> arch
PRODUCTS = {
    "lavapipe": "llvmpipe",  # Mesa's CPU Vulkan driver (CI); its device calls itself llvmpipe
    "a100": "ampere",
    "rtx3090": "ampere",
    "rtx4090": "ada",
    "h100": "ampere",  # no Hopper entry for Vulkan; Ampere's is the closest (sm_80, 163 KiB)
    "h200": "ampere",
    "hopper": "ampere",
    "sm_90": "ampere",  # --iree-vulkan-target=sm_90 crashes iree-compile 3.13 (segfault)
    "rx7900xtx": "rdna3",
}

# Names IREE 3.13 knows (it adds the chip's CU/SM count); the others go to IREE as their arch.
IREE_KNOWS = frozenset({"a100", "rtx3090", "rtx4090", "rx7900xtx"})

# Vulkan compiles attention written out (bmm + softmax) in f32 on every target, while IREE's
# attention op does not ("'iree_linalg_ext.online_attention' op result #0 must be ... ranked
# tensor ..., got memref"); in fp16 it is the other way round on GPU targets. So the decomposed
# lowering comes first and sdpa is the fallback.
STAGES = DECOMPOSED_ATTENTION_STAGES
FALLBACKS = DECOMPOSED_ATTENTION_FALLBACKS


@dataclass(frozen=True)
class VulkanTarget(GpuTarget):
    arch: str = "portable"

    kind: ClassVar[str] = "vulkan"
    driver: ClassVar[str] = "vulkan"
    default_arch: ClassVar[str] = "portable"
    archs: ClassVar[tuple[str, ...]] = ARCHS
    aliases: ClassVar[dict[str, str]] = PRODUCTS
    needs: ClassVar[str] = "a Vulkan 1.1 driver (any GPU, or Mesa's lavapipe on the CPU)"
    stages: ClassVar[tuple[tuple[str, tuple[str, ...]], ...]] = STAGES
    fallbacks: ClassVar[tuple[tuple[str, str], ...]] = FALLBACKS
    holds_f64: ClassVar[bool] = False  # SPIR-V GLSL ops take 16/32-bit floats only ('spirv.GL.Exp' on f64 fails)

    def iree_flags(self) -> list[str]:
        # IREE's default is O0; the target's opt level (O3 unless asked) is what makes it fast.
        return [*self._device_flags(), f"--iree-opt-level=O{self.opt_level}"]

    def _device_flags(self) -> list[str]:
        if self.arch == "portable":  # IREE's --iree-hal-target-device parses a #hal.device.target
            return [f"--iree-hal-target-device={PORTABLE}"]
        name = self.product if self.product in IREE_KNOWS else self.arch
        return ["--iree-hal-target-device=vulkan", f"--iree-vulkan-target={name}"]

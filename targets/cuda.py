"""The CUDA target: IREE's cuda backend (PTX in the module, JIT-compiled by the driver at load),
run with the ``cuda`` driver. ``cuda``, ``cuda:sm_86``, ``cuda:h200``,
``cuda:h200{hopper-mode=target-description}``.

Hopper: IREE 3.13's known-target table stops at sm_89 (sm_90 fails with "missing GPU target in
#hal.executable.target", iree-org/iree#22147). Two ways round it, chosen by ``hopper_mode``:
  ptx-jit             build for sm_89, the newest arch IREE knows; the driver JITs that PTX for
                      sm_90 (the default until the H200 measurements say otherwise);
  target-description  describe the Hopper GPU to IREE ourselves (an ``#iree_gpu.target`` given as
                      the device target), so the PTX is ``.target sm_90`` and IREE may use
                      Hopper's 227 KiB of shared memory per workgroup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cuvil_mlir.core.stages import Stage

from .base import DEFAULT_STAGES, GpuTarget

ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90")

# product -> arch. The object keeps the canonical arch and the product (its spec stays cuda:h200).
PRODUCTS = {
    "a100": "sm_80",
    "a10": "sm_86",
    "rtx3090": "sm_86",
    "l4": "sm_89",
    "rtx4090": "sm_89",
    "h100": "sm_90",  # H100 SXM5 (the PCIe card has 114 SMs, not 132)
    "h200": "sm_90",
}

# Product names IREE 3.13 knows itself (they add the SM count to its target; the PTX for our
# models is the same as for the bare arch). The rest are passed to IREE as their arch.
IREE_KNOWS = frozenset({"a100", "rtx3090", "rtx4090"})

HOPPER_MODES = ("ptx-jit", "target-description")
# kernels=auto: the arch's own kernels for the Cuvil ops they cover (sm_90: the Triton linear
# kernel of targets/cuda_kernels.py, through lower-cuvil-to-kernels); off: IREE's codegen only.
KERNEL_MODES = ("auto", "off")
KERNEL_ARCHS = ("sm_90",)
KERNEL_PASS = "lower-cuvil-to-kernels{arch=sm_90}"
# IREE 3.13's CUDA MMA codegen computes 16-bit 1x1 convs (and matmuls) with fewer than 128 input
# channels wrong (issue 16, docs/known-issues.md); where the sm_90 linear kernel runs, this pass
# hands them to it as channels-last linears. Other cuda targets have no workaround.
CONV_WORKAROUND_PASS = "conv1x1-as-linear"


def _lowering_first(stages, *first):
    """The stages with ``first`` at the start of the lowering stage (before lower-cuvil-to-torch:
    they rewrite or claim Cuvil ops; lower-cuvil-to-torch lowers the rest)."""
    return tuple((name, (*first, *passes) if name == Stage.LOWERED else passes) for name, passes in stages)


KERNEL_STAGES = _lowering_first(DEFAULT_STAGES, CONV_WORKAROUND_PASS, KERNEL_PASS)


def materialize_kernel(symbol: str, spec: dict):
    """The sm_90 kernels at the hand-off (targets/iree.py): cuvil.attention's (its spec says
    ``op = "attention"``) and the KV-cache write's (``op = "cache_write"``), both in
    targets/cuda_attention_kernels.py, or cuvil.linear's (cuda_kernels.py)."""
    from . import cuda_attention_kernels, cuda_kernels

    if spec.get("op") == "cache_write":
        return cuda_attention_kernels.materialize_cache_write(symbol, spec)
    return (cuda_attention_kernels if spec.get("op") == "attention" else cuda_kernels).materialize(symbol, spec)
NEWEST_KNOWN_ARCH = "sm_89"  # what ptx-jit compiles Hopper for

# Hopper (compute capability 9.0) as IREE's #iree_gpu.target, written after IREE's own sm_89
# entry (print it with `iree-compile --iree-cuda-target=sm_89 --compile-to=executable-sources`).
# What differs from sm_89, and why:
#   arch sm_90                      the PTX is `.target sm_90` (not sm_90a: IREE emits no wgmma, and
#                                   sm_90a PTX cannot be JIT-compiled for any other GPU);
#   max_workgroup_memory_bytes      227 KiB = 232448, Hopper's opt-in shared memory per block
#                                   (sm_89: 99 KiB);
#   max_workgroup_sizes z = 64      the hardware's block-dimension limit (IREE's NVIDIA entries say 1024);
#   chip                            the SM count (132 on H100 SXM5 and H200) and datasheet numbers
#                                   (dense tensor TFLOP/s, HBM bandwidth), for products only.
# mma: the NVIDIA intrinsics IREE 3.13's MMAIntrinsic enum has (mma.sync f16/bf16/fp8 and wmma
# f16; it has no wgmma), all of which sm_90 runs. features +ptx84: the PTX ISA of IREE's sm_89 entry.
_HOPPER_WGP = (
    "compute = fp64|fp32|fp16|int64|int32|int16|int8, storage = b64|b32|b16|b8, "
    "subgroup = shuffle|arithmetic, dot = dp4xi8toi32, "
    "mma = [<NV_MMA_SYNC_F32_16x8x16_F16>, <NV_MMA_SYNC_F16_16x8x16_F16>, <NV_MMA_SYNC_F32_16x8x16_BF16>, "
    "<NV_MMA_SYNC_F32_16x8x32_F8E4M3FN>, <NV_MMA_SYNC_F32_16x8x32_F8E5M2>, "
    "<NV_WMMA_F32_16x16x16_F16>, <NV_WMMA_F16_16x16x16_F16>], "
    "subgroup_size_choices = [32], max_workgroup_sizes = [1024, 1024, 64], "
    "max_thread_count_per_workgroup = 1024, max_workgroup_memory_bytes = 232448, "
    "max_workgroup_counts = [2147483647, 65535, 65535]"
)
_HOPPER_TFLOPS = "perf_tflops = {fp16 = 989.5 : f32, fp32 = 67.0 : f32, fp8 = 1979.0 : f32, int8 = 1979.0 : f32}"
_HOPPER_CHIPS = {  # NVIDIA datasheets, SXM parts, dense (no sparsity)
    "h100": f'wgp_count = 132, sku = "h100", memory_bandwidth_tbps = 3.35 : f32, {_HOPPER_TFLOPS}',
    "h200": f'wgp_count = 132, sku = "h200", memory_bandwidth_tbps = 4.8 : f32, {_HOPPER_TFLOPS}',
}


# product -> datasheet peaks (SXM parts; dense tensor-core TFLOP/s per input dtype, HBM GB/s),
# for the profiler (cuvil_mlir/profiler.py). Hopper's are _HOPPER_CHIPS' numbers.
PEAKS = {
    "a100": {"tflops": {"f16": 312.0, "bf16": 312.0, "f32": 19.5, "i8": 624.0}, "gbs": 2039.0},
    "l4": {"tflops": {"f16": 121.0, "bf16": 121.0, "f32": 30.3, "i8": 242.5}, "gbs": 300.0},
    "h100": {"tflops": {"f16": 989.5, "bf16": 989.5, "f32": 67.0, "i8": 1979.0, "f8E4M3FN": 1979.0}, "gbs": 3350.0},
    "h200": {"tflops": {"f16": 989.5, "bf16": 989.5, "f32": 67.0, "i8": 1979.0, "f8E4M3FN": 1979.0}, "gbs": 4800.0},
}


def hopper_device_target(product: str = "") -> str:
    """The ``#hal.device.target`` attribute that describes a Hopper GPU to IREE (an sm_90 without
    a product gets no chip entry, as IREE's own bare-arch entries)."""
    chip = f", chip = <{_HOPPER_CHIPS[product]}>" if product in _HOPPER_CHIPS else ""
    gpu = f'#iree_gpu.target<arch = "sm_90", features = "+ptx84", wgp = <{_HOPPER_WGP}>{chip}>'
    return f'#hal.device.target<"cuda", [#hal.executable.target<"cuda", "cuda-nvptx-fb", {{iree_codegen.target_info = {gpu}}}>]>'


@dataclass(frozen=True)
class CudaTarget(GpuTarget):
    # sm_80 by default: its PTX is JIT-compiled by the driver for every newer GPU.
    arch: str = "sm_80"
    hopper_mode: str = "ptx-jit"
    kernels: str = "auto"

    kind: ClassVar[str] = "cuda"
    driver: ClassVar[str] = "cuda"
    default_arch: ClassVar[str] = "sm_80"
    archs: ClassVar[tuple[str, ...]] = ARCHS
    aliases: ClassVar[dict[str, str]] = PRODUCTS
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"hopper_mode": HOPPER_MODES, "kernels": KERNEL_MODES}
    needs: ClassVar[str] = "an NVIDIA GPU (Ampere or newer) and its CUDA driver"

    def __post_init__(self):
        super().__post_init__()
        if self.hopper_mode != HOPPER_MODES[0] and self.arch != "sm_90":
            raise ValueError(f"hopper-mode applies to sm_90 (h100, h200) only, not {self.arch}")

    def peak(self) -> dict | None:
        return PEAKS.get(self.product)

    @property
    def stages(self):
        return KERNEL_STAGES if self.uses_kernels else DEFAULT_STAGES

    @property
    def uses_kernels(self) -> bool:
        return self.kernels == "auto" and self.arch in KERNEL_ARCHS

    def kernel_builder(self):
        """What fills the kernel functions at the hand-off to IREE (targets/iree.py), or None."""
        return materialize_kernel if self.uses_kernels else None

    def iree_flags(self) -> list[str]:
        # IREE's default is O0; the target's opt level (O3 unless asked) is what makes it fast.
        return [*self._device_flags(), f"--iree-opt-level=O{self.opt_level}"]

    def _device_flags(self) -> list[str]:
        if self.arch == "sm_90":
            return HOPPER_DEVICE_FLAGS[self.hopper_mode](self.product)
        return _cuda_device(self.product if self.product in IREE_KNOWS else self.arch)


def _cuda_device(name: str) -> list[str]:
    return ["--iree-hal-target-device=cuda", f"--iree-cuda-target={name}"]


# hopper_mode -> the device flags for an sm_90 product (or "" for the bare arch)
HOPPER_DEVICE_FLAGS = {
    "ptx-jit": lambda product: _cuda_device(NEWEST_KNOWN_ARCH),
    # the whole device target as an attribute: IREE's --iree-hal-target-device parses a
    # #hal.device.target (then --iree-cuda-target is not used)
    "target-description": lambda product: [f"--iree-hal-target-device={hopper_device_target(product)}"],
}

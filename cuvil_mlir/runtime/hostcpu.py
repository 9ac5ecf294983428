"""Can this CPU run a module compiled for llvm-cpu? (A module built for a CPU with
instructions this one lacks dies with SIGILL on its first call; check before loading.)

A CPU module's package entry records ``requires``: IREE's executable format
(``embedded-elf-x86_64``), the LLVM CPU name and the LLVM features codegen may use
(targets/iree.py ``llvm_cpu_requirements``). Here they are compared with the host's ISA
(Linux ``/proc/cpuinfo`` flags). Only instruction-set extensions are checked; LLVM's tuning
and OS-level features have no cpuinfo flag and are ignored.
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

# LLVM feature name -> Linux cpuinfo flag, where they differ. Everything in _CHECKED is
# compared; a name missing here is the same in both.
_X86_CPUINFO = {
    "sse3": "pni", "sse4.1": "sse4_1", "sse4.2": "sse4_2", "bmi": "bmi1", "lzcnt": "abm", "pclmul": "pclmulqdq",
    "sha": "sha_ni", "avx512vnni": "avx512_vnni", "avx512bf16": "avx512_bf16", "avx512vbmi2": "avx512_vbmi2",
    "avx512bitalg": "avx512_bitalg", "avx512vpopcntdq": "avx512_vpopcntdq", "avx512fp16": "avx512_fp16",
    "avx512vp2intersect": "avx512_vp2intersect", "avxvnni": "avx_vnni", "amx-tile": "amx_tile",
    "amx-bf16": "amx_bf16", "amx-int8": "amx_int8", "amx-fp16": "amx_fp16",
}
_X86_CHECKED = frozenset({
    "sse3", "ssse3", "sse4.1", "sse4.2", "sse4a", "avx", "avx2", "fma", "fma4", "f16c", "bmi", "bmi2", "lzcnt",
    "popcnt", "movbe", "aes", "pclmul", "sha", "adx", "gfni", "vaes", "vpclmulqdq", "avx512f", "avx512bw",
    "avx512cd", "avx512dq", "avx512vl", "avx512ifma", "avx512vbmi", "avx512vbmi2", "avx512vnni", "avx512bf16",
    "avx512bitalg", "avx512vpopcntdq", "avx512fp16", "avx512vp2intersect", "avxvnni", "amx-tile", "amx-bf16",
    "amx-int8", "amx-fp16",
})
_ARM_CPUINFO = {"neon": "asimd", "dotprod": "asimddp", "fullfp16": "asimdhp", "fp-armv8": "fp"}
_ARM_CHECKED = frozenset({"neon", "dotprod", "fullfp16", "sve", "sve2", "i8mm", "bf16", "sme", "fp-armv8"})

_FORMAT_ARCH = {"x86_64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64", "riscv_64": "riscv64"}


def host_arch() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


@functools.lru_cache(maxsize=1)
def host_cpu_flags() -> frozenset[str] | None:
    """The ISA flags of this CPU (cpuinfo names), or None where they cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return None


def unmet(requires: dict) -> str | None:
    """Why this CPU cannot run a module with these ``requires`` (None: it can, or it cannot
    be told, e.g. off Linux)."""
    if not requires:
        return None
    fmt = requires.get("format", "")
    wanted_arch = next((arch for key, arch in _FORMAT_ARCH.items() if fmt.endswith(key)), None)
    here = host_arch()
    cpu = requires.get("cpu", "?")
    if wanted_arch is not None and wanted_arch != here:
        return f"the module is {fmt} code (for CPU '{cpu}'), this machine is {here}"
    flags = host_cpu_flags()
    if flags is None:
        return None
    table, checked = (_X86_CPUINFO, _X86_CHECKED) if here == "x86_64" else (_ARM_CPUINFO, _ARM_CHECKED)
    missing = sorted(f for f in requires.get("cpu_features", ()) if f in checked and table.get(f, f) not in flags)
    if not missing:
        return None
    return (f"the module was compiled for CPU '{cpu}', whose instructions this CPU lacks ({', '.join(missing)}); "
            "running it would crash with an illegal instruction. Recompile for this machine (target 'cpu') "
            "or for a CPU it has")

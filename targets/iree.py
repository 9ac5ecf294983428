"""The IREE compiler seam: the only module that imports ``iree.compiler``.

Cuvil IR lives in torch-mlir's MLIR context; IREE bundles its own MLIR. IR objects never
cross: the fully lowered module is written as bytecode (generic-form text if bytecode
fails) and handed to the IREE compiler as bytes.
"""

from __future__ import annotations

import functools
import re
import shlex

from cuvil_mlir import repro
from cuvil_mlir.diagnostics import CompileError
from cuvil_mlir.ir import ir, module_to_bytecode


def serialize(module: ir.Module) -> bytes:
    """Bytecode of the module, or its generic-form text when bytecode cannot be written."""
    try:
        return module_to_bytecode(module)
    except Exception:
        return module.operation.get_asm(print_generic_op_form=True, binary=True)


def compiler_version() -> str:
    from importlib.metadata import version

    return version("iree-base-compiler")


def compile_to_vmfb(module: ir.Module, flags: list[str], *, input_type: str = "torch") -> bytes:
    """Compile a lowered module with IREE; a failure says why and how to reproduce it."""
    from iree.compiler import CompilerToolError, compile_str

    data = serialize(module)
    try:
        return compile_str(data, input_type=input_type, extra_args=list(flags))
    except CompilerToolError as e:
        first = _first_error(str(e))

        def still_fails(small: bytes) -> bool:  # the same first error without the weights
            try:
                compile_str(small, input_type=input_type, extra_args=list(flags))
            except CompilerToolError as again:
                return _first_error(str(again)) == first
            return False

        path, note = repro.write(data, "cuvil-repro-iree-", still_fails)
        # quoted: a flag may carry an attribute (a #hal.device.target with spaces, quotes, <>, |)
        cmd = shlex.join(["iree-compile", path, f"--iree-input-type={input_type}", *flags, "-o", "out.vmfb"]) if path else None
        raise CompileError(f"IREE failed to compile the module: {first}" + (f" ({note})" if note else ""), repro=cmd) from e


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if "error:" in line:
            return line.strip()
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[0] if lines else "unknown error"


# A function IREE compiles for the llvm-cpu backend in well under a second: the executable
# target IREE assigns to it names the CPU and its features.
_PROBE = "func.func @probe(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = arith.addf %a, %a : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n"
_EXECUTABLE_TARGET = re.compile(r'#hal\.executable\.target<"llvm-cpu",\s*"([^"]+)",\s*\{cpu = "([^"]*)", cpu_features = "([^"]*)"')


@functools.lru_cache(maxsize=None)
def llvm_cpu_requirements(flags: tuple[str, ...]) -> dict:
    """What a module compiled with these llvm-cpu ``flags`` needs of the CPU that runs it:
    ``{"format": "embedded-elf-x86_64", "cpu": "znver4", "cpu_features": ["avx2", ...]}``
    (the features IREE's LLVM codegen may use). Empty for flags that do not target llvm-cpu."""
    from iree.compiler import CompilerToolError, compile_str

    keep = [f for f in flags if f.startswith(("--iree-hal-target-device", "--iree-hal-local-target-device-backends", "--iree-llvmcpu-"))]
    if not any("llvm-cpu" in f for f in keep):
        return {}
    try:
        text = compile_str(_PROBE, input_type="auto", extra_args=[*keep, "--compile-to=flow"]).decode()
    except CompilerToolError as e:
        raise CompileError(f"IREE could not resolve the CPU target: {_first_error(str(e))}") from e
    m = _EXECUTABLE_TARGET.search(text)
    if m is None:
        return {}
    features = sorted({f[1:] for f in m.group(3).split(",") if f.startswith("+")})
    return {"format": m.group(1), "cpu": m.group(2), "cpu_features": features}

"""The IREE compiler seam: the only module that imports ``iree.compiler``.

Cuvil IR lives in torch-mlir's MLIR context; IREE bundles its own MLIR. IR objects never
cross: the fully lowered module is written as bytecode (generic-form text if bytecode
fails) and handed to the IREE compiler as bytes.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import tempfile

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


def compile_to_vmfb(module: ir.Module, flags: list[str], *, input_type: str = "torch", kernels=None,
                    report: list | None = None) -> bytes:
    """Compile a lowered module with IREE; a failure says why and how to reproduce it.

    ``kernels`` (a target's, e.g. targets/cuda_kernels.materialize) fills the kernel functions
    lower-cuvil-to-kernels declared, in IREE's context (materialize_kernels); what it chose per
    function is appended to ``report``."""
    from iree.compiler import CompilerToolError, compile_str

    data = serialize(module)
    if kernels is not None:
        data = materialize_kernels(data, kernels, report if report is not None else [])
    try:
        return compile_str(data, input_type=input_type, extra_args=list(flags))
    except CompilerToolError as e:
        path = _save_input(data)
        first = _first_error(str(e))
        # quoted: a flag may carry an attribute (a #hal.device.target with spaces, quotes, <>, |)
        cmd = shlex.join(["iree-compile", path, f"--iree-input-type={input_type}", *flags, "-o", "out.vmfb"])
        raise CompileError(f"IREE failed to compile the module: {first}", repro=cmd) from e


KERNEL_ATTR = "cuvil.kernel"
SPEC_ATTR = "cuvil.kernel_spec"
SITES_ATTR = "cuvil.kernel_sites"


def materialize_kernels(data: bytes, kernels, report: list) -> bytes:
    """The module (bytecode or text) with the body of each function marked ``cuvil.kernel``
    replaced by what ``kernels(symbol, spec) -> (function text | None, record)`` gives: a
    ``hal.dispatch.extern`` of a prebuilt kernel. This happens in IREE's own context because
    torch-mlir's has no HAL dialect. A function ``kernels`` leaves (None) keeps its body, the
    torch lowering of the op, which IREE compiles with its own codegen."""
    from iree.compiler import ir as iree_ir

    with iree_ir.Context() as ctx, iree_ir.Location.unknown():
        module = iree_ir.Module.parse(data)
        replaced = 0
        for op in list(module.body.operations):
            if op.operation.name != "func.func" or KERNEL_ATTR not in op.attributes:
                continue
            symbol = iree_ir.StringAttr(op.attributes["sym_name"]).value
            spec = _read_spec(iree_ir, op.attributes[SPEC_ATTR])
            text, record = kernels(symbol, spec)
            if SITES_ATTR in op.attributes:  # where the ops it computes came from (nn.Module paths)
                record["sites"] = [iree_ir.StringAttr(a).value for a in iree_ir.ArrayAttr(op.attributes[SITES_ATTR])]
            report.append(record)
            if text is None:
                continue
            try:
                fresh = iree_ir.Module.parse(text)
            except iree_ir.MLIRError as e:
                raise CompileError(f"the kernel function for {symbol} does not parse in IREE's context: {e}") from e
            new = fresh.body.operations[0]
            new.move_before(op)
            op.erase()
            replaced += 1
        if not replaced:
            return data
        return _bytecode_or_text(module)


def _read_spec(iree_ir, attr) -> dict:
    d = iree_ir.DictAttr(attr)
    out = {}
    for i in range(len(d)):
        named = d[i]
        value = named.attr
        if isinstance(value, iree_ir.BoolAttr) or str(value) in ("true", "false"):
            out[named.name] = str(value) == "true"
        elif isinstance(value, iree_ir.IntegerAttr) or str(value).endswith(": i64"):
            out[named.name] = iree_ir.IntegerAttr(value).value
        else:
            out[named.name] = iree_ir.StringAttr(value).value
    return out


def _bytecode_or_text(module) -> bytes:
    import io

    buf = io.BytesIO()
    try:
        module.operation.write_bytecode(buf)
        return buf.getvalue()
    except Exception:
        return module.operation.get_asm(print_generic_op_form=True, binary=True)


def _save_input(data: bytes) -> str:
    fd, path = tempfile.mkstemp(prefix="cuvil-repro-iree-", suffix=".mlirbc")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


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

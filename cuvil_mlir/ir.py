"""The MLIR seam: the only module that imports torch-mlir's MLIR Python bindings.

Everything else in cuvil-mlir reaches MLIR through the names re-exported here, so a
change of binding package (or version) is a change to this one file. The bindings are
the upstream MLIR Python bindings shipped in the torch-mlir wheel; they carry IRDL,
Python-defined dialects (``ext``) and Python rewrite patterns, which IREE's own copy of
MLIR does not. IR objects built here never cross to IREE: see ``targets/iree.py``.
"""

from __future__ import annotations

from torch_mlir import ir, passmanager, rewrite  # noqa: F401  (re-exported)
from torch_mlir.dialects import ext, func, irdl  # noqa: F401  (re-exported)
from torch_mlir.dialects import torch as torch_dialect

__all__ = [
    "ir",
    "rewrite",
    "passmanager",
    "ext",
    "irdl",
    "func",
    "new_torch_context",
    "parse_module",
    "module_to_bytecode",
    "module_to_text",
]


def new_torch_context() -> ir.Context:
    """A fresh MLIR context with the torch dialect registered (no Cuvil ops yet)."""
    ctx = ir.Context()
    torch_dialect.register_dialect(ctx)
    return ctx


def parse_module(text: str | bytes, ctx: ir.Context) -> ir.Module:
    """Parse MLIR text or bytecode into ``ctx``."""
    with ctx:
        return ir.Module.parse(text)


def module_to_bytecode(module: ir.Module) -> bytes:
    import io

    buf = io.BytesIO()
    module.operation.write_bytecode(buf)
    return buf.getvalue()


def module_to_text(module: ir.Module, *, generic: bool = False, elide_weights: bool = False) -> str:
    """Print a module. ``elide_weights`` hides large constants (for reading, not for parsing)."""
    kwargs = {"print_generic_op_form": generic, "enable_debug_info": False}
    if elide_weights:
        kwargs["large_elements_limit"] = 16
        kwargs["large_resource_limit"] = 64
    return module.operation.get_asm(**kwargs)

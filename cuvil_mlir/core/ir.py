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
    "elements_attr",
    "elements_array",
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


# --- weights: dense elements attributes <-> numpy -------------------------------------------
# The importer stores weights as DenseElementsAttr (not torch-mlir's default dense_resource
# blobs, which the Python bindings cannot read back), so passes can fold, concatenate,
# convert and quantize them.

def _element_type(dtype: str) -> ir.Type:
    """MLIR element type of a vtensor dtype name (f32, f16, bf16, f64, si8, ui8, si32, si64, i1)."""
    floats = {"f32": ir.F32Type, "f16": ir.F16Type, "bf16": ir.BF16Type, "f64": ir.F64Type}
    if dtype in floats:
        return floats[dtype].get()
    if dtype == "i1":
        return ir.IntegerType.get_signless(1)
    if dtype[:2] in ("si", "ui") and dtype[2:].isdigit():
        width = int(dtype[2:])
        return ir.IntegerType.get_signed(width) if dtype[0] == "s" else ir.IntegerType.get_unsigned(width)
    raise ValueError(f"no MLIR element type for dtype '{dtype}'")


def elements_attr(array, dtype: str) -> ir.Attribute:
    """A DenseElementsAttr holding ``array`` (numpy) as element type ``dtype`` (vtensor names);
    bf16 takes a float array (rounded to nearest even) or an ml_dtypes.bfloat16 array."""
    import numpy as np

    if dtype == "bf16":
        import ml_dtypes

        shape = list(np.shape(array))  # ascontiguousarray makes a 0-d array 1-d: keep the shape
        bits = np.ascontiguousarray(np.asarray(array).astype(ml_dtypes.bfloat16)).view(np.uint16)
        return ir.DenseElementsAttr.get(bits, type=_element_type("bf16"), shape=shape)
    from cuvil_mlir.core.tensor_types import MLIR_TO_NUMPY

    shape = list(np.shape(array))
    arr = np.ascontiguousarray(np.asarray(array).astype(MLIR_TO_NUMPY[dtype]))
    return ir.DenseElementsAttr.get(arr, type=_element_type(dtype), shape=shape)


def elements_array(attr: ir.Attribute):
    """The numpy array of a DenseElementsAttr (splats expanded; bf16 as ml_dtypes.bfloat16);
    None for attributes whose data Python cannot read (dense_resource blobs)."""
    import numpy as np

    try:
        dense = ir.DenseElementsAttr(attr)
    except (TypeError, ValueError):
        return None
    shape = tuple(ir.ShapedType(dense.type).shape)
    element = ir.ShapedType(dense.type).element_type
    if str(element) == "bf16":  # no buffer protocol for bf16: read the printed form
        return _bf16_from_text(str(dense), shape)
    arr = np.array(dense)
    if arr.dtype == object:
        return None
    return np.broadcast_to(arr, shape).copy() if arr.shape != shape else arr


def _bf16_from_text(text: str, shape):
    """``dense<"0x...">`` (raw little-endian bits) or ``dense<[1.0, ...]>`` / a splat -> bfloat16 array."""
    import re

    import ml_dtypes
    import numpy as np

    body = text[text.index("<") + 1:text.rindex(">", 0, text.rindex(":"))]
    count = int(np.prod(shape, dtype=np.int64))
    if body.startswith('"0x'):
        raw = np.frombuffer(bytes.fromhex(body[3:-1]), dtype=np.uint16)
        values = raw.view(ml_dtypes.bfloat16)
    else:
        values = np.array([float(v) for v in re.findall(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|inf|nan)", body)],
                          dtype=np.float32).astype(ml_dtypes.bfloat16)
    if values.size == 1 and count != 1:
        return np.broadcast_to(values, shape).copy()
    return values.reshape(shape)

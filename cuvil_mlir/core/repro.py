"""Repro files for failed compiles, kept small.

A failed pass or IREE compile writes its input so the failure can be rerun. A model's input
is mostly weights (a GPT-2-size program: 0.5 GB each time), and most failures do not depend
on their values. So by default a large input is written with every large tensor literal
replaced by a splat of its type, after checking that the splat program still fails the same
way; only when it does not, or when ``CUVIL_FULL_REPRO=1``, is the whole input written (a
whole input larger than ``FULL_LIMIT`` only on request). ``CUVIL_REPRO_DIR`` (or the caller's
``directory``) says where; the default is the temp folder. The error names the file, its size
and what was left out.
"""

from __future__ import annotations

import os
import tempfile
from typing import Callable

from cuvil_mlir.core.ir import ir, module_to_bytecode, new_torch_context, parse_module

FULL_ENV = "CUVIL_FULL_REPRO"
DIR_ENV = "CUVIL_REPRO_DIR"
SMALL_LIMIT = 1 << 20  # inputs up to 1 MiB are written whole: nothing to gain
FULL_LIMIT = 64 << 20  # a whole input larger than this is written only with CUVIL_FULL_REPRO=1
SPLAT_MIN_ELEMENTS = 16  # literals with fewer elements (shapes, indices, scalars) are kept


def write(data: bytes, prefix: str, still_fails: Callable[[bytes], bool] | None, directory: str | None = None) -> tuple[str | None, str]:
    """Write a repro of ``data`` (MLIR bytecode or text); returns (path or None, a note for the
    error message: empty when the whole input was written). ``still_fails(small)`` says
    whether the splat-weight input reproduces."""
    directory = directory or os.environ.get(DIR_ENV) or tempfile.gettempdir()
    full = os.environ.get(FULL_ENV, "") not in ("", "0")
    if not full and len(data) > SMALL_LIMIT:
        small = splat_weights(data)
        if small is not None and len(small) < len(data) and still_fails is not None and _fails(still_fails, small):
            path = _save(small, prefix + "splat-", directory)
            return path, (f"repro: {path} ({_size(len(small))}, weights replaced by splats; the whole input is "
                          f"{_size(len(data))}: set {FULL_ENV}=1 to write it)")
        if len(data) > FULL_LIMIT:
            return None, (f"no repro written: the input is {_size(len(data))} and does not fail without its weights; "
                          f"set {FULL_ENV}=1 to write it (to {directory}, or {DIR_ENV})")
    path = _save(data, prefix, directory)
    return path, ""


def splat_weights(data: bytes) -> bytes | None:
    """``data`` with every tensor literal of at least SPLAT_MIN_ELEMENTS elements replaced by
    a splat of the same type, as bytecode; None when it cannot be parsed."""
    ctx = new_torch_context()
    ctx.allow_unregistered_dialects = True  # Cuvil ops (a pass's input) parse as generic ops
    try:
        module = parse_module(data, ctx)
    except Exception:
        return None
    with ctx, ir.Location.unknown():
        _splat_in(module.operation)
        return module_to_bytecode(module)


def _splat_in(op) -> None:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                _splat_in(inner.operation)
    if op.name != "torch.vtensor.literal" or "value" not in op.attributes:
        return
    value = op.attributes["value"]
    try:
        shaped = ir.ShapedType(value.type)
    except Exception:
        return
    if not shaped.has_static_shape or _count(shaped.shape) < SPLAT_MIN_ELEMENTS:
        return
    if isinstance(value, ir.DenseElementsAttr) and value.is_splat:
        return
    element = _splat_element(shaped.element_type)
    if element is not None:
        op.attributes["value"] = ir.DenseElementsAttr.get_splat(shaped, element)


def _splat_element(t):
    if isinstance(t, ir.IntegerType):
        return ir.IntegerAttr.get(t, 0 if t.width == 1 else 1)
    if isinstance(t, (ir.F32Type, ir.F16Type, ir.BF16Type, ir.F64Type)):
        return ir.FloatAttr.get(t, 0.5)
    return None


def _count(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _fails(still_fails, small: bytes) -> bool:
    try:
        return bool(still_fails(small))
    except Exception:
        return False


def _save(data: bytes, prefix: str, directory: str) -> str:
    os.makedirs(directory, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=".mlirbc", dir=directory)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} bytes"

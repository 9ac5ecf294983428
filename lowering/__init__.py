"""The built-in passes, one module per pass: ``raise-torch-to-cuvil`` is raise_torch_to_cuvil.py
and is tested by tests/lowering/raise-torch-to-cuvil.mlir. Each module exposes ``PASS``."""

from cuvil_mlir.passes import Registry

from . import (
    fuse_attention, fuse_conv_bn, fuse_gated_ffn, fuse_horizontal, fuse_linear_epilogue, fuse_norms,
    lower_cuvil_to_torch, raise_torch_to_cuvil, verify_no_cuvil,
)
from . import quantize_static, quantize_weights, raise_pt2e_quant
from . import demote_precision, narrow_io
from . import lower_cuvil_to_kernels

# In the order `cuvil passes` lists them: raise, fuse, precision/quantize, lower, verify.
BUILTIN_PASSES = tuple(m.PASS for m in (
    raise_torch_to_cuvil, raise_pt2e_quant,
    fuse_conv_bn, fuse_norms, fuse_attention, fuse_linear_epilogue, fuse_gated_ffn, fuse_horizontal,
    quantize_weights, quantize_static, narrow_io, demote_precision,
    lower_cuvil_to_kernels, lower_cuvil_to_torch,
    verify_no_cuvil,
))


def builtin_registry() -> Registry:
    """A fresh registry holding every built-in pass (callers may add their own)."""
    return Registry(BUILTIN_PASSES)

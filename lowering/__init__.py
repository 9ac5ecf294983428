"""The built-in passes, one module per pass, in one folder per stage:

    raising/      torch ops -> Cuvil ops           (raise-torch-to-cuvil, raise-pt2e-quant)
    fusion/       Cuvil ops -> fused Cuvil ops     (fuse-*)
    precision/    the precision policies' passes   (demote-precision, quantize-*, narrow-io)
    workarounds/  Cuvil ops rewritten around a backend's bug, for the targets that have it
                  (conv1x1-as-linear: cuda with sm_90 kernels)
    kernels/      Cuvil ops a target runs on its own kernels (lower-cuvil-to-kernels: cuda sm_90)
    to_torch/     Cuvil ops -> torch ops, checked  (lower-cuvil-to-torch, verify-no-cuvil)

``raise-torch-to-cuvil`` is raising/raise_torch_to_cuvil.py and is tested by
tests/lowering/raising/raise-torch-to-cuvil.mlir. Each module exposes ``PASS``: its pattern set
(or, for a pass that is not a rewrite, a FunctionPass), with its options' defaults. A pass
imports no other pass; what two passes share is in common.py.
"""

from cuvil_mlir.core.passes import Registry

from .raising import raise_pt2e_quant, raise_torch_to_cuvil
from .fusion import fuse_attention, fuse_conv_bn, fuse_gated_ffn, fuse_horizontal, fuse_linear_epilogue, fuse_norms
from .precision import demote_precision, narrow_io, quantize_static, quantize_weights
from .kernels import lower_cuvil_to_kernels
from .workarounds import conv1x1_as_linear
from .to_torch import lower_cuvil_to_torch, verify_no_cuvil

# In pipeline order (`cuvil passes` lists them so): raise, fuse, precision/quantize, workarounds, kernels, lower, verify.
BUILTIN_PASSES = tuple(m.PASS for m in (
    raise_torch_to_cuvil, raise_pt2e_quant,
    fuse_conv_bn, fuse_norms, fuse_attention, fuse_linear_epilogue, fuse_gated_ffn, fuse_horizontal,
    narrow_io, demote_precision, quantize_weights, quantize_static,
    conv1x1_as_linear, lower_cuvil_to_kernels, lower_cuvil_to_torch,
    verify_no_cuvil,
))


def builtin_registry() -> Registry:
    """A fresh registry holding every built-in pass (callers may add their own)."""
    return Registry(BUILTIN_PASSES)

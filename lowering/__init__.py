"""The built-in passes, one module per pass: ``raise-torch-to-cuvil`` is raise_torch_to_cuvil.py
and is tested by tests/lowering/raise-torch-to-cuvil.mlir."""

from cuvil_mlir.passes import FunctionPass, Registry

from . import lower_cuvil_to_torch, raise_torch_to_cuvil, verify_no_cuvil

BUILTIN_PASSES = (
    raise_torch_to_cuvil.patterns,
    lower_cuvil_to_torch.PASS,
    FunctionPass(verify_no_cuvil.NAME, verify_no_cuvil.run, "fail if a Cuvil op reaches IREE"),
)


def builtin_registry() -> Registry:
    """A fresh registry holding every built-in pass (callers may add their own)."""
    return Registry(BUILTIN_PASSES)

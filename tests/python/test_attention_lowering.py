"""Both lowerings of cuvil.attention (sdpa, decomposed) compile on the CPU and match PyTorch
for causal, boolean-mask, additive-mask and explicit-scale attention."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from cuvil_mlir.compiler.context import make_context
from cuvil_mlir.compiler.importers import fx
from cuvil_mlir.lowering import builtin_registry
from cuvil_mlir.core.passes import run_pipeline
from cuvil_mlir.runtime.session import Session
from cuvil_mlir.targets import iree, parse_target

pytestmark = pytest.mark.slow


class Attention(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind

    def forward(self, q, k, v, mask):
        if self.kind == "causal":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if self.kind == "bool_mask":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask > 0)
        if self.kind == "float_mask":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return F.scaled_dot_product_attention(q, k, v, scale=0.3)


def compile_with(model, args, attention):
    ctx = make_context()
    module = fx.import_program(fx.to_exported_program(model, args), ctx)
    registry = builtin_registry()
    passes = ["raise-torch-to-cuvil", f"lower-cuvil-to-torch{{attention={attention}}}", "verify-no-cuvil"]
    fired = run_pipeline(module, [registry.get(p) for p in passes])
    assert fired["raise-torch-to-cuvil"]["sdpa"] == 1
    target = parse_target("cpu")
    return Session(iree.compile_to_vmfb(module, target.iree_flags()), target.driver)


@pytest.mark.parametrize("attention", ["sdpa", "decomposed"])
@pytest.mark.parametrize("kind", ["causal", "bool_mask", "float_mask", "scale"])
def test_attention_lowering_matches_torch(kind, attention):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 7, 16), torch.randn(2, 3, 9 if kind != "causal" else 7, 16), None
    v = torch.randn(k.shape[0], k.shape[1], k.shape[2], 8)
    mask = torch.randn(2, 1, 7, k.shape[2])
    mask[..., 0] = 1.0  # every row keeps at least one position (a fully masked row is NaN in torch too)
    model = Attention(kind).eval()
    args = (q, k, v, mask)
    session = compile_with(model, args, attention)
    (got,) = session.invoke("main", [a.numpy() for a in args])
    with torch.no_grad():
        ref = model(*args).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("length,blocked", [(13, True), (4, False)])
def test_causal_blocks_match_torch(length, blocked):
    """decomposed with causal_block=4: 13 causal queries become blocks of 4, 4, 4 and 1, each over
    the keys up to its last position (concatenated: aten.cat), with torch's numbers; 4 queries
    (not more than a block) keep the one [L, L] form."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, length, 16), torch.randn(1, 2, length, 16), torch.randn(1, 2, length, 8)
    model = Attention("causal").eval()
    ctx = make_context()
    module = fx.import_program(fx.to_exported_program(model, (q, k, v, v)), ctx)
    registry = builtin_registry()
    passes = ["raise-torch-to-cuvil", "lower-cuvil-to-torch{attention=decomposed causal_block=4}", "verify-no-cuvil"]
    run_pipeline(module, [registry.get(p) for p in passes])
    assert ("torch.aten.cat" in str(module)) == blocked
    target = parse_target("cpu")
    session = Session(iree.compile_to_vmfb(module, target.iree_flags()), target.driver)
    (got,) = session.invoke("main", [a.numpy() for a in (q, k, v, v)])
    with torch.no_grad():
        ref = model(q, k, v, v).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)

"""The cpu target pads a linear's ragged out features (lower-cuvil-to-torch{pad_rows=16}: GPT-2's
50257-row lm_head runs ~1.6x faster as 50272 rows): the results are unchanged, with the weight
inline (padded at compile time) or an external parameter (padded once, when the module loads)."""

from __future__ import annotations

import numpy as np
import pytest

from cuvil_mlir.compiler.pipeline import Options, compile_program

torch = pytest.importorskip("torch")


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(64, 1030)  # ragged: padded to 1040
        self.head = torch.nn.Linear(1030, 1297, bias=False)  # ragged, no bias: padded to 1312

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


@pytest.mark.parametrize("params", ["inline", "external"])
def test_padded_linears_give_the_same_numbers(params):
    torch.manual_seed(0)
    model, x = Head().eval(), torch.randn(3, 64)
    lowered = compile_program(model, (x,), Options(params=params), emit="lowered").text
    assert lowered.count("torch.aten.constant_pad_nd") == 3  # two weights and one bias
    assert "!torch.vtensor<[3,1040],f32>" in lowered and "!torch.vtensor<[3,1312],f32>" in lowered
    compiled = compile_program(model, (x,), Options(params=params))
    for inputs in ((x,), (torch.randn(3, 64) * 10,)):
        with torch.no_grad():
            expected = model(*inputs).numpy()
        np.testing.assert_allclose(compiled(*inputs).numpy(), expected, rtol=1e-5, atol=1e-4)

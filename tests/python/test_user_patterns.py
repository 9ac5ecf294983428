"""A user's pattern file is first class: compile(patterns=...), and it must not fire where it must not."""

import re
from pathlib import Path

import pytest
import torch

import cuvil_mlir
from cuvil_mlir.core.passes import load_pattern_file

ROOT = Path(__file__).resolve().parents[2]


class HandWrittenSwish(torch.nn.Module):
    def __init__(self, reuse: bool = False):
        super().__init__()
        self.fc = torch.nn.Linear(16, 32)
        self.reuse = reuse

    def forward(self, x):
        h = self.fc(x)
        y = h * torch.sigmoid(h)
        return y + h if self.reuse else y  # with reuse the linear's output is needed twice


@pytest.fixture(scope="module")
def swish_patterns():
    return load_pattern_file(ROOT / "examples" / "swish_pattern.py")


def test_user_pattern_fires_and_is_correct(swish_patterns):
    model, x = HandWrittenSwish().eval(), torch.randn(4, 16)
    text = cuvil_mlir.lower(model, (x,), stage="cuvil", patterns=swish_patterns)
    assert re.search(r'"cuvil.linear".*activation = "silu"', text)
    assert "torch.aten.sigmoid" not in text
    cm = cuvil_mlir.compile(model, (x,), patterns=swish_patterns)
    assert cm.patterns_fired["fuse-hand-written-swish"] == {"swish_into_linear": 1}
    with torch.no_grad():
        ref = model(x)
    assert float((cm(x) - ref).abs().max() / ref.abs().max()) <= 1e-5


def test_user_pattern_does_not_fire_when_linear_is_reused(swish_patterns):
    model, x = HandWrittenSwish(reuse=True).eval(), torch.randn(4, 16)
    text = cuvil_mlir.lower(model, (x,), stage="cuvil", patterns=swish_patterns)
    assert "torch.aten.sigmoid" in text
    assert 'activation = "silu"' not in text

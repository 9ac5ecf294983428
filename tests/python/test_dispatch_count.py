"""Dispatches per layer of a small HF GPT-2 compiled for cuda:h200 (compile only: IREE cross-compiles
without a GPU; kernels=off so that CI needs no triton). 10 per layer on 2026-12-04: QKV matmul,
3 copies of q/k/v out of it, attention, attn.c_proj, 2 LayerNorms (computed in f32, the casts
fused into them), c_fc, mlp.c_proj. A regression (an unfused cast or epilogue) fails here."""

import sys
from collections import Counter
from pathlib import Path

import pytest

from cuvil_mlir.compiler.pipeline import Options, compile_program
from cuvil_mlir.eval.profiler import dispatch_kind

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import models  # noqa: E402

pytestmark = pytest.mark.slow

TARGET = "cuda:h200{kernels=off}"
PER_LAYER = 10


def dispatches(layers: int) -> list[dict]:
    model, args = models.gpt2(layers=layers, d_model=64, heads=4, seq=16)
    compiled = compile_program(model.half(), args, Options(target=TARGET, record_dispatches=True))
    return compiled.metadata["dispatches"][TARGET]


def test_gpt2_dispatches_per_layer_do_not_regress():
    two, three = dispatches(2), dispatches(3)
    layer = Counter(dispatch_kind(s["key"]) for s in three) - Counter(dispatch_kind(s["key"]) for s in two)
    assert len(three) - len(two) <= PER_LAYER, sorted(layer.items())
    assert "elementwise" not in layer, sorted(layer.items())  # norms' casts and bias adds stay fused


def test_kinds_of_one_layer():
    """What the count is made of (so that a change of kind shows as what it is)."""
    layer = Counter(dispatch_kind(s["key"]) for s in dispatches(3)) - Counter(dispatch_kind(s["key"]) for s in dispatches(2))
    assert layer == Counter({"matmul_like": 4, "slow_memcpy": 3, "reduction": 2, "attention": 1}), sorted(layer.items())

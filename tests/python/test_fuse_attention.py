"""fuse-attention end to end: Hugging Face GPT-2, BERT (with and without a padding mask) and
Llama built with attn_implementation="eager", and hand-written attention modules, through the
whole pipeline on IREE CPU against PyTorch; what fired (the compiled model's
``patterns_fired``), the cuvil.attention the fused stage holds (scale, causal, mask), the
look-alikes that must stay as they are, and the differential checker on the pattern."""

import math
import re

import pytest
import torch
import torch.nn as nn

import cuvil_mlir
import models
from cuvil_mlir.lowering.fusion import fuse_attention
from cuvil_mlir.eval.testing import assert_matches_reference, check_pattern

pytestmark = pytest.mark.slow


def attentions(model, args) -> list[str]:
    """The cuvil.attention ops of the fused stage (their text)."""
    text = cuvil_mlir.lower(model, args, stage="fused")
    return [line for line in text.splitlines() if '"cuvil.attention"' in line]


def fired(cm) -> int:
    return cm.patterns_fired.get("fuse-attention", {}).get("attention", 0)


def scale_of(op_text: str) -> float:
    return float(re.search(r"scale = ([-0-9.eE+]+) : f64", op_text).group(1))


def has_mask(op_text: str) -> bool:
    return "operandSegmentSizes = array<i32: 1, 1, 1, 1>" in op_text


# --- Hugging Face models, attn_implementation="eager" ---------------------------------------


@pytest.mark.parametrize("name, causal, mask", [
    ("gpt2-eager", True, False),          # HF's masking utils build the causal mask: it folds to is_causal
    ("llama-eager", True, False),         # GQA: repeat_kv stays as k/v producers
    ("bert-eager", False, False),         # no attention_mask: the all-keep mask folds away
    ("bert-eager-padded", False, True),   # the padding mask stays an additive operand
])
def test_hf_eager_attention_fuses(name, causal, mask):
    model, args = models.EAGER_ATTENTION_MODELS[name](layers=2, d_model=64, heads=4, seq=12)
    ops = attentions(model, args)
    assert len(ops) == 2, f"{name}: expected one cuvil.attention per layer, got {len(ops)}"
    for op in ops:
        assert f"is_causal = {'true' if causal else 'false'}" in op
        assert has_mask(op) == mask
        assert scale_of(op) == pytest.approx(1 / math.sqrt(16))  # head dim 64 / 4
        assert "[1,4,12,16]" in op or "[2,4,12,16]" in op
    cm = cuvil_mlir.compile(model, args, target="cpu")
    assert fired(cm) == 2
    assert_matches_reference(cm, args, reference=model)


@pytest.mark.parametrize("name, causal", [("gpt2-eager", True), ("llama-eager", True), ("bert-eager-padded", False)])
def test_hf_eager_fp16_attention_stays_fp16(name, causal):
    """fp16 models: HF's fp32 softmax upcast and cast back go; the attention is fp16."""
    model, args = models.EAGER_ATTENTION_MODELS[name](layers=1, seq=8)
    (op,) = attentions(model.half(), args)
    assert f"is_causal = {'true' if causal else 'false'}" in op
    assert op.count("f16>") >= 4 and "f32>" not in op


def test_hf_llama_eager_matches_sdpa_model():
    """The eager Llama compiled with fuse-attention computes what the SDPA Llama computes."""
    model, args = models.llama(layers=1, d_model=64, heads=4, kv_heads=2, seq=8, attn="eager")
    sdpa, _ = models.llama(layers=1, d_model=64, heads=4, kv_heads=2, seq=8, attn="sdpa")
    cm = cuvil_mlir.compile(model, args, target="cpu")
    assert fired(cm) == 1
    assert_matches_reference(cm, args, reference=sdpa)


def test_without_the_pass_attention_stays_decomposed():
    model, args = models.EAGER_ATTENTION_MODELS["gpt2-eager"](layers=1, seq=8)
    cm = cuvil_mlir.compile(model, args, target="cpu", disabled_passes=("fuse-attention",))
    assert fired(cm) == 0
    assert_matches_reference(cm, args, reference=model)


# --- hand-written modules --------------------------------------------------------------------


class HandWritten(nn.Module):
    """q @ k.transpose(-2, -1) / math.sqrt(d), optional masks, softmax, @ v, with projections."""

    def __init__(self, d_model=64, heads=4, mask="none", seq=8):
        super().__init__()
        self.heads, self.mask = heads, mask
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.register_buffer("causal", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, x, pad=None):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in self.qkv(x).split(c, -1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if self.mask == "causal-buffer":
            scores = scores.masked_fill(~self.causal[:t, :t], float("-inf"))
        if self.mask == "padding":
            scores = scores + pad  # additive [B, 1, 1, S]
        if self.mask == "boolean":
            scores = torch.where(pad, scores, torch.finfo(scores.dtype).min)
        a = torch.softmax(scores, dim=-1) @ v
        return self.out(a.transpose(1, 2).reshape(b, t, c))


def _pad_inputs(mask: str, b: int, t: int):
    keep = torch.ones(b, 1, 1, t, dtype=torch.bool)
    keep[0, ..., t // 2:] = False
    if mask == "padding":
        return (torch.zeros(b, 1, 1, t).masked_fill(~keep, torch.finfo(torch.float32).min),)
    if mask == "boolean":
        return (keep,)
    return ()


@pytest.mark.parametrize("mask, causal, operand", [
    ("none", False, False), ("causal-buffer", True, False), ("padding", False, True), ("boolean", False, True),
])
def test_hand_written_attention(mask, causal, operand):
    torch.manual_seed(0)
    model = HandWritten(mask=mask).eval()
    args = (torch.randn(2, 8, 64), *_pad_inputs(mask, 2, 8))
    (op,) = attentions(model, args)
    assert f"is_causal = {'true' if causal else 'false'}" in op and has_mask(op) == operand
    assert scale_of(op) == pytest.approx(0.25)
    cm = cuvil_mlir.compile(model, args, target="cpu")
    assert fired(cm) == 1
    assert_matches_reference(cm, args, reference=model)


def test_attention_weights_returned_is_left_alone():
    class WithWeights(nn.Module):
        def forward(self, q, k, v):
            p = torch.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-1)
            return p @ v, p

    args = tuple(torch.randn(1, 2, 8, 16) for _ in range(3))
    assert attentions(WithWeights(), args) == []
    cm = cuvil_mlir.compile(WithWeights(), args, target="cpu")
    assert fired(cm) == 0
    assert_matches_reference(cm, args, reference=WithWeights())


@pytest.mark.parametrize("body", [
    lambda q, k, v, s: torch.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-2) @ v,   # softmax over the queries
    lambda q, k, v, s: torch.softmax(q @ k.transpose(-2, -1) / s, dim=-1) @ v,      # scale is an input
    lambda q, k, v, s: torch.relu(torch.softmax(q @ k.transpose(-2, -1), -1)) @ v,  # value matmul reads relu(softmax)
])
def test_look_alikes_are_left_alone(body):
    class LookAlike(nn.Module):
        def forward(self, q, k, v, s):
            return body(q, k, v, s)

    args = (*(torch.randn(1, 2, 8, 16) for _ in range(3)), torch.tensor(4.0))
    assert attentions(LookAlike(), args) == []


# --- the differential checker ----------------------------------------------------------------


def test_differential_checker():
    report = check_pattern(fuse_attention.patterns, "attention", seeds=1)
    assert report.passed, str(report)
    assert any(c.matches and c.fired for c in report.checks)

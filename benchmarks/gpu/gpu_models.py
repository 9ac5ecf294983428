"""Models of the GPU benchmark that examples/models.py has no builder for. Both sides (build.py
here, run_on_h200.py there) get every model through build(), so they build the same one."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import models  # noqa: E402


def gpt_block(batch=1, seq=128, d_model=768, heads=12):
    """examples' TransformerBlock (LN, fused QKV, causal SDPA, GELU MLP) at GPT-2-small width
    and 12 heads: the block plain IREE compiles (HF GPT-2 does not go through plain torch-mlir)."""
    torch.manual_seed(0)
    return models.TransformerBlock(d_model, heads).eval(), (torch.randn(batch, seq, d_model),)


BUILDERS = {"gpt_block": gpt_block}


def build(builder: str, kwargs: dict):
    """(model in eval mode, example inputs) from this file's builders or examples/models.py."""
    fn = BUILDERS.get(builder) or getattr(models, builder)
    return fn(**kwargs)

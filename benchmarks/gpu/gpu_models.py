"""Models of the GPU benchmark that examples/models.py has no builder for. Both sides (build.py
here, run_on_h200.py there) get every model through build(), so they build the same one.

``weights="sign"`` (a build() keyword, kept in case.json so the GPU side rebuilds the same model):
every floating-point tensor of two or more dimensions (linear/conv weights, embeddings) becomes
sign(w) * std(w) of its own random init: still random, same scale, but one bit of entropy per weight,
so a module with its weights embedded compresses ~10x (xz) and GPT-2-small-width modules fit
the device tool's 64 MiB. Latency does not depend on weight values. Quantization error on such
weights is NOT representative (each tensor is exactly two values): precision numerics are
checked on models with normal weights.
"""

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


def llama_ffn(layers=1, d_model=768, heads=12, kv_heads=4, ffn=2048, vocab=256, seq=512, batch=1, attn="eager"):
    """A Hugging Face Llama (RMSNorm, rotary, grouped KV heads, SwiGLU) with its FFN width given
    (examples' llama() fixes it at 4 * d_model)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(num_hidden_layers=layers, hidden_size=d_model, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, intermediate_size=ffn, vocab_size=vocab,
                         max_position_embeddings=max(2048, seq), attn_implementation=attn, bos_token_id=0, eos_token_id=0)
    return models.LogitsOnly(LlamaForCausalLM(config)).eval(), (torch.randint(0, vocab, (batch, seq)),)


def compare_block():
    """The `cuvil compare --build-only/--from` model: a GPT-2-small-width block (d=768, 12 heads,
    T=128, batch 8), fp16, sign weights. A factory without arguments (FILE.py:FACTORY)."""
    model, (x,) = gpt_block(batch=8, seq=128, d_model=768, heads=12)
    sign_weights(model)
    return model.half(), (x.half(),)


BUILDERS = {"gpt_block": gpt_block, "llama_ffn": llama_ffn}


@torch.no_grad()
def sign_weights(model) -> None:
    for p in model.parameters():
        if p.is_floating_point() and p.dim() >= 2:
            std = float(p.float().std())
            p.copy_(torch.where(p >= 0, std, -std).to(p.dtype))


@torch.no_grad()
def tiled_sign_weights(model, period: int = 64) -> None:
    """sign_weights from one random ``period`` x ``period`` block tiled over each matrix (rank <=
    ``period``): the same timing, numerics still checkable against torch (same weights there), and
    a module that xz shrinks >100x whatever layout IREE stores the weights in (real-size models,
    e.g. Llama d=2048, otherwise do not fit the device tool's 64 MiB)."""
    for p in model.parameters():
        if p.is_floating_point() and p.dim() >= 2:
            std = float(p.float().std())
            block = p.reshape(p.shape[0], -1)[:period, :period]
            block = torch.where(block >= 0, std, -std).to(p.dtype)
            rows, cols = p.shape[0], p[0].numel()
            tiled = block.repeat(-(-rows // block.shape[0]), -(-cols // block.shape[1]))[:rows, :cols]
            p.copy_(tiled.reshape(p.shape))


def build(builder: str, kwargs: dict):
    """(model in eval mode, example inputs) from this file's builders or examples/models.py."""
    kwargs = dict(kwargs)
    weights = kwargs.pop("weights", "random")
    fn = BUILDERS.get(builder) or getattr(models, builder)
    model, args = fn(**kwargs)
    if weights == "sign":
        sign_weights(model)
    elif weights == "tiled":
        tiled_sign_weights(model)
    return model, args

"""fuse-gated-ffn and fuse-horizontal end to end: real models through the whole pipeline on
IREE CPU against PyTorch, what fired (the compiled model's ``patterns_fired``), and how many
linears are left; plus compile-only checks that IREE's CUDA and Vulkan pipelines accept the
fused forms."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import cuvil_mlir
import models

pytestmark = pytest.mark.slow

TOLERANCE = 1e-4  # float32, max-norm relative


def rel_err(got, ref) -> float:
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def assert_matches(model, args, cm):
    with torch.no_grad():
        ref = model(*args)
    assert rel_err(cm(*args), ref) <= TOLERANCE


def fired(cm, pass_name: str, pattern: str) -> int:
    return cm.patterns_fired.get(pass_name, {}).get(pattern, 0)


def linears_lowered(cm) -> int:
    """cuvil.linear ops that reached the lowering: what is left after fusion."""
    return cm.patterns_fired["lower-cuvil-to-torch"]["linear"]


class GatedMLP(nn.Module):
    """HF Llama's MLP, ``down(act(gate(x)) * up(x))``, with a choice of gate activation."""

    def __init__(self, d=32, f=48, act=F.silu, bias=False, up_first=False):
        super().__init__()
        self.gate, self.up = nn.Linear(d, f, bias=bias), nn.Linear(d, f, bias=bias)
        self.down = nn.Linear(f, d, bias=bias)
        self.act, self.up_first = act, up_first

    def forward(self, x):
        g, u = self.act(self.gate(x)), self.up(x)
        return self.down(u * g if self.up_first else g * u)


class QKVAttention(nn.Module):
    """Separate Q, K, V projections (biases on Q and V only, as in Whisper), SDPA, output proj."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d, bias=False), nn.Linear(d, d)
        self.o = nn.Linear(d, d)

    def forward(self, x):
        b, t, c = x.shape
        split = lambda z: z.view(b, t, self.heads, c // self.heads).transpose(1, 2)  # noqa: E731
        a = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)), is_causal=True)
        return self.o(a.transpose(1, 2).reshape(b, t, c))


GATED = {
    "swiglu": dict(act=F.silu),
    "swiglu_bias_up_first": dict(act=F.silu, bias=True, up_first=True),
    "geglu": dict(act=F.gelu, bias=True),
    "geglu_tanh_up_first": dict(act=lambda v: F.gelu(v, approximate="tanh"), up_first=True),
}


@pytest.mark.parametrize("name", sorted(GATED))
def test_hand_written_gated_mlp(name):
    torch.manual_seed(0)
    model, args = GatedMLP(**GATED[name]).eval(), (torch.randn(2, 5, 32),)
    cm = cuvil_mlir.compile(model, args, target="cpu")
    assert fired(cm, "fuse-gated-ffn", "gated_ffn") == 1
    assert linears_lowered(cm) == 2  # the gated [gate; up] linear and down
    assert_matches(model, args, cm)


def test_gated_mlp_with_the_pass_disabled_keeps_three_linears():
    torch.manual_seed(0)
    model, args = GatedMLP().eval(), (torch.randn(2, 5, 32),)
    cm = cuvil_mlir.compile(model, args, target="cpu", disabled_passes=("fuse-gated-ffn",))
    assert "fuse-gated-ffn" not in cm.patterns_fired
    assert fired(cm, "fuse-horizontal", "horizontal_linears") == 0  # gate (silu) and up (none) differ
    assert linears_lowered(cm) == 3
    assert_matches(model, args, cm)


def test_qkv_attention_block():
    torch.manual_seed(0)
    model, args = QKVAttention().eval(), (torch.randn(2, 6, 32),)
    cm = cuvil_mlir.compile(model, args, target="cpu")
    assert fired(cm, "fuse-horizontal", "horizontal_linears") == 1
    assert linears_lowered(cm) == 2  # [q; k; v] and o
    assert_matches(model, args, cm)


def test_hf_llama():
    """Per layer: q/k/v (grouped KV heads: unequal widths) become one linear, gate/up one
    swiglu linear; o_proj, down_proj and the LM head stay."""
    layers = 2
    model, args = models.llama(layers=layers, d_model=32, heads=4, kv_heads=2, vocab=64, seq=8)
    cm = cuvil_mlir.compile(model, args, target="cpu")
    assert fired(cm, "fuse-gated-ffn", "gated_ffn") == layers
    assert fired(cm, "fuse-horizontal", "horizontal_linears") == layers
    assert linears_lowered(cm) == 4 * layers + 1
    assert_matches(model, args, cm)


def test_hf_phi3_packed_gate_up():
    """Phi-3 packs gate and up into one gate_up_proj and chunks it: the packed form becomes the
    gated linear as it is (no weights stacked); its qkv_proj is already one linear."""
    from transformers import AutoModelForCausalLM, Phi3Config

    torch.manual_seed(0)
    config = Phi3Config(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                        intermediate_size=64, vocab_size=64, attn_implementation="sdpa", bos_token_id=0,
                        eos_token_id=0, pad_token_id=0)
    model = models.LogitsOnly(AutoModelForCausalLM.from_config(config)).eval()
    args = (torch.randint(0, 64, (1, 8)),)
    cm = cuvil_mlir.compile(model, args, target="cpu")
    assert fired(cm, "fuse-gated-ffn", "packed_gated_ffn") == 2
    assert "fuse-horizontal" not in cm.patterns_fired
    assert_matches(model, args, cm)


def test_hf_bert_qkv():
    layers = 2
    model, args = models.bert(layers=layers, d_model=32, heads=4, vocab=64, seq=8)
    cm = cuvil_mlir.compile(model, args, target="cpu")
    assert fired(cm, "fuse-horizontal", "horizontal_linears") == layers
    assert "fuse-gated-ffn" not in cm.patterns_fired  # BERT's MLP is not gated
    assert_matches(model, args, cm)


def test_hf_gpt2_has_nothing_to_fuse():
    """GPT-2's c_attn is already one Conv1D (one matmul) and its other linears read distinct inputs."""
    model, args = models.gpt2(layers=1, d_model=32, heads=4, vocab=64, seq=8)
    cm = cuvil_mlir.compile(model, args, target="cpu")
    assert "fuse-horizontal" not in cm.patterns_fired and "fuse-gated-ffn" not in cm.patterns_fired


@pytest.mark.parametrize("target", ["cuda:sm_86", "vulkan"])
def test_llama_block_compiles_for_gpu(target):
    """Compile only (no device needed): IREE's GPU pipelines accept the fused forms."""
    model, args = models.llama(layers=1, d_model=32, heads=4, kv_heads=2, vocab=64, seq=8)
    cm = cuvil_mlir.compile(model, args, target=target)
    assert cm.targets == [target]
    assert fired(cm, "fuse-gated-ffn", "gated_ffn") == 1
    assert fired(cm, "fuse-horizontal", "horizontal_linears") == 1

"""Small real models used by the README example, the end-to-end tests and the benchmarks.

Weights are random (nothing is downloaded); Hugging Face architectures are built from configs.
Each builder returns ``(model in eval mode, example inputs tuple)``.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d_in=64, d_hidden=256, d_out=32):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_hidden)
        self.fc3 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return self.fc3(F.silu(self.fc2(F.gelu(self.fc1(x)))))


class SmallCNN(nn.Module):
    """conv + batchnorm + relu blocks, then a linear classifier."""

    def __init__(self, channels=(3, 16, 32), classes=10):
        super().__init__()
        layers = []
        for c_in, c_out in zip(channels, channels[1:]):
            layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU(), nn.MaxPool2d(2)]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(channels[-1], classes)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


class TransformerBlock(nn.Module):
    """Pre-norm GPT-style block: LayerNorm, fused QKV linear, causal SDPA, GELU MLP."""

    def __init__(self, d_model=64, n_heads=4, mlp_ratio=4):
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, mlp_ratio * d_model)
        self.out = nn.Linear(mlp_ratio * d_model, d_model)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        heads = lambda z: z.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2)  # noqa: E731
        a = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class BasicBlock(nn.Module):
    """torchvision's BasicBlock: two 3x3 conv + BN, the shortcut a 1x1 conv + BN where the block
    changes stride or width (ResNet's downsample convs)."""

    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out)
        self.conv2, self.bn2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False), nn.BatchNorm2d(c_out)
        self.downsample = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    """torchvision's ResNet layout with BasicBlocks: 7x7 stride-2 stem + BN + ReLU + max pool,
    four stages of ``blocks`` blocks (``width`` channels, doubling per stage, the first block of
    stages 2-4 at stride 2), global average pool, fc. ResNet-18: blocks (2, 2, 2, 2), width 64."""

    def __init__(self, width=64, blocks=(2, 2, 2, 2), classes=1000):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, c_in = [], width
        for i, (count, c_out) in enumerate(zip(blocks, (width, 2 * width, 4 * width, 8 * width))):
            stages.append(nn.Sequential(*(BasicBlock(c_in if j == 0 else c_out, c_out, 2 if i > 0 and j == 0 else 1)
                                          for j in range(count))))
            c_in = c_out
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(8 * width, classes)

    def forward(self, x):
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet(batch=1, size=64, width=8, blocks=(1, 1, 1, 1), classes=10, seed=0):
    """A ResNet (``ResNet``) with trained-looking BN statistics, so folding them changes something."""
    torch.manual_seed(seed)
    model = ResNet(width, blocks, classes).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
    return model, (torch.randn(batch, 3, size, size),)


def mlp(batch=8):
    torch.manual_seed(0)
    return MLP().eval(), (torch.randn(batch, 64),)


def small_cnn(batch=2, size=32):
    torch.manual_seed(0)
    model = SmallCNN().eval()
    with torch.no_grad():  # non-trivial running statistics, so folding/lowering BN is really tested
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return model, (torch.randn(batch, 3, size, size),)


def transformer_block(batch=2, seq=16, d_model=64):
    torch.manual_seed(0)
    return TransformerBlock(d_model).eval(), (torch.randn(batch, seq, d_model),)


class LogitsOnly(nn.Module):
    """Hugging Face models return ModelOutput objects; export the logits tensor only."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def gpt2(layers=2, d_model=64, heads=4, vocab=256, seq=16, batch=1, attn="sdpa"):
    """A Hugging Face GPT-2 built from a config with random weights."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_embd=d_model, n_head=heads, vocab_size=vocab, n_positions=max(64, seq),
                        attn_implementation=attn, bos_token_id=0, eos_token_id=0)
    model = LogitsOnly(GPT2LMHeadModel(config)).eval()
    return model, (torch.randint(0, vocab, (batch, seq)),)


class _HiddenStates(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids).last_hidden_state


def bert(layers=2, d_model=64, heads=4, vocab=256, seq=16, batch=1, attn="sdpa"):
    """A Hugging Face BERT encoder from a config (non-persistent position-id buffers)."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(num_hidden_layers=layers, hidden_size=d_model, num_attention_heads=heads,
                        intermediate_size=4 * d_model, vocab_size=vocab, attn_implementation=attn)
    return _HiddenStates(BertModel(config)).eval(), (torch.randint(0, vocab, (batch, seq)),)


def llama(layers=2, d_model=64, heads=4, kv_heads=2, vocab=256, seq=16, batch=1, attn="sdpa"):
    """A Hugging Face Llama from a config: RMSNorm, rotary embeddings, grouped KV heads, SwiGLU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(num_hidden_layers=layers, hidden_size=d_model, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, intermediate_size=4 * d_model, vocab_size=vocab,
                         attn_implementation=attn, bos_token_id=0, eos_token_id=0)
    return LogitsOnly(LlamaForCausalLM(config)).eval(), (torch.randint(0, vocab, (batch, seq)),)


E2E_MODELS = {"mlp": mlp, "cnn": small_cnn, "transformer": transformer_block, "gpt2": gpt2, "bert": bert, "llama": llama}


class _HiddenStatesPadded(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def bert_padded(layers=2, d_model=64, heads=4, vocab=256, seq=16, batch=2, attn="eager"):
    """BERT with a padding ``attention_mask`` input (the first sequence padded after half its
    length): HF turns it into an additive [B, 1, L, S] float mask."""
    model, (ids,) = bert(layers=layers, d_model=d_model, heads=heads, vocab=vocab, seq=seq, batch=batch, attn=attn)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[0, seq // 2:] = 0
    return _HiddenStatesPadded(model.model).eval(), (ids, mask)


# The Hugging Face models as they run with attn_implementation="eager": attention written out
# by hand (matmul, scale, mask, softmax, matmul), which fuse-attention recognizes.
EAGER_ATTENTION_MODELS = {
    "gpt2-eager": lambda **kw: gpt2(attn="eager", **kw),
    "bert-eager": lambda **kw: bert(attn="eager", **kw),
    "bert-eager-padded": lambda **kw: bert_padded(attn="eager", **kw),
    "llama-eager": lambda **kw: llama(attn="eager", **kw),
}

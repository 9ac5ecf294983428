"""fuse-conv-bn and fuse-linear-epilogue on real models: a CNN with Conv+BatchNorm+ReLU/ReLU6/
SiLU, an MLP with GELU/SiLU and hand-written epilogues, and a Hugging Face GPT-2 (NewGELU
written out, Conv1D as addmm): the patterns fire (metadata and fused-stage IR) and the compiled
model matches PyTorch on IREE CPU. With the passes switched off the epilogues stay separate."""

import math
import re

import numpy as np
import pytest
import torch

import cuvil_mlir
import models

pytestmark = pytest.mark.slow


def rel_err(got, ref) -> float:
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def _randomize_bn(bn):
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2)
        bn.weight.uniform_(0.5, 2), bn.bias.uniform_(-1, 1)


class SmallCNN(torch.nn.Module):
    """Conv+BN+ReLU, depthwise Conv (no bias)+BN+ReLU6, Conv+BN+SiLU, pooled into a Linear."""

    def __init__(self):
        super().__init__()
        n = torch.nn
        self.block1 = n.Sequential(n.Conv2d(3, 8, 3, padding=1), n.BatchNorm2d(8), n.ReLU())
        self.block2 = n.Sequential(n.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), n.BatchNorm2d(8), n.ReLU6())
        self.block3 = n.Sequential(n.Conv2d(8, 6, 1), n.BatchNorm2d(6), n.SiLU())
        self.head = n.Linear(6, 5)
        for block in (self.block1, self.block2, self.block3):
            _randomize_bn(block[1])

    def forward(self, x):
        y = self.block3(self.block2(self.block1(x)))
        return self.head(y.mean(dim=(2, 3)))


class MLP(torch.nn.Module):
    """Linear+GELU, Linear+SiLU, a hand-written x @ W + b on a 3-D input with y * sigmoid(y),
    and the erf GELU written out."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 24)
        self.w = torch.nn.Parameter(torch.randn(24, 20) / math.sqrt(24))
        self.b = torch.nn.Parameter(torch.randn(20))
        self.fc3 = torch.nn.Linear(20, 8)

    def forward(self, x):
        y = torch.nn.functional.silu(self.fc2(torch.nn.functional.gelu(self.fc1(x))))
        y = y @ self.w + self.b
        y = y * torch.sigmoid(y)
        y = self.fc3(y)
        return 0.5 * y * (1.0 + torch.erf(y / math.sqrt(2.0)))


def _fused_ops(model, args):
    ir = cuvil_mlir.lower(model, args, stage="fused")
    return ir, re.findall(r'"cuvil\.(linear|conv2d)"\([^)]*\) \{activation = "([a-z0-9_]+)"', ir)


@pytest.fixture(scope="module")
def cnn():
    torch.manual_seed(0)
    return SmallCNN().eval(), (torch.randn(2, 3, 10, 10),)


def test_cnn_conv_bn_activation_become_one_conv_each(cnn):
    model, args = cnn
    ir, ops = _fused_ops(model, args)
    assert [(op, act) for op, act in ops if op == "conv2d"] == [("conv2d", "relu"), ("conv2d", "relu6"), ("conv2d", "silu")]
    # nothing of the batch norms or activations is left as torch ops
    for leftover in ("torch.aten.sqrt", "torch.aten.sub.Tensor", "torch.aten.relu", "torch.aten.maximum", "torch.aten.silu"):
        assert leftover not in ir, leftover

    cm = cuvil_mlir.compile(model, args, target="cpu")
    fired = cm.patterns_fired
    assert fired["fuse-conv-bn"] == {"conv_bn": 3}
    assert fired["fuse-linear-epilogue"] == {"relu_epilogue": 1, "relu6_epilogue": 1, "silu_epilogue": 1}
    with torch.no_grad():
        ref = model(*args)
    assert rel_err(cm(*args), ref) <= 1e-4
    torch.manual_seed(3)
    fresh = torch.randn_like(args[0]) * 3
    with torch.no_grad():
        assert rel_err(cm(fresh), model(fresh)) <= 1e-4


def test_cnn_without_the_passes_keeps_bn_and_activations(cnn):
    from cuvil_mlir.compiler.pipeline import Options, compile_program

    model, args = cnn

    text = compile_program(model, args, Options(disabled_passes=("fuse-conv-bn", "fuse-linear-epilogue")), emit="fused").text
    assert "torch.aten.sqrt" in text and "torch.aten.relu" in text and "torch.aten.silu" in text
    assert 'activation = "relu"' not in text


def test_cnn_f16_conv_bn_folds():
    torch.manual_seed(1)
    n = torch.nn
    model = n.Sequential(n.Conv2d(3, 4, 3, padding=1), n.BatchNorm2d(4), n.ReLU())
    _randomize_bn(model[1])
    model = model.eval().half()
    args = (torch.randn(1, 3, 6, 6).half(),)
    ir, ops = _fused_ops(model, args)
    assert ops == [("conv2d", "relu")] and "torch.aten.to.dtype" not in ir
    cm = cuvil_mlir.compile(model, args)
    with torch.no_grad():
        ref = model.float()(args[0].float())
    assert rel_err(cm(*args).float(), ref) <= 2e-2


def test_training_mode_bn_is_not_folded():
    torch.manual_seed(2)
    n = torch.nn
    model = n.Sequential(n.Conv2d(3, 4, 3, padding=1), n.BatchNorm2d(4), n.ReLU()).train()
    ir = cuvil_mlir.lower(model, (torch.randn(2, 3, 6, 6),), stage="fused")
    conv = re.findall(r'"cuvil\.conv2d".*activation = "([a-z0-9_]+)"', ir)
    assert conv == ["none"]  # batch statistics computed from the conv: no folding, no fused relu
    assert "torch.aten.relu" in ir


def test_mlp_epilogues_fire_and_match_pytorch():
    torch.manual_seed(0)
    model, args = MLP().eval(), (torch.randn(2, 3, 16),)
    ir, ops = _fused_ops(model, args)
    assert ops == [("linear", "gelu"), ("linear", "silu"), ("linear", "silu"), ("linear", "gelu")]
    assert "torch.aten.sigmoid" not in ir and "torch.aten.erf" not in ir and "torch.aten.add.Tensor" not in ir

    cm = cuvil_mlir.compile(model, args)
    assert cm.patterns_fired["fuse-linear-epilogue"] == {
        "gelu_epilogue": 1, "silu_epilogue": 1, "bias_add": 1, "swish_epilogue": 1, "gelu_formula_epilogue": 1,
    }
    with torch.no_grad():
        assert rel_err(cm(*args), model(*args)) <= 1e-5


def test_raise_alone_leaves_the_epilogues():
    """raise-torch-to-cuvil maps one op to one op; the "cuvil" stage keeps the activations."""
    torch.manual_seed(0)
    model, args = MLP().eval(), (torch.randn(2, 3, 16),)
    ir = cuvil_mlir.lower(model, args, stage="cuvil")
    assert set(re.findall(r'"cuvil\.linear".*?activation = "([a-z0-9_]+)"', ir)) == {"none"}
    assert "torch.aten.gelu" in ir and "torch.aten.silu" in ir and "torch.aten.erf" in ir


def test_gpt2_block_new_gelu_and_conv1d_bias_fuse():
    model, args = models.gpt2(layers=1, d_model=64, heads=4, vocab=128, seq=8)
    ir, ops = _fused_ops(model, args)
    assert ("linear", "gelu_tanh") in ops  # NewGELU, written out by HF, fused into c_fc
    assert "torch.aten.tanh" not in ir and "torch.aten.pow.Tensor_Scalar" not in ir

    cm = cuvil_mlir.compile(model, args)
    fired = cm.patterns_fired["fuse-linear-epilogue"]
    assert fired["gelu_formula_epilogue"] == 1
    assert fired["bias_add"] == 4  # c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj: Conv1D's addmm
    with torch.no_grad():
        ref = model(*args)
    # IREE's gelu(tanh) is less exact than the written-out formula (fuse_linear_epilogue.py)
    assert rel_err(cm(*args), ref) <= 1e-4

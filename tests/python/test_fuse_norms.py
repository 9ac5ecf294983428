"""fuse-norms end to end: hand-written RMSNorm / LayerNorm modules (HF Llama, T5, Gemma-style,
hand-written LayerNorm) through the whole pipeline on IREE CPU against PyTorch, what fired (the
compiled model's ``patterns_fired``), the fp32 compute of fp16 models, the look-alikes that
must stay as they are, and the differential checker on every fuse-norms pattern."""

import re

import pytest
import torch
import torch.nn as nn

import cuvil_mlir
import models
from cuvil_mlir.lowering.fusion import fuse_norms
from cuvil_mlir.eval.testing import assert_matches_reference, check_pattern

pytestmark = pytest.mark.slow


def fused_ir(model, args) -> str:
    return cuvil_mlir.lower(model, args, stage="fused")


def norms_fired(cm) -> dict:
    return cm.patterns_fired.get("fuse-norms", {})


class LlamaRMSNorm(nn.Module):
    """HF LlamaRMSNorm / MistralRMSNorm, written out as in transformers."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.randn(d)), eps

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


class T5LayerNorm(nn.Module):
    """HF T5LayerNorm: the variance of the fp32 upcast, the fp16 input times an fp32 rsqrt."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.randn(d)), eps

    def forward(self, x):
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            x = x.to(self.weight.dtype)
        return self.weight * x


class GemmaRMSNorm(nn.Module):
    """Gemma: fp32 compute, ``(1 + w)`` scale, cast back with type_as."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.randn(d) * 0.1), eps

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.float())).type_as(x)


class SpelledRMSNorm(nn.Module):
    """Other spellings: x*x, sum / N, 1 / sqrt, x / sqrt, pow(-0.5), weight on the left."""

    def __init__(self, d, spelling, eps=1e-5):
        super().__init__()
        self.weight, self.eps, self.spelling = nn.Parameter(torch.randn(d)), eps, spelling

    def forward(self, x):
        ms = (x * x).sum(-1, keepdim=True) / x.shape[-1]
        if self.spelling == "reciprocal":
            y = x * (1.0 / torch.sqrt(ms + self.eps))
        elif self.spelling == "div":
            y = x / torch.sqrt(ms + self.eps)
        else:
            y = x * (ms + self.eps) ** -0.5
        return self.weight * y


class HandLayerNorm(nn.Module):
    """LayerNorm written out: a choice of variance, rsqrt or division, affine or not."""

    def __init__(self, shape, variance="var", rsqrt=False, weight=True, bias=True, eps=1e-5):
        super().__init__()
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.dims = tuple(range(-len(shape), 0))
        self.variance, self.rsqrt, self.eps = variance, rsqrt, eps
        self.weight = nn.Parameter(torch.randn(shape)) if weight else None
        self.bias = nn.Parameter(torch.randn(shape)) if bias else None

    def forward(self, x):
        mean = x.mean(self.dims, keepdim=True)
        if self.variance == "var":
            var = x.var(self.dims, keepdim=True, unbiased=False)
        elif self.variance == "var_mean":
            var, mean = torch.var_mean(x, self.dims, keepdim=True, correction=0)
        else:
            var = ((x - mean) ** 2).mean(self.dims, keepdim=True)
        y = (x - mean) * torch.rsqrt(var + self.eps) if self.rsqrt else (x - mean) / torch.sqrt(var + self.eps)
        if self.weight is not None:
            y = y * self.weight
        return y + self.bias if self.bias is not None else y


class Block(nn.Module):
    """norm -> linear, so the norm sits inside a graph as in a model."""

    def __init__(self, norm, d):
        super().__init__()
        self.norm, self.fc = norm, nn.Linear(d, d)

    def forward(self, x):
        return self.fc(self.norm(x)) + x


# --- real models ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_hf_llama_rms_norms_fuse(dtype):
    model, args = models.llama(layers=2)
    model = model.to(dtype)
    cm = cuvil_mlir.compile(model, args)
    assert norms_fired(cm) == {"rms_norm": 5}  # two per layer and the final norm
    assert cm.patterns_fired["lower-cuvil-to-torch"]["norm"] == 5
    assert_matches_reference(cm, args, reference=model)


def test_hf_llama_fp16_norm_computes_in_fp32():
    model, args = models.llama(layers=1)
    text = fused_ir(model.half(), args)
    norms = re.findall(r'"cuvil.norm"\(.*', text)
    assert len(norms) == 3
    for line in norms:  # the upcast input, an fp32 weight, an fp32 result ...
        assert re.search(r'kind = "rms".*: \(!torch.vtensor<\[1,16,64\],f32>, !torch.vtensor<\[64\],f32>\) -> !torch.vtensor<\[1,16,64\],f32>', line)
    assert text.count("torch.aten.rsqrt") == 0
    # ... cast back to fp16 right after it
    assert len(re.findall(r'= "cuvil.norm".*\n\s*%\d+ = torch.aten.to.dtype %\d+, %int5', text)) == 3


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_models_with_nn_layer_norm_are_left_to_the_raise(name):
    model, args = models.E2E_MODELS[name]()
    text = fused_ir(model, args)
    assert "fuse-norms" not in cuvil_mlir.compile(model, args).patterns_fired
    assert 'kind = "layer"' in text  # aten.layer_norm raised whole


# --- hand-written modules ------------------------------------------------------------------------

RMS = {
    "llama": (lambda d: LlamaRMSNorm(d), "rms_norm"),
    "t5": (lambda d: T5LayerNorm(d), "rms_norm"),
    "gemma": (lambda d: GemmaRMSNorm(d), "rms_norm"),
    "reciprocal": (lambda d: SpelledRMSNorm(d, "reciprocal"), "rms_norm"),
    "div_sqrt": (lambda d: SpelledRMSNorm(d, "div"), "rms_norm"),
    "pow_half": (lambda d: SpelledRMSNorm(d, "pow"), "rms_norm"),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("name", sorted(RMS))
def test_hand_written_rms_norm(name, dtype):
    torch.manual_seed(0)
    make, pattern = RMS[name]
    model = Block(make(32), 32).eval().to(dtype)
    args = (torch.randn(2, 5, 32, dtype=dtype),)
    cm = cuvil_mlir.compile(model, args)
    assert norms_fired(cm) == {pattern: 1}
    assert_matches_reference(cm, args, reference=model)


LAYER = {
    "var_div_affine": (dict(variance="var"), "layer_norm_affine"),
    "var_mean_rsqrt_affine": (dict(variance="var_mean", rsqrt=True), "layer_norm_affine"),
    "squares_rsqrt_affine": (dict(variance="squares", rsqrt=True), "layer_norm_affine"),
    "bias_only": (dict(weight=False), "layer_norm_affine"),
    "weight_only": (dict(bias=False), "layer_norm"),
    "plain_rsqrt": (dict(rsqrt=True, weight=False, bias=False), "layer_norm"),
    "plain_div": (dict(weight=False, bias=False), "layer_norm_div"),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("name", sorted(LAYER))
def test_hand_written_layer_norm(name, dtype):
    torch.manual_seed(0)
    options, pattern = LAYER[name]
    model = Block(HandLayerNorm(32, **options), 32).eval().to(dtype)
    args = (torch.randn(2, 5, 32, dtype=dtype) * 3 + 1,)
    cm = cuvil_mlir.compile(model, args)
    assert norms_fired(cm) == {pattern: 1}
    assert_matches_reference(cm, args, reference=model)


def test_layer_norm_over_last_two_dims():
    torch.manual_seed(0)
    model = HandLayerNorm((5, 8), variance="var_mean", rsqrt=True).eval()
    args = (torch.randn(3, 5, 8),)
    text = fused_ir(model, args)
    assert re.search(r'"cuvil.norm"\(%arg0, %\d+, %\d+\) \{eps = 1.000000e-05 : f64, kind = "layer", normalized_shape = array<i64: 5, 8>', text)
    cm = cuvil_mlir.compile(model, args)
    assert norms_fired(cm) == {"layer_norm_affine": 1}
    assert_matches_reference(cm, args, reference=model)


# --- look-alikes ---------------------------------------------------------------------------------


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _rms(x, dim=-1, keepdim=True):
    return x * torch.rsqrt(x.pow(2).mean(dim, keepdim=keepdim) + 1e-6)


NOT_NORMS = {
    "reduces_other_dim": (lambda x: _rms(x, dim=1), (torch.randn(2, 6, 8),)),
    "keepdim_false": (lambda x: _rms(x, keepdim=False), (torch.randn(8, 8),)),
    "eps_not_constant": (lambda x, e: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + e), (torch.randn(2, 8), torch.full((2, 1), 1e-5))),
    # the mean of squares is also an output (one value, two users)
    "variance_reused": (lambda x: (lambda ms: (x * torch.rsqrt(ms + 1e-6), ms))(x.pow(2).mean(-1, keepdim=True)),
                        (torch.randn(2, 8),)),
    "eps_outside_sqrt": (lambda x: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + 1e-6), (torch.randn(2, 8),)),
    "unbiased_var": (lambda x: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + 1e-5), (torch.randn(2, 8),)),
    "std_plus_eps": (lambda x: (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5), (torch.randn(2, 8),)),
}


@pytest.mark.parametrize("name", sorted(NOT_NORMS))
def test_look_alikes_are_left_alone(name):
    fn, args = NOT_NORMS[name]
    model = Fn(fn).eval()
    assert "cuvil.norm" not in fused_ir(model, args)
    cm = cuvil_mlir.compile(model, args)
    assert "fuse-norms" not in cm.patterns_fired
    assert_matches_reference(cm, args, reference=model)


def test_variance_with_another_use_in_layer_norm_is_left_alone():
    def fn(x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) * torch.rsqrt(var + 1e-5) * 2.0, var

    assert "cuvil.norm" not in fused_ir(Fn(fn).eval(), (torch.randn(3, 8),))


def test_weight_of_another_shape_stays_a_multiply():
    torch.manual_seed(0)
    scale = torch.randn(5, 16)  # [s, d], not the normalized shape [d]
    model = Fn(lambda x: _rms(x) * scale).eval()
    args = (torch.randn(2, 5, 16),)
    text = fused_ir(model, args)
    assert re.search(r'= "cuvil.norm"\(%arg0\) \{eps = [^}]*kind = "rms".*operandSegmentSizes = array<i32: 1, 0, 0>', text)
    assert re.search(r'torch.aten.mul.Tensor %\d+, %\d+ : !torch.vtensor<\[2,5,16\],f32>, !torch.vtensor<\[5,16\],f32>', text)
    assert_matches_reference(model, args)


# --- the differential checker --------------------------------------------------------------------


@pytest.mark.parametrize("pattern", [p.name for p in fuse_norms.patterns.patterns])
def test_differential_checker_passes(pattern):
    report = check_pattern(fuse_norms.patterns, pattern, seeds=1)
    assert report.passed, str(report)
    assert not [c for c in report.checks if c.status != "pass"], str(report)

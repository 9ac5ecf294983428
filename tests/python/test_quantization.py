"""Quantization policies end to end on IREE CPU: int8-weight, int4-weight (weight-only),
int8 (calibrated static), PT2E-quantized models; sizes, budgets (docs/precision.md),
calibration round trip and errors."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

import cuvil_mlir
from cuvil_mlir.compiler import precision
from cuvil_mlir.compiler.calibration import Calibration
from cuvil_mlir.compiler.context import make_context
from cuvil_mlir.core.ir import parse_module
from cuvil_mlir.lowering.common import pt2e_quantized_layer
from cuvil_mlir.compiler.pipeline import Options, compile_program
from cuvil_mlir.targets import iree, parse_targets
from models import MLP, SmallCNN, gpt2

# Error budgets (relative L2 error of the output against eager fp32), docs/precision.md.
BUDGETS = {"int8-weight": 2e-2, "int4-weight": 0.2, "int8": 5e-2}


def _rel(y, ref) -> float:
    y = torch.as_tensor(np.asarray(y)).to(torch.float64)
    ref = ref.detach().to(torch.float64)
    return float((y - ref).norm() / ref.norm())


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(0)
    return MLP(64, 256, 32).eval(), torch.randn(8, 64)


@pytest.fixture(scope="module")
def cnn():
    torch.manual_seed(1)
    return SmallCNN().eval(), torch.randn(1, 3, 16, 16)


_LITERAL = re.compile(r"torch\.vtensor\.literal\(.*\) : !torch\.vtensor<\[([0-9,]*)\],(\w+)>")
_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "si64": 8, "si32": 4, "si8": 1, "ui8": 1, "i1": 1}


def _literal_bytes(model, x, policy: str) -> int:
    """Bytes of every tensor literal in the module IREE receives (weights, scales, biases)."""
    text = compile_program(model, (x,), Options(precision=policy), emit="lowered").text
    total = 0
    for dims, dtype in _LITERAL.findall(text):
        total += math.prod(int(d) for d in dims.split(",") if d) * _BYTES[dtype]
    return total


def _vmfb_with_policy_flags(model, x, policy: str) -> bytes:
    """The vmfb of the lowered module compiled with the CPU flags plus the policy's own."""
    text = compile_program(model, (x,), Options(precision=policy), emit="lowered", elide_weights=False).text
    flags = parse_targets("cpu")[0].iree_flags() + precision.iree_flags(policy)
    return iree.compile_to_vmfb(parse_module(text, make_context()), flags)


# ---------------------------------------------------------------------------------------
# Weight-only


@pytest.mark.parametrize("policy", ["int8-weight", "int4-weight", "int4-weight{group=32}"])
def test_weight_only_mlp_within_budget(mlp, policy):
    model, x = mlp
    compiled = cuvil_mlir.compile(model, (x,), precision=policy)
    y = compiled(x)
    assert y.dtype == torch.float32
    assert compiled.patterns_fired["quantize-weights"] == {"quantize_linear": 3}
    assert _rel(y, model(x)) < BUDGETS[policy.split("{")[0]]


def test_weight_only_cnn_quantizes_convs_and_linear(cnn):
    model, x = cnn
    compiled = cuvil_mlir.compile(model, (x,), precision="int8-weight")
    assert compiled.patterns_fired["quantize-weights"] == {"quantize_conv2d": 2, "quantize_linear": 1}
    assert _rel(compiled(x), model(x)) < BUDGETS["int8-weight"]


def test_weight_only_keeps_fp16_dtype():
    torch.manual_seed(2)
    model, x = MLP(32, 64, 16).eval().half(), torch.randn(4, 32).half()
    compiled = cuvil_mlir.compile(model, (x,), precision="int8-weight")
    y = compiled(x)
    assert y.dtype == torch.float16
    assert _rel(y, model.float()(x.float())) < BUDGETS["int8-weight"]


def test_half_gpt2_conv1d_weights_are_quantized():
    """Exported on the CPU, a half GPT-2's Conv1D (addmm) reads its weights as f32 upcasts of f16
    literals; they are quantized all the same (4 per layer and the LM head)."""
    model, args = gpt2(layers=2)
    compiled = cuvil_mlir.compile(model.half(), args, precision="int8-weight")
    assert compiled.patterns_fired["quantize-weights"] == {"quantize_linear": 9}
    logits = compiled(*args)
    logits = logits[0] if isinstance(logits, (tuple, list)) else logits
    assert logits.dtype == torch.float16
    ref = model.float()(*args)
    ref = ref[0] if isinstance(ref, (tuple, list)) else getattr(ref, "logits", ref)
    assert _rel(logits.float(), ref) < 5e-2


def test_int8_weight_literals_are_3_5x_smaller_int4_smaller_still(mlp):
    model, x = mlp
    fp32, int8, int4 = (_literal_bytes(model, x, p) for p in ("fp32", "int8-weight", "int4-weight"))
    assert fp32 / int8 >= 3.5, (fp32, int8)
    assert int4 < int8 * 0.6, (int8, int4)


def test_int8_weight_vmfb_is_smaller_with_the_policy_flags(mlp):
    """Without --iree-opt-const-expr-max-size-increase-threshold=0 IREE evaluates the
    dequantization at compile time and stores fp32 weights again."""
    model, x = mlp
    fp32_literals = _literal_bytes(model, x, "fp32")
    fp32 = len(_vmfb_with_policy_flags(model, x, "fp32"))
    int8 = len(_vmfb_with_policy_flags(model, x, "int8-weight"))
    int4 = len(_vmfb_with_policy_flags(model, x, "int4-weight"))
    code = fp32 - fp32_literals  # executables, VM bytecode, metadata
    assert (fp32 - code) / (int8 - code) >= 3.5, (fp32, int8, code)
    assert int4 < int8


def test_package_carries_the_policy_flags_and_is_smaller(mlp):
    """The pipeline passes precision.iree_flags to IREE: without them IREE would unpack the
    int4 nibbles (a 2x size increase, under its default 1 MiB threshold) at compile time."""
    model, x = mlp
    compiled = cuvil_mlir.compile(model, (x,), precision="int8-weight")
    assert set(precision.iree_flags("int8-weight")) <= set(compiled.modules[0].iree_flags)
    fp32 = len(cuvil_mlir.compile(model, (x,)).modules[0].vmfb)
    assert len(compiled.modules[0].vmfb) < 0.5 * fp32
    int4 = len(cuvil_mlir.compile(model, (x,), precision="int4-weight").modules[0].vmfb)
    assert int4 < 0.7 * len(compiled.modules[0].vmfb), (fp32, len(compiled.modules[0].vmfb), int4)


@pytest.mark.parametrize("spec, message", [
    ("int8-weight{group=64}", "takes no options"),
    ("int4-weight{bits=8}", "takes only group"),
    ("int4-weight{group=3}", "positive even integer"),
    ("int4-weight{group=0}", "positive even integer"),
])
def test_bad_weight_only_options(spec, message):
    with pytest.raises(cuvil_mlir.CuvilError, match=message):
        precision.stage_passes(spec)


# ---------------------------------------------------------------------------------------
# Calibrated static int8


@pytest.mark.parametrize("method", ["minmax", "percentile"])
def test_int8_mlp_within_budget(mlp, method):
    model, x = mlp
    samples = [x] + [torch.randn(8, 64) for _ in range(3)]
    cal = cuvil_mlir.calibrate(model, samples, method=method)
    assert [o.kind for o in cal.ops] == ["linear"] * 3 and cal.samples == 4
    assert cal.ops[0].input_shape == (8, 64) and cal.ops[0].min < 0 < cal.ops[0].max
    compiled = cuvil_mlir.compile(model, (x,), precision="int8", calibration=cal)
    assert compiled.patterns_fired["lower-cuvil-to-torch"]["qlinear"] == 3
    y = compiled(x)
    assert y.dtype == torch.float32
    assert _rel(y, model(x)) < BUDGETS["int8"]


def test_percentile_range_is_inside_minmax(mlp):
    model, x = mlp
    samples = [torch.randn(8, 64) for _ in range(3)]
    minmax = cuvil_mlir.calibrate(model, samples)
    pct = cuvil_mlir.calibrate(model, samples, method="percentile", percentile=99.0)
    for a, b in zip(minmax.ops, pct.ops):
        assert a.min <= b.min <= b.max <= a.max
        assert (b.min, b.max) != (a.min, a.max)


def test_int8_cnn_quantizes_convs(cnn):
    model, x = cnn
    cal = cuvil_mlir.calibrate(model, [x, torch.randn(1, 3, 16, 16)])
    compiled = cuvil_mlir.compile(model, (x,), precision="int8", calibration=cal)
    assert compiled.patterns_fired["quantize-static"] == {"static_conv2d": 2, "static_linear": 1}
    assert _rel(compiled(x), model(x)) < BUDGETS["int8"]


def test_calibration_round_trip(mlp, tmp_path):
    model, x = mlp
    cal = cuvil_mlir.calibrate(model, [x])
    path = tmp_path / "cal.json"
    cal.save(path)
    loaded = Calibration.load(path)
    assert loaded == cal
    a = cuvil_mlir.compile(model, (x,), precision="int8", calibration=cal)(x)
    b = cuvil_mlir.compile(model, (x,), precision="int8", calibration=loaded)(x)
    assert torch.equal(a, b)


def test_calibration_of_another_model_is_rejected(mlp):
    model, x = mlp
    other = MLP(64, 128, 32).eval()
    cal = cuvil_mlir.calibrate(other, [x])
    with pytest.raises(cuvil_mlir.CuvilError, match=r"does not fit.*#0 cuvil.linear \(input \[8, 64\], weight \[256, 64\]\).*weight \[128, 64\]"):
        cuvil_mlir.compile(model, (x,), precision="int8", calibration=cal)


def test_int8_needs_a_calibration(mlp):
    model, x = mlp
    with pytest.raises(cuvil_mlir.CuvilError, match="needs activation ranges"):
        cuvil_mlir.compile(model, (x,), precision="int8")
    with pytest.raises(cuvil_mlir.CuvilError, match="must be a cuvil_mlir.compiler.calibration.Calibration"):
        cuvil_mlir.compile(model, (x,), precision="int8", calibration={"ranges": []})


def test_calibrate_bad_input(mlp):
    model, x = mlp
    with pytest.raises(cuvil_mlir.CuvilError, match="unknown calibration method 'mean'"):
        cuvil_mlir.calibrate(model, [x], method="mean")
    with pytest.raises(cuvil_mlir.CuvilError, match=r"sample 1 has input shapes \[\(4, 64\)\]"):
        cuvil_mlir.calibrate(model, [x, torch.randn(4, 64)])
    with pytest.raises(cuvil_mlir.CuvilError, match="nothing to calibrate"):
        cuvil_mlir.calibrate(torch.nn.ReLU(), [x])


# ---------------------------------------------------------------------------------------
# PT2E


def _pt2e_mlp():
    """The form convert_pt2e produces, written with the quantized_decomposed ops."""
    rng = np.random.default_rng(0)
    model, args = pt2e_quantized_layer("linear", rng)
    return model, args


def test_pt2e_quantized_model_runs_as_qlinear():
    model, (x,) = _pt2e_mlp()
    compiled = cuvil_mlir.compile(model, (x,))
    assert compiled.patterns_fired["raise-pt2e-quant"] == {"pt2e_linear": 1}
    assert compiled.patterns_fired["lower-cuvil-to-torch"]["qlinear"] == 1
    assert _rel(compiled(x), model(x)) < 1e-5  # the same integer arithmetic as the fake quantization


def test_torchao_pt2e_flow_is_recognized():
    pytest.importorskip("torchao")
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer, get_default_x86_inductor_quantization_config,
    )

    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)).eval()
    x = torch.randn(4, 32)
    prepared = prepare_pt2e(torch.export.export(model, (x,)).module(),
                            X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config()))
    for _ in range(4):
        prepared(torch.randn(4, 32))
    quantized = convert_pt2e(prepared)
    compiled = cuvil_mlir.compile(torch.export.export(quantized, (x,)), (x,))
    assert compiled.patterns_fired["raise-pt2e-quant"] == {"pt2e_linear": 2}
    assert _rel(compiled(x), quantized(x)) < 1e-5
    assert _rel(compiled(x), model(x)) < BUDGETS["int8"]

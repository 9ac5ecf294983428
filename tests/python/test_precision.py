"""Mixed precision end to end on IREE CPU: fp16 / bf16 policies (demote-precision) on the e2e
models within their budgets (docs/precision.md), their keep / keep_paths options, the
quantized policies' skip option, the accuracy report and the sensitivity search
(cuvil_mlir/eval/accuracy.py), and `cuvil accuracy`."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
import torch.nn as nn

import cuvil_mlir
import models
from cuvil_mlir.compiler import precision
from cuvil_mlir.eval import accuracy
from cuvil_mlir.cli import main
from cuvil_mlir.compiler.pipeline import Options, compile_program

BUDGETS = precision.BUDGETS  # fp16 1e-2, bf16 5e-2: max |err| / max |ref| against fp32 eager


def _rel(got, ref) -> float:
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    return float(np.abs(got - ref).max() / np.abs(ref).max())


def _ir(model, args, policy: str) -> str:
    return compile_program(model, args, Options(precision=policy), emit="precision").text


def _ops(text: str, name: str) -> list[str]:
    """The result dtypes of every ``name`` op in ``text`` (e.g. ["f16", "f32"])."""
    return re.findall(rf'{re.escape(name)}.*-> !torch\.vtensor<\[[0-9,]*\],(\w+)>', text)


class Tanh3(nn.Module):
    """Three linears with tanh between (tanh is not fused, so each linear keeps its module path);
    ``outlier`` puts one large weight in every row of ``mid`` (int8 per-channel scales grow)."""

    def __init__(self, outlier: float = 0.0):
        super().__init__()
        self.inp, self.mid, self.out = nn.Linear(32, 64), nn.Linear(64, 64), nn.Linear(64, 10)
        with torch.no_grad():
            self.mid.weight[:, 0] += outlier

    def forward(self, x):
        return self.out(torch.tanh(self.mid(torch.tanh(self.inp(x)))))


# ---------------------------------------------------------------------------------------
# Policies and options


def test_policy_lists_parse_and_round_trip():
    p = precision.parse_policy("fp16{keep=softmax,norm,keep_paths=lm_head,h.0.*}")
    assert p.options == (("keep", "softmax,norm"), ("keep_paths", "lm_head,h.0.*"))
    assert precision.parse_policy(p.spec) == p
    (demote,) = precision.stage_passes(p)
    assert demote.name == "demote-precision"
    assert "demote_softmax" not in {pat.name for pat in precision.stage_passes("bf16{keep=softmax}")[0].patterns}
    assert "demote_softmax" in {pat.name for pat in precision.stage_passes("bf16{keep=norm}")[0].patterns}


@pytest.mark.parametrize("spec, message", [
    ("fp16{group=4}", "takes only keep, keep_paths"),
    ("fp16{keep=softmax,bogus}", "option keep: item 'bogus' is not one of linear, conv2d"),
    ("bf16{keep=}", "malformed"),
    ("fp16{,keep=norm}", "malformed"),
    ("int8-weight{group=64}", "takes no options"),
])
def test_bad_policy_options(spec, message):
    with pytest.raises(cuvil_mlir.CuvilError, match=message):
        precision.stage_passes(spec)


def test_default_keeps_norm_and_demotes_linear_attention():
    model, args = models.transformer_block()
    text = _ir(model, args, "fp16")
    assert set(_ops(text, '"cuvil.linear"')) == {"f16"}
    assert _ops(text, '"cuvil.attention"') == ["f16"]
    assert _ops(text, '"cuvil.norm"') == ["f32", "f32"]
    assert re.search(r"func.func @main\(%arg0: !torch.vtensor<\[2,16,64\],f32>\) -> !torch.vtensor<\[2,16,64\],f32>", text)
    assert re.search(r"torch.vtensor.literal\(.*: tensor<192x64xf16>\)", text), "qkv weight converted ahead of time"
    none = _ir(model, args, "bf16{keep=none}")
    assert _ops(none, '"cuvil.norm"') == ["bf16", "bf16"]


def test_keep_paths_and_keep_kinds_by_module():
    model, args = models.transformer_block()
    text = _ir(model, args, "fp16{keep_paths=qkv,out}")
    assert sorted(_ops(text, '"cuvil.linear"')) == ["f16", "f16", "f32", "f32"]
    kept_attention = _ir(model, args, "fp16{keep=attention,norm}")
    assert _ops(kept_attention, '"cuvil.attention"') == ["f32"]


def test_gpt2_keep_paths_lm_head():
    model, args = models.gpt2(layers=1, vocab=200)
    text = _ir(model, args, "fp16{keep_paths=lm_head}")
    linears = [line.rstrip() for line in text.splitlines() if '"cuvil.linear"' in line]
    head = [line for line in linears if line.endswith("[1,16,200],f32>")]
    assert len(head) == 1 and len(linears) == 5, linears
    assert all(line.endswith("f16>") for line in linears if line not in head)


def test_weight_only_skip_keeps_a_layer_float():
    model, x = Tanh3().eval(), torch.randn(4, 32)
    text = _ir(model, (x,), "int8-weight{skip=mid}")
    assert len(re.findall(r"tensor<\d+x\d+xsi8>", text)) == 2
    assert re.search(r"tensor<64x64xf32>", text)


# ---------------------------------------------------------------------------------------
# Budgets on the e2e models (and a transformer: gpt2, bert, llama)


@pytest.mark.parametrize("policy", ["fp16", "bf16"])
@pytest.mark.parametrize("name", sorted(models.E2E_MODELS))
def test_e2e_models_within_budget(name, policy):
    model, args = models.E2E_MODELS[name]()
    with torch.no_grad():
        ref = model(*args)
    compiled = cuvil_mlir.compile(model, args, precision=policy)
    got = compiled(*args)
    assert got.dtype == ref.dtype and got.shape == ref.shape  # io stays f32
    fired = compiled.patterns_fired["demote-precision"]
    assert fired.get("demote_linear", 0) + fired.get("demote_conv2d", 0) >= 1
    err = _rel(got, ref)
    assert err <= BUDGETS[policy], (name, policy, err)
    assert err > 1e-6, "nothing computed in 16 bits?"


def test_keep_none_demotes_norms_and_softmax_and_still_runs():
    """Every kind in f16 (norms, softmax, reductions too): compiles and runs on IREE CPU."""
    model, args = models.llama(layers=1)
    compiled = cuvil_mlir.compile(model, args, precision="fp16{keep=none}")
    fired = compiled.patterns_fired["demote-precision"]
    assert fired["demote_norm"] >= 2 and fired["demote_attention"] == 1
    with torch.no_grad():
        assert _rel(compiled(*args), model(*args)) <= BUDGETS["fp16"]


# ---------------------------------------------------------------------------------------
# Accuracy report and search


def test_report_on_a_transformer_block():
    model, args = models.transformer_block()
    rep = accuracy.report(model, args, precision="fp16")
    assert rep.compiles == 1 + len(rep.ops)
    paths = {o.path for o in rep.ops}
    assert {"qkv", "proj", "out"} <= paths
    assert [o.max_rel_err for o in rep.ops] == sorted((o.max_rel_err for o in rep.ops), reverse=True)
    (whole,) = rep.metrics
    assert 0 < whole.max_rel_err <= BUDGETS["fp16"] and whole.cosine > 0.9999 and whole.max_abs_err > 0
    for o in rep.ops:  # one op alone adds less than everything at once (within rounding noise)
        assert 0 < o.max_rel_err <= 2 * whole.max_rel_err
    text = rep.describe()
    assert "qkv: linear" in text and "cosine" in text
    json.dumps(rep.to_json(), allow_nan=False)


def test_search_keeps_the_sensitive_layer_for_int8_weight():
    torch.manual_seed(3)
    model, x = Tanh3(outlier=8.0).eval(), torch.randn(16, 32)
    rep = accuracy.report(model, (x,), precision="int8-weight")
    assert rep.ops[0].path == "mid", rep.describe()
    budget = (rep.ops[1].max_rel_err + rep.max_rel_err) / 2  # below the whole policy, above the others alone
    found = accuracy.search(model, (x,), precision="int8-weight", budget=budget)
    assert found.met and found.kept[0] == "mid" and found.policy.startswith("int8-weight{skip=mid")
    assert found.max_rel_err <= budget < rep.max_rel_err
    check = cuvil_mlir.compile(model, (x,), precision=found.policy)
    with torch.no_grad():
        assert _rel(check(x), model(x)) <= budget
    assert check.patterns_fired["quantize-weights"]["quantize_linear"] == 3 - len(found.kept)


def test_search_fp16_meets_a_tight_budget_with_keep_paths():
    model, args = models.mlp()
    rep = accuracy.report(model, args, precision="fp16")
    found = accuracy.search(model, args, precision="fp16", budget=rep.max_rel_err / 4)
    assert found.policy.startswith("fp16{keep_paths=") and found.kept
    assert found.met == (found.max_rel_err <= found.budget)
    assert found.max_rel_err < rep.max_rel_err


def test_report_and_search_of_static_int8_per_op():
    model, x = Tanh3(outlier=40.0).eval(), torch.randn(8, 32)
    cal = cuvil_mlir.calibrate(model, [x, torch.randn(8, 32)])
    rep = accuracy.report(model, (x,), precision="int8", calibration=cal)
    assert {o.path for o in rep.ops} == {"inp", "mid", "out"} and rep.compiles == 4
    assert all(o.kinds == ("linear",) for o in rep.ops)
    errors = [o.max_rel_err for o in rep.ops]
    assert errors == sorted(errors, reverse=True) and errors[-1] > 0, rep.describe()
    worst = rep.ops[0].path
    assert 0 < rep.max_rel_err <= accuracy.DEFAULT_BUDGETS["int8"] and rep.metrics[0].top1 > 0.5
    budget = rep.ops[1].max_rel_err * 1.01  # below what the worst op alone costs: it must stay float
    found = accuracy.search(model, (x,), precision="int8", budget=budget, calibration=cal)
    assert found.kept[0] == worst and found.policy.startswith(f"int8{{skip={worst}")
    assert found.met == (found.max_rel_err <= budget) and found.max_rel_err < rep.max_rel_err
    kept = cuvil_mlir.compile(model, (x,), precision=found.policy, calibration=cal)
    assert worst not in kept.metadata["pattern_sites"]["quantize-static"]["static_linear"]


def test_int8_skip_keeps_a_layer_float():
    model, x = Tanh3().eval(), torch.randn(8, 32)
    cal = cuvil_mlir.calibrate(model, [x])
    compiled = cuvil_mlir.compile(model, (x,), precision="int8{skip=out,inp}", calibration=cal)
    assert compiled.metadata["pattern_sites"]["quantize-static"] == {"static_linear": {"mid": 1}}
    assert compiled.metadata["precision"] == "int8{skip=out,inp}"


# ---------------------------------------------------------------------------------------
# io=fp16: 16-bit model inputs and outputs


@pytest.mark.parametrize("policy, dtype", [("fp16{io=fp16}", torch.float16), ("bf16{io=bf16}", torch.bfloat16)])
def test_io_half_takes_and_returns_16_bit(policy, dtype):
    model, args = models.transformer_block()
    with torch.no_grad():
        ref = model(*args)
    compiled = cuvil_mlir.compile(model, args, precision=policy)
    half = {torch.float16: "float16", torch.bfloat16: "bfloat16"}[dtype]
    assert [s.dtype for s in compiled.signature.inputs] == [half] and [s.dtype for s in compiled.signature.outputs] == [half]
    assert compiled.patterns_fired["narrow-io"] == {"narrow_input": 1, "narrow_output": 1}
    got = compiled(args[0].to(dtype))
    assert got.dtype == dtype and got.shape == ref.shape
    assert _rel(got.float(), ref) <= BUDGETS[policy[:4]]
    # a model whose first and last ops are demoted: the boundary casts fold, no f32 copy is made
    tanh3, x = Tanh3().eval(), torch.randn(2, 32)
    text = _ir(tanh3, (x,), policy)
    assert "convert_element_type" not in text and text.count(f"{policy[:4].replace('fp', 'f')}>") > 0
    with pytest.raises(cuvil_mlir.CuvilError, match=f"input 0: expected dtype {half}, got float32"):
        compiled(args[0])


def test_io_half_leaves_integer_inputs_alone():
    model, args = models.gpt2()
    compiled = cuvil_mlir.compile(model, args, precision="fp16{io=fp16}")
    assert compiled.signature.inputs[0].dtype == "int64" and compiled.signature.outputs[0].dtype == "float16"
    with torch.no_grad():
        ref = model(*args)
    assert _rel(compiled(*args).float(), ref) <= BUDGETS["fp16"]
    rep = accuracy.report(model, args, precision="fp16{io=fp16}", per_op=False)  # the report feeds what the module takes
    assert rep.max_rel_err <= BUDGETS["fp16"]


# ---------------------------------------------------------------------------------------
# Combinations: 16-bit activations with quantized weights, from an fp32 model


def test_fp16_plus_int8_weight_from_an_fp32_model():
    model, x = Tanh3().eval(), torch.randn(8, 32)
    text = _ir(model, (x,), "fp16+int8-weight")
    assert set(_ops(text, "cuvil.linear")) == {"f16"}  # compute in fp16 ...
    assert "xsi8>" in text and "xf32>) : !torch.vtensor" not in text  # ... on int8 weights dequantized to f16
    compiled = cuvil_mlir.compile(model, (x,), precision="fp16+int8-weight{skip=out}")
    assert compiled.metadata["precision"] == "fp16+int8-weight{skip=out}"
    assert compiled.metadata["pattern_sites"]["quantize-weights"]["quantize_linear"] == {"inp": 1, "mid": 1}
    assert compiled.patterns_fired["demote-precision"]["demote_linear"] == 3
    assert "--iree-opt-const-expr-max-size-increase-threshold=0" in compiled.modules[0].iree_flags
    with torch.no_grad():
        ref = model(x)
    got = compiled(x)
    assert got.dtype == torch.float32 and 1e-4 < _rel(got, ref) <= precision.parse_policy("fp16+int8-weight").budget(accuracy.DEFAULT_BUDGETS)


def test_combined_policy_report_counts_each_op_once_and_search_keeps_both():
    model, x = Tanh3().eval(), torch.randn(8, 32)
    rep = accuracy.report(model, (x,), precision="bf16+int4-weight{group=32}")
    by_path = {o.path: o for o in rep.ops}
    assert by_path["mid"].count == 1 and by_path["mid"].kinds == ("linear",)
    found = accuracy.search(model, (x,), precision="bf16+int4-weight{group=32}", budget=rep.ops[0].max_rel_err * 0.5)
    worst = rep.ops[0].path
    assert found.kept[0] == worst and f"keep_paths={worst}" in found.policy and f"skip={worst}" in found.policy.split("+")[1]


@pytest.mark.parametrize("spec", ["fp16+bf16", "int8-weight+int4-weight", "fp32+int8-weight", "fp16+int8-weight+int8"])
def test_bad_combinations(spec):
    with pytest.raises(cuvil_mlir.CuvilError, match="a combination is one of fp16, bf16 and one of"):
        precision.parse_policy(spec)


def test_io_option_is_checked():
    model, x = Tanh3().eval(), torch.randn(2, 32)
    with pytest.raises(cuvil_mlir.CuvilError, match=r"io=bf16 is not one of model .*, fp16"):
        cuvil_mlir.compile(model, (x,), precision="fp16{io=bf16}")
    assert cuvil_mlir.compile(model, (x,), precision="fp16{io=model}").signature.inputs[0].dtype == "float32"


def test_top1_agreement_and_metrics():
    ref = np.array([[1.0, 2.0, 0.5], [3.0, 1.0, 0.0]])
    got = np.array([[1.0, 2.1, 0.5], [0.5, 1.0, 0.0]])
    m = accuracy.metrics(got, ref)
    assert m.top1 == 0.5 and m.max_abs_err == pytest.approx(2.5) and m.max_rel_err == pytest.approx(2.5 / 3)
    assert accuracy.metrics(ref[0], ref[0]).top1 is None and accuracy.metrics(ref, ref).cosine == pytest.approx(1.0)


def test_fp32_and_unsupported_per_op_policies_are_errors():
    model, x = Tanh3().eval(), torch.randn(2, 32)
    with pytest.raises(cuvil_mlir.CuvilError, match="fp32 changes nothing"):
        accuracy.report(model, (x,), precision="fp32")
    with pytest.raises(cuvil_mlir.CuvilError, match="needs activation ranges"):
        accuracy.search(model, (x,), precision="int8")


def test_cli_accuracy_on_a_pt2(tmp_path, capsys):
    model, x = Tanh3().eval(), torch.randn(4, 32)
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, (x,)), str(path))
    out = tmp_path / "r.json"
    assert main(["accuracy", str(path), "--precision", "bf16", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "precision bf16 against fp32 PyTorch" in printed and "mid: linear" in printed
    report = json.loads(out.read_text())["report"]
    assert report["policy"] == "bf16" and {o["path"] for o in report["ops"]} == {"", "inp", "mid", "out"}  # "": the tanh of forward
    assert report["max_rel_err"] <= BUDGETS["bf16"]


def test_cli_int8_compile_and_accuracy_calibrate(tmp_path, capsys):
    model, x = Tanh3().eval(), torch.randn(4, 32)
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, (x,)), str(path))
    # no --calibration: the example inputs, said so
    assert main(["compile", str(path), "--precision", "int8", "-o", str(tmp_path / "a.cuvilpkg")]) == 0
    captured = capsys.readouterr()
    assert "calibrating int8 on the example inputs" in captured.err
    # samples as .npz (one per sample) and a saved calibration give the same ranges as calibrate()
    samples = [torch.randn(4, 32) for _ in range(3)]
    files = []
    for i, s in enumerate(samples):
        files += ["--calibration", str(tmp_path / f"s{i}.npz")]
        np.savez(tmp_path / f"s{i}.npz", s.numpy())
    assert main(["compile", str(path), "--precision", "int8{skip=out}", *files, "-o", str(tmp_path / "b.cuvilpkg")]) == 0
    pkg = cuvil_mlir.load(str(tmp_path / "b.cuvilpkg"))
    assert pkg.metadata["pattern_sites"]["quantize-static"]["static_linear"] == {"inp": 1, "mid": 1}
    with torch.no_grad():
        ref = model(x)
    assert _rel(pkg(x), ref) <= accuracy.DEFAULT_BUDGETS["int8"]
    cal = cuvil_mlir.calibrate(model, samples)
    cal.save(tmp_path / "cal.json")
    assert main(["compile", str(path), "--precision", "int8{skip=out}", "--calibration", str(tmp_path / "cal.json"),
                 "-o", str(tmp_path / "c.cuvilpkg")]) == 0
    assert np.array_equal(np.asarray(cuvil_mlir.load(str(tmp_path / "c.cuvilpkg"))(x)), np.asarray(pkg(x)))
    assert main(["accuracy", str(path), "--precision", "int8", "--no-per-op"]) == 0
    assert "precision int8 against fp32 PyTorch" in capsys.readouterr().out
    # mistakes are named
    assert main(["compile", str(path), "--precision", "fp16", "--calibration", "x.npz", "-o", str(tmp_path / "d.cuvilpkg")]) != 0
    assert "--calibration applies to --precision int8 only" in capsys.readouterr().err
    assert main(["compile", str(path), "--precision", "int8", "--calibration", str(tmp_path / "nope.npz"), "-o", str(tmp_path / "d.cuvilpkg")]) != 0
    assert "calibration file not found" in capsys.readouterr().err

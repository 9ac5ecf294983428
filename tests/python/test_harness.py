"""The comparison harness: errors, timing mechanics, configurations, reports, CLI and plugin.

Small models on the CPU only (Vulkan where a device is present); nothing asserts how fast
anything is. A deliberately wrong rewrite (a user pattern that turns a linear's ReLU into a
sigmoid) must show as a mismatch, not pass.
"""

import json
import math
import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import cuvil_mlir
from cuvil_mlir import cli
from cuvil_mlir.core.diagnostics import CuvilError
from cuvil_mlir.eval.harness import Baseline, Config, Plan, compare, make_input_sets, parse_config
from cuvil_mlir.eval.measure import DEFAULT_RTOL, Timer, TimingSettings, output_errors, permuted, rtol_for
from cuvil_mlir.core.patterns import PatternSet, build
from cuvil_mlir.compiler.pipeline import Options, compile_program
from cuvil_mlir.eval.testing import assert_matches_reference

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
FAST = dict(repetitions=3, warmup=1, min_time=0.0, max_time=2.0)  # enough samples to fill every field

# A wrong rewrite, as a user might write it: relu and sigmoid are both "an activation".
relu_to_sigmoid = PatternSet("relu-into-sigmoid", description="a deliberately wrong epilogue rewrite")


@relu_to_sigmoid.add("torch.aten.relu")  # user sets run after raise, before fuse-linear-epilogue
def relu_epilogue_as_sigmoid(op, rewriter):
    """relu(y) -> sigmoid(y)   (WRONG on purpose)"""
    return build("torch.aten.sigmoid", [op.operands[0]], op.result.type)


class ReluMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


@pytest.fixture(scope="module")
def relu_mlp():
    torch.manual_seed(0)
    return ReluMLP().eval(), (torch.randn(4, 16),)


# ---------------------------------------------------------------------------------------
# Errors (no compiling).


def test_rel_err_is_max_norm_relative_and_names_the_worst_element():
    ref = np.array([[1.0, -4.0], [2.0, 0.5]], np.float32)
    got = ref.copy()
    got[1, 0] += 0.002
    (e,) = output_errors([got], [ref])
    assert e.max_abs_err == pytest.approx(0.002, rel=1e-3)
    assert e.max_rel_err == pytest.approx(0.002 / 4.0, rel=1e-3)  # over max |ref|, not elementwise
    assert e.worst_at == [1, 0] and e.got == pytest.approx(2.002) and e.expected == pytest.approx(2.0)
    assert e.rtol == 1e-4 and not e.passed  # 5e-4 > float32's 1e-4
    assert output_errors([got.astype(np.float16)], [ref.astype(np.float16)])[0].passed  # float16: 1e-2


def test_identical_outputs_pass_and_the_tolerance_is_per_dtype():
    a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    assert output_errors([a], [a.copy()])[0].max_rel_err == 0.0
    assert rtol_for("float32") == DEFAULT_RTOL["float32"] == 1e-4
    assert rtol_for("bfloat16") == 2e-2 and rtol_for("float16") == 1e-2
    assert rtol_for("int64") == 0.0 and rtol_for("bool") == 0.0
    assert rtol_for("float32", {"float32": 1e-6}) == 1e-6


def test_nan_shape_dtype_and_integer_mismatches_fail_with_a_problem():
    ref = np.ones((2, 3), np.float32)
    nan = ref.copy()
    nan[0, 1] = np.nan
    (e,) = output_errors([nan], [ref])
    assert not e.passed and math.isinf(e.max_rel_err) and "NaN" in e.problem
    both_nan = output_errors([nan], [nan.copy()])[0]
    assert both_nan.passed  # NaN where the reference has NaN too is agreement
    assert "shape" in output_errors([np.ones((3, 2), np.float32)], [ref])[0].problem
    assert "dtype" in output_errors([ref.astype(np.float64)], [ref])[0].problem
    assert output_errors([ref.astype(np.float64)], [ref], check_dtype=False)[0].passed
    assert "output(s)" in output_errors([ref, ref], [ref])[0].problem
    ints = np.arange(6).reshape(2, 3)
    off_by_one = ints.copy()
    off_by_one[1, 2] += 1
    assert output_errors([ints], [ints.copy()])[0].passed
    assert not output_errors([off_by_one], [ints])[0].passed  # integers are exact


# ---------------------------------------------------------------------------------------
# Timing mechanics (counts, not speed).


def test_timer_warms_up_rotates_inputs_and_takes_the_asked_repetitions():
    seen = []

    def sample(inputs):
        seen.append(inputs[0])
        return 1.0

    settings = TimingSettings(repetitions=7, warmup=2, min_time=0.0, max_time=60.0, rounds=2, input_sets=3)
    timer = Timer(sample, [("a",), ("b",), ("c",)], settings)
    timer.warm_up()
    assert seen == ["a", "b", "c"]  # warm-up: at least one call per input set
    for _ in range(settings.rounds):
        timer.run_round()
    lat = timer.latency()
    assert lat.repetitions == 8 and lat.warmup_calls == 3 and not lat.capped  # 2 rounds of ceil(7 / 2)
    assert seen[3:] == ["a", "b", "c", "a", "b", "c", "a", "b"]  # rotation continues across rounds
    assert lat.median_ms == lat.p10_ms == lat.p90_ms == 1.0


def test_timer_stops_at_max_time_and_says_so():
    def slow(inputs):
        time.sleep(0.02)
        return 20.0

    settings = TimingSettings(repetitions=1000, warmup=0, min_time=0.0, max_time=0.03, rounds=3, input_sets=1)
    timer = Timer(slow, [()], settings)
    for _ in range(settings.rounds):
        timer.run_round()
    lat = timer.latency()
    assert lat.capped and 3 <= lat.repetitions < 1000  # at least one call per round


def test_timing_settings_are_validated():
    with pytest.raises(ValueError, match="max_time"):
        TimingSettings(max_time=0)
    with pytest.raises(ValueError, match="repetitions"):
        TimingSettings(repetitions=-1)


def test_input_sets_permute_given_values():
    tokens = np.array([[3, 1, 4, 1, 5, 9, 2, 6]], np.int64)
    sets, info, notes = make_input_sets(None, (tokens,), 3, seed=0)
    assert len(sets) == 3 and np.array_equal(sets[0][0], tokens)
    for (s,) in sets[1:]:
        assert s.shape == tokens.shape and s.dtype == tokens.dtype
        assert sorted(s.ravel()) == sorted(tokens.ravel())  # same values: token ids stay in range
    assert not all(np.array_equal(s[0], tokens) for s in sets[1:])
    assert info == [{"shape": [1, 8], "dtype": "int64", "source": "given"}] and "permute" in notes[0]
    mask = np.array([0.0, -np.inf, 0.0, -np.inf], np.float32)
    assert sorted(permuted(mask, np.random.default_rng(1))) == sorted(mask)


def test_generated_inputs_follow_the_programs_signature_and_example_range():
    class Embed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(50, 8)

        def forward(self, ids, scale):
            return self.emb(ids) * scale

    program = torch.export.export(Embed(), (torch.tensor([[0, 49, 7]]), torch.ones(3, 8)))
    sets, info, notes = make_input_sets(program, None, 2, seed=0)
    ids, scale = sets[0]
    assert ids.shape == (1, 3) and ids.dtype == np.int64 and ids.min() >= 0 and ids.max() < 50
    assert scale.shape == (3, 8) and scale.dtype == np.float32
    assert [i["values"] for i in info] == ["integers in [0, 50)", "N(0, 1)"]
    assert "generated at random from the program's signature (seed 0)" in notes[0]


# ---------------------------------------------------------------------------------------
# Configurations (no IREE).


def test_configs_resolve_to_passes_and_patterns():
    assert parse_config("default") == parse_config(" default ")
    assert parse_config("plain-iree").plain
    assert parse_config("without:raise-torch-to-cuvil").disabled_passes == ("raise-torch-to-cuvil",)
    assert parse_config("without:gelu_epilogue").disabled_patterns == ("gelu_epilogue",)
    assert parse_config("without:relu-into-sigmoid", [relu_to_sigmoid]).disabled_passes == ("relu-into-sigmoid",)


@pytest.mark.parametrize("text, message", [
    ("without:no-such-pass", r"no such pattern; patterns: .*raise-torch-to-cuvil/linear"),
    ("without:linear", r"several passes .*name one: raise-torch-to-cuvil/linear, lower-cuvil-to-torch/linear"),
    ("fastest", r"unknown configuration 'fastest'; configurations: default, plain-iree, without:PASS"),
])
def test_unknown_or_ambiguous_configs_fail_naming_the_valid_ones(text, message):
    with pytest.raises(CuvilError, match=message):
        parse_config(text)


def test_precision_configs_name_a_policy():
    assert parse_config("precision:int4-weight{group=32}").precision == "int4-weight{group=32}"
    assert parse_config("default").precision == "fp32"
    with pytest.raises(CuvilError, match="unknown precision 'int3'; policies: fp32, fp16"):
        parse_config("precision:int3")


def test_a_plan_is_every_target_with_every_config_and_a_baseline_checks_its_competitors():
    plan = Plan.parse("cpu,vmvx", ["default", "plain-iree"], opt_level=2)
    assert [(t, c.name) for t, c in plan.builds()] == [
        ("cpu", "default"), ("cpu", "plain-iree"), ("vmvx", "default"), ("vmvx", "plain-iree")]
    assert plan.opt_level == 2 and Plan.parse(["cpu"]).configs == (Config("default"),)
    with pytest.raises(CuvilError, match="unknown configuration 'fastest'"):
        Plan.parse("cpu", ["default", "fastest"])
    baseline = Baseline.parse("torch-fp64", "all", {"float32": 1e-3})
    assert "eager" in baseline.competitors and "torch.compile:max-autotune" not in baseline.competitors
    assert not baseline.check_dtype and Baseline.parse().check_dtype  # a float64 reference differs in dtype by design
    assert baseline.tolerance_table()["float32"] == 1e-3 and baseline.tolerance_table()["float16"] == DEFAULT_RTOL["float16"]
    with pytest.raises(CuvilError, match="unknown competitor 'jax'"):
        Baseline.parse(competitors="eager,jax")


def test_a_precision_config_is_checked_against_its_budget():
    """int8-weight's error would fail the fp32 tolerance; the config is held to the policy's budget,
    and a quantized build that broke the numerics would still fail it."""
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).eval()
    report = compare(mlp, (torch.randn(4, 32),), targets=["cpu"], configs=["default", "precision:int8-weight"],
                     competitors=(), repetitions=0)
    exact, quantized = report.entry("cpu"), report.entry("cpu [precision:int8-weight]")
    assert exact.status == quantized.status == "ok"
    assert quantized.numerics.max_rel_err > 10 * exact.numerics.max_rel_err  # it really ran quantized
    assert quantized.numerics.rtol == pytest.approx(5e-2) and exact.numerics.rtol == pytest.approx(1e-4)
    assert quantized.patterns_fired["quantize-weights"]


def test_a_precision_config_with_16_bit_io_is_fed_16_bit_inputs():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).eval()
    report = compare(mlp, (torch.randn(4, 32),), targets=["cpu"], configs=["precision:bf16{io=bf16}"],
                     competitors=(), repetitions=2)
    entry = report.entry("cpu [precision:bf16{io=bf16}]")
    assert entry.status == "ok", entry.error
    assert entry.patterns_fired["narrow-io"] == {"narrow_input": 1, "narrow_output": 1}
    assert 1e-4 < entry.numerics.max_rel_err <= entry.numerics.rtol and entry.latency is not None


def test_disabled_pattern_keeps_the_rest_of_its_pass():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()).eval()
    x = torch.randn(2, 8)
    text = compile_program(mlp, (x,), Options(disabled_patterns=("gelu_epilogue",)), emit="fused").text
    assert "torch.aten.gelu" in text and '"cuvil.linear"' in text  # linear raised, gelu left alone
    default = compile_program(mlp, (x,), Options(), emit="fused").text
    assert "torch.aten.gelu" not in default and 'activation = "gelu"' in default
    with pytest.raises(CuvilError, match="cannot disable pass 'raise-torch-to-cuvl'"):
        compile_program(mlp, (x,), Options(disabled_passes=("raise-torch-to-cuvl",)), emit="cuvil")


# ---------------------------------------------------------------------------------------
# compare(): real compiles of small models.


@pytest.mark.slow
def test_a_wrong_rewrite_is_reported_as_a_mismatch(relu_mlp):
    model, args = relu_mlp
    report = compare(model, args, targets=["cpu"], configs=["default", "without:relu-into-sigmoid"],
                     patterns=[relu_to_sigmoid], competitors=(), repetitions=0)
    wrong, right = report.entry("cpu"), report.entry("cpu [without:relu-into-sigmoid]")
    assert wrong.patterns_fired["relu-into-sigmoid"] == {"relu_epilogue_as_sigmoid": 1}
    assert wrong.status == "mismatch" and not wrong.numerics.passed
    assert wrong.numerics.max_rel_err > 100 * wrong.numerics.rtol  # not a rounding-level difference
    assert right.status == "ok" and right.numerics.max_rel_err <= 1e-5
    assert "relu-into-sigmoid" not in right.patterns_fired
    assert not report.ok and report.to_json()["ok"] is False
    assert right.deltas["max_rel_err_delta"] < 0  # the ablation says which pattern hurt
    text = _rendered(report)
    assert "MISMATCH" in text and re.search(r"cpu: mismatch: output 0 \(float32\[4, 8\]\): max rel err \S+ > tol 0.0001", text)

    with pytest.raises(AssertionError, match=r"do not match the reference \(torch eager \(cpu\)\):\n  output 0 .* at \["):
        assert_matches_reference(model, args, patterns=[relu_to_sigmoid])


@pytest.mark.slow
def test_report_fields_plain_iree_ab_and_an_absent_device(tmp_path):
    import models

    model, args = models.mlp()
    report = compare(model, args, targets=["cpu", "cuda"], configs=["default", "plain-iree", "without:lower-cuvil-to-torch"],
                     competitors=["eager"], **FAST)
    cpu, plain, broken = report.entry("cpu"), report.entry("cpu [plain-iree]"), report.entry("cpu [without:lower-cuvil-to-torch]")
    for e in (cpu, plain):
        assert e.status == "ok" and e.device == "local-task" and e.compile_seconds > 0 and e.first_call_ms > 0
        lat = e.latency
        assert lat.repetitions >= 3 and lat.warmup_calls >= 3 and lat.p10_ms <= lat.median_ms <= lat.p90_ms
        assert e.numerics.input_sets == 3 and e.numerics.max_rel_err <= 1e-5 and e.iree_flags
    assert cpu.patterns_fired["raise-torch-to-cuvil"]["linear"] == 3 and "iree-compile" in cpu.compile_breakdown
    assert plain.kind == "plain-iree" and plain.patterns_fired == {} and plain.baseline == "cpu"
    assert set(plain.deltas) == {"latency_ratio", "median_delta_ms", "max_rel_err_delta", "compile_seconds_delta"}
    assert plain.deltas["latency_ratio"] > 0

    assert broken.status == "failed" and broken.failed_stage == "compile"
    assert "Cuvil op" in broken.reason and broken.repro.startswith("cuvil-opt ")  # verify-no-cuvil says what and how

    for name in ("cuda", "cuda [plain-iree]"):
        skipped = report.entry(name)
        assert skipped.status == "skipped" and "no 'cuda' device" in skipped.reason and skipped.latency is None
    eager = report.entry("torch eager (cpu)")
    assert eager.status == "ok" and eager.numerics.max_rel_err == 0.0 and eager.baseline == "cpu"
    assert report.entry("torch eager (cuda)").status == "skipped"
    assert not report.ok  # the broken configuration is a Cuvil entry that failed

    path = tmp_path / "r.json"
    report.save_json(path)
    data = json.loads(path.read_text())
    assert data["schema"] == "cuvil-compare" and data["schema_version"] == 1
    assert [e["name"] for e in data["entries"]] == [e.name for e in report.entries]
    assert _undocumented_fields(data) == set()
    png = tmp_path / "r.png"
    report.plot(png)
    _assert_png(png)


@pytest.mark.slow
def test_float64_reference_and_the_table_layout(relu_mlp):
    model, args = relu_mlp
    report = compare(model, args, targets="cpu", reference="torch-fp64", competitors=(), repetitions=0)
    cpu = report.entry("cpu")
    assert report.reference["kind"] == "torch-fp64" and cpu.status == "ok"
    assert 0 < cpu.numerics.max_rel_err <= 1e-5  # float32 against float64: a real, small error
    assert cpu.numerics.outputs[0].dtype == "float32" and cpu.latency is None
    assert "errors against torch eager (cpu, float64)" in _rendered(report)


# ---------------------------------------------------------------------------------------
# The JSON schema is documented field by field (docs/harness.md).


def _documented() -> dict[str, str]:
    """``field -> type`` from the tables of docs/harness.md's compare section."""
    text = (ROOT / "docs" / "harness.md").read_text()
    section = text.split("## JSON: `cuvil compare --json`")[1].split("## JSON: `cuvil bench --json`")[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `([^`]+)` \| ([^|]+) \|", section, re.M)}


def _undocumented_fields(data: dict) -> set[str]:
    documented = _documented()

    def walk(x, path):
        if path and documented.get(path, "").startswith("map"):
            return  # keys vary (stage, pass, dtype)
        if isinstance(x, dict):
            for k, v in x.items():
                yield from walk(v, f"{path}.{k}" if path else k)
        elif isinstance(x, list) and x and isinstance(x[0], dict):
            for v in x:
                yield from walk(v, f"{path}[]")
        else:
            yield path

    return set(walk(data, "")) - set(documented)


def test_the_schema_doc_covers_what_the_checker_walks():
    documented = _documented()
    assert documented["entries[].patterns_fired"].startswith("map")
    assert "entries[].latency.median_ms" in documented and "entries[].numerics.outputs[].problem" in documented
    assert _undocumented_fields({"entries": [{"latency": {"median_ms": 1.0, "surprise": 2}}]}) == {"entries[].latency.surprise"}


# ---------------------------------------------------------------------------------------
# CLI: cuvil compare on a small transformer (cpu, and vulkan where a device is present), cuvil bench.


@pytest.fixture(scope="module")
def transformer_pt2(tmp_path_factory):
    import models

    model, args = models.transformer_block()
    path = tmp_path_factory.mktemp("compare") / "block.pt2"
    torch.export.save(torch.export.export(model, args), str(path))
    return path


@pytest.mark.slow
def test_cli_compare_writes_table_json_and_png(transformer_pt2, tmp_path, capsys):
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    code = cli.main(["compare", str(transformer_pt2), "--targets", "cpu,vulkan", "--json", str(out_json),
                     "--plot", str(out_png), "--repetitions", "3", "--warmup", "1", "--min-time", "0", "--max-time", "2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out_json.read_text())
    entries = {e["name"]: e for e in data["entries"]}
    assert set(entries) == {"cpu", "vulkan", "torch eager (cpu)"}
    assert entries["cpu"]["status"] == "ok" and entries["cpu"]["numerics"]["max_rel_err"] <= 1e-4
    assert entries["cpu"]["patterns_fired"]["raise-torch-to-cuvil"]["sdpa"] == 1
    vulkan = entries["vulkan"]
    assert vulkan["status"] == "ok" or (vulkan["status"] == "skipped" and "vulkan" in vulkan["reason"]), vulkan
    assert data["inputs"] == [{"shape": [2, 16, 64], "dtype": "float32", "source": "generated", "values": "N(0, 1)"}]
    assert "generated at random from the program's signature" in out  # said, not silently assumed
    assert re.search(r"│ cpu\s+│ ok\s+│", out) and "torch eager (cpu)" in out
    assert f"wrote {out_png}" in out and "cuvil: cpu: compiling" in err  # progress goes to stderr
    _assert_png(out_png)


def test_cli_compare_rejects_unknown_configs_before_compiling(transformer_pt2, capsys):
    code = cli.main(["compare", str(transformer_pt2), "--configs", "default,without:nope", "-q"])
    err = capsys.readouterr().err
    assert code == 1 and "cannot disable pattern 'nope': no such pattern" in err
    assert cli.main(["compare", str(transformer_pt2), "--tolerance", "float32"]) == 1
    assert "expected DTYPE=RTOL" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_compare_exits_1_on_a_mismatch(relu_mlp, tmp_path, capsys):
    model, args = relu_mlp
    pt2, patterns = tmp_path / "m.pt2", tmp_path / "wrong.py"
    torch.export.save(torch.export.export(model, args), str(pt2))
    patterns.write_text(WRONG_PATTERN_FILE)
    code = cli.main(["compare", str(pt2), "--patterns", str(patterns), "--competitors", "none", "-n", "0", "-q"])
    out, err = capsys.readouterr()
    assert code == 1 and "MISMATCH" in out and "1 entry did not pass: cpu (mismatch)" in err


WRONG_PATTERN_FILE = '''
from cuvil_mlir.core.patterns import PatternSet, build

patterns = PatternSet("relu-into-sigmoid")

@patterns.add("torch.aten.relu")
def relu_epilogue_as_sigmoid(op, rewriter):
    """relu(y) -> sigmoid(y)   (WRONG on purpose)"""
    return build("torch.aten.sigmoid", [op.operands[0]], op.result.type)
'''


TINY_FACTORY = """
import torch


def make():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    return model.eval(), (torch.randn(2, 8),)
"""


@pytest.mark.slow
def test_cli_build_only_then_from_runs_the_built_packages_here(tmp_path, capsys):
    """--build-only DIR compiles every entry into DIR with inputs, references and a manifest;
    --from DIR loads and checks those packages (no compiler) and rebuilds the model for the competitor."""
    factory, built, out_json = tmp_path / "tiny.py", tmp_path / "built", tmp_path / "r.json"
    factory.write_text(TINY_FACTORY)
    assert cli.main(["compare", f"{factory}:make", "--configs", "default,plain-iree", "--build-only", str(built),
                     "-n", "0", "-q"]) == 0
    assert f"run there: cuvil compare --from {built}" in capsys.readouterr().out
    manifest = json.loads((built / "manifest.json").read_text())
    assert [e["name"] for e in manifest["entries"]] == ["cpu", "cpu [plain-iree]"]
    assert all((built / e["package"]).is_file() for e in manifest["entries"])
    assert manifest["competitors"] == ["eager"] and manifest["model_spec"] == f"{factory.resolve()}:make"

    assert cli.main(["compare", "--from", str(built), "-n", "2", "--warmup", "1", "--min-time", "0",
                     "--json", str(out_json), "-q"]) == 0
    data = json.loads(out_json.read_text())
    assert [(e["name"], e["status"]) for e in data["entries"]] == [
        ("cpu", "ok"), ("cpu [plain-iree]", "ok"), ("torch eager (cpu)", "ok")]
    assert data["settings"]["built_from"] == str(built) and data["entries"][1]["baseline"] == "cpu"
    assert any("loaded and run here from built/" in n for n in data["notes"])
    capsys.readouterr()

    assert cli.main(["compare", "--from", str(tmp_path), "-q"]) == 1  # no manifest there
    assert f"compare --from: {tmp_path} has no manifest.json (write one with" in capsys.readouterr().err
    assert cli.main(["compare", "--from", str(built), "m.pt2"]) == 1  # the packages come from DIR
    assert "compare --from DIR takes no --build-only and no .pt2 MODEL" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_bench_times_a_package_on_generated_inputs(relu_mlp, tmp_path, capsys):
    model, args = relu_mlp
    pkg, out_json = tmp_path / "m.cuvilpkg", tmp_path / "b.json"
    cuvil_mlir.compile(model, args, target="cpu,vmvx").save(pkg)
    code = cli.main(["bench", str(pkg), "--device", "vmvx", "-n", "4", "--warmup", "1", "--min-time", "0",
                     "--json", str(out_json), "-q"])
    out = capsys.readouterr().out
    assert code == 0
    data = json.loads(out_json.read_text())
    assert data["schema"] == "cuvil-bench" and data["target"] == "vmvx" and data["targets"] == ["cpu", "vmvx"]
    assert data["latency"]["repetitions"] >= 4 and data["inputs"][0]["source"] == "generated"
    assert "generated at random from the package's signature" in out and re.search(r"│ vmvx\s+│ local-task", out)


# ---------------------------------------------------------------------------------------
# The pytest plugin, through pytester.


def test_plugin_is_an_installed_entry_point():
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="pytest11") if e.name == "cuvil"]
    assert ep.value == "cuvil_mlir.eval.pytest_plugin"


# Each pytester run is a subprocess: an in-process run drops the modules it imported, and
# IREE's runtime, torch-mlir's bindings and ml_dtypes cannot be imported twice in one process.


def test_plugin_parametrizes_over_targets_and_skips_absent_devices(pytester):
    pytester.makepyfile("""
        import pytest

        def test_target(cuvil_target):
            assert cuvil_target in ("cpu", "vmvx", "cuda")

        @pytest.mark.cuvil_targets("vmvx")
        def test_only_vmvx(cuvil_target):
            assert cuvil_target == "vmvx"

        def test_without_fixture():
            pass
    """)
    result = pytester.runpytest_subprocess("--cuvil-targets=cpu,vmvx,cuda", "-rs", "-v")
    result.assert_outcomes(passed=4, skipped=1)
    result.stdout.fnmatch_lines(["cuvil-mlir: --cuvil-targets=cpu,vmvx,cuda", "*test_target?cpu? PASSED*",
                                 "*test_target?vmvx? PASSED*", "*test_target?cuda? SKIPPED*", "*test_only_vmvx?vmvx? PASSED*",
                                 "SKIPPED*cuvil target cuda: no 'cuda' device on this machine*"])


def test_plugin_defaults_to_cpu_and_rejects_bad_targets(pytester):
    pytester.makepyfile("def test_target(cuvil_target):\n    assert cuvil_target == 'cpu'\n")
    pytester.runpytest_subprocess().assert_outcomes(passed=1)
    result = pytester.runpytest_subprocess("--cuvil-targets=cpu,tpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--cuvil-targets=cpu,tpu: unknown target 'tpu'; valid targets: cpu*"])


@pytest.mark.slow
def test_plugin_assertion_helpers_pass_and_fail(pytester):
    pytester.makepyfile("""
        import pytest
        import torch
        import cuvil_mlir
        from cuvil_mlir.eval.testing import assert_matches_reference

        torch.manual_seed(0)
        MODEL, X = torch.nn.Linear(8, 4).eval(), torch.randn(2, 8)

        @pytest.fixture
        def compiled(cuvil_target):
            return cuvil_mlir.compile(MODEL, (X,), target=cuvil_target)

        def test_matches(compiled):
            numerics = assert_matches_reference(compiled, (X,), reference=MODEL, rtol=1e-5)
            assert numerics.passed and numerics.max_rel_err <= 1e-5

        def test_wrong_reference_fails(compiled):
            assert_matches_reference(compiled, (X,), reference=lambda x: MODEL(x) + 1.0)
    """)
    result = pytester.runpytest_subprocess("--cuvil-targets=cpu")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.re_match_lines([r".*AssertionError: outputs on target cpu do not match the reference \(<lambda>\):",
                                  r".*output 0 \(float32\[2, 4\]\): max rel err \S+ > tol 0.0001 \(max abs err 1 at \[\d, \d\]: got"])
    assert "def assert_matches_reference" not in result.stdout.str()  # the traceback points at the test


# ---------------------------------------------------------------------------------------


def _rendered(report) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, file=open("/dev/null", "w"))
    report.print(console)
    return console.export_text()


def _assert_png(path: Path) -> None:
    from PIL import Image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG" and image.width > 600 and image.height > 200

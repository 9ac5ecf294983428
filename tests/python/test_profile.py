"""The profiler (cuvil_mlir/eval/profiler.py): dispatch call sites and their FLOPs/bytes from IREE's
flow stage, per-dispatch timing from IREE's HAL profiling on the local CPU driver, the join,
its JSON form and the CLI. GPU-only parts: test_device_resident.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import cuvil_mlir

from cuvil_mlir.eval import profiler as profile
from cuvil_mlir.cli import main
from cuvil_mlir.core.diagnostics import CuvilError
from cuvil_mlir.targets import iree, parse_target

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

CPU_FLAGS = parse_target("cpu{data-tiling=false}").iree_flags()  # one dispatch per op (no pack / unpack)

MATMUL = """
func.func @main(%a: tensor<64x32xf32>, %b: tensor<32x16xf32>) -> tensor<64x16xf32> {
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<64x16xf32>
  %fill = linalg.fill ins(%zero : f32) outs(%init : tensor<64x16xf32>) -> tensor<64x16xf32>
  %mm = linalg.matmul ins(%a, %b : tensor<64x32xf32>, tensor<32x16xf32>) outs(%fill : tensor<64x16xf32>) -> tensor<64x16xf32>
  return %mm : tensor<64x16xf32>
}
"""


def test_dispatch_sites_count_matmul_flops_and_bytes():
    sites = iree.dispatch_sites(MATMUL.encode(), CPU_FLAGS, input_type="auto")
    assert len(sites) == 1
    s = sites[0]
    assert "matmul" in s["key"]
    assert s["flops"] == 2 * 64 * 32 * 16  # a mul and an add per point of the 64x16x32 nest
    assert s["bytes"] == (64 * 32 + 32 * 16 + 64 * 16) * 4
    assert s["reads"] == [[[64, 32], "f32"], [[32, 16], "f32"]] and s["writes"] == [[[64, 16], "f32"]]


def test_dispatch_sites_count_data_tiled_matmul_flops():
    # the cpu target's default: the matmul runs as mmt4d on packed operands (sizes that fill
    # whole tiles on any x86 tile shape), the packing in dispatches of their own
    sites = iree.dispatch_sites(MATMUL.encode(), parse_target("cpu").iree_flags(), input_type="auto")
    (mm,) = [s for s in sites if "mmt4d" in s["key"]]
    assert mm["flops"] == 2 * 64 * 32 * 16
    assert sum(s["flops"] for s in sites) == mm["flops"]


def test_dispatch_sites_elementwise_has_no_reduction_flops():
    text = """
func.func @main(%a: tensor<128xf32>) -> tensor<128xf32> {
  %0 = arith.addf %a, %a : tensor<128xf32>
  %1 = arith.mulf %0, %0 : tensor<128xf32>
  return %1 : tensor<128xf32>
}
"""
    (s,) = iree.dispatch_sites(text.encode(), CPU_FLAGS, input_type="auto")
    assert s["flops"] == 2 * 128  # one add and one mul per element: fused into one dispatch
    assert s["bytes"] == 2 * 128 * 4


@pytest.mark.parametrize("key, kind, dtype", [
    ("main$async_dispatch_1_matmul_like_128x2304x768_f16xf16xf32", "matmul_like", "f16"),
    ("main$async_dispatch_8_softmax_2x4x16x16xf32_dispatch_tensor_store", "softmax", "f32"),
    ("main$async_dispatch_5_attention_12x128x64x64x128", "attention", ""),
    ("main$async_dispatch_2_slow_memcpy", "slow_memcpy", ""),
    ("main$async_dispatch_0_reduction_32x64_bf16", "reduction", "bf16"),
    ("cuvil_linear_128x2304x768_f16_none_bias_f32_64x64x128w4s4_df2718c7", "kernel_linear", "f16"),
    ("cuvil_attention_1x12x12x128x128x64_f16_causal_128x64w4s3ptr_ef3aa6a7", "kernel_attention", "f16"),
])
def test_dispatch_kind_and_dtype(key, kind, dtype):
    assert profile.dispatch_kind(key) == kind
    assert profile._dispatch_dtype(key, []) == dtype


def test_dtype_falls_back_to_what_the_dispatch_reads():
    calls = [{"reads": [[[4], "i64"], [[4, 8], "f16"]]}]
    assert profile._dispatch_dtype("main$async_dispatch_2_slow_memcpy", calls) == "f16"


def test_group_paths_folds_layer_indices():
    paths = [f"model.h.{i}.attn.c_attn" for i in range(12)] + ["model.ln_f", ""]
    assert profile.group_paths(paths) == ["model.h.*.attn.c_attn x12", "(forward)", "model.ln_f"]
    assert profile.count_layers(paths) == 12
    # no indexed module: no layers (not 1)
    assert profile.count_layers(["fc1", "fc2"]) is None


def test_cuvil_ops_come_from_the_pattern_sites_at_the_same_paths():
    sites = {"lower-cuvil-to-torch": {"linear": {"h.0.fc": 1, "h.1.fc": 1}, "norm": {"h.0.ln": 1}},
             "fuse-linear-epilogue": {"gelu_epilogue": {"h.0.fc": 1}},
             "raise-torch-to-cuvil": {"linear": {"h.0.fc": 1}}}
    assert profile.cuvil_ops(["h.0.fc"], sites) == ["cuvil.linear", "fuse-linear-epilogue/gelu_epilogue"]
    assert profile.cuvil_ops(["h.0.ln"], sites) == ["cuvil.norm"]
    assert profile.cuvil_ops(["h.0.attn"], sites) == []  # nothing recorded there


def test_per_call_counts_from_sites_or_the_rarest_function():
    groups = {"a": (40, 1.0), "b": (20, 1.0)}
    assert profile._per_call(groups, [{"key": "a"}, {"key": "a"}, {"key": "b"}]) == {"a": 2, "b": 1}
    assert profile._per_call(groups, None) == {"a": 2, "b": 1}


def _timing(**over):
    base = dict(driver="local-task", wall_ms=0.05, wall_ms_samples=[0.05, 0.06], dispatch_ns={"k1": 30_000.0, "k2": 10_000.0},
                dispatch_count={"k1": 1.0, "k2": 2.0}, invocations=20, profiling_mode="host-execution")
    return profile.Timing(**{**base, **over})


def test_join_totals_shares_and_peaks():
    sites = [{"key": "k1", "location": 'loc("h.0.fc"(unknown))', "reads": [[[8, 8], "f16"]], "writes": [], "bytes": 3000, "flops": 6000},
             {"key": "k2", "location": 'loc("h.0.ln"(unknown))', "reads": [], "writes": [], "bytes": 1000, "flops": 0},
             {"key": "k2", "location": 'loc("h.1.ln"(unknown))', "reads": [], "writes": [], "bytes": 1000, "flops": 0}]
    prof = profile.join(_timing(), sites, target="cuda:h200", peak={"tflops": {"f16": 100.0}, "gbs": 1000.0})
    t = prof["totals"]
    assert t["wall_us"] == pytest.approx(50.0) and t["dispatch_us"] == pytest.approx(40.0) and t["gap_us"] == pytest.approx(10.0)
    assert t["dispatches"] == 3 and t["layers"] == 2
    k1, k2 = prof["rows"]  # slowest first
    assert k1["dispatch"] == "k1" and k1["share"] == pytest.approx(0.75)
    assert k1["tflops"] == pytest.approx(6000 / 30_000 / 1e3) and k1["gbs"] == pytest.approx(0.1)
    assert k1["tflops_share_of_peak"] == pytest.approx(k1["tflops"] / 100.0)
    assert k2["module_paths"] == ["h.*.ln x2"] and k2["tflops"] is None  # no FLOPs: no rate, not zero
    assert k2["time_us_per_dispatch"] == pytest.approx(5.0)


def test_join_without_sites_still_names_dispatches():
    prof = profile.join(_timing(), None, target="cpu")
    assert {r["dispatch"] for r in prof["rows"]} == {"k1", "k2"}
    assert all(r["module_paths"] == [] and r["flops"] is None for r in prof["rows"])


def test_profile_json_round_trip_and_rejects_others(tmp_path):
    prof = profile.join(_timing(), None, target="cpu")
    path = tmp_path / "p.json"
    profile.write_json(prof, path)
    assert profile.load_profile(path)["rows"] == json.loads(json.dumps(prof["rows"]))
    (tmp_path / "other.json").write_text(json.dumps({"schema": "cuvil-compare"}))
    with pytest.raises(CuvilError, match="not a cuvil profile"):
        profile.load_profile(tmp_path / "other.json")
    (tmp_path / "old.json").write_text(json.dumps({**prof, "schema_version": 99}))
    with pytest.raises(CuvilError, match="schema version 99"):
        profile.load_profile(tmp_path / "old.json")


@pytest.fixture(scope="module")
def mlp_profile():
    import models

    model, args = models.mlp()
    return cuvil_mlir.profile(model, args, target="cpu", repetitions=3, iterations=5)


@pytest.mark.slow
def test_profile_mlp_on_cpu_end_to_end(mlp_profile):
    prof = mlp_profile
    assert prof["schema"] == "cuvil-profile" and prof["driver"] == "local-task" and prof["profiling_mode"] == "host-execution"
    # every Linear got its own matmul dispatch (data-tiled on the CPU: mmt4d, beside the
    # dispatches that pack and unpack its operands), named after its module, with the Cuvil op behind it
    rows = {r["module_paths"][0]: r for r in prof["rows"] if r["module_paths"] and r["kind"].startswith(("matmul", "mmt4d"))}
    assert {"fc1", "fc2", "fc3"} <= set(rows)
    for name, (m, n, k) in {"fc1": (8, 256, 64), "fc2": (8, 256, 256), "fc3": (8, 32, 256)}.items():
        r = rows[name]
        assert "cuvil.linear" in r["cuvil_ops"]
        assert r["flops"] >= 2 * m * n * k  # the matmul, plus its epilogue
        assert r["time_us"] > 0 and r["calls"] == 1
    assert "fuse-linear-epilogue/gelu_epilogue" in rows["fc1"]["cuvil_ops"]
    assert "fuse-linear-epilogue/gelu_epilogue" not in rows["fc3"]["cuvil_ops"]  # fc3 has no activation
    t = prof["totals"]
    assert t["dispatch_us"] == pytest.approx(sum(r["time_us"] for r in prof["rows"]))
    assert t["gap_us"] == pytest.approx(t["wall_us"] - t["dispatch_us"])
    assert sum(r["share"] for r in prof["rows"]) == pytest.approx(1.0)
    assert prof["peak"] is None and all(r["tflops_share_of_peak"] is None for r in prof["rows"])  # a host CPU has no datasheet entry


@pytest.mark.slow
def test_profile_table_and_plot(mlp_profile, tmp_path):
    from rich.console import Console

    console = Console(record=True, width=200)
    profile.print_profile(mlp_profile, console=console)
    text = console.export_text()
    assert "fc1" in text and "gap" in text and "cuvil.linear" in text
    profile.plot(mlp_profile, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_cli_profile_shows_a_saved_profile(mlp_profile, tmp_path, capsys):
    path = tmp_path / "p.json"
    profile.write_json(mlp_profile, path)
    assert main(["profile", str(path), "--plot", str(tmp_path / "p.png")]) == 0
    out = capsys.readouterr().out
    assert "fc2" in out and (tmp_path / "p.png").exists()


def test_cli_profile_errors_name_the_file(tmp_path, capsys):
    assert main(["profile", str(tmp_path / "missing.cuvilpkg")]) == 1
    assert "package not found" in capsys.readouterr().err
    assert main(["profile", str(tmp_path / "p.json"), "--json", str(tmp_path / "no" / "x.json")]) == 1
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_profile_build_only_then_package(tmp_path, capsys):
    pkg = tmp_path / "mlp.cuvilpkg"
    spec = f"{ROOT / 'examples' / 'models.py'}:mlp"
    assert main(["profile", spec, "--build-only", str(pkg)]) == 0
    assert "dispatches" in capsys.readouterr().out
    meta = json.loads(__import__("zipfile").ZipFile(pkg).read("metadata.json"))
    assert len(meta["dispatches"]["cpu"]) >= 3
    assert main(["profile", str(pkg), "--json", str(tmp_path / "p.json"), "--repetitions", "2", "--iterations", "3"]) == 0
    prof = profile.load_profile(tmp_path / "p.json")
    assert any("fc2" in r["module_paths"] for r in prof["rows"])
    assert np.isfinite(prof["totals"]["wall_us"])


@pytest.mark.slow
def test_profile_with_external_parameters(tmp_path):
    """A module whose weights are external (params="external"; the default from 64 MiB of weights)
    reads them from a parameter archive: the profiler's benchmark runs get it, in memory and from
    a saved package alike (without it iree-benchmark-module cannot resolve the weights)."""
    import models

    from cuvil_mlir.compiler.pipeline import Options, compile_program

    model, args = models.mlp()
    compiled = compile_program(model, args, Options(target="cpu", record_dispatches=True, params="external"))
    assert compiled.parameters is not None
    for source in (compiled, tmp_path / "mlp.cuvilpkg"):
        if isinstance(source, Path):
            compiled.save(source)
        prof = cuvil_mlir.profile(source, repetitions=2, iterations=3)
        assert any("--parameters=model=" in c for c in prof["commands"]), prof["commands"]
        rows = {r["module_paths"][0]: r for r in prof["rows"] if r["module_paths"]}
        assert {"fc1", "fc2", "fc3"} <= set(rows) and all(rows[k]["time_us"] > 0 for k in ("fc1", "fc2", "fc3"))


def test_dispatch_sites_of_a_module_with_kernels_are_the_kernels():
    """With the Hopper kernels, the recorded call sites are those of the module that runs: each
    kernel is a dispatch under its own (PTX entry, ncu) name, at the nn.Module path of its op, with
    its FLOPs from the kernel's spec; IREE's dispatches around them keep their runtime names."""
    import torch
    import torch.nn.functional as F

    from cuvil_mlir.compiler.pipeline import Options, compile_program
    from cuvil_mlir.core.diagnostics import module_path
    from cuvil_mlir.targets import cuda_kernels

    if cuda_kernels.available():
        pytest.skip(f"kernels cannot be built here: {cuda_kernels.available()}")

    class QKVAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(256, 768)

        def forward(self, x):
            q, k, v = (t.reshape(1, 128, 4, 64).transpose(1, 2) for t in self.qkv(x).split(256, dim=-1))
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    torch.manual_seed(0)
    model = QKVAttention().eval().half()
    compiled = compile_program(model, (torch.randn(1, 128, 256).half(),), Options(target="cuda:h200", record_dispatches=True))
    kernels = {r["kernel"]: r for r in compiled.metadata["kernels"] if r.get("kernel")}
    assert len(kernels) == 2, compiled.metadata["kernels"]  # the linear and the attention
    sites = compiled.metadata["dispatches"]["cuda:h200"]
    by_key = {s["key"]: s for s in sites}
    assert set(kernels) <= set(by_key), [s["key"] for s in sites]
    for name, record in kernels.items():
        site = by_key[name]
        if record.get("op") == "attention":
            assert site["flops"] == 4 * 1 * 4 * 128 * 128 * 64 and module_path(site["location"]) == ""
        else:
            assert site["flops"] == 2 * 128 * 768 * 256 and module_path(site["location"]) == "qkv"
    # the rest keep IREE's names (main$async_dispatch_N_...), numbered in the module that runs
    assert all(s["key"].startswith("main$async_dispatch_") for s in sites if s["key"] not in kernels)
    ops = profile.cuvil_ops(["qkv"], compiled.metadata["pattern_sites"])
    assert any(op.endswith("[kernel]") for op in ops), ops


def test_ncu_csv_is_grouped_per_kernel():
    text = "\n".join([
        "==PROF== Connected to process 1",
        '"ID","Process ID","Kernel Name","Context","Stream","Metric Name","Metric Unit","Metric Value"',
        '"0","1","main$async_dispatch_0_reduction_128x768_f16","1","13","gpu__time_duration.sum","nsecond","2,048"',
        '"1","1","main$async_dispatch_1_matmul_like_128x2304x768_f16xf16xf32","1","13","gpu__time_duration.sum","usecond","5.5"',
        '"2","1","main$async_dispatch_0_reduction_128x768_f16","1","13","gpu__time_duration.sum","nsecond","1952"',
        '"2","1","main$async_dispatch_0_reduction_128x768_f16","1","13","sm__throughput.avg.pct_of_peak","%","12"',
    ])
    groups = profile.ncu_groups(text)
    assert groups == {"main$async_dispatch_0_reduction_128x768_f16": (2, 4000.0),
                      "main$async_dispatch_1_matmul_like_128x2304x768_f16xf16xf32": (1, 5500.0)}
    # a module initializer's dispatch (load time: a weight transpose) caught in the window is not per-call time
    loaded = {**groups, "_initializer_7_dispatch_0_transpose_768x3072_f16": (3, 900.0)}
    assert profile.calls_only(loaded) == groups


def test_join_matches_cuda_kernel_names_to_exports():
    sites = [{"key": "main$async_dispatch_0_x", "location": 'loc("fc"(unknown))', "reads": [], "writes": [], "bytes": 8, "flops": 0}]
    timing = _timing(dispatch_ns={"main_async_dispatch_0_x": 1000.0}, dispatch_count={"main_async_dispatch_0_x": 1.0})
    (row,) = profile.join(timing, sites, target="cuda")["rows"]
    assert row["dispatch"] == "main$async_dispatch_0_x" and row["module_paths"] == ["fc"] and row["time_us"] == 1.0
    assert profile._per_call({"main_async_dispatch_0_x": (3, 1.0)}, sites) == {"main_async_dispatch_0_x": 1}

"""A CPU module records the instruction set it was compiled for; loading it on a CPU that
lacks those instructions is refused before the first call (it would die with SIGILL), and a
package with another target falls back to it. Also `cuvil targets`."""

import json

import numpy as np
import pytest
import torch

import cuvil_mlir
from cuvil_mlir import cli
from cuvil_mlir.runtime import hostcpu
from cuvil_mlir.core.diagnostics import RuntimeFailure
from cuvil_mlir.targets import iree, parse_target

# CPUs with instructions few machines have all of (AMX, AVX-512 FP16, SVE): the first whose
# requirements this host does not meet is the "foreign" CPU of the tests below.
FOREIGN_CANDIDATES = ("sapphirerapids", "znver5", "znver4", "skylake-avx512", "haswell")


def foreign_cpu() -> str:
    for name in FOREIGN_CANDIDATES:
        if hostcpu.unmet(parse_target(f"cpu:{name}").requirements()):
            return name
    pytest.skip(f"this CPU has every instruction of {', '.join(FOREIGN_CANDIDATES)}")


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


def test_cpu_requirements_name_the_cpu_and_its_features():
    host = parse_target("cpu").requirements()
    assert host["format"].startswith("embedded-elf-") and host["cpu"] and host["cpu"] != "host"
    assert hostcpu.unmet(host) is None  # this machine runs what it compiles for itself
    znver4 = parse_target("cpu:znver4").requirements()
    assert znver4["cpu"] == "znver4" and {"avx2", "avx512f", "avx512bf16"} <= set(znver4["cpu_features"])
    assert parse_target("vmvx").requirements() == {}


def test_unmet_names_missing_instructions(monkeypatch):
    monkeypatch.setattr(hostcpu, "host_arch", lambda: "x86_64")
    monkeypatch.setattr(hostcpu, "host_cpu_flags", lambda: frozenset({"sse4_1", "sse4_2", "avx", "avx2", "fma", "pni"}))
    needs = {"format": "embedded-elf-x86_64", "cpu": "znver4", "cpu_features": ["avx2", "avx512f", "sse4.1", "64bit", "x87"]}
    why = hostcpu.unmet(needs)
    assert "znver4" in why and "avx512f" in why and "avx2" not in why.split("(")[1]
    assert hostcpu.unmet({**needs, "cpu_features": ["avx2", "sse4.1", "sse3", "64bit"]}) is None  # 64bit: no cpuinfo flag
    assert "aarch64" in hostcpu.unmet({"format": "embedded-elf-aarch64", "cpu": "neoverse-v2", "cpu_features": []})
    assert hostcpu.unmet({}) is None


def test_package_records_requirements(tmp_path):
    x = torch.randn(2, 8)
    compiled = cuvil_mlir.compile(Small().eval(), (x,), target="cpu,vmvx")
    path = tmp_path / "m.cuvilpkg"
    compiled.save(path)
    meta = json.loads(__import__("zipfile").ZipFile(path).read("metadata.json"))
    cpu, vmvx = meta["modules"]
    assert cpu["requires"]["cpu"] == parse_target("cpu").requirements()["cpu"] and cpu["requires"]["cpu_features"]
    assert vmvx["requires"] == {}


def test_module_for_a_foreign_cpu_is_refused_before_running(tmp_path):
    name = foreign_cpu()
    model, x = Small().eval(), torch.randn(2, 8)
    path = tmp_path / "foreign.cuvilpkg"
    cuvil_mlir.compile(model, (x,), target=f"cpu:{name}").save(path)
    with pytest.raises(RuntimeFailure) as e:  # at load: it picks its target there
        cuvil_mlir.load(path)(x)
    assert f"cpu:{name}" in e.value.message and "lacks" in e.value.message and "illegal instruction" in e.value.message


def test_package_falls_back_from_a_foreign_cpu_to_one_this_machine_runs(tmp_path):
    name = foreign_cpu()
    model, x = Small().eval(), torch.randn(2, 8)
    path = tmp_path / "both.cuvilpkg"
    cuvil_mlir.compile(model, (x,), target=f"cpu:{name},vmvx").save(path)
    loaded = cuvil_mlir.load(path)
    assert loaded.select() == "vmvx"
    np.testing.assert_allclose(loaded(x).numpy(), model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_cuvil_targets_lists_every_kind_and_the_devices_here(capsys):
    assert cli.main(["targets"]) == 0
    text = capsys.readouterr().out
    for kind in ("cpu", "vmvx", "cuda", "rocm", "vulkan"):
        assert f"\n{kind}  (driver" in text
    assert "cuda:h200 (sm_90)" in text and "hopper-mode=" in text and "rocm:mi300x (gfx942)" in text
    assert "cpu  (driver local-task; device here: yes" in text

    assert cli.main(["targets", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    by_kind = {k["kind"]: k for k in data["targets"]}
    assert by_kind["cpu"]["device"]["available"] is True
    assert data["host"]["cpu"] == parse_target("cpu").requirements()["cpu"]
    assert set(by_kind) == {"cpu", "vmvx", "cuda", "rocm", "vulkan"}

"""Runtime devices: discovery, choosing a package's target on this machine, and falling
back to the next target when one fails to load or to run.

Failing modules are real IREE modules that cannot work where the package says they do:
one compiled for an aarch64 CPU but listed for this machine's CPU driver (IREE refuses it
at load), and one compiled for another batch size than the package's signature (IREE
rejects the call). Nothing of cuvil-mlir is mocked.
"""

import logging
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import cuvil_mlir
from cuvil_mlir.runtime import package
from cuvil_mlir.runtime.compiled import TargetFallbackWarning
from cuvil_mlir.compiler.context import make_context
from cuvil_mlir.core.diagnostics import CuvilError, InputError, RuntimeFailure
from cuvil_mlir.core.ir import parse_module
from cuvil_mlir.runtime.package import PackagedModule
from cuvil_mlir.runtime.session import Session, available_devices, probe_drivers
from cuvil_mlir.targets import iree, parse_target

AARCH64_FLAGS = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
                 "--iree-llvmcpu-target-triple=aarch64-unknown-linux-gnu"]


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


def has_device(driver: str) -> bool:
    return bool(available_devices().get(driver))


def skip_without(driver: str) -> None:
    status = probe_drivers().get(driver)
    if status is None or not status.devices:
        pytest.skip(f"no {driver} device: {status.reason if status else 'no such driver in this IREE runtime'}")


@pytest.fixture(scope="module")
def tiny():
    """The model, its input, the reference output, a cpu+vmvx build and the lowered module."""
    torch.manual_seed(0)
    model, x = Tiny().eval(), torch.randn(4, 16)
    with torch.no_grad():
        ref = model(x).numpy()
    built = cuvil_mlir.compile(model, (x,), target="cpu,vmvx")
    lowered = parse_module(cuvil_mlir.lower(model, (x,), stage="lowered", elide_weights=False), make_context())
    stale = cuvil_mlir.compile(model, (torch.randn(2, 16),), target="cpu").modules[0]  # batch 2, not 4
    return {"model": model, "x": x, "ref": ref, "built": built, "lowered": lowered, "stale": stale}


def module_for(tiny, spec: str) -> PackagedModule:
    """A real module of the tiny model for ``spec``, compiled straight through IREE."""
    target = parse_target(spec)
    flags = target.iree_flags()
    return PackagedModule(target.spec, target.driver, tuple(flags), iree.compile_to_vmfb(tiny["lowered"], flags))


def cpu(tiny) -> PackagedModule:
    return tiny["built"].modules[0]


def vmvx(tiny) -> PackagedModule:
    return tiny["built"].modules[1]


def aarch64_listed_as_cpu(tiny) -> PackagedModule:
    """Compiled for an aarch64 CPU, listed for this machine's CPU driver: fails at load."""
    return PackagedModule("cpu", "local-task", tuple(AARCH64_FLAGS), iree.compile_to_vmfb(tiny["lowered"], AARCH64_FLAGS))


def stale_shape(tiny, target="cpu") -> PackagedModule:
    """Compiled for batch 2 while the package says batch 4: loads, and IREE rejects the call."""
    m = tiny["stale"]
    return PackagedModule(target, m.driver, m.iree_flags, m.vmfb)


def write(tmp_path, tiny, modules, name="m") -> str:
    path = tmp_path / f"{name}.cuvilpkg"
    meta = {k: v for k, v in tiny["built"].metadata.items() if k != "modules"}
    package.write(path, modules, {**meta, "targets": [m.target for m in modules]})
    return path


def assert_matches(tiny, got):
    np.testing.assert_allclose(np.asarray(got), tiny["ref"], rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------
# discovery


def test_local_task_always_has_a_device():
    devices = available_devices()
    assert devices["local-task"] and devices["local-task"][0].driver == "local-task"


def test_every_driver_has_devices_or_a_reason():
    for name, status in probe_drivers().items():
        assert bool(status.devices) != bool(status.reason), name
        assert (name in available_devices()) == bool(status.devices)


def test_driver_without_device_reads_as_absent_with_reason():
    """The Vulkan driver is built in; with no ICD to load it has no device."""
    code = ("from cuvil_mlir.runtime.session import available_devices, probe_drivers\n"
            "s = probe_drivers()['vulkan']\n"
            "print('absent' if 'vulkan' not in available_devices() else 'present', s.reason)\n")
    env = {"VK_ICD_FILENAMES": "/nonexistent/icd.json", "VK_DRIVER_FILES": "/nonexistent/icd.json", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("absent "), out.stdout
    assert len(out.stdout.split()) > 1  # a reason follows


# ---------------------------------------------------------------------------------------
# choosing a target


def test_vulkan_cpu_package_picks_first_available(tmp_path, tiny, caplog):
    path = write(tmp_path, tiny, [module_for(tiny, "vulkan"), cpu(tiny)])
    with caplog.at_level(logging.INFO, logger="cuvil_mlir"):
        cm = cuvil_mlir.load(path)
    expected = "vulkan" if has_device("vulkan") else "cpu"
    assert cm.targets == ["vulkan", "cpu"] and cm.active_target == expected
    assert f"running on target '{expected}'" in caplog.text
    assert_matches(tiny, cm(tiny["x"]))


def test_cuda_cpu_package_picks_cpu_without_cuda_device(tmp_path, tiny, caplog):
    if has_device("cuda"):
        pytest.skip("this machine has a CUDA device (test_cuda_package_runs_on_cuda covers it)")
    path = write(tmp_path, tiny, [module_for(tiny, "cuda:sm_86"), cpu(tiny)])
    with caplog.at_level(logging.INFO, logger="cuvil_mlir"), warnings.catch_warnings():
        warnings.simplefilter("error")  # a target without a device is skipped quietly
        cm = cuvil_mlir.load(path)
        assert_matches(tiny, cm(tiny["x"]))
    assert cm.active_target == "cpu"
    assert "not used: cuda:sm_86: no 'cuda' device" in caplog.text


def test_prefer_reorders(tmp_path, tiny):
    path = write(tmp_path, tiny, [cpu(tiny), vmvx(tiny)])
    assert cuvil_mlir.load(path).active_target == "cpu"
    assert cuvil_mlir.load(path, prefer=["vmvx"]).active_target == "vmvx"
    assert cuvil_mlir.load(path, prefer="vmvx,cpu").active_target == "vmvx"
    cm = cuvil_mlir.load(path, prefer=["vmvx"])
    assert cm.select(prefer=["cpu"]) == "cpu" and cm.active_target == "cpu"
    assert_matches(tiny, cm(tiny["x"]))


def test_prefer_a_kind_matches_its_targets(tmp_path, tiny):
    path = write(tmp_path, tiny, [vmvx(tiny), cpu(tiny)])
    assert cuvil_mlir.load(path, prefer=["cpu"]).active_target == "cpu"


def test_prefer_unknown_target_is_an_error(tmp_path, tiny):
    path = write(tmp_path, tiny, [cpu(tiny), vmvx(tiny)])
    with pytest.raises(CuvilError, match="'rocm' names no target of this program; its targets: cpu, vmvx"):
        cuvil_mlir.load(path, prefer=["rocm"])


def test_compiled_multi_target_result_is_usable_directly(tiny):
    cm = tiny["built"]
    assert cm.targets == ["cpu", "vmvx"]
    assert_matches(tiny, cm(tiny["x"]))
    assert cm.active_target == "cpu"
    assert cm.select(prefer="vmvx") == "vmvx"
    assert_matches(tiny, cm(tiny["x"].numpy()))


# ---------------------------------------------------------------------------------------
# falling back


def test_module_that_fails_to_load_falls_back_with_warning(tmp_path, tiny):
    path = write(tmp_path, tiny, [aarch64_listed_as_cpu(tiny), vmvx(tiny)])
    with pytest.warns(TargetFallbackWarning, match=r"target 'cpu' \(driver 'local-task'\): loading failed: .*"
                                                   r"not found or unavailable.*; falling back to target 'vmvx'"):
        cm = cuvil_mlir.load(path)
    assert cm.active_target == "vmvx"
    assert_matches(tiny, cm(tiny["x"]))


def test_call_that_fails_falls_back_with_warning(tmp_path, tiny):
    path = write(tmp_path, tiny, [stale_shape(tiny), vmvx(tiny)])
    cm = cuvil_mlir.load(path)
    assert cm.active_target == "cpu"  # it loads: the failure comes with the call
    with pytest.warns(TargetFallbackWarning, match=r"target 'cpu' \(driver 'local-task'\): a call failed: "
                                                   r"calling 'main' on driver 'local-task' failed: .*; falling back to target 'vmvx'"):
        got = cm(tiny["x"])
    assert_matches(tiny, got)
    assert cm.active_target == "vmvx"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the failed target is not tried again
        assert_matches(tiny, cm(tiny["x"]))


def test_input_error_does_not_fall_back(tmp_path, tiny):
    path = write(tmp_path, tiny, [cpu(tiny), vmvx(tiny)])
    cm = cuvil_mlir.load(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match=r"expected shape float32\[4, 16\]"):
            cm(torch.randn(3, 16))
    assert cm.active_target == "cpu"


def test_all_targets_failing_to_load_is_a_clear_failure(tmp_path, tiny):
    modules = [aarch64_listed_as_cpu(tiny), PackagedModule("metal", "metal", (), b"not a module")]
    path = write(tmp_path, tiny, modules)
    with pytest.raises(RuntimeFailure) as info:
        cuvil_mlir.load(path)
    text = str(info.value)
    assert "no target of this program can run on this machine (targets: cpu, metal)" in text
    assert "  cpu: loading failed: IREE runtime could not load the module on driver 'local-task'" in text
    assert "  metal: this IREE runtime has no 'metal' driver" in text


def test_all_targets_failing_on_call_is_a_clear_failure(tmp_path, tiny):
    path = write(tmp_path, tiny, [stale_shape(tiny, "cpu"), stale_shape(tiny, "cpu:x86-64")])
    cm = cuvil_mlir.load(path)
    with pytest.warns(TargetFallbackWarning, match="falling back to target 'cpu:x86-64'"):
        with pytest.raises(RuntimeFailure, match=r"(?s)can run on this machine.*  cpu: a call failed: .*"
                                                 r"  cpu:x86-64: a call failed: "):
            cm(tiny["x"])
    with pytest.raises(RuntimeFailure, match="no target of this program can run"):
        cm(tiny["x"])  # and it stays failed, without trying again


# ---------------------------------------------------------------------------------------
# the two ways inputs reach a device


def test_copy_path_matches_import_path_for_mixed_dtypes():
    """The copy path (every non-CPU driver) gives the same results as the CPU import path,
    checked on the CPU so that it runs everywhere; bool and int64 in and out."""

    class Mixed(torch.nn.Module):
        def forward(self, x, ids, mask):
            y = torch.where(mask, x * 2, x) + ids.to(torch.float32)
            return y, y > 1.0, ids * 3

    torch.manual_seed(0)
    args = (torch.randn(3, 5), torch.randint(0, 10, (3, 5)), torch.rand(3, 5) > 0.5)
    module = cuvil_mlir.compile(Mixed(), args, target="cpu").modules[0]
    arrays = [a.numpy() for a in args]
    imported = Session(module.vmfb, "local-task").invoke("main", arrays)
    copying = Session(module.vmfb, "local-task", copy=True)
    assert copying.copies
    copied = copying.invoke("main", arrays)
    with torch.no_grad():
        ref = [r.numpy() for r in Mixed()(*args)]
    for got_i, got_c, r in zip(imported, copied, ref):
        assert got_c.dtype == r.dtype and got_c.shape == r.shape
        np.testing.assert_array_equal(got_c, got_i)
        np.testing.assert_array_equal(got_c, r)
    # staging buffers are kept for the next call, and a kept buffer never leaks one call's
    # results into another's (outputs own their memory)
    staged = {size: len(b) for size, b in copying._staging.items()}
    other = [(a * 0 + 1).astype(a.dtype) if a.dtype != bool else ~a for a in arrays]
    again = copying.invoke("main", other)
    assert {size: len(b) for size, b in copying._staging.items()} == staged
    for got_c, r in zip(copied, ref):
        np.testing.assert_array_equal(got_c, r)  # the first call's outputs are unchanged
    with torch.no_grad():
        ref2 = [r.numpy() for r in Mixed()(*[torch.from_numpy(a) for a in other])]
    for got, r in zip(again, ref2):
        np.testing.assert_array_equal(got, r)


def test_session_allocators():
    module = cuvil_mlir.compile(torch.nn.Linear(4, 2).eval(), (torch.randn(1, 4),), target="cpu").modules[0]
    x = np.ones((1, 4), np.float32)
    cached = Session(module.vmfb, "local-task", copy=True, allocator="caching")
    assert cached.allocator == "caching" and Session(module.vmfb, "local-task").allocator == "default"
    np.testing.assert_array_equal(cached.invoke("main", [x])[0], Session(module.vmfb, "local-task").invoke("main", [x])[0])
    with pytest.raises(cuvil_mlir.CuvilError, match="unknown device allocator 'slab'"):
        Session(module.vmfb, "local-task", allocator="slab")


# ---------------------------------------------------------------------------------------
# CUDA (skipped without a CUDA device)


@pytest.mark.gpu
def test_cuda_package_runs_on_cuda(tmp_path, tiny):
    skip_without("cuda")
    path = write(tmp_path, tiny, [module_for(tiny, "cuda:sm_86"), cpu(tiny)])
    cm = cuvil_mlir.load(path)
    assert cm.active_target == "cuda:sm_86"
    assert_matches(tiny, cm(tiny["x"]))


@pytest.mark.gpu
def test_cuda_module_failing_falls_back_to_cpu(tmp_path, tiny):
    skip_without("cuda")
    bad = PackagedModule("cuda:sm_86", "cuda", (), aarch64_listed_as_cpu(tiny).vmfb)  # not a CUDA module
    path = write(tmp_path, tiny, [bad, cpu(tiny)])
    with pytest.warns(TargetFallbackWarning, match="target 'cuda:sm_86' .*falling back to target 'cpu'"):
        cm = cuvil_mlir.load(path)
    assert cm.active_target == "cpu"

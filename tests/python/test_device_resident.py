"""Device-resident I/O (cuvil_mlir/runtime/device_resident.py, runtime.Session.invoke_dlpack): DLPack in
and out. The mechanism is checked on the local CPU driver (torch CPU tensors through DLPack,
no copy); the CUDA path is gpu-marked and skips without a CUDA device for both torch and IREE."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import cuvil_mlir
from cuvil_mlir.runtime import device_resident
from cuvil_mlir.core.diagnostics import InputError, RuntimeFailure
from cuvil_mlir.runtime.session import Session, available_devices

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))


@pytest.fixture(scope="module")
def mlp_cpu():
    import models

    model, (x,) = models.mlp()
    return cuvil_mlir.compile(model, (x,), target="cpu"), model, x


def _aligned(t, alignment=64):
    """A copy of ``t`` whose data starts on an ``alignment``-byte boundary."""
    flat = torch.empty(t.numel() + alignment, dtype=t.dtype)
    skip = (-flat.data_ptr() % alignment) // t.element_size()
    out = flat[skip:skip + t.numel()].view(t.shape)
    out.copy_(t)
    return out


@pytest.mark.slow
def test_invoke_dlpack_on_cpu_matches_the_host_path(mlp_cpu):
    compiled, model, x = mlp_cpu
    session = Session(compiled.modules[0].vmfb, "local-task")
    want = session.invoke("main", [x.numpy()])[0]
    (capsule,) = session.invoke_dlpack("main", [_aligned(x)])
    got = torch.from_dlpack(capsule)
    assert got.device.type == "cpu" and got.shape == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_allclose(got.numpy(), model(x).detach().numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_invoke_dlpack_rejects_an_unaligned_input_with_a_clear_error(mlp_cpu):
    compiled, _, x = mlp_cpu
    session = Session(compiled.modules[0].vmfb, "local-task")
    flat = _aligned(torch.cat([torch.zeros(1), x.flatten()]))
    unaligned = flat[1:].view(x.shape)  # 4 bytes past a 64-byte boundary
    with pytest.raises(RuntimeFailure, match="device tensors failed.*aligned"):
        session.invoke_dlpack("main", [unaligned])


def test_wanted_only_for_torch_tensors_on_a_gpu():
    x = torch.zeros(2)
    assert not device_resident.wanted((x,))  # CPU tensors: the host path, as before
    assert not device_resident.wanted((x.numpy(),))
    assert not device_resident.wanted(())


@pytest.mark.slow
def test_host_inputs_still_work(mlp_cpu):
    compiled, model, x = mlp_cpu
    assert "dispatches" not in compiled.metadata  # recorded only when asked (record_dispatches)
    out = compiled(x)
    assert isinstance(out, torch.Tensor) and out.device.type == "cpu"
    assert isinstance(compiled(x.numpy()), np.ndarray)


def _cuda_ready() -> bool:
    return torch.cuda.is_available() and bool(available_devices().get("cuda"))


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_ready(), reason="needs a CUDA device for both torch and IREE's cuda driver")
def test_cuda_tensors_in_and_out(mlp_cpu):
    import models

    model, (x,) = models.mlp()
    compiled = cuvil_mlir.compile(model, (x,), target="cuda")
    host = compiled(x.numpy())
    got = compiled(x.cuda())
    assert got.device.type == "cuda"
    np.testing.assert_array_equal(got.cpu().numpy(), host)
    # a torch kernel can read IREE's result, and a view input (not 64-byte aligned) is copied first
    assert torch.allclose(got.float().sum().cpu(), torch.tensor(float(host.sum())), rtol=1e-4)
    shifted = torch.cat([torch.zeros(1), x.flatten()]).cuda()[1:].view(x.shape)  # 4 bytes past the allocation
    np.testing.assert_array_equal(compiled(shifted).cpu().numpy(), host)
    with pytest.raises(InputError, match="input 0"):
        compiled(x[:, :3].cuda())


@pytest.mark.slow
def test_invoke_dlpack_copy_out_gives_the_same_results(mlp_cpu):
    compiled, _, x = mlp_cpu
    session = Session(compiled.modules[0].vmfb, "local-task")
    want = session.invoke("main", [x.numpy()])[0]
    (capsule,) = session.invoke_dlpack("main", [_aligned(x)], copy_out=True)
    got = torch.from_dlpack(capsule)
    assert got.shape == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.slow
def test_bench_io_device_needs_a_cuda_module(mlp_cpu, tmp_path):
    from cuvil_mlir.core.diagnostics import CuvilError
    from cuvil_mlir.eval.harness import bench_package

    compiled, _, _ = mlp_cpu
    compiled.save(tmp_path / "m.cuvilpkg")
    with pytest.raises(CuvilError, match="io=device needs a module on IREE's cuda driver"):
        bench_package(tmp_path / "m.cuvilpkg", repetitions=1, warmup=0, min_time=0, io="device")
    with pytest.raises(CuvilError, match="io must be"):
        bench_package(tmp_path / "m.cuvilpkg", repetitions=1, warmup=0, min_time=0, io="gpu")
    result = bench_package(tmp_path / "m.cuvilpkg", repetitions=2, warmup=0, min_time=0, max_time=5)
    assert result["io"] == "host"

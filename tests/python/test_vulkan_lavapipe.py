"""End to end on Vulkan against PyTorch, on any Vulkan device; in CI that is lavapipe, Mesa's
CPU Vulkan driver (Debian: ``apt-get install -y mesa-vulkan-drivers``, then
``VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json``). Skipped, with the reason,
when this machine has no Vulkan device.

Inputs reach a Vulkan device by copy (runtime.py): lavapipe refuses imported host pointers.
Error budgets are relative (max abs error / max abs reference value), per dtype:
  float32: the CPU suite's budgets; lavapipe measured 1e-7 .. 5e-7 on every model.
  float16: 1e-2 against a float32 PyTorch run of the same fp16 weights (measured ~1e-3).
"""

import warnings

import numpy as np
import pytest
import torch

import cuvil_mlir
import models
from cuvil_mlir.runtime.session import Session, probe_drivers

pytestmark = pytest.mark.slow

FLOAT32_TOLERANCE = {"mlp": 1e-5, "cnn": 1e-5, "transformer": 1e-4, "gpt2": 1e-4, "bert": 1e-4, "llama": 1e-4}
# Linear + gelu/silu, conv + batchnorm + pooling, attention + layernorm. The Hugging Face
# models match too (gpt2 3e-7, bert 2e-7, llama 3e-7, 2026-12-02) but lavapipe compiles their
# shaders on first load for 20-30 s each when Mesa's shader cache is cold, as in CI.
VULKAN_MODELS = ("mlp", "cnn", "transformer")
FLOAT16_TOLERANCE = 1e-2


def vulkan_device():
    status = probe_drivers().get("vulkan")
    if status is None:
        pytest.skip("this IREE runtime has no Vulkan driver")
    if not status.devices:
        pytest.skip(f"no Vulkan device ({status.reason}); for lavapipe: apt-get install -y mesa-vulkan-drivers")
    return status.devices[0]


def rel_err(got, ref) -> float:
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def run_on_vulkan(model, args, target):
    """Compile for ``target`` and call it; it must run on Vulkan, not fall back."""
    compiled = cuvil_mlir.compile(model, args, target=target)
    with warnings.catch_warnings():
        warnings.simplefilter("error", cuvil_mlir.runtime.compiled.TargetFallbackWarning)
        got = compiled(*args)
    assert compiled.active_target == compiled.targets[0]
    return got


@pytest.mark.parametrize("name", VULKAN_MODELS)
def test_float32_matches_pytorch(name):
    """The default ``vulkan`` target: no subgroup ops, so it is right whatever the device's
    subgroup size (lavapipe's is 8; GPU targets that assume 16-64 give wrong numbers there)."""
    vulkan_device()
    model, args = models.E2E_MODELS[name]()
    with torch.no_grad():
        ref = model(*args)
    got = run_on_vulkan(model, args, "vulkan")
    assert isinstance(got, torch.Tensor) and got.dtype == ref.dtype and got.shape == ref.shape
    assert rel_err(got, ref) <= FLOAT32_TOLERANCE[name]


@pytest.mark.parametrize("target", ["vulkan", "vulkan:lavapipe"])
def test_float16_mlp(target):
    """fp16 needs Float16 and 16-bit storage, which the default target declares."""
    if target == "vulkan:lavapipe" and "llvmpipe" not in vulkan_device().name:
        pytest.skip("vulkan:lavapipe is compiled for lavapipe only; this Vulkan device is another")
    vulkan_device()
    model, args = models.mlp()
    model, args = model.half(), tuple(a.half() for a in args)
    with torch.no_grad():  # the reference: float32 math on the same fp16-rounded weights and inputs
        ref = model.float()(*[a.float() for a in args]).numpy()
    got = run_on_vulkan(model.half(), args, target)
    assert got.dtype == torch.float16
    assert rel_err(got.float(), ref) <= FLOAT16_TOLERANCE


class Mixed(torch.nn.Module):
    """bool and int64 in and out; 15 elements, so a bool tensor is not a whole number of 32-bit words."""

    def forward(self, x, ids, mask):
        y = torch.where(mask, x * 2, x) + ids.to(torch.float32)
        return y, y > 1.0, ids * 3


def mixed_args():
    torch.manual_seed(0)
    return torch.randn(3, 5), torch.randint(0, 10, (3, 5)), torch.ones(3, 5, dtype=torch.bool)


def test_bool_and_int64_on_lavapipe_target():
    """Inputs are copied to Vulkan (never imported); every dtype comes back bit-exact."""
    if "llvmpipe" not in vulkan_device().name:
        pytest.skip("vulkan:lavapipe is compiled for lavapipe only; this Vulkan device is another")
    args = mixed_args()
    compiled = cuvil_mlir.compile(Mixed(), args, target="vulkan:lavapipe")
    assert Session(compiled.modules[0].vmfb, "vulkan").copies
    got = run_on_vulkan(Mixed(), args, "vulkan:lavapipe")
    with torch.no_grad():
        ref = Mixed()(*args)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape
        torch.testing.assert_close(g, r, rtol=0, atol=0)


def test_bool_input_tail_on_default_target():
    """With 32-bit-only storage a bool input's last partial 32-bit word read as zeros (15 bools:
    the last 3 lost); the default target declares 8-bit storage so it must be exact."""
    vulkan_device()
    args = mixed_args()
    got = run_on_vulkan(Mixed(), args, "vulkan")
    with torch.no_grad():
        ref = Mixed()(*args)
    torch.testing.assert_close(got[0], ref[0])

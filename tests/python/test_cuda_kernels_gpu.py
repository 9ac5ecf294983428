"""The Hopper kernels on a real GPU: packages built by ``benchmarks/gpu/kernel_check.py build DIR``
(on a machine with the IREE compiler and triton), run where an sm_90 GPU is, against the PyTorch
fp32 reference saved beside them.

    CUVIL_KERNEL_CHECK_DIR=DIR pytest -q tests/python/test_cuda_kernels_gpu.py

Skipped without the folder or without a CUDA device (CI has neither).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

CHECK_DIR = os.environ.get("CUVIL_KERNEL_CHECK_DIR")
CASES = sorted(p.stem for p in Path(CHECK_DIR).glob("*.cuvilpkg")) if CHECK_DIR and Path(CHECK_DIR).is_dir() else []

pytestmark = pytest.mark.gpu


def _cuda_device() -> bool:
    try:
        from cuvil_mlir.runtime.session import probe_drivers
    except ImportError:
        return False
    status = probe_drivers().get("cuda")
    return bool(status and status.devices)


@pytest.mark.skipif(not CASES, reason="no prebuilt kernel cases (set CUVIL_KERNEL_CHECK_DIR; see benchmarks/gpu/kernel_check.py)")
@pytest.mark.parametrize("case", CASES or ["none"])
def test_kernel_case_matches_torch(case):
    if not _cuda_device():
        pytest.skip("no CUDA device")
    import cuvil_mlir

    folder = Path(CHECK_DIR)
    meta = json.loads((folder / f"{case}.json").read_text())
    model = cuvil_mlir.load(folder / f"{case}.cuvilpkg")
    assert model.select(["cuda"]).startswith("cuda")
    x = np.load(folder / f"{case}.input.npy")
    ref = np.load(folder / f"{case}.ref.npy")
    y = np.asarray(model(x), dtype=np.float32)
    assert y.shape == ref.shape
    err = float(np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-6))
    assert np.isfinite(y).all(), f"{case}: non-finite outputs"
    assert err < meta["tolerance"], f"{case}: max rel. error {err:.3g} >= {meta['tolerance']} (kernels: {[k.get('kernel') for k in meta['kernels']]})"
    # the package says which linear got which kernel
    taken = sum(len(k.get("sites", [""])) for k in model.metadata["kernels"] if k.get("kernel"))
    assert taken == meta["taken"]

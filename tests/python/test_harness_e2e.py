"""End to end through the pytest plugin: each test runs once per ``--cuvil-targets`` target
(default ``cpu``; ``pytest --cuvil-targets=cpu,vulkan,cuda`` on a machine that has them), and
a target without a device here is skipped with the reason.

    pytest tests/python/test_harness_e2e.py --cuvil-targets=cpu,vulkan
"""

import pytest
import torch

import cuvil_mlir
import models
from cuvil_mlir.eval.testing import assert_close_across_targets, assert_matches_reference

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_model_matches_pytorch(cuvil_target, name):
    model, args = models.E2E_MODELS[name]()
    numerics = assert_matches_reference(model, args, target=cuvil_target, input_sets=2)
    assert numerics.input_sets == 2 and numerics.outputs[0].dtype == "float32"


def test_compiled_model_matches_its_module_and_runs_where_asked(cuvil_target):
    model, args = models.mlp()
    compiled = cuvil_mlir.compile(model, args, target=cuvil_target)
    assert_matches_reference(compiled, args, reference=model, rtol=1e-5)
    assert compiled.active_target == cuvil_target  # no silent fallback to another target


def test_targets_agree_with_each_other():
    """The CPU's LLVM code and IREE's portable VM interpreter (always here) give the same numbers."""
    model, args = models.mlp()
    report = assert_close_across_targets(model, args, ["cpu", "vmvx"])
    assert [e.name for e in report.entries] == ["vmvx"] and report.reference["name"] == "cpu"


def test_a_wrong_reference_is_caught(cuvil_target):
    model, args = models.mlp()
    compiled = cuvil_mlir.compile(model, args, target=cuvil_target)
    with pytest.raises(AssertionError, match=r"output 0 \(float32\[8, 32\]\): max rel err \S+ > tol 0.0001"):
        assert_matches_reference(compiled, args, reference=lambda x: model(x) * 1.01)
    with torch.no_grad():
        expected = model(*args)
    assert_matches_reference(compiled, args, reference=expected)  # expected outputs work too

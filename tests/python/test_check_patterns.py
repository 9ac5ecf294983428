"""The differential checker (cuvil_mlir.eval.testing.check_pattern/check_patterns, `cuvil check-patterns`):
it catches a wrong rewrite with a repro that reproduces, a near miss that is rewritten, a
pattern that leaves garbage, a pattern without an example; and every built-in pattern passes."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cuvil_mlir.lowering import builtin_registry
from cuvil_mlir.core.patterns import PatternSet, const_float, defining_op
from cuvil_mlir.eval.testing import builtin_pattern_sets, check_pattern, check_patterns

BIN = Path(sys.executable).parent

# A user's pattern file with a deliberately broken rewrite: relu(x) -> x.
BROKEN = '''
from cuvil_mlir.core.patterns import PatternSet

patterns = PatternSet("drop-relu", description="a wrong rewrite")

@patterns.add("torch.aten.relu")
def drop_relu(op, rewriter):
    """relu(x) -> x   (wrong: negative inputs)"""
    return op.operands[0]

@patterns.example("drop_relu")
def _relu_then_scale(rng):
    import torch
    rows, cols = int(rng.integers(1, 5)), int(rng.integers(1, 17))
    return (lambda x: torch.relu(x) * 2.0), (torch.randn(rows, cols),)
'''


@pytest.fixture
def broken_file(tmp_path):
    path = tmp_path / "broken_patterns.py"
    path.write_text(BROKEN)
    return path


def test_broken_pattern_is_a_mismatch_with_a_repro_that_reproduces(broken_file, tmp_path):
    report = check_patterns([broken_file], seeds=1, repro_dir=tmp_path / "repros")
    assert not report.passed
    [check] = report.checks
    assert (check.pass_name, check.pattern, check.status, check.fired) == ("drop-relu", "drop_relu", "fail", 1)
    bad = [o for o in check.outputs if not o["passed"]]
    assert bad and bad[0]["max_rel_err"] > 0.1 and bad[0]["worst_at"] is not None
    assert check.inputs == [{"shape": list(np.load(Path(check.repro_dir) / "input0.npy").shape), "dtype": "float32"}]
    assert "drop-relu/drop_relu" in str(report) and "reproduce with: cuvil-opt" in str(report)

    # the repro: cuvil-opt runs the pass on before.mlir; lowered and compiled, the result
    # gives the checker's "got" on the saved inputs, not its "expected"
    folder = Path(check.repro_dir)
    assert check.repro.startswith("cuvil-opt ") and str(folder / "before.mlir") in check.repro
    assert f"--load-patterns {broken_file.resolve()}" in check.repro
    rewritten = subprocess.run([str(BIN / "cuvil-opt"), *check.repro.split()[1:]], capture_output=True, text=True, check=True).stdout
    assert "torch.aten.relu" in (folder / "before.mlir").read_text() and "torch.aten.relu" not in rewritten
    inputs = [np.load(folder / "input0.npy")]
    got, expected = np.load(folder / "got0.npy"), np.load(folder / "expected0.npy")
    assert np.allclose(_run_ir(rewritten, inputs)[0], got) and np.allclose(_run_ir((folder / "before.mlir").read_text(), inputs)[0], expected)
    assert not np.allclose(got, expected)


def _run_ir(text: str, inputs):
    from cuvil_mlir.compiler.context import make_context
    from cuvil_mlir.core.ir import parse_module
    from cuvil_mlir.core.passes import run_pipeline
    from cuvil_mlir.runtime.session import Session
    from cuvil_mlir.targets import iree, parse_target

    module = parse_module(text, make_context())
    registry = builtin_registry()
    run_pipeline(module, [registry.get("lower-cuvil-to-torch"), registry.get("verify-no-cuvil")])
    target = parse_target("cpu")
    return Session(iree.compile_to_vmfb(module, target.iree_flags()), target.driver).invoke("main", inputs)


def _scale_patterns(*, wrong_fold: bool = False) -> PatternSet:
    patterns = PatternSet("fold-scales")

    @patterns.add("torch.aten.mul.Scalar")
    def fold_scales(op, rewriter):
        """mul.Scalar(mul.Scalar(x, a), b) -> mul.Scalar(x, a * b)"""
        from cuvil_mlir.core.patterns import build, torch_float

        inner = defining_op(op.operands[0], "torch.aten.mul.Scalar")
        if inner is None or const_float(op.operands[1]) is None or const_float(inner.operands[1]) is None:
            return None
        a, b = const_float(inner.operands[1]), const_float(op.operands[1])
        return build("torch.aten.mul.Scalar", [inner.operands[0], torch_float(a + b if wrong_fold else a * b)], op.result.type)

    @patterns.example("fold_scales")
    def _two_scales(rng):
        import torch

        return (lambda x: (x * 3.0) * 0.5), (torch.randn(int(rng.integers(1, 6)), 4),)

    return patterns


def test_correct_pattern_passes_and_wrong_fold_fails(tmp_path):
    ok = check_pattern(_scale_patterns(), "fold_scales", seeds=2)
    assert ok.passed, str(ok)
    assert [c.status for c in ok.checks] == ["pass", "pass"] and all(c.fired == 1 for c in ok.checks)
    assert {o["rtol"] for c in ok.checks for o in c.outputs} == {1e-4}  # float32's tolerance
    wrong = check_pattern(_scale_patterns(wrong_fold=True), "fold_scales", seeds=1, repro_dir=tmp_path)
    assert [c.status for c in wrong.checks] == ["fail"]
    assert "outputs differ" in wrong.checks[0].message


def test_subtly_broken_builtin_pattern_is_caught(tmp_path):
    """fuse-linear-epilogue with its gelu epilogue broken: exact gelu fused as the tanh
    approximation (a max-norm relative error of only ~3e-4)."""
    from cuvil_mlir.dialects import cuvil
    from cuvil_mlir.lowering.fusion import fuse_linear_epilogue
    from cuvil_mlir.core.patterns import has_one_use

    builtin = fuse_linear_epilogue.patterns.without("gelu_epilogue")
    broken = PatternSet(builtin.name, list(builtin.patterns))

    @broken.add("torch.aten.gelu")
    def gelu_epilogue(op, rewriter):
        """gelu(cuvil.linear(...)) -> cuvil.linear(...) {activation = "gelu_tanh"}   (wrong: ignores approximate)"""
        lin = defining_op(op.operands[0], "cuvil.linear")
        if lin is None or cuvil.activation_of(lin) != "none" or not has_one_use(op.operands[0]):
            return None
        return cuvil.with_activation(lin, "gelu_tanh")

    @broken.example("gelu_epilogue")
    def _linear_gelu(rng):
        import torch

        d_in, d_out = int(rng.integers(1, 33)), int(rng.integers(1, 33))
        model = torch.nn.Sequential(torch.nn.Linear(d_in, d_out), torch.nn.GELU()).eval()
        return model, (torch.randn(int(rng.integers(1, 5)), d_in),)

    report = check_pattern(broken, "gelu_epilogue", seeds=2, repro_dir=tmp_path)
    assert [c.status for c in report.checks] == ["fail", "fail"], str(report)
    assert all(c.fired == 1 and 1e-4 < c.max_rel_err < 1e-2 for c in report.checks)


def test_near_miss_that_is_rewritten_is_reported(tmp_path):
    patterns = _scale_patterns()

    @patterns.example("fold_scales", matches=False)
    def _chained_but_should_not(rng):  # the pattern does fire here: the checker must say so
        import torch

        return (lambda x: (x * 2.0) * 2.0), (torch.randn(2, 3),)

    @patterns.example("fold_scales", matches=False)
    def _one_scale(rng):  # a real near miss: untouched
        import torch

        return (lambda x: torch.relu(x) * 2.0), (torch.randn(2, 3),)

    report = check_pattern(patterns, "fold_scales", seeds=1, repro_dir=tmp_path)
    by_example = {c.example: c for c in report.checks}
    assert by_example["_two_scales"].status == "pass"
    assert by_example["_one_scale"].status == "pass" and by_example["_one_scale"].fired == 0
    fired = by_example["_chained_but_should_not"]
    assert fired.status == "fail" and "near miss" in fired.message and fired.fired == 1
    assert "-" in fired.diff and "+" in fired.diff and Path(fired.repro_dir, "after.mlir").exists()
    assert not report.passed


def test_pattern_that_builds_before_failing_to_match_is_reported(tmp_path):
    patterns = _scale_patterns()

    @patterns.add("torch.aten.add.Scalar")
    def builds_then_gives_up(op, rewriter):
        """add.Scalar(x, c) -> ... (never matches, but builds a constant first: a bug)"""
        from cuvil_mlir.core.patterns import torch_float

        torch_float(0.0)
        return None

    @patterns.example("builds_then_gives_up")
    def _add(rng):
        import torch

        return (lambda x: x + 1.0), (torch.randn(2, 3),)

    @patterns.example("fold_scales")
    def _scaled_then_shifted(rng):  # checking fold_scales here also runs builds_then_gives_up on it
        import torch

        return (lambda x: (x * 3.0) * 0.5 + 1.0), (torch.randn(2, 3),)

    report = check_patterns([patterns], seeds=1, repro_dir=tmp_path)
    bad = {(c.pattern, c.example): c for c in report.failures}
    assert ("builds_then_gives_up", "_add") in bad  # its own example
    assert ("builds_then_gives_up", "_scaled_then_shifted (of fold_scales)") in bad  # and another pattern's
    assert bad[("builds_then_gives_up", "_add")].status == "fail" and "did not converge" in bad[("builds_then_gives_up", "_add")].message
    # fold_scales cannot be checked where its pass's other pattern loops: an error that says so
    blocked = bad[("fold_scales", "_scaled_then_shifted")]
    assert blocked.status == "error" and "other patterns of 'fold-scales' failed" in blocked.message
    assert {c.status for c in report.checks if (c.pattern, c.example) == ("fold_scales", "_two_scales")} == {"pass"}


def test_pattern_without_example_is_reported():
    patterns = _scale_patterns()

    @patterns.add("torch.aten.neg")
    def double_negation(op, rewriter):
        """neg(neg(x)) -> x"""
        inner = defining_op(op.operands[0], "torch.aten.neg")
        return None if inner is None else inner.operands[0]

    @patterns.example("double_negation", matches=False)  # only a near miss: still no example
    def _one_neg(rng):
        import torch

        return (lambda x: -x), (torch.randn(2, 3),)

    report = check_patterns([patterns], patterns=["double_negation"], seeds=1)
    statuses = {(c.pattern, c.example): c.status for c in report.checks}
    assert statuses == {("double_negation", None): "no-example", ("double_negation", "_one_neg"): "pass"}
    assert "pattern double_negation has no example" in str(report)


def test_filters_that_name_nothing_fail():
    from cuvil_mlir.core.diagnostics import CuvilError

    with pytest.raises(CuvilError, match="no pattern 'nope'"):
        check_patterns([_scale_patterns()], patterns=["nope"])
    with pytest.raises(CuvilError, match="no pass 'fuse-nothing'"):
        check_patterns(passes=["fuse-nothing"])


@pytest.mark.slow
def test_every_builtin_pattern_passes_the_checker():
    """The CI gate: every built-in pattern has a matching example and passes on it."""
    report = check_patterns(seeds=2)
    expected = {f"{p.name}/{pat.name}" for p in builtin_pattern_sets() for pat in p.patterns}
    assert set(report.patterns()) == expected
    assert report.passed, str(report)


def test_cli_on_a_broken_pattern_file_exits_1_and_names_the_pattern(broken_file, tmp_path):
    out = tmp_path / "report.json"
    result = subprocess.run([str(BIN / "cuvil"), "check-patterns", str(broken_file), "--seeds", "1", "--repro-dir",
                             str(tmp_path / "repros"), "--json", str(out)], capture_output=True, text=True)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "drop-relu/drop_relu" in result.stderr and "fail" in result.stderr
    assert "drop_relu" in result.stdout and "reproduce with: cuvil-opt" in " ".join(result.stdout.split())
    import json

    data = json.loads(out.read_text())
    assert data["passed"] is False and [c["status"] for c in data["checks"]] == ["fail"]


def test_cli_usage_errors(tmp_path):
    result = subprocess.run([str(BIN / "cuvil"), "check-patterns", str(tmp_path / "missing.py")], capture_output=True, text=True)
    assert result.returncode == 1 and "pattern file not found" in result.stderr
    result = subprocess.run([str(BIN / "cuvil"), "check-patterns", "--seeds", "0"], capture_output=True, text=True)
    assert result.returncode == 2

"""Testing helpers: assertions for compiled models (the pytest plugin re-exports them) and
the differential checker for rewrite patterns (cuvil_mlir/eval/pattern_check.py).

    from cuvil_mlir.eval.testing import assert_matches_reference, assert_close_across_targets

    def test_block(cuvil_target):                      # the plugin's fixture: one run per target
        assert_matches_reference(model, (x,), target=cuvil_target)

    from cuvil_mlir.eval.testing import check_patterns
    report = check_patterns(["my_patterns.py"])        # default: every built-in pattern
    assert report.passed, str(report)

Errors are max-norm relative (max |got - ref| / max |ref|) and pass under the per-dtype
tolerances of cuvil_mlir.eval.measure.DEFAULT_RTOL unless ``rtol`` is given. A failure names the
output, its error, the tolerance and the worst element.
"""

from __future__ import annotations

from cuvil_mlir.core.diagnostics import CuvilError

# The checker's names, imported on first use: it loads the MLIR bindings, which the pytest
# plugin (importing this module at startup) should not pay for.
_CHECKER_NAMES = ("check_pattern", "check_patterns", "builtin_pattern_sets", "PatternCheck", "CheckReport")


def __getattr__(name: str):
    if name in _CHECKER_NAMES:
        from cuvil_mlir.eval import pattern_check

        return getattr(pattern_check, name)
    raise AttributeError(f"module 'cuvil_mlir.eval.testing' has no attribute '{name}'")


def assert_matches_reference(compiled_or_model, inputs, *, reference="torch", rtol: float | None = None,
                             target: str = "cpu", patterns=(), opt_level: int = 3, input_sets: int = 1):
    """Assert that a compiled model's outputs on ``inputs`` match ``reference``.

    ``compiled_or_model``: a model (``nn.Module``, ``ExportedProgram``, ``.pt2`` path), compiled
    here for ``target`` with ``patterns``; or a ``CompiledModel``. ``reference``: "torch" (eager
    PyTorch), "torch-fp64", a target spec, a callable (e.g. the ``nn.Module``) or the expected
    outputs; a ``CompiledModel`` does not know its model, so it needs a callable or outputs.
    ``input_sets`` > 1 also checks that many permutations of the inputs' values. Returns the
    ``Numerics`` (errors per output).
    """
    __tracebackhide__ = True  # pytest: the failure points at the test, not here
    from cuvil_mlir.runtime.compiled import CompiledModel
    from cuvil_mlir.eval.inputs import as_list, make_input_sets, normalize_model, reference_outputs
    from cuvil_mlir.eval.report import Numerics
    from cuvil_mlir.eval.measure import output_errors, worst_of
    from cuvil_mlir.runtime.arrays import to_numpy

    tolerances = None if rtol is None else _all_dtypes(rtol)
    if isinstance(compiled_or_model, CompiledModel):
        compiled, program = compiled_or_model, None
        if isinstance(reference, str):
            raise CuvilError(f"assert_matches_reference: reference='{reference}' needs the model, which a CompiledModel "
                             "does not know; pass reference=model (or the model instead of the CompiledModel)")
        if inputs is None:
            raise CuvilError("assert_matches_reference: a CompiledModel needs inputs")
        eager = None
        sets, _, _ = make_input_sets(None, inputs, input_sets, seed=0)
        where = compiled.active_target or compiled.target
    else:
        program, eager, _ = normalize_model(compiled_or_model, inputs)
        sets, _, _ = make_input_sets(program, inputs, input_sets, seed=0)
        from cuvil_mlir.eval.configs import Config, compile_config

        compiled = compile_config(target, Config("default"), program, opt_level=opt_level, patterns=patterns)
        where = target
    refs, info = reference_outputs(reference, eager, program, sets, opt_level=opt_level)
    check_dtype = reference != "torch-fp64"
    runs = [output_errors([to_numpy(o) for o in as_list(compiled(*s))], r, tolerances, check_dtype=check_dtype)
            for s, r in zip(sets, refs)]
    numerics = Numerics.of(worst_of(runs), len(runs))
    if not numerics.passed:
        raise AssertionError(_failure(f"on target {compiled.active_target or where}", info["name"], numerics))
    return numerics


def assert_close_across_targets(model, inputs, targets, *, rtol: float | None = None, patterns=(), opt_level: int = 3):
    """Assert that ``model`` gives the same outputs on every target of ``targets`` that has a
    device here, against the first such target. Skips the test (pytest) when fewer than two
    have a device. Returns the comparison ``Report``."""
    __tracebackhide__ = True
    import pytest

    from cuvil_mlir.eval.comparison import compare
    from cuvil_mlir.eval.configs import target_specs
    from cuvil_mlir.eval.entries import absent as absent_reason
    from cuvil_mlir.runtime.session import probe_drivers
    from cuvil_mlir.targets import parse_target

    drivers = probe_drivers()
    specs = target_specs(targets)
    absent = {s: absent_reason(parse_target(s).driver, drivers) for s in specs}
    present = [s for s in specs if absent[s] is None]
    if len(present) < 2:
        why = "; ".join(f"{s}: {r}" for s, r in absent.items() if r)
        pytest.skip(f"fewer than two of the targets {', '.join(specs)} have a device here ({why})")
    report = compare(model, inputs, targets=present[1:], reference=present[0], competitors=(), patterns=patterns,
                     opt_level=opt_level, tolerances=None if rtol is None else _all_dtypes(rtol), repetitions=0, input_sets=1)
    bad = [e for e in report.entries if e.status != "ok"]
    if bad:
        lines = [f"targets disagree with {present[0]} (the reference):"]
        for e in bad:
            lines.append(_failure(f"  on target {e.target}", present[0], e.numerics) if e.numerics
                         else f"  on target {e.target}: {e.status} ({e.failed_stage}): {e.reason}"
                         + (f"\n    reproduce with: {e.repro}" if e.repro else ""))
        raise AssertionError("\n".join(lines))
    return report


def _all_dtypes(rtol: float) -> dict[str, float]:
    """One tolerance for every float dtype (integers stay exact)."""
    from cuvil_mlir.eval.measure import DEFAULT_RTOL

    return {dtype: float(rtol) for dtype in DEFAULT_RTOL}


def _failure(where: str, reference: str, numerics) -> str:
    from dataclasses import asdict

    from cuvil_mlir.eval.measure import finite
    from cuvil_mlir.eval.render import describe_error

    lines = [f"outputs {where} do not match the reference ({reference}):"]
    lines += [f"  {describe_error(finite(asdict(o)))}" for o in numerics.outputs if not o.passed]
    return "\n".join(lines)

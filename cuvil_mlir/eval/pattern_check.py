"""The differential checker: every rewrite pattern checked numerically on IREE CPU.

For a pattern P of pass S and each example registered for P (``PatternSet.example``), for
several seeds::

    build(rng) -> (program, args)             shapes and weights drawn from the seed
    import (the pipeline's FX importer); run the target's passes that come before S
                                              (a user's PatternSet: after the "cuvil" stage)
                                              -> "before"
    S.only(P)                                 -> "after": it must fire (a matching example)
                                                 or leave the IR byte-identical (a near miss)
    lower both (the target's "lowered" stage) and compile both with IREE for the target
    run both on several input sets (the example's own, N(0, 1), x1e3, x1e-3, zeros)
    compare "after" with "before", per output, with per-dtype tolerances

A pattern of the "lowered" stage is compared with eager PyTorch instead: lowering "before"
would run the very pattern under test. An input set on which the program itself is badly
conditioned (softmax of scores ~1e6) cannot tell a wrong rewrite from rounding, so an
output's tolerance is at least ``NOISE_FACTOR`` times the reference's own error against
eager PyTorch in float64 on that set. A rewrite must also not cost accuracy: where both
programs are compared with float64 PyTorch, "after"'s error may be at most
``ACCURACY_FACTOR`` times "before"'s (or a few units in the last place of the dtype,
``ACCURACY_FLOOR_ULPS``), unless the example declares the rewrite lossy (its ``rtol``).
A pattern that does not fire must leave the IR as the pass's folding alone leaves it (no
ops built and abandoned).

A failure writes a repro folder: ``before.mlir`` (the pass's input), ``after.mlir``, the
inputs and both outputs as ``.npy``; its ``repro`` is the ``cuvil-opt`` command that reruns
the pass on ``before.mlir``.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import math
import os
import shlex
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from cuvil_mlir.core.stages import Stage
from cuvil_mlir.core.diagnostics import CompileError, CuvilError, PassError, one_line
from cuvil_mlir.eval.measure import finite, output_errors
from cuvil_mlir.runtime.arrays import to_numpy, to_torch
from cuvil_mlir.core.patterns import Example, Pattern, PatternSet

STATUSES = ("pass", "fail", "no-match", "no-example", "error")
LOWERED_STAGE = Stage.LOWERED  # the stage that turns Cuvil ops back into torch ops
USER_STAGE = Stage.CUVIL  # user pattern sets run at the end of this stage (cuvil_mlir/compiler/pipeline.py)
PRECISION_STAGE = Stage.PRECISION  # built-in passes outside the target's stage list run here
NOISE_FACTOR = 10.0
UNINFORMATIVE = 0.1  # a tolerance the noise floor raised above this judges nothing on that input set
_NO_CONVERGENCE = ("the rewrite did not converge (a pattern that changes the IR and then returns None, or a "
                   "rewrite that matches its own result)")
SCALES = (("randn", 1.0), ("large (x1e3)", 1e3), ("tiny (x1e-3)", 1e-3))
# A rewrite may be at most this many times less accurate (vs float64) than the program before
# it, or off by this many units in the last place of the output's dtype, whichever is larger
# (a tanh-GELU epilogue lowered to IREE's aten.gelu(tanh) was 100x less accurate: issue 13).
ACCURACY_FACTOR = 4.0
ACCURACY_FLOOR_ULPS = 8.0


# ---------------------------------------------------------------------------------------
# Results.


@dataclass
class PatternCheck:
    """One pattern on one example and seed. ``status``: pass; fail (wrong numerics, a near
    miss rewritten, IR changed by a pattern that did not fire, a pattern that raised or left
    invalid IR, IR IREE cannot compile); no-match (a matching example the pattern did not
    fire on); no-example (the pattern has no matching example); error (the check could not
    run: the example, the import, an earlier pass or IREE on the unrewritten IR failed)."""

    pass_name: str
    pattern: str
    example: str | None = None
    seed: int | None = None
    matches: bool = True  # the example is a match (False: a near miss)
    status: str = "pass"
    message: str = ""
    fired: int = 0
    inputs: list[dict] = field(default_factory=list)  # shape and dtype of each program input
    reference: str = "before"  # what "after" is compared with: "before" (IREE) or "torch" (eager)
    input_set: str | None = None  # the input set with the worst error
    outputs: list[dict] = field(default_factory=list)  # per output on that set: measure.OutputError fields
    eager_rel_err: float | None = None  # "after" against eager PyTorch, worst over the sets (information)
    diff: str | None = None  # IR diff, for a near miss that changed
    repro: str | None = None  # the cuvil-opt command that reruns the pass on the repro's before.mlir
    repro_dir: str | None = None
    rerun: str | None = None  # the cuvil check-patterns command that reruns this check
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def max_rel_err(self) -> float | None:
        errs = [o["max_rel_err"] for o in self.outputs]
        return max(errs) if errs else None

    def describe(self) -> str:
        """The failure in words: what, where, the worst element and how to reproduce it."""
        where = f"{self.pass_name}/{self.pattern}"
        if self.example:
            where += f" example {self.example}" + (" (near miss)" if not self.matches else "") + f" seed {self.seed}"
        lines = [f"{where}: {self.status}: {self.message}"]
        if self.inputs:
            lines.append("  inputs: " + ", ".join(f"{i['dtype']}{i['shape']}" for i in self.inputs))
        for o in self.outputs:
            if not o["passed"]:
                lines.append(f"  {_describe_output(o)} on input set '{self.input_set}' (against {self.reference})")
        if self.diff:
            lines += ["  " + line for line in self.diff.splitlines()]
        if self.repro:
            lines.append(f"  reproduce with: {self.repro}")
        if self.repro_dir:
            lines.append(f"  repro files: {self.repro_dir}")
        if self.rerun:
            lines.append(f"  rerun the check: {self.rerun}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return finite(asdict(self))


@dataclass
class CheckReport:
    """Every check of a run; ``passed`` when all of them passed."""

    checks: list[PatternCheck]
    target: str = "cpu"
    seeds: int = 2
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def failures(self) -> list[PatternCheck]:
        return [c for c in self.checks if not c.passed]

    def patterns(self) -> list[str]:
        return sorted({f"{c.pass_name}/{c.pattern}" for c in self.checks})

    def summary(self) -> str:
        counts = {s: sum(c.status == s for c in self.checks) for s in STATUSES}
        parts = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        return (f"{len(self.checks)} checks of {len(self.patterns())} patterns on {self.target} "
                f"({self.seeds} seed(s), {self.seconds:.1f} s): {parts or 'none'}")

    def __str__(self) -> str:
        return "\n".join([self.summary(), *(c.describe() for c in self.failures)])

    def to_json(self) -> dict:
        return {"target": self.target, "seeds": self.seeds, "seconds": round(self.seconds, 3), "passed": self.passed,
                "summary": self.summary(), "checks": [c.to_json() for c in self.checks]}

    def save_json(self, path: str | os.PathLike) -> None:
        import json

        Path(path).write_text(json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n")

    def table(self):
        """A rich Table, one row per check; failures are described in the caption."""
        from rich.table import Table
        from rich.text import Text

        t = Table(title=Text(self.summary()), title_justify="left",
                  caption=Text("\n".join(c.describe() for c in self.failures)), caption_justify="left")
        for name, justify in (("pass", "left"), ("pattern", "left"), ("example", "left"), ("seed", "right"),
                              ("status", "left"), ("fired", "right"), ("inputs", "left"), ("max rel err", "right"),
                              ("tol", "right"), ("vs", "left"), ("s", "right")):
            t.add_column(name, justify=justify, overflow="fold")
        for c in self.checks:
            style = "green" if c.passed else "bold red"
            tol = max((o["rtol"] for o in c.outputs), default=None)
            err = c.max_rel_err
            t.add_row(c.pass_name, c.pattern, (c.example or "-") + ("" if c.matches else " (near miss)"),
                      "-" if c.seed is None else str(c.seed), Text(c.status, style=style), str(c.fired),
                      " ".join(f"{i['dtype']}{i['shape']}" for i in c.inputs) or "-",
                      "-" if err is None else f"{err:.2g}", "-" if tol is None else f"{tol:.0e}",
                      c.reference if c.outputs else "-", f"{c.seconds:.1f}")
        return t

    def print(self, console=None) -> None:
        from rich.console import Console

        (console or Console()).print(self.table())


# ---------------------------------------------------------------------------------------
# Entry points.


def check_pattern(pattern_set: PatternSet, pattern: str, *, seeds: int | Sequence[int] = 2, target: str = "cpu",
                  user_sets: Sequence[PatternSet] = (), repro_dir: str | os.PathLike | None = None,
                  tolerances: dict[str, float] | None = None, source: str | None = None,
                  progress: Callable[[PatternCheck], None] | None = None) -> CheckReport:
    """Check one pattern of ``pattern_set`` on each of its examples for each seed (``seeds``:
    a count, 0..N-1, or the seeds themselves). ``user_sets`` are user PatternSets that run
    before ``pattern_set`` (in the pipeline's order); ``source`` is the pattern file it came
    from (the repro command loads it)."""
    start = time.perf_counter()
    checker = _Checker(target, repro_dir, tolerances)
    checks = checker.pattern(pattern_set, pattern, _seed_list(seeds), tuple(user_sets), source, progress)
    return CheckReport(checks, checker.target.spec, len(_seed_list(seeds)), time.perf_counter() - start)


def check_patterns(pattern_sets: Iterable[PatternSet | str | os.PathLike] | None = None, *, passes: Sequence[str] = (),
                   patterns: Sequence[str] = (), seeds: int | Sequence[int] = 2, target: str = "cpu",
                   repro_dir: str | os.PathLike | None = None, tolerances: dict[str, float] | None = None,
                   progress: Callable[[PatternCheck], None] | None = None) -> CheckReport:
    """Check every pattern of ``pattern_sets`` (PatternSets or pattern files; default: every
    built-in pass, configurable ones with their default options). ``passes`` / ``patterns``
    keep only those names (a pattern as ``name`` or ``pass/name``). A pattern with no
    matching example is a failure (status no-example)."""
    start = time.perf_counter()
    checker = _Checker(target, repro_dir, tolerances)
    sets = _resolve_sets(pattern_sets)
    _check_filters(sets, passes, patterns)
    checks: list[PatternCheck] = []
    users: list[PatternSet] = []  # user sets seen so far: they run before the next one
    for pset, source in sets:
        before_users = tuple(users) if not checker.is_builtin(pset.name) else ()
        if not checker.is_builtin(pset.name):
            users.append(pset)
        if passes and pset.name not in passes:
            continue
        names = list(dict.fromkeys(p.name for p in pset.patterns))  # one pattern may be added at several roots
        chosen = [n for n in names if not patterns or n in patterns or f"{pset.name}/{n}" in patterns]
        checker.scope[pset.name] = tuple(chosen)
        for name in chosen:
            checks += checker.pattern(pset, name, _seed_list(seeds), before_users, source, progress)
    return CheckReport(checks, checker.target.spec, len(_seed_list(seeds)), time.perf_counter() - start)


def builtin_pattern_sets() -> list[PatternSet]:
    """Every built-in pass that is a PatternSet (configurable ones with default options)."""
    from cuvil_mlir.lowering import BUILTIN_PASSES, builtin_registry

    registry = builtin_registry()
    out = []
    for p in BUILTIN_PASSES:
        configured = registry.get(p.name)
        if isinstance(configured, PatternSet):
            out.append(configured)
    return out


def _resolve_sets(pattern_sets) -> list[tuple[PatternSet, str | None]]:
    from cuvil_mlir.core.passes import load_pattern_file

    if pattern_sets is None:
        return [(p, None) for p in builtin_pattern_sets()]
    out = []
    for item in pattern_sets:
        if isinstance(item, PatternSet):
            out.append((item, None))
        elif isinstance(item, (str, os.PathLike)):
            path = str(Path(item).resolve())
            out += [(p, path) for p in load_pattern_file(path)]
        else:
            raise CuvilError(f"check_patterns: expected PatternSets or pattern file paths, got a {type(item).__name__}")
    return out


def _check_filters(sets, passes, patterns) -> None:
    """A filter that names nothing would check nothing and pass: fail instead."""
    names = [p.name for p, _ in sets]
    for name in passes:
        if name not in names:
            raise CuvilError(f"no pass '{name}' to check; passes: {', '.join(names)}")
    known = {f"{p.name}/{pat.name}" for p, _ in sets for pat in p.patterns if not passes or p.name in passes}
    for name in patterns:
        if name not in known and not any(k.endswith(f"/{name}") for k in known):
            raise CuvilError(f"no pattern '{name}' to check; patterns: {', '.join(sorted(known))}")


def _seed_list(seeds) -> list[int]:
    if isinstance(seeds, int):
        if seeds < 1:
            raise CuvilError(f"seeds must be at least 1, got {seeds}")
        return list(range(seeds))
    return [int(s) for s in seeds]


# ---------------------------------------------------------------------------------------
# The checker.


class _Stop(Exception):
    """The check has its verdict (set on the PatternCheck)."""


@dataclass
class _Placement:
    """Where a pass sits in the target's pipeline."""

    before: list  # passes that run first
    lowerings: list[list]  # the lowered stage's passes, per target variant (fallbacks after the first)
    reference: str  # "before", or "torch" for a pattern of the lowered stage itself


class _Checker:
    def __init__(self, target: str, repro_dir, tolerances):
        from cuvil_mlir.lowering import builtin_registry
        from cuvil_mlir.targets import parse_target

        self.target = parse_target(target)
        self.registry = builtin_registry()
        self.repro_dir = Path(repro_dir) if repro_dir is not None else None
        self.tolerances = tolerances
        self._vmfbs: dict[str, bytes | CompileError] = {}  # compiled modules by IR hash, within a run
        self.scope: dict[str, tuple[str, ...]] = {}  # pass -> its patterns checked in this run (cross-checked)
        self.extra: list[PatternCheck] = []  # failures of those patterns on other patterns' examples

    def is_builtin(self, name: str) -> bool:
        return name in self.registry.names()

    # --- placement ------------------------------------------------------------------------

    def placement(self, pset: PatternSet, user_sets: tuple) -> _Placement:
        from cuvil_mlir.core.passes import parse_pass_spec

        specs = [(stage, spec) for stage, passes in self.target.stages for spec in passes]
        names = [parse_pass_spec(spec)[0] for _, spec in specs]
        stage_names = [stage for stage, _ in self.target.stages]
        if pset.name in names:
            at = names.index(pset.name)
            stage = specs[at][0]
        else:  # a user set ends the cuvil stage; another built-in pass runs in the precision stage
            stage = USER_STAGE if not self.is_builtin(pset.name) else PRECISION_STAGE
            if stage not in stage_names:
                raise CuvilError(f"target '{self.target.spec}' has no '{stage}' stage to run pass '{pset.name}' in")
            last = stage_names.index(stage)
            at = sum(len(passes) for _, passes in self.target.stages[: last + 1])
        before = [self.registry.get(spec) for _, spec in specs[:at]] + list(user_sets)
        lowerings = []
        for variant in self.target.variants():
            lowerings.append([self.registry.get(spec) for name, specs_ in variant if name == LOWERED_STAGE for spec in specs_])
        if not lowerings[0]:
            raise CuvilError(f"target '{self.target.spec}' has no '{LOWERED_STAGE}' stage to lower Cuvil ops with")
        return _Placement(before, _unique(lowerings), "torch" if stage == LOWERED_STAGE else "before")

    # --- one pattern ------------------------------------------------------------------------

    def pattern(self, pset: PatternSet, name: str, seeds: list[int], user_sets: tuple, source, progress) -> list[PatternCheck]:
        pattern = next((p for p in pset.patterns if p.name == name), None)
        if pattern is None:
            raise CuvilError(f"pattern set '{pset.name}' has no pattern '{name}'; "
                             f"patterns: {', '.join(p.name for p in pset.patterns)}")
        examples = [e for e in pset.examples if e.pattern == name]
        checks = []
        if not any(e.matches for e in examples):
            checks.append(PatternCheck(pset.name, name, status="no-example",
                                       message=f"pattern {name} has no example: register a matching one with "
                                               f"PatternSet.example(\"{name}\") (docs/writing-a-pattern.md)"))
            if progress:
                progress(checks[-1])
        placement = self.placement(pset, user_sets)
        for example in examples:
            for seed in seeds:
                check = self.example(pset, pattern, example, seed, placement, source)
                found, self.extra = [check, *self.extra], []
                checks += found
                for c in found if progress else ():
                    progress(c)
        return checks

    def example(self, pset: PatternSet, pattern: Pattern, example: Example, seed: int, placement: _Placement,
                source: str | None) -> PatternCheck:
        check = PatternCheck(pset.name, pattern.name, example.name or example.build.__name__, seed, example.matches,
                             reference=placement.reference)
        start = time.perf_counter()
        try:
            self._run(check, pset, pattern, example, seed, placement, source)
        except _Stop:
            pass
        except CuvilError as e:
            check.status, check.message, check.repro = "error", one_line(e.message), check.repro or e.repro
        except Exception as e:  # a bug in the example or a dependency: report it, check the rest
            check.status, check.message = "error", f"{type(e).__name__}: {one_line(str(e))}"
        check.seconds = round(time.perf_counter() - start, 3)
        if not check.passed:
            check.rerun = _rerun_command(check, source)
        return check

    def _run(self, check: PatternCheck, pset, pattern, example, seed, placement: _Placement, source) -> None:
        from cuvil_mlir.core.ir import module_to_bytecode, module_to_text, parse_module
        from cuvil_mlir.core.passes import run_pipeline

        program, args = _build(example, seed)
        check.inputs = [{"shape": list(a.shape), "dtype": str(a.dtype)} for a in args]
        module, eager = _import(program, args)
        ctx = module.context
        repro_dir = str(self._dir())
        try:
            run_pipeline(module, placement.before, repro_dir=repro_dir)
        except CuvilError as e:
            raise CuvilError(f"a pass before '{pset.name}' failed on the example: {e.message}", repro=e.repro) from e
        earlier = module_to_bytecode(module)

        # every other pattern, on the IR this pass receives: where it does not fire, it must
        # leave the IR as the pass's folding alone does
        folded = parse_module(earlier, ctx)
        PatternSet(pset.name).apply(folded)
        folded_text = module_to_text(folded)
        for other in self.scope.get(pset.name, ()):
            if other != pattern.name:
                self._untouched(pset, other, check, earlier, folded_text, ctx, source)

        # "before": the pass without this pattern, to its fixpoint (a pattern may build on
        # another of its pass: an epilogue on the cuvil.linear that "linear" raised)
        try:
            run_pipeline(module, [pset.without(pattern.name)], repro_dir=repro_dir)
        except (CuvilError, RuntimeError) as e:
            raise CuvilError(f"the other patterns of '{pset.name}' failed on the example: "
                             f"{getattr(e, 'message', None) or one_line(str(e))}", repro=getattr(e, "repro", None)) from e
        before = module_to_bytecode(module)
        before_text = module_to_text(module)
        baseline = parse_module(before, ctx)  # folding again: normally a no-op, compared against to be sure
        PatternSet(pset.name).apply(baseline)
        baseline_text = module_to_text(baseline)

        after = parse_module(before, ctx)
        try:
            fired = run_pipeline(after, [pset.only(pattern.name)], repro_dir=repro_dir)[pset.name][pattern.name]
        except PassError as e:
            self._stop(check, "fail", e.message, before_text, None, source, repro=e.repro)
        except RuntimeError as e:  # the greedy driver's "failed to converge"
            self._stop(check, "fail", f"{_NO_CONVERGENCE}: {one_line(str(e))}", before_text, None, source)
        check.fired = fired
        after_text = module_to_text(after)
        changed = after_text != baseline_text
        if fired == 0 and changed:
            self._stop(check, "fail", "the pattern did not fire but changed the IR (ops built before the match "
                       "failed?)", before_text, after_text, source, diff=_diff(baseline_text, after_text))
        if fired == 0:
            if example.matches:
                self._stop(check, "no-match", f"the pattern did not fire on this example (after the passes before "
                           f"'{pset.name}' and the pass's other patterns)", before_text, None, source)
            raise _Stop  # a near miss, untouched: pass
        if not example.matches:
            self._stop(check, "fail", f"near miss: the pattern fired {fired} time(s) where it must not", before_text,
                       after_text, source, diff=_diff(baseline_text, after_text))
        self._numerics(check, example, before, after, ctx, args, eager, placement, before_text, after_text, source, seed)

    def _untouched(self, pset, other: str, check: PatternCheck, before: bytes, baseline_text: str, ctx, source) -> None:
        """Another pattern of the pass, on this example: where it does not fire it must leave
        the IR as folding alone does, and it must not raise. Only a failure is reported."""
        from cuvil_mlir.core.ir import module_to_text, parse_module
        from cuvil_mlir.core.patterns import PatternFailure

        module = parse_module(before, ctx)
        before_text = module_to_text(module)
        cross = PatternCheck(pset.name, other, f"{check.example} (of {check.pattern})", check.seed, False,
                             inputs=check.inputs, reference=check.reference)
        try:
            try:
                fired = pset.only(other).apply(module)[other]
            except PatternFailure as e:
                self._stop(cross, "fail", f"the pattern raised on another pattern's example: {e}", before_text, None, source)
            except RuntimeError as e:
                self._stop(cross, "fail", f"{_NO_CONVERGENCE}: {one_line(str(e))}", before_text, None, source)
            text = module_to_text(module)
            if fired == 0 and text != baseline_text:
                self._stop(cross, "fail", "the pattern did not fire but changed the IR (ops built before the match "
                           "failed?)", before_text, text, source, diff=_diff(baseline_text, text))
        except _Stop:
            cross.rerun = _rerun_command(cross, source)
            self.extra.append(cross)

    # --- numerics -----------------------------------------------------------------------------

    def _numerics(self, check, example, before: bytes, after, ctx, args, eager, placement, before_text, after_text, source, seed):
        from cuvil_mlir.core.ir import module_to_bytecode, parse_module
        from cuvil_mlir.runtime.session import Session

        after_bytes = module_to_bytecode(after)
        vmfb_before = vmfb_after = None
        failure: CompileError | None = None
        for passes in placement.lowerings:  # the target's lowering, then its fallbacks
            if placement.reference == "before":
                vmfb_before = self._lower_and_compile(parse_module(before, ctx), passes)
                if isinstance(vmfb_before, CompileError):
                    failure = failure or vmfb_before
                    vmfb_before = None
                    continue
            try:
                lowered = self._lower_and_compile(parse_module(after_bytes, ctx), passes)
            except CuvilError as e:  # the unrewritten program lowered: the pattern's result does not
                self._stop(check, "fail", f"the IR after the pattern does not lower: {one_line(e.message)}", before_text,
                           after_text, source, repro=e.repro)
            if isinstance(lowered, CompileError):
                failure = failure or lowered
                continue
            vmfb_after = lowered
            break
        if vmfb_after is None:
            if placement.reference == "before" and vmfb_before is None:
                raise CuvilError(f"IREE cannot compile the example before the pattern: {failure.message}", repro=failure.repro)
            self._stop(check, "fail", f"IREE cannot compile the IR after the pattern: {failure.message}", before_text,
                       after_text, source, repro=failure.repro)

        driver = self.target.driver
        run_after = Session(vmfb_after, driver)
        run_before = Session(vmfb_before, driver) if vmfb_before is not None else None
        sets = _input_sets(args, np.random.default_rng(10_000 + seed))
        example_rtol = example.rtol  # a lossy rewrite's declared error (e.g. quantization)
        worst = None  # (failed, rel err, set name, errors, inputs, reference outputs, got)
        eager_worst = None
        informative = 0  # input sets on which the reference itself is accurate enough to judge by
        for set_name, inputs in sets:
            got = run_after.invoke("main", list(inputs))
            exact = _eager(eager, inputs, fp64=True)
            native = _eager(eager, inputs) if placement.reference == "torch" or run_before is not None else None
            ref = run_before.invoke("main", list(inputs)) if run_before is not None else native
            if ref is None:
                raise CuvilError("the eager PyTorch reference failed on the example's inputs")
            errors = self._compare(got, ref, exact, example_rtol)
            informative += all(e.rtol <= max(UNINFORMATIVE, example_rtol or 0.0) for e in errors)
            if native is not None:
                rel = max((e.max_rel_err for e in output_errors(got, native, check_dtype=False)), default=0.0)
                eager_worst = rel if eager_worst is None else max(eager_worst, rel)
            key = (any(not e.passed for e in errors), max((e.max_rel_err for e in errors), default=0.0))
            if worst is None or key > worst[:2]:
                worst = (*key, set_name, errors, inputs, ref, got)
        failed, _, set_name, errors, inputs, ref, got = worst
        check.input_set = set_name
        check.outputs = [finite(asdict(e)) for e in errors]
        check.eager_rel_err = None if eager_worst is None or math.isnan(eager_worst) else eager_worst
        if failed:
            self._stop(check, "fail", f"outputs differ after the pattern (input set '{set_name}')", before_text,
                       after_text, source, arrays={"input": inputs, "expected": ref, "got": got})
        if not informative:
            raise CuvilError(f"the example cannot judge the pattern: on every input set the {check.reference} program "
                             f"itself is more than {UNINFORMATIVE:g} (relative) away from float64 PyTorch")
        check.status = "pass"

    def _compare(self, got, ref, exact, example_rtol: float | None) -> list:
        """Errors of ``got`` against ``ref``. Where ``ref`` is not finite it is masked (there
        ``got`` may be anything: the rewrite may be more accurate; a non-finite ``got`` where
        ``ref`` is finite fails). A float output's tolerance is its dtype's, at least the
        example's own ``rtol`` (a lossy rewrite such as quantization declares one), and at
        least NOISE_FACTOR times ``ref``'s own error against float64 ``exact``."""
        masked = [np.where(np.isfinite(r), g, r) if _is_float(r) and g.shape == r.shape else g for g, r in zip(got, ref)]
        errors = output_errors(masked, ref, self.tolerances)
        exact = exact if exact is not None and len(exact) == len(ref) else [None] * len(ref)
        for e, g, r, x in zip(errors, masked, ref, exact):
            if e.problem or not _is_float(r):
                continue
            floor = example_rtol or 0.0
            if x is not None and r.shape == x.shape:
                noise = output_errors([r], [x], check_dtype=False)[0].max_rel_err
                floor = max(floor, NOISE_FACTOR * noise if math.isfinite(noise) else 0.0)
            if floor > e.rtol:
                e.rtol = floor
                e.passed = e.max_rel_err <= e.rtol
            if x is not None and r.shape == x.shape and g.shape == r.shape and not example_rtol:
                _check_accuracy(e, g, r, x)
        return errors

    def _lower_and_compile(self, module, passes) -> bytes | CompileError:
        from cuvil_mlir.core.ir import module_to_bytecode
        from cuvil_mlir.core.passes import run_pipeline
        from cuvil_mlir.targets import iree

        run_pipeline(module, passes, repro_dir=str(self._dir()))
        key = hashlib.sha256(module_to_bytecode(module)).hexdigest()
        if key not in self._vmfbs:
            try:
                self._vmfbs[key] = iree.compile_to_vmfb(module, self.target.iree_flags())
            except CompileError as e:
                self._vmfbs[key] = e
        return self._vmfbs[key]

    # --- verdicts and repros ----------------------------------------------------------------

    def _stop(self, check, status, message, before_text, after_text, source, *, repro=None, diff=None, arrays=None):
        check.status, check.message, check.diff = status, message, diff
        folder = self._repro_folder(check)
        (folder / "before.mlir").write_text(before_text)
        if after_text is not None:
            (folder / "after.mlir").write_text(after_text)
        for kind, values in (arrays or {}).items():
            for i, a in enumerate(values):
                np.save(folder / f"{kind}{i}.npy", np.asarray(a))
        check.repro_dir = str(folder)
        load = ["--load-patterns", source] if source else []
        check.repro = repro if repro and status != "fail" else shlex.join(
            ["cuvil-opt", str(folder / "before.mlir"), "-p", check.pass_name, *load])
        if repro and repro != check.repro:
            check.message += f" (reproduce the failure with: {repro})"
        raise _Stop

    def _dir(self) -> Path:
        directory = self.repro_dir or Path(tempfile.gettempdir())
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def _repro_folder(self, check: PatternCheck) -> Path:
        stem = f"cuvil-check-{check.pass_name}-{check.pattern}-{check.example}-seed{check.seed}-"
        return Path(tempfile.mkdtemp(prefix=_safe(stem), dir=self._dir()))


# ---------------------------------------------------------------------------------------
# Programs and inputs.


def _build(example: Example, seed: int):
    """Run the example's builder with a seeded numpy Generator (torch's RNG seeded too, so
    weights are the same on a rerun); returns (program, inputs as numpy arrays)."""
    import torch

    torch.manual_seed(seed)
    try:
        built = example.build(np.random.default_rng(seed))
    except Exception as e:
        raise CuvilError(f"example '{example.name}' failed to build (seed {seed}): {type(e).__name__}: {one_line(str(e))}") from e
    if not (isinstance(built, tuple) and len(built) == 2):
        raise CuvilError(f"example '{example.name}' must return (program, args), got {type(built).__name__}")
    program, args = built
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    for i, a in enumerate(args):
        if not isinstance(a, (torch.Tensor, np.ndarray)):
            raise CuvilError(f"example '{example.name}': argument {i} is a {type(a).__name__}; the checker needs tensors "
                             "(bake other values into the program)")
    if not (isinstance(program, torch.nn.Module) or callable(program) or _is_onnx(program)):
        raise CuvilError(f"example '{example.name}': the program must be an nn.Module or a function, got {type(program).__name__}")
    return program, tuple(to_numpy(a) for a in args)


def _import(program, args):
    """Export and import with the pipeline's importer; returns (module, the eager module)."""
    import torch

    from cuvil_mlir.compiler.context import make_context
    from cuvil_mlir.compiler.importers import fx

    if _is_onnx(program):  # an ONNX model: its own importer; onnx's reference evaluator is "eager"
        from cuvil_mlir.compiler.importers import onnx as onnx_importer
        from cuvil_mlir.eval.onnx_reference import OnnxReference

        return onnx_importer.import_model(program, make_context()), OnnxReference(program, runtime="onnx.reference")
    module = program if isinstance(program, torch.nn.Module) else _function_module(program)
    exported = fx.to_exported_program(module, tuple(to_torch(a) for a in args))
    return fx.import_program(exported, make_context()), module


def _is_onnx(program) -> bool:
    return type(program).__name__ == "ModelProto" and type(program).__module__.startswith("onnx")


def _function_module(fn):
    import torch

    class Function(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fn = fn

        def forward(self, *args):
            return self.fn(*args)

    return Function()


def _eager(module, inputs, *, fp64: bool = False) -> list[np.ndarray] | None:
    """Eager PyTorch outputs (on a copy: a training-mode module updates its buffers), or None
    when it fails (e.g. an op without float64 support)."""
    import torch
    from torch.utils._pytree import tree_leaves

    try:
        m = copy.deepcopy(module)
        xs = [to_torch(np.array(a)) for a in inputs]
        if fp64:
            m = m.double()
            xs = [x.double() if x.is_floating_point() else x for x in xs]
        with torch.no_grad():
            return [to_numpy(o) for o in tree_leaves(m(*xs))]
    except Exception:
        return None


def _check_accuracy(e, got, ref, exact) -> None:
    """Fail ``e`` when ``got`` is much further from float64 ``exact`` than ``ref`` is."""
    before = output_errors([np.where(np.isfinite(ref), ref, exact)], [exact], check_dtype=False)[0].max_rel_err
    after = output_errors([np.where(np.isfinite(ref), got, exact)], [exact], check_dtype=False)[0].max_rel_err
    if not (math.isfinite(before) and math.isfinite(after)):
        return
    ulp = float(np.finfo(ref.dtype).eps) if np.issubdtype(ref.dtype, np.floating) else 0.0
    allowed = max(ACCURACY_FACTOR * before, ACCURACY_FLOOR_ULPS * ulp)
    if after > allowed:
        e.passed = False
        e.problem = (f"less accurate than before the rewrite: max rel err {after:.3g} against float64 PyTorch, "
                     f"before {before:.3g} (allowed {allowed:.3g})")


def _is_float(a) -> bool:
    a = np.asarray(a)
    return a.dtype.kind == "f" or str(a.dtype) in ("bfloat16", "float8_e4m3fn", "float8_e5m2")


def _input_sets(args: tuple, rng: np.random.Generator) -> list[tuple[str, tuple]]:
    """The example's own inputs, then float inputs redrawn from N(0, 1), scaled by 1e3 and
    1e-3, and all zeros (integer and boolean inputs keep the example's values: token ids,
    indices and masks must stay meaningful)."""
    sets = [("example", args)]
    if not any(_is_float(a) for a in args):
        return sets
    for name, scale in SCALES:
        sets.append((name, tuple((rng.standard_normal(a.shape) * scale).astype(a.dtype) if _is_float(a) else a for a in args)))
    sets.append(("zeros", tuple(np.zeros_like(a) if _is_float(a) else a for a in args)))
    return sets


# ---------------------------------------------------------------------------------------
# Text.


def _diff(a: str, b: str, limit: int = 40) -> str:
    lines = list(difflib.unified_diff(a.splitlines(), b.splitlines(), "before", "after", lineterm="", n=1))
    if len(lines) > limit:
        lines = lines[:limit] + [f"... ({len(lines) - limit} more diff lines)"]
    return "\n".join(line if len(line) <= 200 else line[:200] + " ..." for line in lines)


def _rerun_command(check: PatternCheck, source: str | None) -> str:
    words = ["cuvil", "check-patterns", *([source] if source else []), "--pass", check.pass_name, "--pattern", check.pattern]
    if check.seed is not None:
        words += ["--seeds", str(check.seed + 1)]
    return shlex.join(words)


def _describe_output(o: dict) -> str:
    head = f"output {o['index']} ({o['dtype']}{o['shape']})"
    rel = "inf" if o["max_rel_err"] is None else f"{o['max_rel_err']:.3g}"
    abs_ = "inf" if o["max_abs_err"] is None else f"{o['max_abs_err']:.3g}"
    text = f"{head}: max rel err {rel} (tol {o['rtol']:.2g}), max abs err {abs_}"
    if o["worst_at"] is not None and o["got"] is not None and o["expected"] is not None:
        text += f", worst at {o['worst_at']}: got {o['got']:.6g}, expected {o['expected']:.6g}"
    if o["problem"]:
        text += f" ({o['problem']})"
    return text


def _safe(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)


def _unique(items: list[list]) -> list[list]:
    out, seen = [], set()
    for passes in items:
        key = tuple(p.name if not hasattr(p, "patterns") else (p.name, tuple(q.fn for q in p.patterns)) for p in passes)
        if key not in seen:
            seen.add(key)
            out.append(passes)
    return out



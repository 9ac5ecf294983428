"""The compile pipeline: one straight function of named stages.

    import (torch-mlir FX importer)          -> stage "torch"
    the target's stages, in order:
        raise torch ops to Cuvil ops         -> stage "cuvil"
        (fusion, precision: later stages)
        lower Cuvil ops back to torch ops,
        check no Cuvil op is left            -> stage "lowered"
    hand-off + IREE compile (targets/iree.py) -> the vmfb

``emit=<stage>`` stops after that stage and returns its IR text.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib.metadata import version

from cuvil_mlir import __version__
from cuvil_mlir.compiled import CompiledModel
from cuvil_mlir.context import make_context
from cuvil_mlir.diagnostics import CuvilError
from cuvil_mlir.importers import fx
from cuvil_mlir.ir import module_to_text
from cuvil_mlir.lowering import builtin_registry
from cuvil_mlir.package import PackagedModule
from cuvil_mlir.passes import Pass, run_pipeline
from cuvil_mlir.patterns import PatternSet
from cuvil_mlir.signature import signature_of
from cuvil_mlir.targets import iree, parse_target

IMPORT_STAGE = "torch"


@dataclass
class Options:
    target: str = "cpu"
    opt_level: int = 3
    patterns: tuple[PatternSet, ...] = ()  # user pattern sets, run in the "cuvil" stage after raising
    disabled_passes: tuple[str, ...] = ()  # built-in passes to skip (for A/B comparisons)


@dataclass
class Emitted:
    stage: str
    text: str


@dataclass
class Timings:
    seconds: dict[str, float] = field(default_factory=dict)


def stage_names(target_spec: str = "cpu") -> list[str]:
    target = parse_target(target_spec)
    return [IMPORT_STAGE, *[name for name, _ in target.stages], "vmfb"]


def compile_program(model, args=(), options: Options | None = None, *, emit: str | None = None, elide_weights: bool = True):
    """Run the pipeline; returns a CompiledModel, or an Emitted when ``emit`` names a stage."""
    options = options or Options()
    target = parse_target(options.target, opt_level=options.opt_level)
    valid = stage_names(options.target)
    if emit is not None and emit not in valid[:-1]:
        raise CuvilError(f"unknown stage '{emit}'; stages: {', '.join(valid[:-1])}")
    timings: dict[str, float] = {}

    # import: torch-mlir's FX importer -> torch dialect (value semantics, weights as literals)
    start = time.perf_counter()
    program = fx.to_exported_program(model, args)
    ctx = make_context()
    module = fx.import_program(program, ctx)
    signature = signature_of(module)
    timings[IMPORT_STAGE] = time.perf_counter() - start
    if emit == IMPORT_STAGE:
        return Emitted(emit, module_to_text(module, elide_weights=elide_weights))

    # the target's stages: raise (+ user patterns), lower, verify
    fired: dict[str, Counter] = {}
    for stage, pass_names in target.stages:
        start = time.perf_counter()
        fired.update(run_pipeline(module, _stage_passes(stage, pass_names, options)))
        timings[stage] = time.perf_counter() - start
        if emit == stage:
            return Emitted(emit, module_to_text(module, elide_weights=elide_weights))

    # hand-off to IREE: bytecode across the seam, compiled with the target's flags
    start = time.perf_counter()
    flags = target.iree_flags()
    vmfb = iree.compile_to_vmfb(module, flags)
    timings["iree-compile"] = time.perf_counter() - start

    metadata = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "function": "main",
        "signature": signature.to_json(),
        "target": target.spec,
        "opt_level": options.opt_level,
        "patterns_fired": {name: dict(c) for name, c in fired.items() if c},
        "compile_seconds": {k: round(v, 4) for k, v in timings.items()},
        "versions": _versions(),
    }
    return CompiledModel([PackagedModule(target.spec, target.driver, tuple(flags), vmfb)], metadata)


def _stage_passes(stage: str, pass_names, options: Options) -> list[Pass]:
    registry = builtin_registry()
    passes = [registry.get(n) for n in pass_names if n not in options.disabled_passes]
    if stage == "cuvil":
        passes += list(options.patterns)
    return passes


def _versions() -> dict[str, str]:
    out = {"cuvil-mlir": __version__}
    for dist in ("torch-mlir", "iree-base-compiler", "iree-base-runtime", "torch"):
        try:
            out[dist] = version(dist)
        except Exception:
            out[dist] = "unknown"
    return out

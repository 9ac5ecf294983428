"""The compile pipeline: one straight function of named stages.

    import (torch-mlir FX importer)          -> stage "torch"
    the target's stages, in order:
        raise torch ops to Cuvil ops         -> stage "cuvil"
        fuse Cuvil ops (conv+BN, norms, attention, epilogues, gated FFN, horizontal)
                                             -> stage "fused"
        the precision policy's passes        -> stage "precision"
        lower Cuvil ops back to torch ops,
        check no Cuvil op is left            -> stage "lowered"
    hand-off + IREE compile (targets/iree.py) -> the vmfb

``emit=<stage>`` stops after that stage and returns its IR text.

``compile_plain_iree`` is the baseline without Cuvil (torch-mlir's own import straight into
IREE), for A/B comparisons (cuvil_mlir/eval/harness.py).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone

from cuvil_mlir.compiler import precision
from cuvil_mlir.runtime import boundary
from cuvil_mlir.compiler.calibration import Calibration
from cuvil_mlir.core.versions import versions
from cuvil_mlir.runtime.compiled import CompiledModel
from cuvil_mlir.compiler.context import make_context
from cuvil_mlir.core.diagnostics import CompileError, CuvilError
from cuvil_mlir.compiler.importers import fx, onnx
from cuvil_mlir.core.ir import module_to_bytecode, module_to_text, parse_module
from cuvil_mlir.lowering import builtin_registry
from cuvil_mlir.runtime.package import PackagedModule
from cuvil_mlir.runtime.parameters import Parameters
from cuvil_mlir.core import params
from cuvil_mlir.core.params import ParameterStore, resolve_mode
from cuvil_mlir.core.passes import Pass, parse_pass_spec, run_pipeline
from cuvil_mlir.core.patterns import PatternSet
from cuvil_mlir.core.stages import Stage
from cuvil_mlir.runtime.signature import signature_of
from cuvil_mlir.targets import iree, parse_targets

IMPORT_STAGE = Stage.TORCH
# how often an ONNX model IREE cannot compile is rewritten where it failed and tried again
# (an expanded function can hold another: SoftmaxCrossEntropyLoss -> NegativeLogLikelihoodLoss)
ONNX_REWRITE_ROUNDS = 3
# float64 computed as float64 where the target can (targets/base.py holds_f64)
F64_FLAGS = ("--iree-input-demote-f64-to-f32=false",)


@dataclass
class Options:
    target: str = "cpu"
    opt_level: int = 3
    patterns: tuple[PatternSet, ...] = ()  # user pattern sets, run in the "cuvil" stage after raising
    disabled_passes: tuple[str, ...] = ()  # passes to skip, built-in or user PatternSets (for A/B comparisons)
    disabled_patterns: tuple[str, ...] = ()  # single patterns to drop: "pass/pattern", or "pattern" when unambiguous
    precision: str = "fp32"  # a policy of cuvil_mlir/compiler/precision.py: fp32, fp16, bf16, int8-weight, int4-weight, int8
    calibration: Calibration | None = None  # activation ranges for precision="int8" (cuvil_mlir.calibrate)
    record_dispatches: bool = False  # metadata["dispatches"]: IREE's dispatches and their call sites (cuvil_mlir/eval/profiler.py)
    params: str = "auto"  # weights "inline" in the modules or "external" (one archive all targets share); "auto": core/params.py's rule


@dataclass
class Emitted:
    stage: str
    text: str


def stage_names(target_spec: str = "cpu") -> list[str]:
    target = parse_targets(target_spec)[0]
    return [IMPORT_STAGE, *[name for name, _ in target.stages], "vmfb"]


def compile_program(model, args=(), options: Options | None = None, *, emit: str | None = None, elide_weights: bool = True,
                    kwargs=None, dynamic_shapes=None):
    """Run the pipeline; returns a CompiledModel (one module per target, in the order
    given), or an Emitted when ``emit`` names a stage (of the first target). ``kwargs`` and
    ``dynamic_shapes`` go to torch.export with ``args`` (an nn.Module only)."""
    options = options or Options()
    targets = parse_targets(options.target, opt_level=options.opt_level)
    check_disabled(options)
    precision.stage_passes(options.precision, options.calibration)  # a bad policy fails before the import
    valid = stage_names(options.target)
    if emit is not None and emit not in valid[:-1]:
        raise CuvilError(f"unknown stage '{emit}'; stages: {', '.join(valid[:-1])}")

    # import: torch-mlir's FX importer -> torch dialect (value semantics, weights as literals,
    # or for a big model as references to a parameter store: core/params.py)
    start = time.perf_counter()
    ctx = make_context()
    module, prepared, store = _import(model, args, kwargs, dynamic_shapes, ctx, complex_ops=True, params_mode=options.params)
    signature = signature_of(module)
    prepared = prepared or boundary.Prepared.identity(signature)
    prepared.check_against(signature)
    import_seconds = time.perf_counter() - start
    if emit == IMPORT_STAGE:
        return Emitted(emit, module_to_text(module, elide_weights=elide_weights))
    imported = module_to_bytecode(module)

    # per target: its stages on a fresh copy of the imported module, then IREE; the
    # parameters the targets' modules read (passes add derived ones to the store) are kept
    failed: list[str] = []
    while True:
        try:
            built = _compile_targets(targets, imported, ctx, options, emit, elide_weights, store)
            break
        except CompileError as e:
            if not onnx.is_onnx_model(model) or len(failed) == ONNX_REWRITE_ROUNDS:
                raise
            # an ONNX model whose lowering IREE cannot compile: imported again, rewritten at
            # the ONNX level where IREE failed (function bodies, constants, static reduction axes)
            failed.append(e.message)
            try:
                module, _, store = _import(model, args, kwargs, dynamic_shapes, ctx, params_mode=options.params,
                                           failed=tuple(failed))
            except onnx.RewriteNotPossible:
                raise e from None
            imported = module_to_bytecode(module)
    if isinstance(built, Emitted):
        return built

    metadata = _metadata(signature, built, options, import_seconds)
    used = set().union(*(result.parameters for result in built))
    parameters = None if store is None else Parameters.in_memory(store.arrays_for(used), abstract=bool(store.abstract & used))
    if parameters is not None:
        metadata["parameters"] = {"count": len(parameters.arrays), "weight_bytes": parameters.nbytes,
                                  **params.describe(store, used)}
    return _compiled(built, metadata, prepared, parameters)


def _compile_targets(targets, imported: bytes, ctx, options: Options, emit, elide_weights, store):
    """Each target's build (or the Emitted stage of the first), with ``store`` the active
    parameter store (None: weights inline)."""
    built = []
    with params.active(store):
        for target in targets:
            result = _compile_for_target(target, imported, ctx, options, emit, elide_weights)
            if isinstance(result, Emitted):
                return result
            built.append(result)
    return built


def compile_plain_iree(model, args=(), options: Options | None = None) -> CompiledModel:
    """The baseline without Cuvil: torch-mlir's FX import with its default decompositions,
    straight into IREE with each target's flags, less the optional optimizations IREE does not
    turn on by itself (``Target.relaxed()``: the CPU's data tiling). No Cuvil pass runs
    (``patterns`` and the disabled lists of ``options`` do not apply); ``patterns_fired`` is empty."""
    options = options or Options()
    targets = parse_targets(options.target, opt_level=options.opt_level)
    start = time.perf_counter()
    module, prepared, _ = _import(model, args, None, None, make_context(), plain=True, kept_ops=(), params_mode="inline")
    signature = signature_of(module)
    prepared = prepared or boundary.Prepared.identity(signature)
    prepared.check_against(signature)
    import_seconds = time.perf_counter() - start

    built = []
    for target in targets:
        start = time.perf_counter()
        flags = next(iter(target.relaxed()), target).iree_flags()  # without our optional optimizations
        vmfb = iree.compile_to_vmfb(module, flags)
        seconds = {"iree-compile": round(time.perf_counter() - start, 4)}
        built.append(_Built(PackagedModule(target.spec, target.driver, tuple(flags), vmfb, (), {}, target.requirements()), {}, seconds))
    return _compiled(built, {**_metadata(signature, built, options, import_seconds), "pipeline": "plain-iree"}, prepared)


def compile_functions(programs: dict, options: Options, *, entry: str, emit: str | None = None, elide_weights: bool = True):
    """Several ExportedPrograms compiled as the functions of one module (per target), by name:
    the weights they share are one copy (IREE folds identical constants; external parameters
    are named by their state-dict names, so the functions read the same ones), and an input a
    program mutates in place stays one device buffer the function updates (importers/fx.py
    ``import_functions``). Returns (the modules, their metadata: the signature is ``entry``'s,
    the external parameters or None), or an Emitted when ``emit`` names a stage."""
    targets = parse_targets(options.target, opt_level=options.opt_level)
    check_disabled(options)
    precision.stage_passes(options.precision, options.calibration)
    start = time.perf_counter()
    ctx = make_context()
    store = ParameterStore() if resolve_mode(options.params, fx.shared_weight_bytes(programs.values())) == "external" else None
    module = fx.import_functions(programs, ctx, store=store)
    signature = signature_of(module, entry)
    import_seconds = time.perf_counter() - start
    if emit == IMPORT_STAGE:
        return Emitted(emit, module_to_text(module, elide_weights=elide_weights))
    imported = module_to_bytecode(module)
    built = []
    with params.active(store):
        for target in targets:
            result = _compile_for_target(target, imported, ctx, options, emit, elide_weights, entry)
            if isinstance(result, Emitted):
                return result
            built.append(result)
    if emit is not None:
        raise CuvilError(f"unknown stage '{emit}'; stages: {', '.join(stage_names(options.target)[:-1])}")
    metadata = {**_metadata(signature, built, options, import_seconds), "function": entry}
    used = set().union(*(result.parameters for result in built))
    parameters = None if store is None else Parameters.in_memory(store.arrays_for(used), abstract=bool(store.abstract & used))
    if parameters is not None:
        metadata["parameters"] = {"count": len(parameters.arrays), "weight_bytes": parameters.nbytes,
                                  **params.describe(store, used)}
    return [b.module for b in built], metadata, parameters


def _import(model, args, kwargs, dynamic_shapes, ctx, *, params_mode: str, plain: bool = False,
            failed: tuple[str, ...] = (), **options):
    """torch-mlir's import: an ONNX model through its ONNX importer (no torch.export signature:
    the boundary is its inputs, the shape operands among them bound to the example ``args``, and
    the dtypes its narrow-typed values are carried in; ``plain``: without Cuvil's
    ONNX-level rewrites; ``failed``: IREE's errors on the modules of earlier imports, to rewrite for),
    anything else exported and shaped by the boundary (cuvil_mlir/runtime/boundary.py). Returns
    (module, prepared, the parameter store when the weights are external, else None)."""
    if onnx.is_onnx_model(model):  # a .onnx path or ModelProto
        onnx_options = {"kept_ops": options["kept_ops"]} if "kept_ops" in options else {}
        if plain:  # torch-mlir's ONNX import alone
            onnx_options["rewrites_allowed"] = False
        carried: dict = {}
        module = onnx.import_model(model, ctx, failed=failed, carried=carried, example_inputs=tuple(args),
                                   params_mode=params_mode, **onnx_options)
        return module, _onnx_prepared(module, carried), carried["store"]
    program = fx.to_exported_program(model, args, kwargs, dynamic_shapes)
    store = ParameterStore() if resolve_mode(params_mode, fx.weight_bytes(program)) == "external" else None
    found = []

    def prepare(decomposed):
        from cuvil_mlir.compiler.f64_math import narrow_f64_math

        narrow_f64_math(decomposed)  # float64 sin, tanh, erf, ... do not link on llvm-cpu
        decomposed, prepared = boundary.prepare(decomposed)
        found.append(prepared)
        return decomposed

    module = fx.import_program(program, ctx, prepare=prepare, store=store, **options)
    return module, found[0], store


def _onnx_prepared(module, carried: dict) -> boundary.Prepared:
    """An ONNX model's boundary: its inputs in order, those bound to example values
    (shape operands) checked at each call, float8 / int4 / ... inputs and outputs converted
    from and to the wider types the function carries them in."""
    signature = signature_of(module)
    args = {name: i for i, name in enumerate(carried["args"])}
    results = {name: i for i, name in enumerate(carried["results"])}
    dtypes = carried["dtypes"]
    inputs, in_specs = [], []
    for name in carried["names"]:
        if name in carried["bound"]:
            value = carried["bound"][name]
            inputs.append(boundary.Leaf("constant", -1, value.tolist(), dtype=str(value.dtype)))
            in_specs.append(dict(boundary.LEAF))
        elif name in carried["groups_in"]:  # a sequence: a list of tensors
            inputs += [boundary.Leaf("tensor", args[element]) for element in carried["groups_in"][name]]
            in_specs.append({"type": "list", "children": [dict(boundary.LEAF)] * len(carried["groups_in"][name])})
        else:
            inputs.append(boundary.Leaf("tensor", args[name], dtype=dtypes.get(name)))
            in_specs.append(dict(boundary.LEAF))
    outputs, out_specs = [], []
    for name in carried["outputs"]:
        if name in carried["groups_out"]:
            outputs += [boundary.Leaf("tensor", results[element]) for element in carried["groups_out"][name]]
            out_specs.append({"type": "list", "children": [dict(boundary.LEAF)] * len(carried["groups_out"][name])})
        else:
            outputs.append(boundary.Leaf("tensor", results[name], dtype=dtypes.get(name)))
            out_specs.append(dict(boundary.LEAF))
    return boundary.Prepared.positional(signature, boundary.Boundary.positional(inputs, outputs, in_specs, out_specs))


def _compiled(built, metadata: dict, prepared, parameters=None) -> CompiledModel:
    metadata["boundary"] = prepared.boundary().to_json()
    return CompiledModel([b.module for b in built], metadata, boundary=prepared.boundary(), state=prepared.state_values,
                         parameters=parameters)


def _metadata(signature, built: list["_Built"], options: Options, import_seconds: float) -> dict:
    first = built[0]
    return {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "function": "main",
        "signature": (first.signature or signature).to_json(),
        "target": first.module.target,
        "targets": [b.module.target for b in built],
        "opt_level": options.opt_level,
        "precision": precision.parse_policy(options.precision).spec,
        "patterns_fired": first.fired,
        "pattern_sites": first.sites,
        "kernels": first.kernels,
        "compile_seconds": {IMPORT_STAGE: round(import_seconds, 4), **first.seconds},
        "versions": versions(("cuvil-mlir", "torch-mlir", "iree-base-compiler", "iree-base-runtime", "torch")),
        **({"dispatches": {b.module.target: b.dispatches for b in built}} if all(b.dispatches is not None for b in built) else {}),
    }


@dataclass
class _Built:
    module: PackagedModule
    fired: dict[str, dict[str, int]]
    seconds: dict[str, float]
    sites: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # pass -> pattern -> module path -> n
    signature: object = None  # read after the stages (a precision policy may narrow the I/O); None: the import's
    dispatches: list | None = None  # targets/iree.py dispatch_sites, when Options.record_dispatches
    kernels: list = field(default_factory=list)  # targets' own kernels: one record per kernel function
    parameters: set = field(default_factory=set)  # the keys of the external parameters its module reads


class OptLevelFallbackWarning(UserWarning):
    """IREE failed at the asked optimization level and the module was compiled at a lower one."""


class RelaxedTargetWarning(UserWarning):
    """IREE failed with one of the target's optional optimizations (Target.relaxed: the CPU's
    data tiling) and the module was compiled without it."""


def _compile_for_target(target, imported: bytes, ctx, options: Options, emit, elide_weights, entry: str = "main"):
    """``_compile_variants``; when IREE fails at every variant, retry with the target relaxed
    (``Target.relaxed()``: without data tiling on the CPU), then at lower optimization levels
    (each relaxed too): some IREE codegen paths fail only at O2/O3 (max_pool2d with indices on
    the CPU: "write affecting operations on global resources are restricted to workgroup
    distributed contexts"), and a slower module beats no module. The module keeps the target's
    name; the flags it was compiled with are recorded in it."""
    try:
        return _compile_variants(target, imported, ctx, options, emit, elide_weights, entry)
    except CompileError as e:
        first = e
    for level in (target.opt_level, *(lvl for lvl in (1, 0) if lvl < target.opt_level)):
        at_level = dataclasses.replace(target, opt_level=level)
        for candidate in ([] if level == target.opt_level else [at_level]) + at_level.relaxed():
            try:
                built = _compile_variants(candidate, imported, ctx, options, emit, elide_weights, entry, spec=target.spec)
            except CompileError:
                continue
            if level < target.opt_level:
                how = f"compiled at O{level}" + (f" as {candidate.spec}" if candidate.spec != target.spec else "")
                warnings.warn(f"target '{target.spec}': IREE failed at O{target.opt_level} ({first.message}); {how}",
                              OptLevelFallbackWarning, stacklevel=3)
            else:
                warnings.warn(f"target '{target.spec}': IREE failed ({first.message}); compiled as {candidate.spec}",
                              RelaxedTargetWarning, stacklevel=3)
            return built
    raise first


def _compile_variants(target, imported: bytes, ctx, options: Options, emit, elide_weights, entry: str = "main",
                      spec: str | None = None):
    """Run the target's stages and IREE; on an IREE failure retry with the target's
    fallback stage lists (skipping any that lower to the same IR). ``entry``: the function
    whose signature the package records; ``spec``: the target name the module records
    (default: the target's own)."""
    failures: list[tuple[tuple, CompileError]] = []
    tried: set[bytes] = set()
    for stages in target.variants():
        module = parse_module(imported, ctx)
        fired: dict[str, Counter] = {}
        seconds: dict[str, float] = {}
        for stage, pass_specs in stages:
            start = time.perf_counter()
            fired.update(run_pipeline(module, _stage_passes(stage, pass_specs, options)))
            seconds[stage] = round(time.perf_counter() - start, 4)
            if emit == stage:
                return Emitted(emit, module_to_text(module, elide_weights=elide_weights))
        signature = signature_of(module, entry)
        lowered = module_to_bytecode(module)
        if lowered in tried:
            continue
        tried.add(lowered)

        # hand-off to IREE: bytecode across the seam, compiled with the target's flags (and
        # the precision policy's: quantized weights must not be expanded at compile time)
        start = time.perf_counter()
        boundary.check_dtypes(signature, target)
        flags = [*target.iree_flags(), *precision.iree_flags(options.precision), *(F64_FLAGS if target.holds_f64 else ())]
        kernels: list[dict] = []  # which kernel function got which kernel (or why none)
        used: set[str] = set()  # the external parameters the module reads
        try:
            vmfb = iree.compile_to_vmfb(module, flags, kernels=target.kernel_builder(), report=kernels, parameters=used)
        except CompileError as e:
            failures.append((stages, e))
            continue
        seconds["iree-compile"] = round(time.perf_counter() - start, 4)
        dispatches = iree.dispatch_sites(module, flags, kernels=target.kernel_builder()) if options.record_dispatches else None
        passes = tuple(p for _, specs in stages for p in specs)
        fired_json = {name: dict(c) for name, c in fired.items() if c}
        sites = {name: {p: dict(where) for p, where in getattr(c, "sites", {}).items()} for name, c in fired.items() if c}
        module = PackagedModule(spec or target.spec, target.driver, tuple(flags), vmfb, passes, fired_json, target.requirements())
        return _Built(module, fired_json, seconds, sites, signature, dispatches, kernels, used)
    raise _all_failed(target, failures)


def _all_failed(target, failures) -> CompileError:
    if len(failures) == 1:
        return failures[0][1]
    lines = [f"IREE failed to compile for target '{target.spec}' with every lowering tried:"]
    for stages, e in failures:
        passes = ", ".join(p for _, specs in stages for p in specs)
        lines.append(f"  [{passes}] {e.message}")
    return CompileError("\n".join(lines), repro=failures[0][1].repro)


def _stage_passes(stage: str, pass_specs, options: Options) -> list[Pass]:
    registry = builtin_registry()
    passes = [registry.get(spec) for spec in pass_specs if parse_pass_spec(spec)[0] not in options.disabled_passes]
    if stage == Stage.CUVIL:
        passes += [p for p in options.patterns if p.name not in options.disabled_passes]
    if stage == Stage.PRECISION:
        passes += [p for p in precision.stage_passes(options.precision, options.calibration) if p.name not in options.disabled_passes]
    return [_without_patterns(p, options.disabled_patterns) for p in passes]


def _without_patterns(p: Pass, disabled: tuple[str, ...]) -> Pass:
    """``p`` less the disabled patterns it holds (``check_disabled`` resolved the names)."""
    if not isinstance(p, PatternSet):
        return p
    mine = {pat.name for pat in p.patterns}
    drop = [name for owner, _, name in (d.rpartition("/") for d in disabled) if name in mine and owner in ("", p.name)]
    return p.without(*drop) if drop else p


def pass_patterns(user_patterns=()) -> dict[str, list[str]]:
    """Every pass a pipeline may run (built-in, then the user's PatternSets) -> its pattern
    names (empty for a pass that is not a pattern set)."""
    registry = builtin_registry()
    out = {}
    for name in registry.names():
        p = registry.get(name)  # a configurable pass, with its default options
        out[name] = [pat.name for pat in p.patterns] if isinstance(p, PatternSet) else []
    for p in user_patterns:
        out[p.name] = [pat.name for pat in p.patterns]
    return out


def check_disabled(options: Options) -> None:
    """A disabled pass or pattern that does not exist would silently measure the default:
    fail instead, listing the valid names. A bare pattern name must name one pass's pattern."""
    known = pass_patterns(options.patterns)
    for name in options.disabled_passes:
        if name not in known:
            raise CuvilError(f"cannot disable pass '{name}': no such pass; passes: {', '.join(known)}")
    for spec in options.disabled_patterns:
        owner, _, name = spec.rpartition("/")
        owners = [p for p, pats in known.items() if name in pats and owner in ("", p)]
        if not owners:
            valid = ", ".join(f"{p}/{pat}" for p, pats in known.items() for pat in pats)
            raise CuvilError(f"cannot disable pattern '{spec}': no such pattern; patterns: {valid}")
        if len(owners) > 1:
            raise CuvilError(f"pattern '{spec}' is in several passes ({', '.join(owners)}); "
                             f"name one: {', '.join(f'{p}/{name}' for p in owners)}")



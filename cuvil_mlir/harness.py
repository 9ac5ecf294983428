"""The comparison harness: one model on several targets, pattern configurations and PyTorch,
side by side: compile time, latency, and errors against a reference.

    from cuvil_mlir.harness import compare
    report = compare(model, (x,), targets=["cpu", "vulkan", "cuda"],
                     configs=["default", "plain-iree", "without:raise-torch-to-cuvil"],
                     competitors=["eager", "torch.compile"])
    report.print(); report.save_json("report.json"); report.plot("report.png")

Each entry (a row of the report) is a target with a configuration, or a PyTorch competitor
on a device. It is ``ok`` (ran, every output within its dtype's tolerance), ``mismatch`` (ran,
an output is not), ``failed`` (compile, load or call failed: the error and its repro) or
``skipped`` (no device here: the runtime's device discovery says why). How latency and errors
are measured: cuvil_mlir/measure.py. The JSON fields: docs/harness.md.

Everything is built first (compile, load, first call, errors on every input set), then the
entries are timed in interleaved rounds, so a burst of load on the machine hits all alike.
"""

from __future__ import annotations

import copy
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path
from typing import Sequence

import numpy as np

from cuvil_mlir.diagnostics import CuvilError
from cuvil_mlir.measure import (
    DEFAULT_RTOL, Latency, OutputError, Timer, TimingSettings, cuda_events, output_errors, permuted, random_array,
    to_numpy, to_torch, wall_clock, worst_of,
)
from cuvil_mlir.signature import as_signature

SCHEMA = "cuvil-compare"
SCHEMA_VERSION = 1

REFERENCES = ("torch", "torch-fp64")  # or a target spec
# competitor name -> torch.compile mode (None: eager)
COMPETITORS = {
    "eager": None,
    "torch.compile": "default",
    "torch.compile:reduce-overhead": "reduce-overhead",
    "torch.compile:max-autotune": "max-autotune",
}
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # modes that record CUDA graphs: GPU only
GPU_KINDS = {"cuda": "cuda", "rocm": "cuda"}  # target kind -> the torch device its competitors run on (ROCm torch calls itself cuda)


# ---------------------------------------------------------------------------------------
# The report.


@dataclass
class Numerics:
    """Errors of an entry's outputs against the reference, the worst over all input sets."""

    max_abs_err: float
    max_rel_err: float
    rtol: float  # the tolerance of the worst output
    passed: bool
    input_sets: int
    outputs: list[OutputError]

    @classmethod
    def of(cls, outputs: list[OutputError], input_sets: int) -> "Numerics":
        worst = max(outputs, key=lambda e: (not e.passed, e.max_rel_err))
        return cls(max(e.max_abs_err for e in outputs), worst.max_rel_err, worst.rtol,
                   all(e.passed for e in outputs), input_sets, outputs)


@dataclass
class Entry:
    """One row: a target with a configuration, or a PyTorch competitor on a device."""

    name: str  # unique in the report: "cpu", "cpu [plain-iree]", "torch eager (cpu)"
    kind: str  # "cuvil", "plain-iree" or "competitor"
    config: str  # "default", "without:X", "plain-iree", "precision:P"; a competitor's name for competitors
    target: str | None = None  # the target spec (None for competitors)
    device: str | None = None  # where it ran: "local-task", "vulkan: llvmpipe (...)", "torch cpu"
    status: str = "ok"  # ok | mismatch | failed | skipped
    reason: str | None = None  # why skipped or failed
    failed_stage: str | None = None  # compile | load | run
    repro: str | None = None  # the command that reproduces a failure
    compile_seconds: float | None = None
    compile_breakdown: dict[str, float] = field(default_factory=dict)
    first_call_ms: float | None = None
    latency: Latency | None = None
    numerics: Numerics | None = None
    patterns_fired: dict[str, dict[str, int]] = field(default_factory=dict)
    iree_flags: list[str] = field(default_factory=list)
    module_bytes: int | None = None  # the compiled module's size (the .vmfb of this target)
    baseline: str | None = None  # the entry the deltas compare with
    deltas: dict[str, float] | None = None

    def skip(self, reason: str) -> "Entry":
        self.status, self.reason = "skipped", reason
        return self

    def fail(self, stage: str, error: BaseException) -> "Entry":
        self.status, self.failed_stage = "failed", stage
        if isinstance(error, CuvilError):
            self.reason, self.repro = _one_line(error.message), error.repro
        else:
            self.reason = f"internal error: {type(error).__name__}: {_one_line(str(error))}"
        return self

    @property
    def ran(self) -> bool:
        return self.status in ("ok", "mismatch")


@dataclass
class Report:
    model: str
    reference: dict
    inputs: list[dict]
    settings: dict
    tolerances: dict[str, float]
    entries: list[Entry]
    machine: dict
    versions: dict
    notes: list[str]
    created: str

    @property
    def ok(self) -> bool:
        """Every Cuvil entry that was not skipped ran and matched (competitors do not count)."""
        return all(e.status in ("ok", "skipped") for e in self.entries if e.kind != "competitor")

    def entry(self, name: str) -> Entry:
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(f"no entry '{name}'; entries: {', '.join(e.name for e in self.entries)}")

    def to_json(self) -> dict:
        return _finite({
            "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "created": self.created, "model": self.model,
            "ok": self.ok, "reference": self.reference, "inputs": self.inputs, "settings": self.settings,
            "tolerances": self.tolerances, "entries": [asdict(e) for e in self.entries], "machine": self.machine,
            "versions": self.versions, "notes": self.notes,
        })

    def save_json(self, path: str | os.PathLike) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n")

    def table(self):
        """The report as a ``rich`` renderable (a table with the notes under it)."""
        from cuvil_mlir import render

        return render.table(self.to_json())

    def print(self, console=None) -> None:
        from cuvil_mlir import render

        render.print_report(self.to_json(), console)

    def plot(self, path: str | os.PathLike) -> None:
        """A PNG: latency per entry (median, p10-p90 bars) and error per entry (log scale)."""
        from cuvil_mlir import render

        render.plot(self.to_json(), path)


# ---------------------------------------------------------------------------------------
# Configurations.


@dataclass(frozen=True)
class Config:
    name: str
    plain: bool = False  # torch-mlir's import straight into IREE, no Cuvil
    disabled_passes: tuple[str, ...] = ()
    disabled_patterns: tuple[str, ...] = ()
    precision: str = "fp32"  # a policy of cuvil_mlir/precision.py; int8 is calibrated on the input sets


# The error a precision policy may add, as the harness measures it (max |err| / max |ref|):
# fp16/bf16 are docs/precision.md's budgets; the quantized policies' budgets there are
# relative L2 errors, and a max-norm error of the same build is up to ~2x larger.
def _precision_rtol() -> dict[str, float]:
    """Per policy budgets. cuvil_mlir.precision imports the pass machinery (torch-mlir): imported here,
    not at module level, so ``compare --from`` runs where only the IREE runtime and torch are."""
    from cuvil_mlir.precision import BUDGETS

    return {"fp32": 0.0, **BUDGETS, "int8-weight": 5e-2, "int4-weight": 2.5e-1, "int8": 1e-1}


def parse_config(text: str, patterns=()) -> Config:
    """``default``, ``plain-iree``, ``without:PASS``, ``without:PATTERN``, ``without:PASS/PATTERN``
    (PASS: a built-in pass or one of ``patterns``) or ``precision:POLICY`` (``precision:fp16``,
    ``precision:int4-weight{group=64}``). Unknown names fail with the valid ones."""
    from cuvil_mlir.pipeline import Options, check_disabled, pass_patterns
    from cuvil_mlir.precision import parse_policy

    text = text.strip()
    if text in ("default", "plain-iree"):
        return Config(text, plain=text == "plain-iree")
    kind, _, name = text.partition(":")
    if kind == "precision" and name:
        return Config(text, precision=parse_policy(name).spec)
    if kind != "without" or not name:
        raise CuvilError(f"unknown configuration '{text}'; configurations: default, plain-iree, without:PASS, "
                         "without:PATTERN, without:PASS/PATTERN, precision:POLICY")
    if name in pass_patterns(patterns):
        return Config(text, disabled_passes=(name,))
    check_disabled(Options(patterns=tuple(patterns), disabled_patterns=(name,)))  # raises with the valid names
    return Config(text, disabled_patterns=(name,))


# ---------------------------------------------------------------------------------------
# compare()


def compare(model, inputs=None, *, targets: str | Sequence[str] = ("cpu",), reference: str = "torch",
            configs: Sequence[str] | None = None, competitors: Sequence[str] = ("eager",), patterns=(),
            opt_level: int = 3, tolerances: dict[str, float] | None = None, repetitions: int = 50, warmup: int = 5,
            min_time: float = 0.5, max_time: float = 10.0, rounds: int = 3, input_sets: int = 3, seed: int = 0,
            progress: bool = False) -> Report:
    """Compile ``model`` for every target and configuration, run each on this machine's
    device, and compare errors against ``reference`` and latency side by side.

    ``model``: an ``nn.Module`` (``inputs`` required), an ``ExportedProgram`` or a ``.pt2``
    path; without ``inputs``, random inputs are generated from the program's signature.
    ``reference``: "torch" (eager, on the CPU), "torch-fp64" (eager in float64) or a target
    spec (its default configuration). ``configs``: see ``parse_config`` (default: ["default"]),
    each run on every target. ``competitors``: "eager", "torch.compile",
    "torch.compile:reduce-overhead" (CUDA graphs), "torch.compile:max-autotune", or "all";
    they run on the CPU when a CPU target is asked for (or no GPU target), and on CUDA when a
    cuda/rocm target is. ``tolerances``: dtype -> max relative error, over ``DEFAULT_RTOL``.
    Timing: ``measure.TimingSettings`` (``repetitions=0``: no timing). ``patterns``: user
    PatternSets run in every Cuvil configuration.
    """
    settings = TimingSettings(repetitions, warmup, min_time, max_time, rounds, input_sets)
    target_specs = _target_specs(targets)
    parsed_configs = [parse_config(c, patterns) for c in (configs or ["default"])]
    competitor_names = _competitor_names(competitors)
    program, eager, model_name = _normalize_model(model, inputs)
    sets, input_info, input_notes = make_input_sets(program, inputs, settings.input_sets, seed)
    check_dtype = reference != "torch-fp64"
    load_at_start = _loadavg()

    with _Progress(progress) as bar:
        bar.say(f"reference: {reference}")
        refs, reference_info = reference_outputs(reference, eager, program, sets, opt_level=opt_level)
        from cuvil_mlir.runtime import probe_drivers

        drivers = probe_drivers()
        plan = [(t, c) for t in target_specs for c in parsed_configs]
        devices = _competitor_devices(target_specs, competitor_names)
        bar.phase("building", len(plan) + sum(len(names) for names in devices.values()))
        built: list[tuple[Entry, Timer | None]] = []
        for spec, config in plan:
            bar.say(f"{_entry_name(spec, config)}: compiling and checking")
            built.append(_build_cuvil(spec, config, program, sets, refs, drivers, opt_level, patterns, tolerances,
                                      check_dtype, settings))
            bar.advance()
        for device, names in devices.items():
            for name in names:
                bar.say(f"{_competitor_label(name, device)}: building and checking")
                built.append(_build_competitor(name, device, eager, sets, refs, tolerances, check_dtype, settings))
                bar.advance()
        _time_interleaved([(e, t) for e, t in built if t is not None], settings, bar)

    entries = [e for e, _ in built]
    _add_deltas(entries, target_specs)
    notes = _notes(entries, settings, input_notes)
    if load_at_start and load_at_start[0] > 0.5 * (os.cpu_count() or 1):
        notes.append(f"the machine was busy when this started (load average {load_at_start[0]} on {os.cpu_count()} "
                     "logical CPUs): latencies may be noisy")
    return Report(model_name, reference_info, input_info, {**settings.to_json(), "opt_level": opt_level, "seed": seed},
                  {**DEFAULT_RTOL, **(tolerances or {})}, entries,
                  {**machine_info(drivers), "loadavg_start": load_at_start, "loadavg_end": _loadavg()}, versions(), notes,
                  datetime.now(timezone.utc).isoformat(timespec="seconds"))


def _target_specs(targets) -> list[str]:
    from cuvil_mlir.targets import parse_targets

    text = targets if isinstance(targets, str) else ",".join(targets)
    return [t.spec for t in parse_targets(text)]  # validates, and names each target as parse_target does


def _competitor_names(competitors) -> list[str]:
    names = list(competitors.split(",") if isinstance(competitors, str) else competitors)
    if "all" in names:
        names = [n for n in COMPETITORS if n != "torch.compile:max-autotune"]
    for n in names:
        if n not in COMPETITORS:
            raise CuvilError(f"unknown competitor '{n}'; competitors: {', '.join(COMPETITORS)}, all")
    return list(dict.fromkeys(names))


def _competitor_devices(target_specs: list[str], names: list[str]) -> dict[str, list[str]]:
    """torch device -> the competitors that run there. CUDA-graph modes run on GPUs only."""
    kinds = {s.partition(":")[0] for s in target_specs}
    devices = list(dict.fromkeys(GPU_KINDS[k] for k in kinds if k in GPU_KINDS))
    if kinds - set(GPU_KINDS) - {"vulkan"} or not devices:
        devices.insert(0, "cpu")
    return {d: [n for n in names if d != "cpu" or COMPETITORS[n] not in CUDA_GRAPH_MODES] for d in devices if names}


def _entry_name(spec: str, config: Config) -> str:
    return spec if config.name == "default" else f"{spec} [{config.name}]"


def _competitor_label(name: str, device: str) -> str:
    mode = COMPETITORS[name]
    if mode is None:
        return f"torch eager ({device})"
    return f"torch.compile ({device})" if mode == "default" else f"torch.compile {mode} ({device})"


# ---------------------------------------------------------------------------------------
# Model and inputs.


def _normalize_model(model, inputs):
    """(ExportedProgram, the eager callable, a name for the report)."""
    import torch

    from cuvil_mlir.importers import fx

    if isinstance(model, torch.nn.Module):
        if inputs is None:
            raise CuvilError(f"compare: an nn.Module ({type(model).__name__}) needs example inputs, e.g. compare(model, (x,))")
        args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
        return fx.to_exported_program(model, tuple(to_torch(to_numpy(a)) for a in args)), model.eval(), type(model).__name__
    program = fx.to_exported_program(model)
    name = Path(model).name if isinstance(model, (str, os.PathLike)) else "ExportedProgram"
    return program, program.module(), name


def program_input_specs(program) -> list[tuple[tuple[int, ...], str, int | None]]:
    """(shape, numpy dtype, integer high) of each user input of an ExportedProgram. Shapes come
    from its example inputs when it carries them (torch.export.save keeps them), else from its
    signature; ``high`` is 1 + the example's largest value for integer inputs (token ids and
    indices stay in range), else None."""
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    examples = list(program.example_inputs[0]) if getattr(program, "example_inputs", None) else []
    specs = []
    for i, name in enumerate(program.graph_signature.user_inputs):
        example = examples[i] if i < len(examples) and hasattr(examples[i], "shape") else None
        val = example if example is not None else placeholders[name].meta.get("val")
        if val is None or not hasattr(val, "shape"):
            raise CuvilError(f"input {i} ('{name}') of the program is not a tensor; only tensor inputs are supported")
        shape = tuple(_dim(d) for d in val.shape)
        dtype = str(val.dtype).removeprefix("torch.")
        high = None
        if example is not None and not example.is_floating_point() and example.dtype.is_signed is not None and example.numel():
            high = int(example.max()) + 1 if dtype != "bool" else None
        specs.append((shape, dtype, high))
    return specs


def _dim(d) -> int:
    try:
        return int(d)
    except (TypeError, ValueError):
        return -1  # a symbolic dimension


def make_input_sets(program, given, count: int, seed: int):
    """``count`` input sets (tuples of numpy arrays) with their description and notes. Set 0
    is ``given`` (else random from the program's signature); the others permute the given
    inputs' elements (else are random too), so rotating them defeats caches."""
    rng = np.random.default_rng(seed)
    if given is not None:
        given = tuple(given) if isinstance(given, (tuple, list)) else (given,)
        first = tuple(to_numpy(x) for x in given)
        sets = [first] + [tuple(permuted(a, rng) for a in first) for _ in range(count - 1)]
        info = [{"shape": list(a.shape), "dtype": str(a.dtype), "source": "given"} for a in first]
        note = ("inputs: as given" + (f"; {count - 1} more input set(s) permute their elements" if count > 1 else ""))
        return sets, info, [note]
    specs = program_input_specs(program)
    try:
        sets = [tuple(random_array(shape, dtype, rng, high=high) for shape, dtype, high in specs) for _ in range(count)]
    except ValueError as e:
        raise CuvilError(f"cannot generate inputs: {e}") from e
    info = [{"shape": list(shape), "dtype": dtype, "source": "generated",
             "values": "N(0, 1)" if np.dtype(_np_name(dtype)).kind == "f" else
             "true/false" if dtype == "bool" else f"integers in [0, {high or 2})"} for shape, dtype, high in specs]
    described = ", ".join(f"{i['dtype']}[{', '.join(map(str, i['shape']))}] {i['values']}" for i in info)
    return sets, info, [f"inputs: generated at random from the program's signature (seed {seed}): {described}"]


def _np_name(dtype: str) -> str:
    return "float32" if dtype == "bfloat16" else dtype


# ---------------------------------------------------------------------------------------
# The reference.


def reference_outputs(reference, eager, program, sets, *, opt_level: int = 3):
    """The reference's outputs on every input set, and a description of it. ``reference``:
    "torch", "torch-fp64", a target spec, a callable (called with torch tensors) or, for a
    single input set, the expected outputs themselves (arrays or tensors)."""
    import torch

    if isinstance(reference, str) and reference in REFERENCES:
        fp64 = reference == "torch-fp64"
        module = copy.deepcopy(eager).double() if fp64 else eager
        outs = [_call_torch(module, s, fp64=fp64) for s in sets]
        return outs, {"kind": reference, "name": "torch eager (cpu, float64)" if fp64 else "torch eager (cpu)",
                      "device": "cpu", "torch": torch.__version__}
    if isinstance(reference, str):
        if program is None:
            raise CuvilError(f"reference target '{reference}' needs the model to compile it")
        try:
            compiled = _compile(reference, Config("default"), program, opt_level, ())
            compiled.select()
        except CuvilError as e:
            raise CuvilError(f"the reference target '{reference}' cannot be used here: {e.message}", repro=e.repro) from e
        return [_as_list(compiled(*s)) for s in sets], {"kind": "target", "name": reference, "device": compiled.active_target}
    if callable(reference):
        return [_call_torch(reference, s) for s in sets], {"kind": "callable", "name": getattr(reference, "__name__", type(reference).__name__), "device": "cpu"}
    if len(sets) != 1:
        raise CuvilError("expected outputs as the reference need exactly one input set")
    return [[to_numpy(o) for o in _leaves(reference)]], {"kind": "outputs", "name": "given outputs", "device": None}


def _call_torch(fn, arrays, *, fp64: bool = False) -> list[np.ndarray]:
    import torch

    xs = [to_torch(a) for a in arrays]
    if fp64:
        xs = [x.double() if x.is_floating_point() else x for x in xs]
    with torch.no_grad():
        return [to_numpy(o) for o in _leaves(fn(*xs))]


def _leaves(out) -> list:
    from torch.utils._pytree import tree_leaves

    return tree_leaves(out)


def _as_list(out) -> list[np.ndarray]:
    return list(out) if isinstance(out, tuple) else [out]


# ---------------------------------------------------------------------------------------
# Building entries: compile, load, first call, errors on every input set.


def _compile(spec: str, config: Config, program, opt_level: int, patterns, sets=()):
    from cuvil_mlir.pipeline import Options, compile_plain_iree, compile_program
    from cuvil_mlir.precision import parse_policy

    calibration = None
    if parse_policy(config.precision).uses("int8"):  # calibrated on the comparison's own input sets
        import torch

        from cuvil_mlir.calibration import calibrate

        if not sets:
            raise CuvilError(f"configuration '{config.name}' calibrates on the comparison's input sets, and there are none here")
        samples = [tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in s) for s in sets]
        calibration = calibrate(program, samples, target=spec, patterns=patterns,
                                disabled_passes=config.disabled_passes, disabled_patterns=config.disabled_patterns)
    options = Options(target=spec, opt_level=opt_level, patterns=tuple(patterns), disabled_passes=config.disabled_passes,
                      disabled_patterns=config.disabled_patterns, precision=config.precision, calibration=calibration)
    return compile_plain_iree(program, (), options) if config.plain else compile_program(program, (), options)


def _config_tolerances(config: Config, tolerances: dict | None) -> dict | None:
    """A precision configuration is checked against its policy's budget."""
    if config.precision == "fp32":  # no budget; and no import of the pass machinery (torch-mlir) for `compare --from`
        return tolerances
    from cuvil_mlir.precision import parse_policy

    budget = parse_policy(config.precision).budget(_precision_rtol())
    if not budget:
        return tolerances
    merged = {**DEFAULT_RTOL, **(tolerances or {})}
    return {dtype: max(rtol, budget) for dtype, rtol in merged.items()}


def _absent(driver: str, drivers) -> str | None:
    status = drivers.get(driver)
    if status is None:
        return f"this IREE runtime has no '{driver}' driver"
    if not status.devices:
        return f"no '{driver}' device on this machine: {status.reason}"
    return None


def _build_cuvil(spec, config, program, sets, refs, drivers, opt_level, patterns, tolerances, check_dtype, settings):
    from cuvil_mlir.targets import parse_target

    target = parse_target(spec, opt_level=opt_level)
    entry = Entry(_entry_name(spec, config), "plain-iree" if config.plain else "cuvil", config.name, target=spec)
    absent = _absent(target.driver, drivers)
    if absent:
        return entry.skip(absent), None
    device = drivers[target.driver].devices[0]
    entry.device = target.driver if device.name in ("", "default") else f"{target.driver}: {device.name}"
    start = time.perf_counter()
    try:
        compiled = _compile(spec, config, program, opt_level, patterns, sets)
    except Exception as e:  # a failing entry is a result, not the end of the comparison
        return entry.fail("compile", e), None
    entry.compile_seconds = round(time.perf_counter() - start, 4)
    entry.compile_breakdown = dict(compiled.metadata.get("compile_seconds", {}))
    entry.patterns_fired = compiled.patterns_fired
    entry.iree_flags = list(compiled.modules[0].iree_flags)
    entry.module_bytes = len(compiled.modules[0].vmfb)
    try:
        compiled.select()
    except Exception as e:
        return entry.fail("load", e), None
    # a policy with io=fp16 takes and returns 16-bit floats: feed it those, compare in float
    narrowed = _dtypes(sets[0]) != [t.dtype for t in compiled.signature.inputs]
    return _check(entry, lambda *xs: compiled(*xs), sets, refs, _config_tolerances(config, tolerances),
                  check_dtype and not narrowed, settings, wall_clock,
                  to_inputs=(lambda xs: as_signature([to_numpy(x) for x in xs], compiled.signature)) if narrowed else None)


def _dtypes(arrays) -> list[str]:
    return [to_numpy(a).dtype.name for a in arrays]


def _check(entry, call, sets, refs, tolerances, check_dtype, settings, make_sample, to_inputs=None, outputs=None):
    """First call (timed), then errors on every input set; returns (entry, its Timer)."""
    inputs = [to_inputs(s) for s in sets] if to_inputs else sets
    outputs = outputs or (lambda out: [to_numpy(o) for o in _leaves(out)])
    runs = []
    try:
        for i, xs in enumerate(inputs):
            start = time.perf_counter()
            got = outputs(call(*xs))
            if i == 0:
                entry.first_call_ms = round((time.perf_counter() - start) * 1e3, 4)
            runs.append(output_errors(got, refs[i], tolerances, check_dtype=check_dtype))
    except Exception as e:
        return entry.fail("run", e), None
    entry.numerics = Numerics.of(worst_of(runs), len(runs))
    entry.status = "ok" if entry.numerics.passed else "mismatch"
    if settings.repetitions == 0:
        return entry, None
    return entry, Timer(make_sample(call), inputs, settings)


def _build_competitor(name, device, eager, sets, refs, tolerances, check_dtype, settings):
    import torch

    mode = COMPETITORS[name]
    entry = Entry(_competitor_label(name, device), "competitor", name, device=f"torch {device}")
    if device == "cuda" and not torch.cuda.is_available():
        return entry.skip(f"torch has no CUDA device here (torch {torch.__version__}, "
                          f"CUDA build: {torch.version.cuda or 'no'})"), None
    try:
        module = eager if device == "cpu" else copy.deepcopy(eager).to(device)
        if device == "cuda":
            entry.device = f"torch cuda: {torch.cuda.get_device_name()}"
        fn = module
        if mode is not None:
            torch._dynamo.reset()  # an honest compile time, and no recompile limit from earlier entries
            fn = torch.compile(module, mode=None if mode == "default" else mode)
    except Exception as e:
        return entry.fail("compile", e), None

    def call(*xs):
        with torch.no_grad():
            return fn(*xs)

    graphs = mode in CUDA_GRAPH_MODES and device == "cuda"
    step = torch.compiler.cudagraph_mark_step_begin if graphs else None
    sample = (lambda c: cuda_events(c, before=step)) if device == "cuda" else wall_clock
    entry, timer = _check(entry, call, sets, refs, tolerances, check_dtype, settings, sample,
                          to_inputs=lambda s: tuple(to_torch(a).to(device) for a in s))
    if mode is None:
        return entry, timer
    if entry.first_call_ms is None and entry.status == "failed":
        entry.failed_stage = "compile"  # torch.compile compiles on the first call
    elif entry.first_call_ms is not None:
        entry.compile_seconds = round(entry.first_call_ms / 1e3, 4)
        entry.compile_breakdown = {"first call": entry.compile_seconds}
    return entry, timer


# ---------------------------------------------------------------------------------------
# Timing, deltas, notes.


def _time_interleaved(timed: list[tuple[Entry, Timer]], settings: TimingSettings, bar) -> None:
    if not timed:
        return
    bar.phase("timing", len(timed) * settings.repetitions)
    bar.say(f"timing {len(timed)} entries: warm-up, then {settings.rounds} interleaved rounds")
    for entry, timer in timed:  # warm-up: caches, thread pools, lazy allocations, CUDA graphs
        bar.say(f"{entry.name}: warm-up", line=False)
        try:
            timer.warm_up()
        except Exception as e:
            entry.fail("run", e)
    for r in range(settings.rounds):
        for entry, timer in timed:
            if not entry.ran:
                continue
            bar.say(f"{entry.name}: timing, round {r + 1}/{settings.rounds}", line=False)
            try:
                timer.run_round(bar.advance)
            except Exception as e:
                entry.fail("run", e)
    for entry, timer in timed:
        if entry.ran:
            entry.latency = timer.latency()


def _add_deltas(entries: list[Entry], target_specs: list[str]) -> None:
    """Each configuration against its target's "default" (else its first configuration);
    each competitor against the first target's default entry on the same kind of device."""
    by_target: dict[str, Entry] = {}
    for e in entries:
        if e.kind != "competitor" and e.target not in by_target:
            by_target[e.target] = next((x for x in entries if x.target == e.target and x.config == "default"), e)
    for e in entries:
        if e.kind == "competitor":
            device = e.device.split()[1].rstrip(":") if e.device else "cpu"
            spec = next((s for s in target_specs if GPU_KINDS.get(s.partition(":")[0], "cpu") == device), None)
            base = by_target.get(spec) if spec else None
        else:
            base = by_target.get(e.target)
        if base is None or base is e:
            continue
        e.baseline = base.name
        e.deltas = _deltas(e, base)


def _deltas(e: Entry, base: Entry) -> dict[str, float] | None:
    out = {}
    if e.latency and base.latency:
        out["latency_ratio"] = e.latency.median_ms / base.latency.median_ms
        out["median_delta_ms"] = e.latency.median_ms - base.latency.median_ms
    if e.numerics and base.numerics:
        out["max_rel_err_delta"] = e.numerics.max_rel_err - base.numerics.max_rel_err
    if e.compile_seconds is not None and base.compile_seconds is not None:
        out["compile_seconds_delta"] = e.compile_seconds - base.compile_seconds
    return out or None


def _notes(entries: list[Entry], settings: TimingSettings, input_notes: list[str]) -> list[str]:
    notes = list(input_notes)
    if settings.repetitions:
        notes.append(f"latency: {settings.warmup} warm-up call(s) (at least one per input set), then >= {settings.repetitions} "
                     f"timed calls and >= {settings.min_time:g} s (at most {settings.max_time:g} s) per entry in {settings.rounds} "
                     f"interleaved rounds, rotating over {settings.input_sets} input set(s); median and p10-p90 of single calls")
    if settings.repetitions and any(e.kind != "competitor" and e.ran for e in entries):
        notes.append("IREE calls take host arrays and return host arrays: a sample includes the copies to and from "
                     "the device and the wait for it (synchronous)")
    if any(e.kind == "competitor" and e.device and e.device.startswith("torch cuda") and e.ran for e in entries):
        notes.append("torch on CUDA: inputs already on the GPU, each call timed with CUDA events and synchronized")
    capped = [e.name for e in entries if e.latency and e.latency.capped]
    if capped:
        notes.append(f"max_time stopped timing before the asked repetitions: {', '.join(capped)}")
    return notes


# ---------------------------------------------------------------------------------------
# Machine, versions, small helpers.


def machine_info(drivers=None) -> dict:
    import torch

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    devices = {name: [d.name for d in s.devices] for name, s in (drivers or {}).items() if s.devices}
    return {"hostname": platform.node(), "cpu": cpu, "logical_cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(), "platform": platform.platform(), "iree_devices": devices,
            "torch_cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def _loadavg() -> list[float] | None:
    """The 1/5/15-minute load averages: other work on the machine skews latency."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def versions() -> dict[str, str]:
    out = {}
    for dist in ("cuvil-mlir", "torch", "torch-mlir", "iree-base-compiler", "iree-base-runtime", "numpy"):
        try:
            out[dist] = version(dist)
        except Exception:
            out[dist] = "not installed"
    return out


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in str(text).splitlines() if line.strip())


def _finite(x):
    """JSON has no Infinity or NaN: they become null (an error's ``problem`` says why)."""
    if isinstance(x, float) and not np.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


class _Progress:
    """Progress on stderr: a rich progress bar on a terminal, one line per step otherwise,
    nothing when disabled."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._rich = None
        self._task = None

    def __enter__(self):
        if self.enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._rich = Progress(TextColumn("{task.description:<48}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                  console=Console(stderr=True), transient=True)
            self._rich.start()
        return self

    def __exit__(self, *exc):
        if self._rich is not None:
            self._rich.stop()

    def say(self, text: str, *, line: bool = True) -> None:
        """A step: the bar's description on a terminal, else a line (unless ``line`` is False)."""
        if self._rich is not None and self._task is not None:
            self._rich.update(self._task, description=text)
        elif self.enabled and self._rich is None and line:
            print(f"cuvil: {text}", file=sys.stderr, flush=True)

    def phase(self, name: str, total: int) -> None:
        """A new bar (building: one unit per entry; timing: one per timed call asked for)."""
        if self._rich is not None:
            if self._task is not None:
                self._rich.update(self._task, completed=self._rich.tasks[self._task].total)
            self._task = self._rich.add_task(name, total=total)

    def advance(self) -> None:
        if self._rich is not None and self._task is not None:
            self._rich.advance(self._task)


# ---------------------------------------------------------------------------------------
# bench: one package's latency on this machine.

BENCH_SCHEMA = "cuvil-bench"


def bench_package(path: str | os.PathLike, inputs=None, *, prefer=None, repetitions: int = 100, warmup: int = 5,
                  min_time: float = 1.0, max_time: float = 30.0, input_sets: int = 3, seed: int = 0,
                  progress: bool = False) -> dict:
    """Time a ``.cuvilpkg`` on the first of its targets (in ``prefer`` order) that runs here.
    Without ``inputs``, random inputs are generated from the package's signature. Returns the
    JSON-able result (docs/harness.md, "cuvil bench")."""
    from cuvil_mlir import load

    settings = TimingSettings(repetitions, warmup, min_time, max_time, 1, input_sets)
    compiled = load(path, prefer=prefer)
    sets, info, notes = _package_input_sets(compiled.user_signature, inputs, settings.input_sets, seed)
    compiled.user_signature.check(list(sets[0]))
    start = time.perf_counter()
    compiled(*sets[0])
    first_ms = (time.perf_counter() - start) * 1e3
    timer = Timer(wall_clock(lambda *xs: compiled(*xs)), sets, settings)
    with _Progress(progress) as bar:
        bar.phase("timing", max(settings.repetitions, 1))
        bar.say(f"{compiled.active_target}: warm-up")
        timer.warm_up()
        bar.say(f"{compiled.active_target}: timing")
        if settings.repetitions:
            timer.run_round(bar.advance)
    module = next(m for m in compiled.modules if m.target == compiled.active_target)
    latency = timer.latency()
    notes.append("IREE calls take host arrays and return host arrays: a sample includes the copies to and from "
                 "the device and the wait for it (synchronous)")
    return _finite({
        "schema": BENCH_SCHEMA, "schema_version": SCHEMA_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "package": str(path),
        "target": compiled.active_target, "driver": module.driver, "targets": compiled.targets,
        "inputs": info, "settings": settings.to_json(), "first_call_ms": round(first_ms, 4),
        "latency": latency.to_json() if latency else None, "machine": machine_info(), "versions": versions(),
        "notes": notes,
    })


def _package_input_sets(signature, given, count: int, seed: int):
    rng = np.random.default_rng(seed)
    if given is not None:
        return make_input_sets(None, given, count, seed)
    try:
        sets = [tuple(random_array(s.shape, s.dtype, rng) for s in signature.inputs) for _ in range(count)]
    except ValueError as e:
        raise CuvilError(f"cannot generate inputs: {e}") from e
    info = [{"shape": list(s.shape), "dtype": s.dtype, "source": "generated",
             "values": "N(0, 1)" if np.dtype(_np_name(s.dtype)).kind == "f" else
             "true/false" if s.dtype == "bool" else "integers in [0, 2)"} for s in signature.inputs]
    described = ", ".join(f"{i['dtype']}[{', '.join(map(str, i['shape']))}] {i['values']}" for i in info)
    return sets, info, [f"inputs: generated at random from the package's signature (seed {seed}): {described}"]


# ---------------------------------------------------------------------------------------
# Compile here, run there: ``compare --build-only DIR`` and ``compare --from DIR``.

BUILD_SCHEMA = "cuvil-compare-build"
MANIFEST = "manifest.json"


def load_model_spec(spec: str):
    """``FILE.py:NAME`` or ``package.module:NAME`` -> (nn.Module in eval mode, example inputs).
    NAME is a factory called without arguments that returns ``(model, inputs)`` (as
    examples/models.py's builders do) or a module alone (inputs are then None)."""
    import importlib
    import importlib.util

    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise CuvilError(f"model spec '{spec}': expected FILE.py:FACTORY or package.module:FACTORY")
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise CuvilError(f"model spec '{spec}': no file {where}")
        sys.path.insert(0, str(path.resolve().parent))  # the file may import its neighbours
        mod_spec = importlib.util.spec_from_file_location(f"_cuvil_model_{path.stem}", path)
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise CuvilError(f"model spec '{spec}': {where} has no callable '{name}'")
    made = factory()
    model, inputs = made if isinstance(made, tuple) and len(made) == 2 else (made, None)
    if hasattr(model, "eval"):
        model = model.eval()
    return model, inputs


def build_only(model, inputs=None, *, out_dir: str | os.PathLike, model_spec: str | None = None,
               targets: str | Sequence[str] = ("cpu",), reference: str = "torch", configs: Sequence[str] | None = None,
               competitors: Sequence[str] = ("eager",), patterns=(), opt_level: int = 3,
               tolerances: dict[str, float] | None = None, repetitions: int = 50, warmup: int = 5,
               min_time: float = 0.5, max_time: float = 10.0, rounds: int = 3, input_sets: int = 3, seed: int = 0,
               progress: bool = False) -> dict:
    """The first half of ``compare`` on a machine without the devices: compile every target x
    configuration into ``out_dir`` (one .cuvilpkg each), with the input sets, the reference
    outputs and a manifest; ``run_from(out_dir)`` finishes the comparison where the devices are.
    Nothing here needs a device. ``model_spec`` (``FILE.py:FACTORY``) lets the other machine
    rebuild the model for the PyTorch competitors (a .pt2 ``model`` is copied along instead).
    Returns the manifest."""
    settings = TimingSettings(repetitions, warmup, min_time, max_time, rounds, input_sets)
    target_specs = _target_specs(targets)
    parsed_configs = [parse_config(c, patterns) for c in (configs or ["default"])]
    competitor_names = _competitor_names(competitors)
    program, eager, model_name = _normalize_model(model, inputs)
    sets, input_info, input_notes = make_input_sets(program, inputs, settings.input_sets, seed)
    out = Path(out_dir)
    (out / "data").mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.cuvilpkg"):
        old.unlink()
    model_spec = _portable_spec(model_spec)
    pt2 = None
    if isinstance(model, (str, os.PathLike)) and str(model).endswith(".pt2"):
        pt2 = "model.pt2"
        (out / pt2).write_bytes(Path(model).read_bytes())
    with _Progress(progress) as bar:
        bar.say(f"reference: {reference}")
        refs, reference_info = reference_outputs(reference, eager, program, sets, opt_level=opt_level)
        bar.phase("compiling", len(target_specs) * len(parsed_configs))
        entries = []
        for i, (spec, config) in enumerate((t, c) for t in target_specs for c in parsed_configs):
            bar.say(f"{_entry_name(spec, config)}: compiling")
            entries.append(_build_package(i, spec, config, program, opt_level, patterns, out))
            bar.advance()
    files = {"inputs": [], "refs": []}
    for s, (xs, rs) in enumerate(zip(sets, refs)):
        files["inputs"].append(_save_arrays(out / "data", f"set{s}_in", xs))
        files["refs"].append(_save_arrays(out / "data", f"set{s}_ref", rs))
    manifest = _finite({
        "schema": BUILD_SCHEMA, "schema_version": SCHEMA_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "model": model_name,
        "model_spec": model_spec, "pt2": pt2, "targets": target_specs, "configs": [c.name for c in parsed_configs],
        "competitors": competitor_names, "reference": reference_info, "check_dtype": reference != "torch-fp64",
        "inputs": input_info, "input_notes": input_notes, "files": files,
        "settings": {**settings.to_json(), "opt_level": opt_level, "seed": seed},
        "tolerances": {**DEFAULT_RTOL, **(tolerances or {})}, "entries": entries,
        "machine": {**machine_info(), "loadavg": _loadavg()}, "versions": versions(),
    })
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, allow_nan=False) + "\n")
    return manifest


def _build_package(index: int, spec: str, config: Config, program, opt_level: int, patterns, out: Path) -> dict:
    from cuvil_mlir.targets import parse_target

    target = parse_target(spec, opt_level=opt_level)
    entry = Entry(_entry_name(spec, config), "plain-iree" if config.plain else "cuvil", config.name, target=spec)
    row = {"driver": target.driver, "package": None}
    start = time.perf_counter()
    try:
        compiled = _compile(spec, config, program, opt_level, patterns)
    except Exception as e:
        entry.fail("compile", e)
        return {**asdict(entry), **row}
    entry.compile_seconds = round(time.perf_counter() - start, 4)
    entry.compile_breakdown = dict(compiled.metadata.get("compile_seconds", {}))
    entry.patterns_fired = compiled.patterns_fired
    entry.iree_flags = list(compiled.modules[0].iree_flags)
    entry.module_bytes = len(compiled.modules[0].vmfb)
    slug = "".join(ch if ch.isalnum() else "-" for ch in entry.name).strip("-")
    row["package"] = f"{index:02d}-{slug}.cuvilpkg"
    compiled.save(out / row["package"])
    return {**asdict(entry), **row}


def _portable_spec(spec: str | None) -> str | None:
    """A FILE.py:FACTORY spec with FILE relative to the working directory when it lies under it
    (run_from resolves it against its own working directory: run both from the repo root)."""
    if not spec:
        return spec
    where, _, name = spec.rpartition(":")
    if where.endswith(".py"):
        path = Path(where).resolve()
        try:
            return f"{path.relative_to(Path.cwd().resolve())}:{name}"
        except ValueError:
            return f"{path}:{name}"
    return spec


def _save_arrays(folder: Path, stem: str, arrays) -> list[str]:
    names = []
    for j, a in enumerate(arrays):
        names.append(f"{stem}{j}.npy")
        np.save(folder / names[-1], np.asarray(a), allow_pickle=False)
    return names


def run_from(build_dir: str | os.PathLike, *, competitors: Sequence[str] | None = None, model_spec: str | None = None,
             repetitions: int | None = None, warmup: int | None = None, min_time: float | None = None,
             max_time: float | None = None, rounds: int | None = None, progress: bool = False) -> Report:
    """The second half of ``compare``: load the packages ``build_only`` wrote on this machine's
    devices (a target without a device here is skipped), check them against the reference
    outputs computed where they were built, rebuild the model for the PyTorch competitors
    (``model_spec`` or the manifest's; else the copied .pt2), and time everything interleaved.
    Needs only the IREE runtime and torch: no torch-mlir, no IREE compiler. Timing settings
    default to the ones given at build time."""
    folder = Path(build_dir)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        raise CuvilError(f"compare --from: {folder} has no {MANIFEST} (write one with compare --build-only {folder})") from None
    if manifest.get("schema") != BUILD_SCHEMA:
        raise CuvilError(f"compare --from: {folder / MANIFEST} is not a '{BUILD_SCHEMA}' manifest")
    given = manifest["settings"]
    chosen = {"repetitions": repetitions, "warmup": warmup, "min_time": min_time, "max_time": max_time, "rounds": rounds}
    settings = TimingSettings(**{k: given[k] if v is None else v for k, v in chosen.items()}, input_sets=given["input_sets"])
    data = folder / "data"
    sets = [tuple(np.load(data / f) for f in names) for names in manifest["files"]["inputs"]]
    refs = [[np.load(data / f) for f in names] for names in manifest["files"]["refs"]]
    tolerances, check_dtype = manifest["tolerances"], manifest["check_dtype"]
    competitor_names = _competitor_names(manifest["competitors"] if competitors is None else competitors)
    spec = model_spec or manifest.get("model_spec")
    from cuvil_mlir.runtime import probe_drivers

    with _Progress(progress) as bar:
        drivers = probe_drivers()
        devices = _competitor_devices(manifest["targets"], competitor_names)
        bar.phase("loading", len(manifest["entries"]) + sum(len(n) for n in devices.values()))
        built: list[tuple[Entry, Timer | None]] = []
        for row in manifest["entries"]:
            bar.say(f"{row['name']}: loading and checking")
            built.append(_load_package(row, folder, sets, refs, drivers, tolerances, check_dtype, settings))
            bar.advance()
        eager = _rebuild_eager(spec, folder, manifest) if any(devices.values()) else None
        for device, names in devices.items():
            for name in names:
                bar.say(f"{_competitor_label(name, device)}: building and checking")
                if isinstance(eager, str):
                    built.append((Entry(_competitor_label(name, device), "competitor", name, device=f"torch {device}").skip(eager), None))
                else:
                    built.append(_build_competitor(name, device, eager, sets, refs, tolerances, check_dtype, settings))
                bar.advance()
        _time_interleaved([(e, t) for e, t in built if t is not None], settings, bar)
    entries = [e for e, _ in built]
    _add_deltas(entries, manifest["targets"])
    notes = _notes(entries, settings, manifest["input_notes"])
    b = manifest["machine"]
    notes.insert(0, f"compiled on {b.get('hostname')} ({b.get('cpu')}) at {manifest['created']} with "
                    + ", ".join(f"{k} {v}" for k, v in manifest["versions"].items() if k != "iree-base-runtime")
                    + f"; loaded and run here from {folder.name}/; reference outputs computed there")
    if competitor_names and not isinstance(eager, str) and eager is not None:
        notes.append(f"competitors: the model rebuilt here from {spec or manifest.get('pt2')}")
    return Report(manifest["model"], manifest["reference"], manifest["inputs"],
                  {**settings.to_json(), "opt_level": given.get("opt_level"), "seed": given.get("seed"),
                   "built_from": str(folder), "built_on": b.get("hostname"), "built": manifest["created"]},
                  tolerances, entries, {**machine_info(drivers), "loadavg_end": _loadavg()}, versions(), notes,
                  datetime.now(timezone.utc).isoformat(timespec="seconds"))


def _load_package(row: dict, folder: Path, sets, refs, drivers, tolerances, check_dtype, settings):
    from cuvil_mlir import package
    from cuvil_mlir.compiled import CompiledModel

    keep = {f.name for f in fields(Entry)}
    entry = Entry(**{k: v for k, v in row.items() if k in keep and k not in ("latency", "numerics", "deltas", "baseline")})
    if entry.status == "failed":  # it did not compile there: the row says why
        return entry, None
    entry.status = "ok"
    absent = _absent(row["driver"], drivers)
    if absent:
        return entry.skip(absent), None
    device = drivers[row["driver"]].devices[0]
    entry.device = row["driver"] if device.name in ("", "default") else f"{row['driver']}: {device.name}"
    try:
        metadata, modules = package.read(folder / row["package"])
        compiled = CompiledModel(modules, metadata, prefer=[row["target"]])
        compiled.select()
    except Exception as e:
        return entry.fail("load", e), None
    config = Config(entry.config or "default", precision=metadata.get("precision", "fp32"))
    return _check(entry, lambda *xs: compiled(*xs), sets, refs, _config_tolerances(config, tolerances), check_dtype,
                  settings, wall_clock)


def _rebuild_eager(spec: str | None, folder: Path, manifest: dict):
    """The eager model for the competitors, or a string saying why there is none."""
    try:
        if spec:
            return load_model_spec(spec)[0]
        if manifest.get("pt2"):
            import torch

            return torch.export.load(folder / manifest["pt2"]).module()
    except Exception as e:
        return f"cannot rebuild the model here: {type(e).__name__}: {_one_line(str(e))[:300]}"
    return "no model to rebuild: the build had no model spec (FILE.py:FACTORY) and no .pt2"

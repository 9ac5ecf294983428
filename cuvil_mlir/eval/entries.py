"""Building a comparison's entries (compile, load, first call, errors on every input set),
then timing them interleaved and relating each to its baseline: the shared core of
``compare``, ``build_only`` / ``run_from`` (cuvil_mlir/eval/remote.py)."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, replace
from typing import Sequence

from cuvil_mlir.core.diagnostics import CuvilError
from cuvil_mlir.eval.configs import Config, Plan, config_tolerances
from cuvil_mlir.eval.inputs import leaves
from cuvil_mlir.eval.measure import DEFAULT_RTOL, Timer, TimingSettings, cuda_events, output_errors, wall_clock, worst_of
from cuvil_mlir.eval.report import Entry, Numerics
from cuvil_mlir.runtime.arrays import to_numpy, to_torch
from cuvil_mlir.runtime.signature import as_signature

# competitor name -> torch.compile mode (None: eager)
COMPETITORS = {
    "eager": None,
    "torch.compile": "default",
    "torch.compile:reduce-overhead": "reduce-overhead",
    "torch.compile:max-autotune": "max-autotune",
}
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # modes that record CUDA graphs: GPU only
GPU_KINDS = {"cuda": "cuda", "rocm": "cuda"}  # target kind -> the torch device its competitors run on (ROCm torch calls itself cuda)


@dataclass(frozen=True)
class Baseline:
    """What a comparison measures against: the reference (its outputs are the expected ones),
    the PyTorch competitors (rows of their own) and the tolerance per output dtype."""

    reference: object = "torch"  # "torch", "torch-fp64", a target spec; reference_outputs also takes a callable or outputs
    competitors: tuple[str, ...] = ("eager",)
    tolerances: dict[str, float] | None = None  # over DEFAULT_RTOL

    @classmethod
    def parse(cls, reference="torch", competitors: str | Sequence[str] = ("eager",),
              tolerances: dict[str, float] | None = None) -> "Baseline":
        """Competitor names checked (``all`` expanded); fails at once on an unknown one."""
        return cls(reference, tuple(competitor_names(competitors)), tolerances)

    @property
    def check_dtype(self) -> bool:
        """Whether output dtypes must match the reference's (a float64 reference differs by design)."""
        return self.reference != "torch-fp64"

    def tolerance_table(self) -> dict[str, float]:
        return {**DEFAULT_RTOL, **(self.tolerances or {})}


@dataclass(frozen=True)
class Expected:
    """What each entry's outputs are checked against: the input sets, the reference's outputs on
    each, the tolerances (None: DEFAULT_RTOL) and whether dtypes must match."""

    sets: list
    refs: list
    tolerances: dict[str, float] | None = None
    check_dtype: bool = True


def competitor_names(competitors) -> list[str]:
    """Competitor names (a list or comma-separated; ``all``: every one but max-autotune), checked, each once."""
    names = list(competitors.split(",") if isinstance(competitors, str) else competitors)
    if "all" in names:
        names = [n for n in COMPETITORS if n != "torch.compile:max-autotune"]
    for n in names:
        if n not in COMPETITORS:
            raise CuvilError(f"unknown competitor '{n}'; competitors: {', '.join(COMPETITORS)}, all")
    return list(dict.fromkeys(names))


def competitor_devices(target_specs: list[str], names: list[str]) -> dict[str, list[str]]:
    """torch device -> the competitors that run there. CUDA-graph modes run on GPUs only."""
    kinds = {s.partition(":")[0] for s in target_specs}
    devices = list(dict.fromkeys(GPU_KINDS[k] for k in kinds if k in GPU_KINDS))
    if kinds - set(GPU_KINDS) - {"vulkan"} or not devices:
        devices.insert(0, "cpu")
    return {d: [n for n in names if d != "cpu" or COMPETITORS[n] not in CUDA_GRAPH_MODES] for d in devices if names}


def entry_name(spec: str, config: Config) -> str:
    return spec if config.name == "default" else f"{spec} [{config.name}]"


def competitor_label(name: str, device: str) -> str:
    mode = COMPETITORS[name]
    if mode is None:
        return f"torch eager ({device})"
    return f"torch.compile ({device})" if mode == "default" else f"torch.compile {mode} ({device})"


# ---------------------------------------------------------------------------------------
# Building entries: compile, load, first call, errors on every input set.


def absent(driver: str, drivers) -> str | None:
    """Why this machine cannot run ``driver`` (``drivers``: runtime.session.probe_drivers()), or None."""
    status = drivers.get(driver)
    if status is None:
        return f"this IREE runtime has no '{driver}' driver"
    if not status.devices:
        return f"no '{driver}' device on this machine: {status.reason}"
    return None


def place_on_device(entry: Entry, driver: str, drivers) -> bool:
    """Name the device ``entry`` runs on; or, when this machine has none for ``driver``, skip it
    with the reason (False)."""
    why = absent(driver, drivers)
    if why:
        entry.skip(why)
        return False
    device = drivers[driver].devices[0]
    entry.device = driver if device.name in ("", "default") else f"{driver}: {device.name}"
    return True


def record_compile(entry: Entry, compiled, seconds: float) -> None:
    """What an entry's report row says about its build: time, stages, patterns fired, IREE flags, size."""
    entry.compile_seconds = round(seconds, 4)
    entry.compile_breakdown = dict(compiled.metadata.get("compile_seconds", {}))
    entry.patterns_fired = compiled.patterns_fired
    entry.iree_flags = list(compiled.modules[0].iree_flags)
    entry.module_bytes = len(compiled.modules[0].vmfb)


def build_cuvil(spec: str, config: Config, program, plan: Plan, expected: Expected, drivers, timing: TimingSettings):
    """A Cuvil entry: compile (for a target with a device here), load, first call, errors; (entry, its Timer)."""
    from cuvil_mlir.targets import parse_target

    target = parse_target(spec, opt_level=plan.opt_level)
    entry = Entry(entry_name(spec, config), "plain-iree" if config.plain else "cuvil", config.name, target=spec)
    if not place_on_device(entry, target.driver, drivers):
        return entry, None
    start = time.perf_counter()
    try:
        compiled = plan.compile(spec, config, program, expected.sets)
    except Exception as e:  # a failing entry is a result, not the end of the comparison
        return entry.fail("compile", e), None
    record_compile(entry, compiled, time.perf_counter() - start)
    try:
        compiled.select()
    except Exception as e:
        return entry.fail("load", e), None
    # a policy with io=fp16 takes and returns 16-bit floats: feed it those, compare in float
    narrowed = _dtypes(expected.sets[0]) != [t.dtype for t in compiled.signature.inputs]
    expected = replace(expected, tolerances=config_tolerances(config, expected.tolerances),
                       check_dtype=expected.check_dtype and not narrowed)
    return check_entry(entry, lambda *xs: compiled(*xs), expected, timing, wall_clock,
                       to_inputs=(lambda xs: as_signature([to_numpy(x) for x in xs], compiled.signature)) if narrowed else None)


def _dtypes(arrays) -> list[str]:
    return [to_numpy(a).dtype.name for a in arrays]


def check_entry(entry: Entry, call, expected: Expected, timing: TimingSettings, make_sample, to_inputs=None):
    """First call (timed), then errors on every input set; returns (entry, its Timer: None when
    it failed or nothing is timed). ``to_inputs`` turns an input set into what ``call`` takes."""
    inputs = [to_inputs(s) for s in expected.sets] if to_inputs else expected.sets
    runs = []
    try:
        for i, xs in enumerate(inputs):
            start = time.perf_counter()
            got = [to_numpy(o) for o in leaves(call(*xs))]
            if i == 0:
                entry.first_call_ms = round((time.perf_counter() - start) * 1e3, 4)
            runs.append(output_errors(got, expected.refs[i], expected.tolerances, check_dtype=expected.check_dtype))
    except Exception as e:
        return entry.fail("run", e), None
    entry.numerics = Numerics.of(worst_of(runs), len(runs))
    entry.status = "ok" if entry.numerics.passed else "mismatch"
    if timing.repetitions == 0:
        return entry, None
    return entry, Timer(make_sample(call), inputs, timing)


def build_competitor(name: str, device: str, eager, expected: Expected, timing: TimingSettings):
    """A PyTorch competitor on ``device`` ("cpu" or "cuda"): (entry, its Timer)."""
    import torch

    mode = COMPETITORS[name]
    entry = Entry(competitor_label(name, device), "competitor", name, device=f"torch {device}")
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
    entry, timer = check_entry(entry, call, expected, timing, sample,
                               to_inputs=lambda s: tuple(to_torch(a).to(device) for a in s))
    if mode is None:
        return entry, timer
    if entry.first_call_ms is None and entry.status == "failed":
        entry.failed_stage = "compile"  # torch.compile compiles on the first call
    elif entry.first_call_ms is not None:
        entry.compile_seconds = round(entry.first_call_ms / 1e3, 4)
        entry.compile_breakdown = {"first call": entry.compile_seconds}
    return entry, timer


def build_competitors(devices: dict[str, list[str]], eager, expected: Expected, timing: TimingSettings, bar) -> list:
    """(entry, Timer) of every competitor on every device; ``eager`` is the model, or a string
    saying why there is none here (each competitor is then skipped with it)."""
    built = []
    for device, names in devices.items():
        for name in names:
            label = competitor_label(name, device)
            bar.say(f"{label}: building and checking")
            if isinstance(eager, str):
                built.append((Entry(label, "competitor", name, device=f"torch {device}").skip(eager), None))
            else:
                built.append(build_competitor(name, device, eager, expected, timing))
            bar.advance()
    return built


# ---------------------------------------------------------------------------------------
# Timing, deltas, notes.


def time_interleaved(timed: list[tuple[Entry, Timer]], timing: TimingSettings, bar) -> None:
    """Warm every timer up, then time the entries in interleaved rounds: load on the machine hits all alike."""
    if not timed:
        return
    bar.phase("timing", len(timed) * timing.repetitions)
    bar.say(f"timing {len(timed)} entries: warm-up, then {timing.rounds} interleaved rounds")
    for entry, timer in timed:  # warm-up: caches, thread pools, lazy allocations, CUDA graphs
        bar.say(f"{entry.name}: warm-up", line=False)
        try:
            timer.warm_up()
        except Exception as e:
            entry.fail("run", e)
    for r in range(timing.rounds):
        for entry, timer in timed:
            if not entry.ran:
                continue
            bar.say(f"{entry.name}: timing, round {r + 1}/{timing.rounds}", line=False)
            try:
                timer.run_round(bar.advance)
            except Exception as e:
                entry.fail("run", e)
    for entry, timer in timed:
        if entry.ran:
            entry.latency = timer.latency()


def add_deltas(entries: list[Entry], target_specs: list[str]) -> None:
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


def entry_notes(entries: list[Entry], timing: TimingSettings, input_notes: list[str]) -> list[str]:
    notes = list(input_notes)
    if timing.repetitions:
        notes.append(f"latency: {timing.warmup} warm-up call(s) (at least one per input set), then >= {timing.repetitions} "
                     f"timed calls and >= {timing.min_time:g} s (at most {timing.max_time:g} s) per entry in {timing.rounds} "
                     f"interleaved rounds, rotating over {timing.input_sets} input set(s); median and p10-p90 of single calls")
    if timing.repetitions and any(e.kind != "competitor" and e.ran for e in entries):
        notes.append("IREE calls take host arrays and return host arrays: a sample includes the copies to and from "
                     "the device and the wait for it (synchronous)")
    if any(e.kind == "competitor" and e.device and e.device.startswith("torch cuda") and e.ran for e in entries):
        notes.append("torch on CUDA: inputs already on the GPU, each call timed with CUDA events and synchronized")
    capped = [e.name for e in entries if e.latency and e.latency.capped]
    if capped:
        notes.append(f"max_time stopped timing before the asked repetitions: {', '.join(capped)}")
    return notes

"""``compare``: one model on several targets, pattern configurations and PyTorch, side by side
(the module docstring of cuvil_mlir/eval/harness.py says how; docs/harness.md the JSON)."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Sequence

from cuvil_mlir.core.versions import versions
from cuvil_mlir.eval.configs import Plan
from cuvil_mlir.eval.entries import (
    Baseline, Expected, add_deltas, build_competitors, build_cuvil, competitor_devices, entry_name, entry_notes,
    time_interleaved,
)
from cuvil_mlir.eval.inputs import make_input_sets, normalize_model, reference_outputs, without_torch_competitors
from cuvil_mlir.eval.measure import TimingSettings
from cuvil_mlir.eval.progress import Progress
from cuvil_mlir.eval.report import Report, loadavg, machine_info


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
    timing = TimingSettings(repetitions, warmup, min_time, max_time, rounds, input_sets)
    plan = Plan.parse(targets, configs, opt_level=opt_level, patterns=patterns)
    return compare_plan(model, inputs, plan, Baseline.parse(reference, competitors, tolerances), timing, seed=seed,
                        progress=progress)


def compare_plan(model, inputs, plan: Plan, baseline: Baseline, timing: TimingSettings, *, seed: int = 0,
                 progress: bool = False) -> Report:
    """``compare`` with its settings grouped: what to build, what to measure against, how to time."""
    program, eager, model_name = normalize_model(model, inputs)
    baseline, onnx_notes = without_torch_competitors(eager, baseline)
    sets, input_info, input_notes = make_input_sets(program, inputs, timing.input_sets, seed)
    input_notes = [*input_notes, *onnx_notes]
    load_at_start = loadavg()

    with Progress(progress) as bar:
        bar.say(f"reference: {baseline.reference}")
        refs, reference_info = reference_outputs(baseline.reference, eager, program, sets, opt_level=plan.opt_level)
        expected = Expected(sets, refs, baseline.tolerances, baseline.check_dtype)
        from cuvil_mlir.runtime.session import probe_drivers

        drivers = probe_drivers()
        devices = competitor_devices(list(plan.targets), list(baseline.competitors))
        bar.phase("building", len(plan.builds()) + sum(len(names) for names in devices.values()))
        built = []
        for spec, config in plan.builds():
            bar.say(f"{entry_name(spec, config)}: compiling and checking")
            built.append(build_cuvil(spec, config, program, plan, expected, drivers, timing))
            bar.advance()
        built += build_competitors(devices, eager, expected, timing, bar)
        time_interleaved([(e, t) for e, t in built if t is not None], timing, bar)

    entries = [e for e, _ in built]
    add_deltas(entries, list(plan.targets))
    notes = entry_notes(entries, timing, input_notes)
    if load_at_start and load_at_start[0] > 0.5 * (os.cpu_count() or 1):
        notes.append(f"the machine was busy when this started (load average {load_at_start[0]} on {os.cpu_count()} "
                     "logical CPUs): latencies may be noisy")
    return Report(model_name, reference_info, input_info, {**timing.to_json(), "opt_level": plan.opt_level, "seed": seed},
                  baseline.tolerance_table(), entries,
                  {**machine_info(drivers), "loadavg_start": load_at_start, "loadavg_end": loadavg()}, versions(), notes,
                  datetime.now(timezone.utc).isoformat(timespec="seconds"))

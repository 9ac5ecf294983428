"""``bench_package``: one package's latency on this machine (``cuvil bench``; JSON: docs/harness.md)."""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone

from cuvil_mlir.core.versions import versions
from cuvil_mlir.eval.inputs import package_input_sets
from cuvil_mlir.eval.measure import Timer, TimingSettings, finite, wall_clock
from cuvil_mlir.eval.progress import Progress
from cuvil_mlir.eval.report import SCHEMA_VERSION, machine_info

BENCH_SCHEMA = "cuvil-bench"


def bench_package(path: str | os.PathLike, inputs=None, *, prefer=None, repetitions: int = 100, warmup: int = 5,
                  min_time: float = 1.0, max_time: float = 30.0, input_sets: int = 3, seed: int = 0,
                  progress: bool = False) -> dict:
    """Time a ``.cuvilpkg`` on the first of its targets (in ``prefer`` order) that runs here.
    Without ``inputs``, random inputs are generated from the package's signature. Returns the
    JSON-able result (docs/harness.md, "cuvil bench")."""
    from cuvil_mlir.runtime.compiled import load

    settings = TimingSettings(repetitions, warmup, min_time, max_time, 1, input_sets)
    compiled = load(path, prefer=prefer)
    sets, info, notes = package_input_sets(compiled.signature, inputs, settings.input_sets, seed)
    compiled.signature.check(list(sets[0]))
    start = time.perf_counter()
    compiled(*sets[0])
    first_ms = (time.perf_counter() - start) * 1e3
    timer = Timer(wall_clock(lambda *xs: compiled(*xs)), sets, settings)
    with Progress(progress) as bar:
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
    return finite({
        "schema": BENCH_SCHEMA, "schema_version": SCHEMA_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "package": str(path),
        "target": compiled.active_target, "driver": module.driver, "targets": compiled.targets,
        "inputs": info, "settings": settings.to_json(), "first_call_ms": round(first_ms, 4),
        "latency": latency.to_json() if latency else None, "machine": machine_info(), "versions": versions(),
        "notes": notes,
    })

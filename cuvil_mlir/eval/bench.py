"""``bench_package``: one package's latency on this machine (``cuvil bench``; JSON: docs/harness.md)."""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone

from cuvil_mlir.core.diagnostics import CuvilError
from cuvil_mlir.core.versions import versions
from cuvil_mlir.eval.inputs import package_input_sets
from cuvil_mlir.eval.measure import Timer, TimingSettings, finite, wall_clock
from cuvil_mlir.eval.progress import Progress
from cuvil_mlir.eval.report import SCHEMA_VERSION, machine_info
from cuvil_mlir.runtime.arrays import to_torch

BENCH_SCHEMA = "cuvil-bench"


def bench_package(path: str | os.PathLike, inputs=None, *, prefer=None, repetitions: int = 100, warmup: int = 5,
                  min_time: float = 1.0, max_time: float = 30.0, input_sets: int = 3, seed: int = 0,
                  progress: bool = False, io: str = "host", parameters=None) -> dict:
    """Time a ``.cuvilpkg`` on the first of its targets (in ``prefer`` order) that runs here.
    Without ``inputs``, random inputs are generated from the package's signature. ``io``: the
    path a call's tensors take, ``host`` (numpy in, numpy out) or ``device`` (torch tensors on
    the GPU in and out: cuvil_mlir/runtime/device_resident.py). Returns the JSON-able result
    (docs/harness.md, "cuvil bench"). ``parameters``: the weights of a package saved without them
    (``cuvil_mlir.load``)."""
    from cuvil_mlir.runtime.compiled import load

    settings = TimingSettings(repetitions, warmup, min_time, max_time, 1, input_sets)
    compiled = load(path, prefer=prefer, parameters=parameters)
    sets, info, notes = package_input_sets(compiled.user_signature, inputs, settings.input_sets, seed)
    compiled.user_signature.check(list(sets[0]))
    sets = _on_device(sets, io, compiled)
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
                 "the device and the wait for it (synchronous)" if io == "host" else
                 "device-resident calls: torch CUDA tensors in and out (DLPack), no host copy; a sample includes "
                 "the wait for torch's stream before the call and for the results after it (synchronous)")
    return finite({
        "schema": BENCH_SCHEMA, "schema_version": SCHEMA_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "package": str(path),
        "target": compiled.active_target, "driver": module.driver, "targets": compiled.targets,
        "inputs": info, "io": io, "settings": settings.to_json(), "first_call_ms": round(first_ms, 4),
        "latency": latency.to_json() if latency else None, "machine": machine_info(), "versions": versions(),
        "notes": notes,
    })


def _on_device(sets, io: str, compiled) -> list:
    """The input sets as torch CUDA tensors for ``io="device"`` (which needs the cuda target)."""
    if io == "host":
        return sets
    if io != "device":
        raise CuvilError(f"io must be 'host' or 'device', got '{io}'")
    if compiled._active is None or compiled._active.driver != "cuda":
        raise CuvilError(f"io=device needs a module on IREE's cuda driver; this call runs on '{compiled.active_target}'")
    return [tuple(to_torch(a).cuda() for a in s) for s in sets]

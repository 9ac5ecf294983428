"""The profiler: where a compiled model's time goes, dispatch by dispatch, mapped back to the
nn.Module path and the Cuvil op that produced each dispatch.

Two halves, so the compile side runs where the compiler is and the timing where the device is:

  compile side (``compile(..., record_dispatches=True)``; needs the IREE compiler)
      the package metadata's ``dispatches``: per target, every ``flow.dispatch`` call site of
      the module (targets/iree.py ``dispatch_sites``): the exported function it calls, the
      location of the ops it was formed from (the importer names it after the nn.Module path),
      the tensors it reads and writes and its arithmetic (FLOPs).
  timing side (``measure``; needs only the IREE runtime wheel)
      ``iree-benchmark-module`` twice on the same module and inputs: once plain (the wall time
      of one call, as the project measures everywhere), once with IREE's HAL profiling
      (``--device_profiling_mode``: device timestamps of every dispatch on CUDA, host execution
      events on the local CPU drivers), decoded with ``iree-profile``.

``join`` puts the two together: one row per dispatch (its exported function), time per call,
share of the summed dispatch time, achieved TFLOP/s and GB/s and their share of the target's
datasheet peak (targets' ``peak()``), the module paths and Cuvil ops of its call sites; and the
gap: wall time minus the dispatches' summed time (launches, waits, copies, what runs between).
docs/profiling.md has the JSON schema and how to read a profile.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from cuvil_mlir.core.diagnostics import CuvilError, InputError, RuntimeFailure, module_path
from cuvil_mlir.runtime.session import CPU_WORKER_STACK_FLAG

SCHEMA_VERSION = 1

# driver -> how per-dispatch timings are taken, tried in order: IREE HAL profiling data families,
# or "ncu" (Nsight Compute: IREE 3.13's CUDA driver has no HAL-native profiling, "UNIMPLEMENTED;
# CUDA HAL-native profiling is not implemented", checked on the H200)
PROFILING_MODES = {
    "cuda": ("dispatch-events", "ncu"),
    "hip": ("dispatch-events",),
    "local-task": ("host-execution",),
    "local-sync": ("host-execution",),
}
DEFAULT_PROFILING_MODES = ("dispatch-events", "host-execution")

# iree-benchmark-module's device flags per driver, as the project measures (docs/harness.md)
# iree-benchmark-module flags per driver; local-task: the worker stacks the in-process runtime uses
DEVICE_FLAGS = {"cuda": ("--device_allocator=caching",), "local-task": (CPU_WORKER_STACK_FLAG,)}

_LAYER_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")
_DISPATCH_NAME = re.compile(r"_dispatch_\d+_(.*)$")
_NOT_KIND = re.compile(r"^(\d|(bf|f|i)\d+(x|$)|dispatch$)")
_DTYPE = re.compile(r"_(?:\d+x)*\d+x?_?(bf16|f8E\w+?|f\d+|i\d+)(?=x|_|$)")
_FILE_LINE = re.compile(r'"([^"]+)":(\d+):\d+')


@dataclass
class Timing:
    """What the timing side measured for one module (``measure``)."""

    driver: str
    wall_ms: float  # median wall time of one call (iree-benchmark-module)
    wall_ms_samples: list[float]
    dispatch_ns: dict[str, float]  # export name -> device (or host) time per call, ns
    dispatch_count: dict[str, float]  # export name -> dispatches per call
    invocations: int  # calls the profiled run made
    profiling_mode: str
    commands: list[str] = field(default_factory=list)
    runtime_flags: list[str] = field(default_factory=list)
    failed_modes: dict[str, str] = field(default_factory=dict)  # profiling modes tried first that gave nothing, and why


def measure(vmfb: bytes | str | os.PathLike, driver: str, inputs: list[np.ndarray], *, function: str = "main",
            repetitions: int = 10, iterations: int = 20, runtime_flags=(), sites: list[dict] | None = None,
            workdir: str | os.PathLike | None = None, modes=None, keep_profile: str | os.PathLike | None = None,
            parameters: str | os.PathLike | None = None) -> Timing:
    """Time ``vmfb`` on ``driver``: the wall time of one call, and each dispatch's time from IREE's
    HAL profiling (on CUDA: from ncu, see PROFILING_MODES). ``sites`` (the compile side's call sites) tells how many dispatches of each
    exported function one call makes; without it, the rarest function is taken to run once.
    ``modes``: the profiling data families to try (default: the driver's, PROFILING_MODES);
    ``keep_profile``: where to copy the raw timing data (the .ireeprof bundle ``iree-profile`` reads,
    or ncu's CSV). ``parameters``: the IREE parameter archive (``.irpa``) of a module whose weights
    are external (scope ``model``, as the compiler writes them)."""
    from cuvil_mlir.runtime.parameters import SCOPE
    from cuvil_mlir.runtime.session import tool_path

    with tempfile.TemporaryDirectory(prefix="cuvil-profile-", dir=workdir) as tmp:
        tmp = Path(tmp)
        module = Path(vmfb) if not isinstance(vmfb, bytes) else tmp / "module.vmfb"
        if isinstance(vmfb, bytes):
            module.write_bytes(vmfb)
        base = [tool_path("iree-benchmark-module"), f"--module={module}", f"--device={driver}", f"--function={function}",
                *DEVICE_FLAGS.get(driver, ()), *runtime_flags]
        if parameters is not None:
            base.append(f"--parameters={SCOPE}={Path(parameters).resolve()}")
        for i, a in enumerate(inputs):
            np.save(tmp / f"input{i}.npy", a)
            base.append(f"--input=@{tmp / f'input{i}.npy'}")
        wall_cmd = [*base, f"--benchmark_repetitions={repetitions}", "--benchmark_min_warmup_time=0.5",
                    "--benchmark_format=json", "--benchmark_min_time=0.2s"]
        samples = _wall_samples(_run(wall_cmd))
        failed: dict[str, str] = {}
        for mode in modes or PROFILING_MODES.get(driver, DEFAULT_PROFILING_MODES):
            prof = tmp / f"{mode}.ireeprof"
            prof_cmd = [*base, f"--benchmark_min_time={iterations}x", "--benchmark_repetitions=1",
                        f"--device_profiling_mode={mode}", f"--device_profiling_output={prof}"]
            try:
                if mode == "ncu":
                    prof_cmd, groups = _ncu(base, sites, prof)
                else:
                    _run(prof_cmd)
                    groups = _dispatch_groups(_run([tool_path("iree-profile"), "dispatch", "--format=jsonl", str(prof)]))
            except RuntimeFailure as e:
                failed[mode] = e.message
                continue
            groups = calls_only(groups)
            if not groups:
                failed[mode] = f"IREE's '{mode}' profiling on driver '{driver}' recorded no dispatch"
                continue
            if keep_profile:
                shutil.copyfile(prof if mode != "ncu" else prof.with_suffix(".ncu.csv"), keep_profile)
            per_call = _per_call(groups, sites)
            invocations = max(1, round(statistics.median(n / per_call[k] for k, (n, _) in groups.items() if per_call.get(k))))
            return Timing(driver, statistics.median(samples), samples,
                          {k: total / invocations for k, (_, total) in groups.items()},
                          {k: n / invocations for k, (n, _) in groups.items()}, invocations, mode,
                          [_shell(wall_cmd, tmp), _shell(prof_cmd, tmp)], list(runtime_flags), failed)
        why = "; ".join(f"{m}: {e}" for m, e in failed.items()) or "no profiling mode"
        raise RuntimeFailure(f"no per-dispatch timing on driver '{driver}': {why}")


# Nsight Compute, as it times each kernel: the card's clocks and caches left as they are
NCU_FLAGS = ("--csv", "--print-units=base", "--metrics=gpu__time_duration.sum", "--clock-control=none",
             "--cache-control=none", "--target-processes=all")
NCU_CALLS = 3  # calls timed, after one untimed


def _ncu(base: list[str], sites: list[dict] | None, raw: Path) -> tuple[list[str], dict[str, tuple[int, float]]]:
    """Each kernel's device time from ``ncu`` around iree-benchmark-module (kernels run one at a
    time under it, so this is kernel time without the overlap or the launch gaps of a real call);
    the first call is skipped when the call sites say how many kernels it launches."""
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    if not Path(ncu).exists():
        raise RuntimeFailure("ncu (Nsight Compute) is not on this machine")
    window = [f"--launch-skip={len(sites)}", f"--launch-count={len(sites) * NCU_CALLS}"] if sites else []
    cmd = [ncu, *NCU_FLAGS, *window, *base, f"--benchmark_min_time={NCU_CALLS + 1}x", "--benchmark_repetitions=1"]
    text = _run(cmd)
    raw.with_suffix(".ncu.csv").write_text(text)
    return cmd, ncu_groups(text)


def ncu_groups(text: str) -> dict[str, tuple[int, float]]:
    """ncu's --csv output -> kernel name -> (launches, total ns of gpu__time_duration.sum)."""
    groups: dict[str, list] = {}
    for row in csv.DictReader(line for line in text.splitlines() if line.startswith('"')):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        scale = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6}.get(row.get("Metric Unit", "ns"), 1.0)
        entry = groups.setdefault(row["Kernel Name"], [0, 0.0])
        entry[0] += 1
        entry[1] += float(row["Metric Value"].replace(",", "")) * scale
    return {k: (n, total) for k, (n, total) in groups.items()}


def calls_only(groups: dict) -> dict:
    """The groups without the module initializers' dispatches (IREE names them
    ``_initializer_<n>_dispatch_...``): they run once when the module loads (weight transposes,
    casts), yet a window of kernel launches can catch some of them (ncu's skip and count are
    launches, not calls); they are not part of a call's time."""
    return {k: v for k, v in groups.items() if not k.startswith("_initializer_")}


def _run(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = " ".join((proc.stderr or proc.stdout).split())[-600:]
        raise RuntimeFailure(f"{Path(cmd[0]).name} failed (exit {proc.returncode}): {tail}")
    return proc.stdout


def _shell(cmd: list[str], tmp: Path) -> str:
    return " ".join(c.replace(str(tmp), "$TMP").replace(str(Path(cmd[0]).parent) + "/", "") for c in cmd)


def _wall_samples(stdout: str) -> list[float]:
    data = json.loads(stdout[stdout.index("{"):])
    runs = [b for b in data["benchmarks"] if b.get("run_type") == "iteration"]
    unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    return [b["real_time"] * unit[b.get("time_unit", "ns")] for b in runs]


def _dispatch_groups(jsonl: str) -> dict[str, tuple[int, float]]:
    """iree-profile's per-function aggregates -> export name -> (dispatches, total ns). Device
    dispatch groups when the driver has device timestamps, host execution groups otherwise."""
    device, host = {}, {}
    for line in jsonl.splitlines():
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        if row.get("type") == "dispatch_group" and row.get("valid"):
            device[row["key"]] = (row["valid"], float(row["total_ns"]))
        elif row.get("type") == "host_dispatch_group" and row.get("valid"):
            host[row["key"]] = (row["valid"], float(row["total_ns"]))
    return device or host


def kernel_name(key: str) -> str:
    """The name a dispatch's kernel has on the device: IREE's CUDA backend writes the export
    ``main$async_dispatch_1_...`` as ``main_async_dispatch_1_...`` (PTX names have no ``$``)."""
    return key.replace("$", "_")


def _export_of(kernel: str, exports) -> str:
    """The export whose kernel is named ``kernel``, or ""."""
    return next((e for e in exports if kernel_name(e) == kernel), "")


def _per_call(groups: dict, sites: list[dict] | None) -> dict[str, int]:
    """Export (or kernel) name -> how many times one call dispatches it."""
    if sites:
        counts = Counter(s["key"] for s in sites)
        return {k: counts.get(k) or counts.get(_export_of(k, counts), 0) for k in groups}
    fewest = min(n for n, _ in groups.values())
    return {k: max(1, round(n / fewest)) for k, (n, _) in groups.items()}


# ---------------------------------------------------------------------------------------
# Joining the two halves.


def join(timing: Timing, sites: list[dict] | None, *, target: str, peak: dict | None = None,
         pattern_sites: dict | None = None, model: str = "") -> dict:
    """The profile (its JSON form, docs/profiling.md): one row per exported dispatch function,
    slowest first, and the totals."""
    by_key: dict[str, list[dict]] = {}
    for s in sites or []:
        by_key.setdefault(s["key"], []).append(s)
    # timed names -> the exports' (a CUDA kernel's name has "_" where the export has "$")
    exports = {kernel_name(k): k for k in by_key}
    dispatch_ns = {exports.get(kernel_name(k), k): v for k, v in timing.dispatch_ns.items()}
    dispatch_count = {exports.get(kernel_name(k), k): v for k, v in timing.dispatch_count.items()}
    keys = set(dispatch_ns) | set(by_key)
    total_ns = sum(dispatch_ns.values())
    rows = []
    for key in keys:
        calls = by_key.get(key, [])
        ns = dispatch_ns.get(key)
        count = dispatch_count.get(key, len(calls))
        flops = sum(c["flops"] for c in calls) if calls else None
        nbytes = sum(c["bytes"] for c in calls) if calls else None
        paths = [module_path(c["location"]) for c in calls]
        row = {
            "dispatch": key,
            "kind": dispatch_kind(key),
            "dtype": _dispatch_dtype(key, calls),
            "calls": count,
            "time_us": ns / 1e3 if ns is not None else None,
            "time_us_per_dispatch": ns / 1e3 / count if ns is not None and count else None,
            "share": ns / total_ns if ns is not None and total_ns else None,
            "flops": flops,
            "bytes": nbytes,
            "tflops": flops / ns / 1e3 if flops and ns else None,
            "gbs": nbytes / ns if nbytes and ns else None,
            "module_paths": group_paths(paths),
            "sources": sorted({src for src in (_source(c["location"]) for c in calls) if src}),
            "cuvil_ops": cuvil_ops(paths, pattern_sites or {}),
        }
        row["tflops_share_of_peak"] = _of_peak(row["tflops"], (peak or {}).get("tflops", {}).get(row["dtype"]))
        row["gbs_share_of_peak"] = _of_peak(row["gbs"], (peak or {}).get("gbs"))
        rows.append(row)
    rows.sort(key=lambda r: (-(r["time_us"] or 0), r["dispatch"]))
    dispatches = sum(r["calls"] for r in rows)
    wall_us = timing.wall_ms * 1e3
    return {
        "schema": "cuvil-profile",
        "schema_version": SCHEMA_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": model,
        "target": target,
        "driver": timing.driver,
        "peak": peak,
        "profiling_mode": timing.profiling_mode,
        "profiling_modes_failed": timing.failed_modes,
        "runtime_flags": timing.runtime_flags,
        "commands": timing.commands,
        "totals": {
            "wall_us": wall_us,
            "wall_us_samples": [x * 1e3 for x in timing.wall_ms_samples],
            "dispatch_us": total_ns / 1e3,
            "gap_us": wall_us - total_ns / 1e3,
            "dispatches": dispatches,
            "distinct_dispatches": len(rows),
            "layers": count_layers([module_path(s["location"]) for s in sites or []]),
            "flops": sum(s["flops"] for s in sites or []) or None,
            "bytes": sum(s["bytes"] for s in sites or []) or None,
            "profiled_invocations": timing.invocations,
        },
        "rows": rows,
    }


def dispatch_kind(key: str) -> str:
    """``main$async_dispatch_3_matmul_like_128x768x2304_f16`` -> ``matmul_like``; a prebuilt
    kernel (targets/cuda_kernels.py: ``cuvil_linear_128x768x768_f16_..``) -> ``kernel_linear``
    (``kernel_attention``, ``kernel_cache_write``)."""
    if key.startswith(("cuvil_linear_", "cuvil_attention_")):
        return "kernel_" + key.split("_")[1]
    if key.startswith("cuvil_cache_write_"):
        return "kernel_cache_write"
    m = _DISPATCH_NAME.search(key)
    if not m:
        return key
    words = []
    for word in m.group(1).split("_"):
        if _NOT_KIND.match(word):
            break
        words.append(word)
    return "_".join(words) or m.group(1)


def _dispatch_dtype(key: str, calls: list[dict]) -> str:
    m = _DTYPE.search(key)
    if m:
        return m.group(1)
    floats = [t[1] for c in calls for t in c["reads"] if t[1].startswith(("f", "bf"))]
    return Counter(floats).most_common(1)[0][0] if floats else ""


def _of_peak(value, peak) -> float | None:
    return value / peak if value and peak else None


def _source(location: str) -> str:
    """The innermost user source line of a location (not torch's own files): ``models.py:57``."""
    frames = [(f, line) for f, line in _FILE_LINE.findall(location) if "/torch/" not in f and "site-packages" not in f]
    if not frames:
        return ""
    f, line = frames[-1]
    return f"{Path(f).name}:{line}"


def group_paths(paths: list[str]) -> list[str]:
    """Module paths with their layer indices folded: ``h.*.attn.c_attn x12``; "(forward)" for
    ops of the top module's own forward."""
    folded = Counter(_LAYER_INDEX.sub("*", p) if p else "(forward)" for p in paths)
    return [f"{p} x{n}" if n > 1 else p for p, n in sorted(folded.items(), key=lambda kv: (-kv[1], kv[0]))]


def count_layers(paths: list[str]) -> int | None:
    """How many repeated blocks the paths run through (the distinct indices under the most
    common indexed prefix: ``transformer.h.0 .. h.11`` -> 12); None for a model without any."""
    indices: dict[str, set] = {}
    for p in paths:
        m = re.search(r"^(.*?)\.(\d+)(?:\.|$)", p)
        if m:
            indices.setdefault(m.group(1), set()).add(int(m.group(2)))
    return max((len(v) for v in indices.values()), default=0) or None


def cuvil_ops(paths: list[str], pattern_sites: dict) -> list[str]:
    """The Cuvil ops (the lowering's pattern names: ``cuvil.linear``) and the fusions
    (``fuse-linear-epilogue/gelu_epilogue``) recorded at these module paths."""
    wanted = set(paths)
    out = set()
    for pass_name, patterns in pattern_sites.items():
        for pattern, where in patterns.items():
            if not wanted & set(where):
                continue
            if pass_name == "lower-cuvil-to-torch":
                out.add(f"cuvil.{pattern}")
            elif pass_name == "lower-cuvil-to-kernels":  # handed to a prebuilt kernel (targets/cuda_kernels.py)
                out.add(f"cuvil.{pattern} [kernel]")
            elif pass_name.startswith(("fuse-", "precision", "quantize")):
                out.add(f"{pass_name}/{pattern}")
    return sorted(out)


# ---------------------------------------------------------------------------------------
# The API: profile a model or a package.


def profile(model, args=(), *, target: str = "cpu", inputs=None, repetitions: int = 10, iterations: int = 20,
            runtime_flags=(), **compile_options) -> dict:
    """Compile ``model`` (an nn.Module with ``args``, an ExportedProgram, a ``.pt2`` path) for
    ``target`` with its dispatches recorded, or take a ``CompiledModel`` / ``.cuvilpkg`` path
    as it is, and profile it on this machine's device for the first target. Returns the profile
    (docs/profiling.md); ``print_profile`` and ``plot`` show it."""
    from cuvil_mlir.runtime.compiled import CompiledModel
    from cuvil_mlir.runtime.compiled import load as load_package

    if isinstance(model, CompiledModel):
        compiled = model
    elif isinstance(model, (str, os.PathLike)) and str(model).endswith(".cuvilpkg"):
        compiled = load_package(model)
    else:
        from cuvil_mlir.compiler.pipeline import Options, compile_program

        compiled = compile_program(model, args, Options(target=target, record_dispatches=True, **compile_options))
        if inputs is None and args:
            inputs = args if isinstance(args, (tuple, list)) else (args,)
    return profile_compiled(compiled, inputs, repetitions=repetitions, iterations=iterations, runtime_flags=runtime_flags,
                            model=_model_name(model))


def profile_compiled(compiled, inputs=None, *, repetitions: int = 10, iterations: int = 20, runtime_flags=(),
                     model: str = "", workdir=None, modes=None, keep_profile=None, function: str | None = None,
                     position: int | None = None) -> dict:
    """Profile a CompiledModel's first module that can run here (see ``profile``). A causal
    LM's package (runtime/generation.py ``CausalLM``): one call of ``function`` (default
    ``decode``) at ``position`` (default: its last, the longest cache read) with a zero cache."""
    from cuvil_mlir.eval.measure import random_array
    from cuvil_mlir.runtime.arrays import to_numpy
    from cuvil_mlir.runtime.generation import CausalLM, is_first_chunk
    from cuvil_mlir.runtime.signature import as_signature
    from cuvil_mlir.targets import parse_target

    target = compiled.select()
    module = next(m for m in compiled.modules if m.target == target)
    if isinstance(compiled, CausalLM):
        function = function or "decode"
        arrays = compiled.step_arguments(function, position, inputs[0] if inputs else None)
        model = f"{model} {function}" + ("" if is_first_chunk(function) else f" at position {int(arrays[1][0])}")
    else:
        if function not in (None, compiled.metadata.get("function", "main")) or position is not None:
            raise InputError("--function and --position profile one step of a causal LM's package "
                             "(cuvil_mlir.compile_causal_lm); this package has one function")
        function = compiled.metadata.get("function", "main")
        if inputs is None:
            rng = np.random.default_rng(0)
            arrays = [random_array(s.shape, s.dtype, rng) for s in compiled.signature.inputs]
        else:
            arrays = as_signature([to_numpy(x) for x in inputs], compiled.signature)
        compiled.signature.check(arrays)
    sites = compiled.metadata.get("dispatches", {}).get(target)
    if sites and any("function" in s for s in sites):  # the profiled function's own call sites
        sites = [s for s in sites if s.get("function") == function]
    with tempfile.TemporaryDirectory(prefix="cuvil-params-", dir=workdir) as tmp:
        archive = None
        if compiled.parameters is not None:  # external weights: the tool reads them from an archive file
            archive = Path(tmp) / "model.irpa"
            with open(archive, "wb") as f:
                compiled.parameters.write_archive(f, Path(tmp) / "scratch.irpa")
        timing = measure(module.vmfb, module.driver, arrays, function=function,
                         repetitions=repetitions, iterations=iterations, runtime_flags=runtime_flags, sites=sites, workdir=workdir,
                         modes=modes, keep_profile=keep_profile, parameters=archive)
    out = join(timing, sites, target=target, peak=parse_target(target).peak(),
               pattern_sites=compiled.metadata.get("pattern_sites"), model=model)
    if sites is None:
        out["notes"] = ["the package records no dispatch call sites (compile with record_dispatches=True, or "
                        "`cuvil profile MODEL.pt2 --build-only`): no module paths, FLOPs or bytes"]
    return out


def _model_name(model) -> str:
    if isinstance(model, (str, os.PathLike)):
        return Path(model).name
    return type(model).__name__


def load_profile(path: str | os.PathLike) -> dict:
    """A profile written as JSON (``--json``), checked to be one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CuvilError(f"cannot read profile {path}: {e}") from e
    if not isinstance(data, dict) or data.get("schema") != "cuvil-profile":
        raise CuvilError(f"{path} is not a cuvil profile (no \"schema\": \"cuvil-profile\")")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise CuvilError(f"{path} has profile schema version {data.get('schema_version')}; this cuvil-mlir reads {SCHEMA_VERSION}")
    return data


# ---------------------------------------------------------------------------------------
# Showing a profile.


def _fmt(x, spec: str, none: str = "-") -> str:
    return none if x is None else format(x, spec)


def table(prof: dict, limit: int = 25):
    """A rich Table of the slowest dispatches, the totals in its caption. ``us`` is a dispatch
    function's time per model call (all its calls together), ``us each`` one of its calls."""
    from rich.table import Table

    t = prof["totals"]
    title = (f"{prof['model'] or 'model'} on {prof['target']} ({prof['driver']}, {prof['profiling_mode']}): "
             f"wall {t['wall_us']:.1f} us = dispatches {t['dispatch_us']:.1f} us + gap {t['gap_us']:.1f} us; "
             f"{t['dispatches']:g} dispatches ({t['distinct_dispatches']} distinct)"
             + (f", {t['dispatches'] / t['layers']:.1f} per layer over {t['layers']} layers" if t.get("layers") else ""))
    tab = Table(title=title, title_justify="left")
    for name, justify in (("#", "right"), ("dispatch", "left"), ("calls", "right"), ("us", "right"), ("us each", "right"),
                          ("share", "right"),
                          ("TFLOP/s", "right"), ("GB/s", "right"), ("% peak", "right"), ("module paths", "left"),
                          ("cuvil ops", "left")):
        tab.add_column(name, justify=justify, overflow="fold")
    for i, r in enumerate(prof["rows"][:limit], 1):
        peak = max(filter(None, (r["tflops_share_of_peak"], r["gbs_share_of_peak"])), default=None)
        tab.add_row(str(i), _short_key(r["dispatch"]), f"{r['calls']:g}", _fmt(r["time_us"], ".1f"),
                    _fmt(r.get("time_us_per_dispatch"), ".1f"), _fmt(r["share"], ".1%"),
                    _fmt(r["tflops"], ".2f"), _fmt(r["gbs"], ".0f"), _fmt(peak, ".1%"),
                    ", ".join(r["module_paths"][:3]) + (" ..." if len(r["module_paths"]) > 3 else ""),
                    ", ".join(r["cuvil_ops"]))
    left = len(prof["rows"]) - limit
    notes = list(prof.get("notes", []))
    if left > 0:
        notes.insert(0, f"{left} more dispatch functions not shown")
    tab.caption = "\n".join(notes) if notes else None
    return tab


def _short_key(key: str) -> str:
    return key.split("$async_", 1)[-1] if "$async_" in key else key


def print_profile(prof: dict, limit: int = 25, console=None) -> None:
    from rich.console import Console

    (console or Console()).print(table(prof, limit))


def plot(prof: dict, path: str | os.PathLike, limit: int = 25) -> None:
    """A bar chart: time per call of the slowest dispatch functions, labelled with their module
    paths, coloured by kind; the wall time, dispatch sum and gap in the title."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = [r for r in prof["rows"] if r["time_us"] is not None][:limit]
    t = prof["totals"]
    gap = max(t["gap_us"], 0.0)
    labels = [f"{_short_key(r['dispatch'])[:48]}\n{(r['module_paths'] or [''])[0][:60]}" for r in rows] + ["gap (not in any dispatch)"]
    values = [r["time_us"] for r in rows] + [gap]
    kinds = sorted({r["kind"] for r in rows})
    palette = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd"]
    color = {k: palette[i % len(palette)] for i, k in enumerate(kinds)}
    fig = Figure(figsize=(12, 1.5 + 0.42 * len(values)), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ys = list(range(len(values)))[::-1]
    ax.barh(ys, values, color=[color[r["kind"]] for r in rows] + ["#bbbbbb"])
    for y, v, r in zip(ys, values, rows + [None]):
        share = f"  {v:.1f} us" + (f" ({r['share']:.0%})" if r and r["share"] is not None else "")
        ax.text(v, y, share, va="center", fontsize=7)
    ax.set_yticks(ys, labels, fontsize=7)
    ax.set_xlabel("us per call (all calls of the dispatch function)")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=color[k], label=k) for k in kinds], fontsize=7, loc="lower right")
    fig.suptitle(f"{prof['model'] or 'model'} on {prof['target']}: wall {t['wall_us']:.0f} us = dispatches "
                 f"{t['dispatch_us']:.0f} us + gap {t['gap_us']:.0f} us, {t['dispatches']:g} dispatches "
                 f"({prof['created'][:10]})", fontsize=10)
    fig.savefig(path, dpi=110)


def write_json(prof: dict, path: str | os.PathLike) -> None:
    Path(path).write_text(json.dumps(prof, indent=2, sort_keys=True, default=_jsonable))


def _jsonable(x):
    if isinstance(x, np.generic):
        return x.item()
    if hasattr(x, "__dataclass_fields__"):
        return asdict(x)
    raise TypeError(f"not JSON serializable: {type(x).__name__}")

"""CPU end to end, side by side: cuvil-mlir vs plain torch-mlir -> IREE vs PyTorch eager vs torch.compile.

    python benchmarks/cpu_e2e.py                       # all e2e models, results in benchmarks/results/
    python benchmarks/cpu_e2e.py --models mlp,cnn --min-time 0.5 --out /tmp/bench

For each model of examples/models.py this measures, in one process and with one thread setting:
  cuvil        cuvil_mlir.compile(model, args, target="cpu") and its CompiledModel call
  plain IREE   torch_mlir.fx.export_and_import (default decompositions) -> bytecode ->
               iree.compiler.compile_str with the same CPU flags -> iree.runtime local-task
  eager        model(*args) under torch.no_grad()
  torch.compile default mode (inductor, C++ on the CPU)
Compile time is the wall time of the whole compile call (torch.compile: its first call). Latency
samples are single calls, rotating over several different inputs, taken in interleaved rounds so a
burst of load on the machine hits every backend alike. Each backend's outputs are compared with eager.

This file is the only place outside targets/iree.py and cuvil_mlir/runtime/session.py that imports
iree.compiler / iree.runtime: the plain-IREE baseline must not go through Cuvil.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from datetime import datetime
from importlib.metadata import version
from pathlib import Path

# A fresh inductor cache, so torch.compile's compile time is not flattered by an earlier run.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="cuvil-bench-inductor-"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))

import models  # noqa: E402

import cuvil_mlir  # noqa: E402
from cuvil_mlir.targets import parse_target  # noqa: E402

# cuvil_vmfb: cuvil's module called exactly like plain IREE's (raw iree.runtime call, no CompiledModel),
# so "cuvil vs plain IREE" can be split into generated code and per-call Python overhead.
BACKENDS = ("cuvil", "cuvil_vmfb", "plain_iree", "eager", "torch_compile")
LABELS = {"cuvil": "cuvil", "cuvil_vmfb": "cuvil vmfb (raw call)", "plain_iree": "plain IREE", "eager": "eager",
          "torch_compile": "torch.compile"}
# Above this max relative error vs eager a result is flagged as wrong (the e2e tests allow 1e-4).
REL_ERR_FLAG = 1e-4
# The e2e language models are built with vocab=256; token inputs stay below that.
TOKEN_HIGH = 250


# ---------------------------------------------------------------- backends
# Each builder returns (call, info): call(*torch_tensors) -> numpy array; info has "compile_s".


def build_cuvil(model, args):
    start = time.perf_counter()
    compiled = cuvil_mlir.compile(model, args, target="cpu", opt_level=3)
    seconds = time.perf_counter() - start
    info = {"compile_s": seconds, "compile_breakdown_s": compiled.metadata["compile_seconds"],
            "iree_flags": list(compiled.modules[0].iree_flags), "vmfb_bytes": len(compiled.modules[0].vmfb),
            "patterns_fired": compiled.patterns_fired}
    call = lambda *xs: compiled(*xs).numpy()  # noqa: E731  the public API, as a user calls it
    call.vmfb = compiled.modules[0].vmfb
    return call, info


def build_plain_iree(model, args):
    """torch-mlir's own import (default decompositions) straight into IREE: no Cuvil anywhere."""
    import iree.compiler
    from torch_mlir import fx

    flags = parse_target("cpu", opt_level=3).iree_flags()
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        module = fx.export_and_import(model, *args, output_type="torch")
    buf = io.BytesIO()
    module.operation.write_bytecode(buf)
    imported = time.perf_counter()
    vmfb = iree.compiler.compile_str(buf.getvalue(), input_type="torch", extra_args=flags)
    end = time.perf_counter()
    info = {"compile_s": end - start, "compile_breakdown_s": {"import": round(imported - start, 4),
            "iree-compile": round(end - imported, 4)}, "iree_flags": flags, "vmfb_bytes": len(vmfb)}
    return raw_iree_call(vmfb), info


def raw_iree_call(vmfb: bytes):
    """The leanest Python call of a module's ``main`` on local-task: numpy in, host array out."""
    import iree.runtime as rt

    ctx = rt.SystemContext(config=rt.Config("local-task"))
    ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
    main = ctx.modules.module["main"]
    return lambda *xs: main(*[x.numpy() for x in xs]).to_host()


def build_eager(model, args):
    def call(*xs):
        with torch.no_grad():
            return model(*xs)
    return call, {}


def build_torch_compile(model, args):
    torch._dynamo.reset()
    compiled = torch.compile(model)  # default mode: inductor, C++ kernels on the CPU

    def call(*xs):
        with torch.no_grad():
            return compiled(*xs)
    start = time.perf_counter()
    call(*args)  # compiles on the first call
    return call, {"compile_s": time.perf_counter() - start}


BUILDERS = {"cuvil": build_cuvil, "plain_iree": build_plain_iree, "eager": build_eager,
            "torch_compile": build_torch_compile}


# ---------------------------------------------------------------- timing


def fresh_inputs(args, count: int) -> list[tuple[torch.Tensor, ...]]:
    """``count`` input sets of the example's shapes and dtypes with different values."""
    sets = []
    for i in range(count):
        g = torch.Generator().manual_seed(1000 + i)
        sets.append(tuple(torch.randint(0, TOKEN_HIGH, a.shape, dtype=a.dtype, generator=g) if not a.is_floating_point()
                          else torch.randn(a.shape, dtype=a.dtype, generator=g) for a in args))
    return sets


def time_calls(call, inputs, seconds: float, min_reps: int) -> list[float]:
    """Single-call times in ms, rotating over ``inputs``, until both ``seconds`` and ``min_reps`` are met."""
    samples = []
    gc.collect()
    gc.disable()  # a collection in the middle of a call is noise, not the backend's cost
    try:
        deadline = time.perf_counter() + seconds
        i = 0
        while len(samples) < min_reps or time.perf_counter() < deadline:
            xs = inputs[i % len(inputs)]
            t0 = time.perf_counter_ns()
            call(*xs)
            samples.append((time.perf_counter_ns() - t0) / 1e6)
            i += 1
    finally:
        gc.enable()
    return samples


def summarize(samples: list[float]) -> dict:
    q = np.percentile(samples, [10, 50, 90])
    return {"median_ms": float(q[1]), "p10_ms": float(q[0]), "p90_ms": float(q[2]), "reps": len(samples),
            "mean_ms": statistics.fmean(samples)}


def rel_err(got, ref) -> float:
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return float("inf")
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def failure(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    first = next((line for line in lines if "error:" in line), lines[0] if lines else "")
    return f"failed: {type(e).__name__}: {first[:300]}"


def bench_model(name: str, opts) -> dict:
    model, args = models.E2E_MODELS[name]()
    inputs = fresh_inputs(args, opts.inputs)
    with torch.no_grad():
        refs = [model(*xs).numpy() for xs in inputs]
    result = {"model": name, "inputs": [f"{a.dtype}{list(a.shape)}" for a in args], "backends": {}}

    # build every backend first, then time them in interleaved rounds
    calls = {}
    for backend in opts.backends:
        log(f"  {name}: building {backend}")
        try:
            if backend == "cuvil_vmfb":
                if "cuvil" not in calls:
                    raise RuntimeError("needs the cuvil backend (listed before it, and compiled)")
                call, info = raw_iree_call(calls["cuvil"].vmfb), {}
            else:
                call, info = BUILDERS[backend](model, args)
            outs = [np.asarray(call(*xs)) for xs in inputs]
            info["rel_err"] = max(rel_err(o, r) for o, r in zip(outs, refs))
            info["status"] = "ok"
            calls[backend] = call
        except Exception as e:  # a failing backend is a result, not the end of the run
            info = {"status": failure(e)}
            if opts.verbose:
                traceback.print_exc()
        result["backends"][backend] = info

    samples = {b: [] for b in calls}
    for b, call in calls.items():  # warm-up: caches, thread pools, lazy allocations
        time_calls(call, inputs, opts.warmup, 3 * len(inputs))
    for _ in range(opts.rounds):
        for b, call in calls.items():
            samples[b] += time_calls(call, inputs, opts.min_time / opts.rounds, -(-opts.min_reps // opts.rounds))
    for b in calls:
        result["backends"][b]["latency"] = summarize(samples[b])

    med = {b: result["backends"][b]["latency"]["median_ms"] for b in calls}
    speedup = {}
    for b in ("cuvil", "cuvil_vmfb", "plain_iree", "torch_compile"):
        if b in med and "eager" in med:
            speedup[f"{b}_vs_eager"] = med["eager"] / med[b]
    for b in ("cuvil", "cuvil_vmfb"):
        if b in med and "plain_iree" in med:
            speedup[f"{b}_vs_plain_iree"] = med["plain_iree"] / med[b]
    result["speedup"] = speedup
    result["loadavg_after"] = loadavg()
    return result


def warm_up_compilers(backends) -> None:
    """One throwaway compile per path, so the first model does not pay for lazy imports and JIT setup."""
    tiny = torch.nn.Linear(4, 4).eval()
    x = (torch.randn(1, 4),)
    for b in backends:
        if b in ("cuvil", "plain_iree", "torch_compile"):
            try:
                BUILDERS[b](tiny, x)
            except Exception:
                pass
    torch._dynamo.reset()


# ---------------------------------------------------------------- environment and reporting


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def loadavg() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def machine() -> dict:
    lscpu = {}
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            key, _, value = line.partition(":")
            lscpu[key.strip()] = value.strip()
    except OSError:
        pass
    mem_kb = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    cores = int(lscpu.get("Core(s) per socket", 0) or 0) * int(lscpu.get("Socket(s)", 1) or 1)
    flags = lscpu.get("Flags", "").split()
    return {"cpu": lscpu.get("Model name", platform.processor()), "cores": cores, "logical_cpus": os.cpu_count(),
            "memory_gib": round(mem_kb / 2**20, 1), "avx512f": "avx512f" in flags, "avx2": "avx2" in flags,
            "hypervisor": lscpu.get("Hypervisor vendor", ""), "hostname": platform.node(), "python": platform.python_version()}


def versions() -> dict:
    out = {}
    for dist in ("cuvil-mlir", "torch", "torch-mlir", "iree-base-compiler", "iree-base-runtime", "transformers", "numpy"):
        try:
            out[dist] = version(dist)
        except Exception:
            out[dist] = "not installed"
    return out


def other_python_processes() -> list[str]:
    me = {str(os.getpid()), str(os.getppid())}
    try:
        out = subprocess.run(["pgrep", "-af", "python"], capture_output=True, text=True).stdout
    except OSError:
        return []
    return [line for line in out.splitlines() if line.split(" ", 1)[0] not in me]


def fmt_ms(lat: dict | None) -> str:
    if not lat:
        return "-"
    return f"{lat['median_ms']:.3f} ({lat['p10_ms']:.3f}-{lat['p90_ms']:.3f})"


def fmt_err(info: dict) -> str:
    if info.get("status") != "ok":
        return "-"
    e = info["rel_err"]
    return f"{e:.1e}" + (" **WRONG**" if e > REL_ERR_FLAG else "")


def to_markdown(report: dict) -> str:
    m, env = report["machine"], report["settings"]
    lines = [
        f"# CPU end to end: cuvil vs plain IREE vs PyTorch ({report['date']})",
        "",
        f"- command: `{report['command']}`",
        f"- machine: {m['cpu']}, {m['cores']} cores ({m['logical_cpus']} logical), {m['memory_gib']} GiB, "
        f"AVX-512: {'yes' if m['avx512f'] else 'no'}, AVX2: {'yes' if m['avx2'] else 'no'}"
        + (f", {m['hypervisor']} VM" if m["hypervisor"] else ""),
        "- versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()),
        f"- threads: torch.get_num_threads() = {env['torch_threads']}, interop {env['torch_interop_threads']}; "
        f"IREE local-task `--task_topology_max_group_count={env['iree_max_group_count']}`",
        f"- timing: {env['warmup_s']} s warm-up per backend, then {env['rounds']} interleaved rounds, in all >= "
        f"{env['min_time_s']} s and >= {env['min_reps']} single calls per backend, rotating over {env['inputs']} "
        "different inputs; median (p10-p90) in ms",
        f"- IREE flags (cuvil and plain alike): `{' '.join(report['iree_flags'])}`",
        f"- load average (1/5/15 min) at start {report['load']['start']}, at end {report['load']['end']}"
        + (f"; other python processes at start: {len(report['load']['other_python_at_start'])}"
           if report["load"]["other_python_at_start"] else "; no other python process at start"),
        "",
        "## Latency (ms, median and p10-p90; lower is better)",
        "",
        "| model | cuvil | cuvil vmfb (raw call) | plain IREE | eager | torch.compile | cuvil vs eager "
        "| cuvil vs plain IREE | cuvil vmfb vs plain IREE | plain IREE vs eager | torch.compile vs eager |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["models"]:
        b, s = r["backends"], r["speedup"]
        cells = [fmt_ms(b.get(k, {}).get("latency")) if b.get(k, {}).get("status") == "ok" else
                 ("-" if k not in b else b[k]["status"]) for k in BACKENDS]
        ratios = [f"{s[k]:.2f}x" if k in s else "-" for k in ("cuvil_vs_eager", "cuvil_vs_plain_iree",
                  "cuvil_vmfb_vs_plain_iree", "plain_iree_vs_eager", "torch_compile_vs_eager")]
        lines.append(f"| {r['model']} | " + " | ".join(cells + ratios) + " |")
    lines += [
        "",
        "Speedup = other median / this median (above 1x: faster than the other). \"cuvil\" is the public "
        "`CompiledModel` call (torch in, torch out); \"cuvil vmfb (raw call)\" is the same module called the way "
        "plain IREE is (numpy in, `main(...).to_host()`), so the gap between the two is per-call Python overhead.",
        "",
        "## Compile time (s, wall) and numerics (max relative error vs eager over all inputs)",
        "",
        "| model | inputs | cuvil compile | plain IREE compile | torch.compile first call | cuvil rel. err | plain IREE rel. err | torch.compile rel. err |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report["models"]:
        b = r["backends"]
        comp = []
        for k in ("cuvil", "plain_iree", "torch_compile"):
            info = b.get(k, {})
            if info.get("status") != "ok":
                comp.append("-" if not info else "failed")
                continue
            split = info.get("compile_breakdown_s")
            detail = f" ({', '.join(f'{n} {v:.2f}' for n, v in split.items())})" if split else ""
            comp.append(f"{info['compile_s']:.2f}{detail}")
        errs = [fmt_err(b.get(k, {})) for k in ("cuvil", "plain_iree", "torch_compile")]
        comp[0] += f"; vmfb {b['cuvil']['vmfb_bytes'] / 1e6:.2f} MB" if b.get("cuvil", {}).get("status") == "ok" else ""
        comp[1] += f"; vmfb {b['plain_iree']['vmfb_bytes'] / 1e6:.2f} MB" if b.get("plain_iree", {}).get("status") == "ok" else ""
        lines.append(f"| {r['model']} | {', '.join(r['inputs'])} | " + " | ".join(comp + errs) + " |")
    lines += ["", f"Relative error = max |got - eager| / max |eager|; flagged WRONG above {REL_ERR_FLAG:g}."]
    notes = [f"- {r['model']} / {LABELS[k]}: {info['status']}" for r in report["models"]
             for k, info in r["backends"].items() if info.get("status") != "ok"]
    if notes:
        lines += ["", "## Failures", "", *notes]
    if report.get("notes"):
        lines += ["", "## Notes", "", *[f"- {n}" for n in report["notes"]]]
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(models.E2E_MODELS), help="comma-separated, from: %(default)s")
    p.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated, from: %(default)s")
    p.add_argument("--min-time", type=float, default=2.0, help="seconds of timed calls per backend and model (default 2)")
    p.add_argument("--min-reps", type=int, default=20, help="at least this many timed calls per backend (default 20)")
    p.add_argument("--warmup", type=float, default=0.5, help="seconds of untimed calls per backend first (default 0.5)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds over the backends (default 3)")
    p.add_argument("--inputs", type=int, default=3, help="different input sets to rotate over (default 3)")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch and IREE threads (default: torch's)")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"), help="directory for the .md and .json")
    p.add_argument("--tag", default="", help="suffix of the result files: cpu_e2e-<date>-<tag>.md")
    p.add_argument("--note", action="append", default=[], help="a line added to the report's notes (repeatable)")
    p.add_argument("--verbose", action="store_true", help="print tracebacks of failing backends")
    opts = p.parse_args(argv)
    opts.models = [m for m in opts.models.split(",") if m]
    opts.backends = [b for b in opts.backends.split(",") if b]
    for m in opts.models:
        if m not in models.E2E_MODELS:
            p.error(f"unknown model '{m}'; models: {', '.join(models.E2E_MODELS)}")
    for b in opts.backends:
        if b not in BACKENDS:
            p.error(f"unknown backend '{b}'; backends: {', '.join(BACKENDS)}")
    return opts


def main(argv=None) -> int:
    opts = parse_args(argv)
    # One thread setting for everyone. IREE's flags must be parsed before the first device exists.
    torch.set_num_threads(opts.threads)
    import iree.runtime as rt

    rt.flags.parse_flags(f"--task_topology_max_group_count={opts.threads}")

    now = datetime.now()
    report = {
        "date": now.isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]) if argv is None else shlex.join(argv),
        "machine": machine(),
        "versions": versions(),
        "settings": {"torch_threads": torch.get_num_threads(), "torch_interop_threads": torch.get_num_interop_threads(),
                     "iree_max_group_count": opts.threads, "min_time_s": opts.min_time, "min_reps": opts.min_reps,
                     "warmup_s": opts.warmup, "rounds": opts.rounds, "inputs": opts.inputs, "opt_level": 3},
        "iree_flags": parse_target("cpu", opt_level=3).iree_flags(),
        "load": {"start": loadavg(), "other_python_at_start": other_python_processes()},
        "notes": list(opts.note),
        "models": [],
    }
    log(f"threads={opts.threads} load={report['load']['start']}; warming up the compilers")
    warm_up_compilers(opts.backends)
    for name in opts.models:
        log(f"{name}:")
        report["models"].append(bench_model(name, opts))
    report["load"]["end"] = loadavg()

    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / ("cpu_e2e-" + now.strftime("%Y-%m-%d") + (f"-{opts.tag}" if opts.tag else ""))
    md = to_markdown(report)
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    stem.with_suffix(".md").write_text(md)
    print(md)
    log(f"wrote {stem}.md and {stem}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

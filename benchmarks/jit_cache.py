"""The jit's on-disk cache and the torch.compile backend on the CPU, with HF GPT-2.

    python benchmarks/jit_cache.py                           # GPT-2 124M (12 layers, d=768), T=128, B=1
    python benchmarks/jit_cache.py --layers 2 --d-model 256 --out /tmp/bench

1. Cold vs warm start: two fresh processes, one after the other, on one fresh cache folder,
   each builds the model (random weights, seed 0: not timed) and calls
   ``cuvil_mlir.jit(model)(ids)`` once. The first compiles and stores the entry, the second
   loads it. Timed: that first call, and in the second process also ``cuvil_mlir.load`` of
   the entry's package alone (the time of loading). The two outputs are compared bit for bit.
2. Latency in one process: eager, torch.compile (inductor, default mode),
   torch.compile(backend="cuvil") (through the warm cache) and the jitted model, single calls
   in interleaved rounds over rotating inputs, under torch.no_grad(); medians.
Results: benchmarks/results/jit_cache-<date>.{json,md} (jit_cache-startup-<date> with --skip-latency).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def build(args):
    sys.path.insert(0, str(REPO / "examples"))
    import models

    return models.gpt2(layers=args.layers, d_model=args.d_model, heads=args.heads, vocab=args.vocab, seq=args.seq, batch=1)


def first_call(args) -> dict:
    """One process: build, jit, time the first call (and the package load alone when warm)."""
    import numpy as np
    import torch

    import cuvil_mlir
    from cuvil_mlir.compiler.cache import Cache

    model, (ids,) = build(args)
    jitted = cuvil_mlir.jit(model, cache=args.cache_dir)
    with torch.no_grad():
        start = time.perf_counter()
        out = jitted(ids)
        seconds = time.perf_counter() - start
    entry = jitted.cuvil_jit.entries[0]
    np.save(args.output, out.numpy())
    result = {"first_call_s": round(seconds, 3), "status": entry.status, "cache": entry.cache, "reason": entry.reason,
              "parts_s": entry.times}
    if entry.cache.startswith("hit"):
        path = Cache(args.cache_dir).package_path(entry.key)
        start = time.perf_counter()
        loaded = cuvil_mlir.load(path)
        result["load_only_s"] = round(time.perf_counter() - start, 3)
        result["package_bytes"] = path.stat().st_size
        del loaded
    print(json.dumps(result))
    return result


def latency(args) -> dict:
    import torch

    import cuvil_mlir

    model, (ids,) = build(args)
    gen = torch.Generator().manual_seed(1)
    inputs = [torch.randint(0, args.vocab, ids.shape, generator=gen) for _ in range(4)]
    backends = {"eager": model}
    compile_s = {}
    with torch.no_grad():
        for name, make in (("torch.compile (inductor)", lambda: torch.compile(model)),
                           ("torch.compile (cuvil)", lambda: torch.compile(model, backend="cuvil", options={"cache": args.cache_dir})),
                           ("cuvil jit", lambda: cuvil_mlir.jit(model, cache=args.cache_dir))):
            fn = make()
            start = time.perf_counter()
            fn(inputs[0])
            compile_s[name] = round(time.perf_counter() - start, 2)
            backends[name] = fn
        ref = model(inputs[0])
        errors = {name: float((fn(inputs[0]) - ref).abs().max() / ref.abs().max()) for name, fn in backends.items()}
        samples = {name: [] for name in backends}
        for r in range(args.rounds):
            for name, fn in backends.items():
                x = inputs[r % len(inputs)]
                start = time.perf_counter()
                fn(x)
                samples[name].append((time.perf_counter() - start) * 1e3)
    return {"median_ms": {k: round(statistics.median(v), 3) for k, v in samples.items()},
            "first_call_s": compile_s, "max_rel_err_vs_eager": errors, "rounds": args.rounds}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    p.add_argument("--skip-latency", action="store_true")
    p.add_argument("--first-call", action="store_true", help=argparse.SUPPRESS)  # a child process
    p.add_argument("--cache-dir", help=argparse.SUPPRESS)
    p.add_argument("--output", help=argparse.SUPPRESS)
    p.add_argument("--latency", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.first_call:
        first_call(args)
        return 0
    if args.latency:
        print(json.dumps(latency(args)))
        return 0

    import numpy as np
    import torch

    # one scratch folder for the cache (a GPT-2 124M entry is ~0.5 GB), the outputs and inductor's
    # cache, removed when the run ends
    with tempfile.TemporaryDirectory(prefix="cuvil-bench-") as scratch:
        result = _measure(args, Path(scratch), np, torch)
    _write(result, Path(args.out))
    return 0


def _measure(args, scratch: Path, np, torch) -> dict:
    cache_dir = str(scratch / "cache")
    work = scratch
    size = ["--layers", str(args.layers), "--d-model", str(args.d_model), "--heads", str(args.heads),
            "--vocab", str(args.vocab), "--seq", str(args.seq)]
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor")}
    runs = {}
    for name in ("cold", "warm"):
        cmd = [sys.executable, __file__, "--first-call", "--cache-dir", cache_dir, "--output", str(work / f"{name}.npy"), *size]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
        runs[name] = json.loads(out.strip().splitlines()[-1])
        print(name, runs[name], flush=True)
    identical = bool(np.array_equal(np.load(work / "cold.npy"), np.load(work / "warm.npy")))
    result = {"date": datetime.now().isoformat(timespec="seconds"), "machine": _machine(),
              "command": shlex.join(["python", "benchmarks/jit_cache.py", *sys.argv[1:]]),
              "model": {"layers": args.layers, "d_model": args.d_model, "heads": args.heads, "vocab": args.vocab,
                        "seq": args.seq, "batch": 1},
              "cold": runs["cold"], "warm": runs["warm"], "warm_output_bit_identical": identical,
              "torch": torch.__version__, "threads": torch.get_num_threads(), "load_average_before": os.getloadavg()}
    if not args.skip_latency:
        cmd = [sys.executable, __file__, "--latency", "--cache-dir", cache_dir, "--rounds", str(args.rounds), *size]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
        result["latency"] = json.loads(out.strip().splitlines()[-1])
    result["load_average_after"] = os.getloadavg()
    return result


def _machine() -> str:
    cpu = ""
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{platform.node()}: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def _loads(values) -> str:
    return "/".join(f"{v:.1f}" for v in values)


def _write(result: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"jit_cache{'' if 'latency' in result else '-startup'}-{result['date'][:10]}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1))
    m, cold, warm = result["model"], result["cold"], result["warm"]
    lines = [f"# jit cache and torch.compile backend, CPU ({result['date']})", "",
             f"machine: {result['machine']}; torch {result['torch']}, {result['threads']} threads; load average "
             f"(1/5/15 min) before {_loads(result['load_average_before'])}, after {_loads(result['load_average_after'])} "
             "(the machine is shared: latencies are relative, measured in interleaved rounds)", "",
             f"command: `{result['command']}`", "",
             f"model: HF GPT-2, {m['layers']} layers, d={m['d_model']}, {m['heads']} heads, vocab {m['vocab']}, "
             f"T={m['seq']}, B=1, fp32, random weights", "",
             "| first call of a new process | seconds |", "|---|---|",
             f"| cold ({' + '.join(cold.get('parts_s', {}))} + store + load + run; cache {cold['cache']}) | {cold['first_call_s']} |",
             f"| warm ({' + '.join(warm.get('parts_s', {}))} + run; cache {warm['cache']}) | {warm['first_call_s']} |",
             f"| loading the cached package alone (cuvil_mlir.load) | {warm.get('load_only_s', '-')} |", "",
             f"parts (s): cold {cold.get('parts_s', {})}; warm {warm.get('parts_s', {})} (the rest of a first call: "
             "loading the module on the device and running it)", "",
             f"package: {warm.get('package_bytes', 0) / 1e6:.0f} MB; warm output bit-identical to cold: "
             f"{result['warm_output_bit_identical']}"]
    if "latency" in result:
        lat = result["latency"]
        lines += ["", f"| backend | median ms ({lat['rounds']} rounds) | first call s | max rel err vs eager |", "|---|---|---|---|"]
        for name, ms in lat["median_ms"].items():
            lines.append(f"| {name} | {ms} | {lat['first_call_s'].get(name, '-')} | {lat['max_rel_err_vs_eager'][name]:.1e} |")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())

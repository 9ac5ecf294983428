"""The Hopper attention kernel (targets/cuda_attention_kernels.py) against torch SDPA: its
numerics over a shape sweep and its speed against the flash backend; the sweep that fills
targets/cuda_attention_configs.json.

    python benchmarks/gpu/attention_kernels.py build .gpu/attn/ak        # here: the kernels AOT, IREE modules
    python3 benchmarks/gpu/attention_kernels.py run .gpu/attn/ak --out $OUT [--tune]   # there (H200)
    python benchmarks/gpu/attention_kernels.py report results.json      # markdown

``build`` (the CPU machine: triton 3.9, the IREE compiler): the kernels of SWEEP and TIMED with
the configs of the shipped table, each as the ``hal.dispatch.extern`` cuvil embeds, in three
IREE modules (sweep_f16, sweep_bf16, timed), and cases.json.
``run`` (the GPU machine: torch, triton, the IREE runtime wheel): per SWEEP case the max error
of the kernel through IREE (iree.runtime) and of the same Triton source JIT-compiled there
(standalone) against fp32 SDPA on the same 16-bit inputs, beside torch's own fp16/bf16 SDPA
error; per TIMED case the kernel standalone (every TUNE config with ``--tune``, else the table's)
and torch SDPA with the flash backend, both with CUDA events (triton.testing.do_bench medians),
and the IREE module with iree-benchmark-module.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

FLAGS = ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_89", "--iree-opt-level=O3"]

# correctness: (batch, q heads, kv heads, tq, tkv, d, causal) x dtype
SWEEP = [(b, hq, hkv, t, t, d, c) for (b, hq, hkv, d) in ((2, 32, 8, 128), (1, 32, 8, 64), (2, 12, 12, 64), (1, 12, 12, 128))
         for t in (1, 17, 128, 1000, 2048) for c in (False, True)]
SWEEP += [(b, hq, hkv, 1, 2047, d, False) for (b, hq, hkv, d) in ((2, 32, 8, 128), (1, 32, 8, 64), (2, 12, 12, 64), (1, 12, 12, 128))]
SWEEP += [(1, 8, 2, 100, 300, 64, True), (1, 8, 2, 300, 100, 128, True)]  # Tq != Tkv, causal (torch's top-left diagonal)
# speed: causal prefill, Llama-1B (32/8 heads, d 64), GPT-2 (12 heads, d 64), Llama-8B (32/8, d 128)
TIMED = [(b, hq, hkv, t, t, d, True) for (hq, hkv, d) in ((32, 8, 64), (12, 12, 64), (32, 8, 128))
         for b in (1, 8) for t in (128, 512, 2048, 8192)]
TUNE = [  # bm, bn, warps, stages, kind
    (128, 64, 4, 3, "tma"), (128, 64, 8, 3, "tma"), (128, 128, 8, 3, "tma"), (128, 128, 8, 2, "tma"),
    (128, 64, 4, 4, "tma"), (64, 64, 4, 3, "tma"), (128, 64, 4, 3, "pointers"), (128, 128, 8, 2, "pointers"),
]


def _spec(ak, case, dtype):
    b, hq, hkv, tq, tkv, d, causal = case
    return ak.AttentionSpec(b, hq, hkv, tq, tkv, d, dtype, causal, d ** -0.5)


def _name(case, dtype):
    b, hq, hkv, tq, tkv, d, causal = case
    return f"a_{b}x{hq}x{hkv}x{tq}x{tkv}x{d}_{dtype}{'_causal' if causal else ''}"


def build(out: Path) -> None:
    from cuvil_mlir.targets import cuda_attention_kernels as ak

    out.mkdir(parents=True, exist_ok=True)
    modules = {"sweep_f16": [(c, "f16") for c in SWEEP], "sweep_bf16": [(c, "bf16") for c in SWEEP], "timed": [(c, "f16") for c in TIMED]}
    meta = {"flags": FLAGS, "modules": {}}
    for module, cases in modules.items():
        funcs, entries = [], []
        for case, dtype in cases:
            spec = _spec(ak, case, dtype)
            kb = ak.build_attention(spec)
            name = _name(case, dtype)
            funcs.append(ak.dispatch_function(f"k_{name}", kb, torch_types=False))
            q, k = (f"tensor<{case[0]}x{h}x{t}x{case[5]}x{dtype}>" for h, t in ((case[1], case[3]), (case[2], case[4])))
            funcs.append(f"func.func @{name}(%q: {q}, %k: {k}, %v: {k}) -> {q} {{\n"
                         f"  %o = call @k_{name}(%q, %k, %v) : ({q}, {k}, {k}) -> {q}\n  return %o : {q}\n}}\n")
            entries.append({"function": name, "case": case, "dtype": dtype, **kb.describe()})
        src = out / f"{module}.mlir"
        src.write_text("\n".join(funcs))
        start = time.time()
        r = subprocess.run([str(Path(sys.executable).parent / "iree-compile"), str(src), *FLAGS, "-o", str(out / f"{module}.vmfb")],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"{module}: iree-compile failed: {r.stderr[:3000]}")
        src.unlink()
        print(f"{module}: {len(entries)} kernels, compiled in {time.time() - start:.1f} s", file=sys.stderr)
        meta["modules"][module] = entries
    (out / "cases.json").write_text(json.dumps(meta, indent=1))


# ------------------------------------------------------------------------------ there


def _inputs(torch, case, tdt, seed=0):
    b, hq, hkv, tq, tkv, d, _ = case
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, hq, tq, d, device="cuda", generator=gen).to(tdt)
    k = torch.randn(b, hkv, tkv, d, device="cuda", generator=gen).to(tdt)
    v = torch.randn(b, hkv, tkv, d, device="cuda", generator=gen).to(tdt)
    return q, k, v


def _sdpa(torch, q, k, v, causal, flash=False):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    gqa = q.shape[1] != k.shape[1]
    if flash:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)


def _err(torch, got, ref):
    return ((got.float() - ref).abs().max() / ref.abs().max().clamp(min=1e-6)).item()


def _launch(ak, torch, spec, config):
    """A function running the JIT-compiled kernel (the same source) on torch tensors."""
    fn = ak.kernel()
    grid = ak.grid_of(spec, config)
    consts = ak.constexprs(spec, config)

    def run(q, k, v, o):
        fn[grid](q, k, v, o, **consts, num_warps=config.warps, num_stages=config.stages)
        return o
    return run


def _warm(job):
    """In a worker process: JIT-compile one (spec, config) into triton's disk cache."""
    import torch

    import triton
    from cuvil_mlir.targets import cuda_attention_kernels as ak

    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    spec, config = ak.AttentionSpec(**job[0]), ak.AttentionConfig(**job[1])
    tdt = torch.float16 if spec.dtype == "f16" else torch.bfloat16
    t = [torch.empty(16, 16, dtype=tdt, device="cuda") for _ in range(4)]
    fn = ak.kernel()
    try:
        fn.warmup(*t, **ak.constexprs(spec, config), num_warps=config.warps, num_stages=config.stages, grid=ak.grid_of(spec, config))
    except Exception as e:
        return f"{e}"[:300]
    return None


def run(folder: Path, out: Path, tune: bool, deadline: float) -> None:
    import concurrent.futures as cf
    import multiprocessing as mp

    import numpy as np
    import torch
    import triton
    from triton.testing import do_bench

    from cuvil_mlir.targets import cuda_attention_kernels as ak

    begin = time.time()
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    site = Path(os.environ.get("IREE_SITE", "/tmp/iree-site"))
    sys.path.insert(0, str(site))
    sys.path.insert(0, str(Path(__file__).parent))
    import iree.runtime as rt
    from linear_kernels import _host_bits, _typed_view

    meta = json.loads((folder / "cases.json").read_text())
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": torch.cuda.get_device_name(),
               "torch": torch.__version__, "triton_there": triton.__version__, "flags": meta["flags"], "sweep": [], "timed": []}
    save = lambda: (out / "attention_kernels.json").write_text(json.dumps(results, indent=1))  # noqa: E731
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}
    # every kernel the run JITs, compiled first in 16 processes (triton's disk cache)
    jobs = {(tuple(sorted(asdict(_spec(ak, c, t)).items())), tuple(sorted(asdict(ak.select_config(_spec(ak, c, t))).items())))
            for c in SWEEP for t in ("f16", "bf16")}
    timed_configs = [ak.AttentionConfig(*c) for c in TUNE] if tune else []
    for c in TIMED:
        spec = _spec(ak, c, "f16")
        for config in timed_configs + [ak.select_config(spec)]:
            jobs.add((tuple(sorted(asdict(spec).items())), tuple(sorted(asdict(config).items()))))
    with cf.ProcessPoolExecutor(16, mp_context=mp.get_context("spawn")) as pool:
        failures = [f for f in pool.map(_warm, [(dict(s), dict(c)) for s, c in jobs]) if f]
    results["jit_compiles"] = len(jobs)
    results["jit_failures"] = failures[:5]
    print(f"{len(jobs)} kernels JIT-compiled in {time.time() - begin:.0f} s; {len(failures)} failed", file=sys.stderr, flush=True)

    config = rt.Config("cuda")
    # 1. numerics: through IREE and standalone, against fp32 SDPA
    for module in ("sweep_f16", "sweep_bf16"):
        ctx = rt.SystemContext(config=config)
        ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, (folder / f"{module}.vmfb").read_bytes()))
        for entry in meta["modules"][module]:
            case, dtype = tuple(entry["case"]), entry["dtype"]
            tdt = dt[dtype]
            q, k, v = _inputs(torch, case, tdt)
            ref = _sdpa(torch, q.float(), k.float(), v.float(), case[6])
            row = {"function": entry["function"], "case": case, "dtype": dtype, "config": entry["config"],
                   "torch_err": _err(torch, _sdpa(torch, q, k, v, case[6]), ref)}
            spec = _spec(ak, case, dtype)
            try:
                o = _launch(ak, torch, spec, ak.select_config(spec))(q, k, v, torch.empty_like(q))
                row["standalone_err"] = _err(torch, o, ref)
            except Exception as e:
                row["standalone_error"] = str(e)[:300]
            try:
                elt = rt.HalElementType.FLOAT_16 if dtype == "f16" else rt.HalElementType.BFLOAT_16
                y = ctx.modules.module[entry["function"]](*[_typed_view(rt, ctx, a.cpu(), elt) for a in (q, k, v)])
                yt = torch.from_numpy(_host_bits(np, y).copy()).view(tdt).reshape(q.shape).cuda()
                row["iree_err"] = _err(torch, yt, ref)
            except Exception as e:
                row["iree_error"] = str(e)[:300]
            bound = 2 * row["torch_err"] + (1e-3 if dtype == "f16" else 8e-3)
            row["ok"] = all(row.get(k, 1) <= bound for k in ("standalone_err", "iree_err"))
            results["sweep"].append(row)
            print(row, file=sys.stderr, flush=True)
        del ctx
        save()
    # 2. speed: standalone kernel (configs) and SDPA flash with CUDA events, then the IREE module
    bench = site / "iree" / "_runtime_libs" / "iree-benchmark-module"
    for entry in meta["modules"]["timed"]:
        if time.time() - begin > deadline:
            print("deadline reached", file=sys.stderr)
            break
        case = tuple(entry["case"])
        b, hq, hkv, tq, tkv, d, causal = case
        q, k, v = _inputs(torch, case, torch.float16)
        flops = 4 * b * hq * tq * tkv * d / (2 if causal else 1)
        kf, vf = k, v
        try:
            flash = _sdpa(torch, q, k, v, causal, flash=True)
        except RuntimeError:  # no grouped heads in this flash backend: give it the heads repeated
            kf, vf = (t.repeat_interleave(hq // hkv, 1) for t in (k, v))
            flash = _sdpa(torch, q, kf, vf, causal, flash=True)
        row = {"function": entry["function"], "case": case, "table_config": entry["config"], "flash_gqa": kf is k,
               "flash_ms": do_bench(lambda: _sdpa(torch, q, kf, vf, causal, flash=True), warmup=10, rep=60, return_mode="median"),
               "configs": {}}
        spec = _spec(ak, case, "f16")
        o = torch.empty_like(q)
        for cfg in timed_configs + [ak.select_config(spec)]:
            if cfg.key in row["configs"]:
                continue
            try:
                fn = _launch(ak, torch, spec, cfg)
                err = _err(torch, fn(q, k, v, o), flash.float())
                ms = do_bench(lambda: fn(q, k, v, o), warmup=10, rep=60, return_mode="median")
                row["configs"][cfg.key] = {"ms": ms, "tflops": flops / ms / 1e9, "err_vs_flash": err}
            except Exception as e:
                row["configs"][cfg.key] = {"error": str(e)[:300]}
        good = {key: c["ms"] for key, c in row["configs"].items() if c.get("err_vs_flash", 1) < 1e-2}
        if good:
            best = min(good, key=good.get)
            row["best"], row["best_ms"], row["best_vs_flash"] = best, good[best], row["flash_ms"] / good[best]
        table = row["configs"].get(entry["config"], {})
        row["table_vs_flash"] = row["flash_ms"] / table["ms"] if "ms" in table else None
        row["flash_tflops"] = flops / row["flash_ms"] / 1e9
        shape = lambda h, t: f"--input={b}x{h}x{t}x{d}xf16=0.5"  # noqa: E731
        cmd = [str(bench), f"--module={folder / 'timed.vmfb'}", "--device=cuda", f"--function={entry['function']}",
               shape(hq, tq), shape(hkv, tkv), shape(hkv, tkv), "--benchmark_repetitions=3", "--benchmark_min_warmup_time=0.2",
               "--benchmark_min_time=0.05s", "--device_allocator=caching", "--benchmark_format=json"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        try:
            data = json.loads(r.stdout[r.stdout.index("{"):])
            med = [bm for bm in data["benchmarks"] if bm.get("aggregate_name") == "median"][0]
            row["iree_ms"] = med["real_time"] / (1e6 if med["time_unit"] == "ns" else 1e3 if med["time_unit"] == "us" else 1)
            row["iree_vs_flash"] = row["flash_ms"] / row["iree_ms"]
        except Exception:
            row["iree_error"] = (r.stderr or r.stdout)[-400:]
        results["timed"].append(row)
        print({k: v for k, v in row.items() if k != "configs"}, file=sys.stderr, flush=True)
        save()
        del q, k, v, kf, vf, o, flash


def report(path: Path) -> str:
    d = json.loads(path.read_text())
    lines = [f"{d['date']}, {d['device']}, torch {d['torch']}, triton there {d['triton_there']}; IREE flags {' '.join(d['flags'])}", "",
             "Speed, causal prefill, fp16 (ms; kernel standalone and SDPA flash: do_bench medians; IREE: iree-benchmark-module median)", "",
             "| B x Hq/Hkv x T x D | SDPA flash ms | TFLOP/s | kernel (table config) ms | vs flash | best config | best ms | vs flash | IREE module ms | vs flash |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in d["timed"]:
        b, hq, hkv, tq, tkv, dd, _ = r["case"]
        t = r["configs"].get(r["table_config"], {})
        lines.append(f"| {b} x {hq}/{hkv} x {tq} x {dd} | {r['flash_ms']:.4f} | {r['flash_tflops']:.0f} | {t.get('ms', float('nan')):.4f} | "
                     f"{(r.get('table_vs_flash') or float('nan')):.2f}x | {r.get('best', '-')} | {r.get('best_ms', float('nan')):.4f} | "
                     f"{r.get('best_vs_flash', float('nan')):.2f}x | {r.get('iree_ms', float('nan')):.4f} | {r.get('iree_vs_flash', float('nan')):.2f}x |")
    ok = sum(r["ok"] for r in d["sweep"])
    lines += ["", f"Numerics: {ok}/{len(d['sweep'])} cases within 2x torch's own error (+1e-3 f16, +8e-3 bf16) against fp32 SDPA, through IREE and standalone", "",
              "| case (B, Hq, Hkv, Tq, Tkv, D, causal) | dtype | config | torch err | standalone err | IREE err | ok |", "|---|---|---|---|---|---|---|"]
    for r in d["sweep"]:
        lines.append(f"| {tuple(r['case'])} | {r['dtype']} | {r['config']} | {r['torch_err']:.1e} | {r.get('standalone_err', float('nan')):.1e} | "
                     f"{r.get('iree_err', float('nan')):.1e} | {'yes' if r['ok'] else 'NO ' + r.get('iree_error', r.get('standalone_error', ''))[:80]} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("out", type=Path)
    r = sub.add_parser("run")
    r.add_argument("folder", type=Path)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--tune", action="store_true", help="time every TUNE config, not only the table's")
    r.add_argument("--deadline", type=float, default=400)
    m = sub.add_parser("report")
    m.add_argument("results", type=Path)
    a = p.parse_args()
    if a.cmd == "build":
        build(a.out)
    elif a.cmd == "report":
        print(report(a.results), end="")
    else:
        run(a.folder, a.out, a.tune, a.deadline)


if __name__ == "__main__":
    main()

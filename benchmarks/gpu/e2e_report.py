"""The report of the real-size end-to-end H200 step (benchmarks/gpu/e2e_device.sh): from the files
its device calls brought back (results-e2e-part*.json, profiles-part*.json), here:

    python benchmarks/gpu/e2e_report.py DIR [DIR ...] --date 2026-12-05 [--out benchmarks/results]

writes gpu-e2e-<date>.{md,json} (latency of every cuvil variant and torch mode, ratios of the
product's path and of the path before the kernels against every torch mode, numerics, dispatches
per layer, which op got which kernel) and gpu-profile-<date>.{md,json} with one PNG chart per
profile (gpu-profile-<case>-<variant>-<date>.png). --after / --before name the variants compared
(defaults: cuvil_h200_td, the target description with the Hopper kernels; cuvil_h200_nokern,
cuda:h200 with kernels off: the path issue 14's table measured).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

VARIANT_LABELS = {
    "cuvil_h200_td": "cuvil td + kernels",
    "cuvil_h200_td_nokern": "cuvil td, kernels off",
    "cuvil_h200_nokern": "cuvil ptx-jit, kernels off (before)",
    "cuvil_h200": "cuvil ptx-jit + kernels",
}
VARIANT_TARGETS = {
    "cuvil_h200_td": "cuda:h200{hopper-mode=target-description} (sm_90, 132 SMs described to IREE; Hopper kernels for cuvil.linear / cuvil.attention)",
    "cuvil_h200_td_nokern": "cuda:h200{hopper-mode=target-description,kernels=off}",
    "cuvil_h200_nokern": "cuda:h200{kernels=off} (ptx-jit, sm_89 PTX, IREE's codegen for every op: the cuda:h200 of issue 14's table)",
    "cuvil_h200": "cuda:h200 (ptx-jit, kernels on)",
}
TORCH_MODES = [("eager", "torch eager"), ("compile_default", "torch.compile"), ("compile_reduce_overhead", "reduce-overhead"),
               ("compile_max_autotune", "max-autotune")]
MODEL_DESC = {
    "gpt2-12l": "HF GPT-2, 12 layers, d=768, 12 heads, T=128, vocab 256",
    "llama-2048": "HF Llama, 2 layers, d=2048, 32/8 heads, FFN 8192 (SwiGLU), T=512, vocab 256, SDPA",
    "bert-base": "HF BERT encoder, 12 layers, d=768, 12 heads, FFN 3072, T=128, vocab 256",
}
MODEL_ORDER = ["gpt2-12l", "llama-2048", "bert-base"]
# earlier H200 measurements of the same models (ms): issue 14's table (cuda:h200 as shipped, before
# the kernels, 2026-12-03) and hopper-e2e-2026-12-03 (ptx-jit + linear kernels; tiled weights)
EARLIER = {
    "gpt2-12l-b1": {"issue14_cuvil": 2.18, "issue14_best_torch": 0.60, "hopper_e2e_1203": 1.056},
    "gpt2-12l-b8": {"issue14_cuvil": 2.94, "issue14_best_torch": 0.89, "hopper_e2e_1203": 1.680},
    "llama-2048-b1": {"issue14_cuvil": 1.50, "issue14_best_torch": 0.58, "hopper_e2e_1203": 0.607},
    "llama-2048-b8": {"issue14_cuvil": 8.75, "issue14_best_torch": 2.03, "hopper_e2e_1203": 2.714},
}
ERR_BUDGET = 2e-2


# ---------------------------------------------------------------- reading


def load(dirs: list[Path]) -> dict:
    """Merge every results-*.json and profiles-*.json found in ``dirs``: per case, each cuvil
    variant's row (a measured one wins) and each torch mode (an ok one wins)."""
    runs, cases, profiles, errors = [], {}, [], []
    for d in dirs:
        for f in sorted(d.glob("results-*.json")):
            r = json.loads(f.read_text())
            r["file"] = f"{d.name}/{f.name}"
            runs.append(r)
            # a run with more runtime flags (e2e_device.sh ALT_FLAGS) is a variant of its own: "cuvil_h200_td
            # [--cuda_use_streams=false]"
            extra = " ".join(f for f in r.get("bench_flags", []) if not f.startswith(("--benchmark_", "--device_allocator", "--function")))
            for name, c in r["cases"].items():
                dst = cases.setdefault(name, {"model": c["model"], "batch": c["batch"], "iree": {}, "torch": {}})
                for v, row in c["iree"].items():
                    v = f"{v} [{extra}]" if extra else v
                    if v not in dst["iree"] or dst["iree"][v].get("status") != "measured":
                        dst["iree"][v] = row
                for mode, t in (c.get("torch") or {}).items():
                    if not isinstance(t, dict):
                        dst["torch"][mode] = t
                    elif mode not in dst["torch"] or (dst["torch"][mode] or {}).get("status") != "ok":
                        dst["torch"][mode] = t
        for f in sorted(d.glob("profiles-*.json")):
            p = json.loads(f.read_text())
            profiles += p.get("profiles", [])
            errors += [f"{f.name}: {e}" for e in p.get("errors", [])]
    if not runs:
        raise SystemExit(f"no results-*.json in {', '.join(map(str, dirs))}")
    return {"runs": runs, "cases": cases, "profiles": profiles, "profile_errors": errors}


def ms(case: dict, key: str) -> float | None:
    if key in dict(TORCH_MODES):
        t = case["torch"].get(key) or {}
        return t.get("median_ms") if isinstance(t, dict) and t.get("status") == "ok" else None
    b = (case["iree"].get(key) or {}).get("bench") or {}
    return b.get("median_ms") if b.get("status") == "ok" else None


def best_torch(case: dict) -> tuple[float | None, str]:
    got = [(ms(case, k), label) for k, label in TORCH_MODES if ms(case, k)]
    return min(got) if got else (None, "")


def order(cases: dict) -> list[str]:
    return sorted(cases, key=lambda n: (MODEL_ORDER.index(cases[n]["model"]) if cases[n]["model"] in MODEL_ORDER else 99,
                                        cases[n]["model"], cases[n]["batch"]))


def variants_present(cases: dict, after: str, before: str) -> list[str]:
    seen = []
    for c in cases.values():
        seen += [v for v in c["iree"] if v not in seen]
    first = [v for v in (after, "cuvil_h200_td_nokern", before, "cuvil_h200") if v in seen]
    return first + [v for v in seen if v not in first]


# ---------------------------------------------------------------- cells


def cell(case: dict, key: str) -> str:
    if key in dict(TORCH_MODES):
        t = case["torch"].get(key)
        if not t:
            return "-"
        if t.get("status") == "ok":
            return f"{t['median_ms']:.3f} ({t['p10_ms']:.3f}-{t['p90_ms']:.3f})"
        return "deadline" if "deadline" in t.get("status", "") or "did not finish" in t.get("status", "") else "failed"
    row = case["iree"].get(key)
    if not row:
        return "-"
    b = row.get("bench") or {}
    if b.get("status") == "ok":
        return f"{b['median_ms']:.3f} ({b['p10_ms']:.3f}-{b['p90_ms']:.3f})"
    status = row.get("status", "")
    if "deadline" in status:
        return "deadline"
    if status.startswith("compile failed"):
        return "compile failed"
    return "load failed" if (row.get("check") or {}).get("status", "ok") != "ok" else "run failed"


def ratio(num: float | None, den: float | None) -> str:
    return f"{num / den:.2f}x" if num and den else "-"


def err(case: dict, key: str) -> str:
    if key in dict(TORCH_MODES):
        t = case["torch"].get(key) or {}
        e = t.get("max_rel_err") if isinstance(t, dict) else None
    else:
        c = (case["iree"].get(key) or {}).get("check") or {}
        if c.get("status") not in (None, "ok"):
            return "check failed"
        if c.get("numerics") not in (None, "ok"):
            return c["numerics"]
        e = c.get("max_rel_err")
    return "-" if e is None else f"{e:.1e}" + (" **over 2e-2**" if e > ERR_BUDGET else "")


def opt_level(row: dict) -> str:
    levels = [f.rsplit("=", 1)[1] for f in row.get("iree_flags", []) if f.startswith("--iree-opt-level=")]
    return levels[-1] if levels else "?"


# ---------------------------------------------------------------- the e2e report


def gpu_label(smi: dict) -> str:
    """'H100' / 'H200' from nvidia-smi's name (the modules target sm_90 either way), else the name as given."""
    name = str(smi.get("name", "H200"))
    for short in ("H200", "H100"):
        if short in name:
            return short
    return name


def e2e_markdown(data: dict, date: str, after: str, before: str, note: str) -> tuple[str, dict]:
    cases, runs = data["cases"], data["runs"]
    names = order(cases)
    variants = variants_present(cases, after, before)
    r0 = runs[0]
    m, v = r0["machine"], r0["versions"]
    smi = m.get("nvidia_smi") if isinstance(m.get("nvidia_smi"), dict) else {}
    L = [f"# {gpu_label(smi)}, real model sizes: cuvil-mlir with the Hopper kernels vs PyTorch, before and after ({date})", ""]
    L += [f"- machine: {smi.get('name', '?')}, driver {smi.get('driver_version', '?')}, CUDA {m.get('cuda_version_smi', '?')}, "
          f"{smi.get('memory.total', '?')}, {m.get('cpus')} CPUs; at the start SM clock {smi.get('clocks.sm', '?')} "
          f"(max {smi.get('clocks.max.sm', '?')}), {smi.get('temperature.gpu', '?')} C, {smi.get('pstate', '?')}",
          "- versions there: " + ", ".join(f"{k} {val}" for k, val in v.items()) + f", Python {m.get('python')}",
          "- built here: `python benchmarks/gpu/build.py compile --out DIR --models gpt2-12l,llama-2048 --batches 1,8 --variants e2e "
          "--record-dispatches cuvil_h200_td,cuvil_h200_td_nokern,cuvil_h200_nokern` (and bert-base at batch 8), "
          "`build.py pack --out DIR --runs \"gpt2-12l,llama-2048,bert-base\"`: fp16 models with sign weights (each weight tensor "
          "sign(w) * std(w)), weights external (one IREE parameter archive per model, shared by its batches and variants, "
          "~1 bit per weight on the trip: dedup.py)" + (f"; {note}" if note else ""),
          "- run there: `DEADLINE=540 bash benchmarks/gpu/e2e_device.sh 1|2 .gpu/e2e/run` (two device calls; "
          "part 1: the cuvil variants, torch eager and reduce-overhead, the profiles; part 2: td without kernels, "
          "torch.compile default, max-autotune on GPT-2 B=1 and Llama B=8)",
          "- IREE latency: `iree-benchmark-module " + " ".join(r0["bench_flags"]) + " --parameters=model=<archive>` "
          "(median of 10 repetitions, p10-p90); each module also run once through iree.runtime for its numerics",
          f"- PyTorch: the same fp16 model on the GPU (rebuilt from the same seed; weights checked by checksum), the same inputs; "
          f"{r0['torch_timing']}; torch.compile with `dynamic=False`; median (p10-p90)",
          "- result files: " + "; ".join(f"{r['file']} ({r.get('elapsed_s', '?')} s, started {r['date']})" for r in runs), ""]
    L += ["## Variants", ""] + [f"- `{k}`: {VARIANT_TARGETS.get(k, k)}" for k in variants] + [""]
    L += ["## Cases", "", "| case | model |", "|---|---|"]
    L += [f"| {n} | {MODEL_DESC.get(cases[n]['model'], cases[n]['model'])}, batch {cases[n]['batch']}, fp16, sign weights |" for n in names]

    cols = [(VARIANT_LABELS.get(k, k), k) for k in variants] + [(label, k) for k, label in TORCH_MODES]
    L += ["", "## Latency (ms, median (p10-p90); lower is better)", "",
          "| case | " + " | ".join(lbl for lbl, _ in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for n in names:
        L.append(f"| {n} | " + " | ".join(cell(cases[n], k) for _, k in cols) + " |")

    a_lbl, b_lbl = VARIANT_LABELS.get(after, after), VARIANT_LABELS.get(before, before)
    L += ["", f"## Ratios (torch time / cuvil time: above 1x cuvil is faster)", "",
          f"after = `{after}` ({a_lbl}); before = `{before}` ({b_lbl}); best torch = the fastest torch mode measured for the case "
          "(max-autotune only where it ran).", "",
          "| case | after vs eager | vs torch.compile | vs reduce-overhead | vs max-autotune | **after vs best torch** | before vs best torch | "
          "after / before (speedup) | kernels alone (td off / td on) | best torch mode |", "|---" * 10 + "|"]
    summary = {}
    for n in names:
        c = cases[n]
        a, b = ms(c, after), ms(c, before)
        bt, bt_name = best_torch(c)
        tdoff = ms(c, "cuvil_h200_td_nokern")
        L.append(f"| {n} | " + " | ".join(ratio(ms(c, k), a) for k, _ in TORCH_MODES) + f" | **{ratio(bt, a)}** | {ratio(bt, b)} | "
                 f"{ratio(b, a)} | {ratio(tdoff, a)} | {bt_name or '-'} |")
        summary[n] = {"after_ms": a, "before_ms": b, "td_kernels_off_ms": tdoff, "best_torch_ms": bt, "best_torch_mode": bt_name,
                      "after_vs_best_torch": (bt / a) if a and bt else None, "before_vs_best_torch": (bt / b) if b and bt else None,
                      **{f"after_vs_{k}": (ms(c, k) / a) if a and ms(c, k) else None for k, _ in TORCH_MODES}}
    reached = [n for n in names if (summary[n]["after_vs_best_torch"] or 0) >= 1.0]
    missed = [n for n in names if summary[n]["after_vs_best_torch"] is not None and summary[n]["after_vs_best_torch"] < 1.0]
    L += ["", f"Goal of issues 14/15 (at least 1.0x the best torch mode on every case): reached on "
          f"{', '.join(reached) or 'no case'}; not reached on {', '.join(missed) or 'no case'}"
          + ("; not measured: " + ", ".join(n for n in names if summary[n]["after_vs_best_torch"] is None)
             if any(summary[n]["after_vs_best_torch"] is None for n in names) else "") + "."]

    earlier = [n for n in names if n in EARLIER]
    if earlier:
        L += ["", "## Against the earlier runs", "",
              "issue 14's table (2026-12-03: `cuda:h200` as shipped then, no kernels, sign weights) and hopper-e2e-2026-12-03 "
              "(ptx-jit + the first linear kernels, tiled weights); ms.", "",
              "| case | issue 14 cuvil | issue 14 best torch | hopper-e2e 12-03 | before, this run | after, this run | "
              "after vs issue 14 cuvil |", "|---|---|---|---|---|---|---|"]
        for n in earlier:
            e = EARLIER[n]
            a = ms(cases[n], after)
            L.append(f"| {n} | {e['issue14_cuvil']:.2f} | {e['issue14_best_torch']:.2f} | {e['hopper_e2e_1203']:.3f} | "
                     f"{_f(ms(cases[n], before))} | {_f(a)} | {ratio(e['issue14_cuvil'], a)} |")

    L += ["", "## Numerics: max|out - ref| / max|ref| against PyTorch fp32 on the CPU (same input values)", "",
          "(fp16; flagged over 2e-2; sign weights make the logits large, so ~1e-3 is the fp16 floor here)", "",
          "| case | " + " | ".join(lbl for lbl, _ in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for n in names:
        L.append(f"| {n} | " + " | ".join(err(cases[n], k) for _, k in cols) + " |")

    L += ["", "## Dispatches per call (per layer), from the recorded call sites", "",
          "| case | " + " | ".join(VARIANT_LABELS.get(k, k) for k in variants) + " |", "|---" * (len(variants) + 1) + "|"]
    for n in names:
        cells = []
        for k in variants:
            dc = (cases[n]["iree"].get(k) or {}).get("dispatch_counts")
            cells.append(f"{dc['dispatches']} ({dc['per_layer']:g} over {dc['layers']} layers)" if dc and dc.get("per_layer")
                         else (str(dc["dispatches"]) if dc else "-"))
        L.append(f"| {n} | " + " | ".join(cells) + " |")

    L += ["", f"## Which op got which kernel (`{after}`)", "",
          "| case | kernel function | kernel (config) | call sites | or why not |", "|---|---|---|---|---|"]
    for n in names:
        row = cases[n]["iree"].get(after) or {}
        for k in row.get("kernels") or []:
            sites = k.get("sites") or []
            L.append(f"| {n} | `{k['function']}` | {k.get('config') or '-'} | {len(sites)} ({_paths(sites)}) | {k.get('why') or ''} |")
        if row and not row.get("kernels"):
            L.append(f"| {n} | (none) | | | |")
        if row:
            L.append(f"| {n} | IREE opt level | O{opt_level(row).lstrip('O')} | | |")
    return "\n".join(L) + "\n", summary


def _f(x) -> str:
    return f"{x:.3f}" if x else "-"


def _paths(sites: list[str]) -> str:
    from cuvil_mlir.eval.profiler import group_paths

    g = group_paths(sites)
    return ", ".join(g[:2]) + (" ..." if len(g) > 2 else "")


# ---------------------------------------------------------------- the profile report


def kind_of(row: dict) -> str:
    """A coarse class for the time split: the prebuilt kernels, IREE's matmuls, data movement, the rest."""
    d = row["dispatch"]
    if d.startswith("cuvil_linear"):
        return "kernel: linear"
    if d.startswith("cuvil_attention"):
        return "kernel: attention"
    k = row["kind"]
    if k.startswith(("matmul", "batch_matmul", "contract")):
        return "IREE matmul"
    if k == "attention":
        return "IREE attention"
    if k in ("slow_memcpy", "transpose") or "memcpy" in k:
        return "copy / transpose"
    if k == "reduction":
        return "reduction (norms)"
    return f"{k}"


def profile_markdown(data: dict, date: str, out: Path, limit: int = 15) -> tuple[str, list[str]]:
    from cuvil_mlir.eval.profiler import plot

    profs, seen = [], set()
    for prof in data["profiles"]:  # one per case and variant (the first part's, where both have it)
        if (prof["case"], prof["variant"]) not in seen:
            seen.add((prof["case"], prof["variant"]))
            profs.append(prof)
    smi = data["runs"][0]["machine"].get("nvidia_smi") if data.get("runs") else None
    gpu = gpu_label(smi if isinstance(smi, dict) else {})
    L = [f"# {gpu}: `cuvil profile` of the real-size models, with the Hopper kernels and without ({date})", "",
         "- timing: `iree-benchmark-module` for the wall time (median of 10); per dispatch `ncu --metrics gpu__time_duration.sum "
         "--clock-control=none --cache-control=none` around it (first call skipped, 3 calls timed; kernels serialized, so a "
         "dispatch's time is its kernel alone): cuvil_mlir.eval.profiler.measure, run by benchmarks/gpu/e2e_profile.py on the "
         "case's module with its parameter archive",
         "- call sites (module path, Cuvil op, FLOPs, bytes) recorded at compile time on the module with its kernels "
         "materialized (build.py --record-dispatches); the kernels appear under their PTX entry names (cuvil_linear_..., "
         "cuvil_attention_...); % peak: the larger of the TFLOP/s and GB/s shares of the H200 datasheet (989.5 fp16 TFLOP/s, 4800 GB/s)"
         + ("; this run's GPU is an H100 (3350 GB/s), so its GB/s shares read low by 0.7x" if gpu == "H100" else ""),
         ""]
    if data["profile_errors"]:
        L += ["Profiles that did not run: " + "; ".join(data["profile_errors"]), ""]
    pngs = []
    for p in profs:
        t = p["totals"]
        name = f"{p['case']}-{p['variant']}"
        png = out / f"gpu-profile-{name}-{date}.png"
        try:
            plot(p, png)
            pngs.append(png.name)
        except Exception as e:  # matplotlib missing: the tables still come
            png = None
            L.append(f"(no chart: {type(e).__name__}: {e})")
        per_layer = f", {t['dispatches'] / t['layers']:.1f} per layer over {t['layers']} layers" if t.get("layers") else ""
        L += [f"## {p['case']} — `{p['variant']}` ({p['target']})", "",
              f"wall **{t['wall_us']:.0f} us** = dispatches {t['dispatch_us']:.0f} us + gap {t['gap_us']:.0f} us; "
              f"{t['dispatches']:g} dispatches ({t['distinct_dispatches']} distinct){per_layer}; profiling mode {p['profiling_mode']}"
              + (f"; chart: {png.name}" if png else ""), ""]
        split: dict[str, list] = {}
        for r in p["rows"]:
            if r["time_us"] is not None:
                s = split.setdefault(kind_of(r), [0.0, 0])
                s[0] += r["time_us"]
                s[1] += r["calls"]
        L += ["| where the dispatch time goes | us per call | share | dispatches |", "|---|---|---|---|"]
        for k, (us, n) in sorted(split.items(), key=lambda kv: -kv[1][0]):
            L.append(f"| {k} | {us:.1f} | {us / t['dispatch_us']:.1%} | {n:g} |" if t["dispatch_us"] else f"| {k} | {us:.1f} | - | {n:g} |")
        L += ["", "| # | dispatch | calls | us/call | share | TFLOP/s | GB/s | % peak | module paths | cuvil ops |", "|---" * 10 + "|"]
        for i, r in enumerate([r for r in p["rows"] if r["time_us"] is not None][:limit], 1):
            peak = max([x for x in (r.get("tflops_share_of_peak"), r.get("gbs_share_of_peak")) if x is not None], default=None)
            L.append(f"| {i} | `{r['dispatch'].split('$async_', 1)[-1][:70]}` | {r['calls']:g} | {r['time_us'] / r['calls']:.1f} | "
                     f"{r['share']:.1%} | {_g(r['tflops'])} | {_g(r['gbs'], 0)} | {'-' if peak is None else f'{peak:.1%}'} | "
                     f"{', '.join(r['module_paths'][:3]) + (' ...' if len(r['module_paths']) > 3 else '')} | {', '.join(r['cuvil_ops'])} |")
        untimed = [r["dispatch"] for r in p["rows"] if r["time_us"] is None]
        if untimed:
            L += ["", f"Recorded but not timed (not in ncu's list): {', '.join(untimed[:8])}" + (" ..." if len(untimed) > 8 else "")]
        L.append("")
    if not profs:
        L.append("No profile came back.")
    return "\n".join(L) + "\n", pngs


def _g(x, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


# ---------------------------------------------------------------- main


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dirs", nargs="+", type=Path, help="folders with the files the device calls brought back")
    p.add_argument("--date", required=True)
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    p.add_argument("--after", default="cuvil_h200_td")
    p.add_argument("--before", default="cuvil_h200_nokern")
    p.add_argument("--note", default="")
    opts = p.parse_args()
    data = load(opts.dirs)
    opts.out.mkdir(parents=True, exist_ok=True)
    md, summary = e2e_markdown(data, opts.date, opts.after, opts.before, opts.note)
    base = opts.out / f"gpu-e2e-{opts.date}"
    base.with_suffix(".md").write_text(md)
    base.with_suffix(".json").write_text(json.dumps({"date": opts.date, "after": opts.after, "before": opts.before,
                                                     "summary": summary, "cases": data["cases"], "runs": data["runs"]}, indent=1))
    print(f"wrote {base}.md, .json")
    pmd, pngs = profile_markdown(data, opts.date, opts.out)
    pbase = opts.out / f"gpu-profile-{opts.date}"
    pbase.with_suffix(".md").write_text(pmd)
    pbase.with_suffix(".json").write_text(json.dumps({"date": opts.date, "profiles": data["profiles"],
                                                      "errors": data["profile_errors"]}, indent=1))
    print(f"wrote {pbase}.md, .json" + (f", {', '.join(pngs)}" if pngs else ""))
    print(md.split("## Ratios", 1)[-1].split("## Against", 1)[0][:3000])


if __name__ == "__main__":
    main()

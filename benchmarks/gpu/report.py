"""Turn the results-*.json files that run_on_h200.py wrote on the GPU machine into
benchmarks/results/gpu-<kind>-<date>.md and .json (kind: e2e, ablation, precision).

    python benchmarks/gpu/report.py e2e .../results-run1.json ... --date 2026-12-03 [--cases mlp,gpt2] [--note TEXT]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

# columns of the latency table: (label, where in a case's results)
IREE_COLS = [
    ("cuvil h200 ptx-jit (= sm_89)", "cuvil_h200"),
    ("cuvil h200 target-description", "cuvil_h200_td"),
    ("cuvil sm_90 target-description (no chip)", "cuvil_sm90_td"),
    ("plain IREE (h200 ptx-jit flags)", "plain_h200"),
    ("cuvil vulkan:ampere", "cuvil_vulkan_ampere"),
    ("cuvil vulkan (portable)", "cuvil_vulkan"),
]
TORCH_COLS = [("torch eager", "eager"), ("torch.compile", "compile_default"), ("reduce-overhead", "compile_reduce_overhead"),
              ("max-autotune", "compile_max_autotune")]
MODEL_ORDER = ["mlp", "cnn", "transformer", "gpt2", "gpt2s", "block768", "gpt2-12l", "llama-2048", "bert-base"]
MODEL_DESC = {
    "mlp": "MLP 64-256-256-32 (gelu, silu)",
    "cnn": "SmallCNN 3-16-32 conv+BN+ReLU+pool, 32x32",
    "transformer": "pre-norm GPT block d=64, 4 heads, T=16 (examples TransformerBlock)",
    "gpt2": "HF GPT-2, 2 layers, d=64, 4 heads, T=16, vocab 256",
    "gpt2s": "HF GPT-2, 2 layers, d=768, 12 heads, T=128, vocab 256 (GPT-2-small width), sign weights",
    "block768": "examples TransformerBlock d=768, 12 heads, T=128 (GPT-2-small width), sign weights",
    "gpt2-12l": "HF GPT-2, 12 layers, d=768, 12 heads, T=128, vocab 256, sign weights",
    "llama-2048": "HF Llama, 2 layers, d=2048, 32/8 heads, FFN 8192 (SwiGLU), T=512, vocab 256, SDPA, sign weights",
    "bert-base": "HF BERT encoder, 12 layers, d=768, 12 heads, FFN 3072, T=128, vocab 256, sign weights",
}


def merge(files: list[Path]) -> dict:
    runs = [json.loads(f.read_text()) for f in files]
    cases: dict[str, dict] = {}
    for r in runs:
        for name, c in r["cases"].items():
            dst = cases.setdefault(name, {"model": c["model"], "batch": c["batch"], "iree": {}, "torch": None})
            for v, row in c["iree"].items():
                if v not in dst["iree"] or dst["iree"][v].get("status") != "measured":
                    dst["iree"][v] = row
            if c.get("torch"):
                dst["torch"] = c["torch"]
    return {"runs": runs, "cases": cases}


def iree_row(case: dict, key: str) -> dict:
    row = case["iree"].get(key) or {}
    if "same_as" in row:
        row = case["iree"].get(row["same_as"], {})
    return row


def latency(case: dict, key: str) -> float | None:
    if key in dict(TORCH_COLS).values():
        t = (case.get("torch") or {}).get(key) or {}
        return t.get("median_ms") if t.get("status") == "ok" else None
    b = iree_row(case, key).get("bench") or {}
    return b.get("median_ms") if b.get("status") == "ok" else None


def cell_ms(case: dict, key: str) -> str:
    if key in dict(TORCH_COLS).values():
        t = (case.get("torch") or {}).get(key)
        if not t:
            return "-"
        return f"{t['median_ms']:.3f} ({t['p10_ms']:.3f}-{t['p90_ms']:.3f})" if t.get("status") == "ok" else "failed"
    row = iree_row(case, key)
    b = row.get("bench") or {}
    if b.get("status") == "ok":
        tag = " (no caching alloc.)" if "with_caching_allocator" in b else ""
        dt = " fp32" if row.get("dtype") == "float32" else ""
        return f"{b['median_ms']:.3f} ({b['p10_ms']:.3f}-{b['p90_ms']:.3f}){dt}{tag}"
    if not row:
        return "-"
    if row.get("status", "").startswith("compile failed"):
        return "compile failed"
    return "load failed" if (row.get("check") or {}).get("status", "ok") != "ok" else "run failed"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def order(cases: dict) -> list[str]:
    return sorted(cases, key=lambda n: (MODEL_ORDER.index(cases[n]["model"]) if cases[n]["model"] in MODEL_ORDER else 99, cases[n]["batch"]))


def err_cell(row: dict, budget: float = 2e-2) -> str:
    c = row.get("check") or {}
    if c.get("status") != "ok":
        return "-"
    if c.get("numerics") != "ok":
        return c.get("numerics", "?")
    e = c["max_rel_err"]
    return f"{e:.1e}" + (" **WRONG**" if e > budget else "")


def markdown(data: dict, date: str, note: str) -> str:
    r0 = data["runs"][0]
    m, v = r0["machine"], r0["versions"]
    smi = m.get("nvidia_smi") if isinstance(m.get("nvidia_smi"), dict) else {}
    cases = data["cases"]
    names = order(cases)
    L = [f"# H200: cuvil-mlir (IREE 3.13) vs plain IREE vs PyTorch, fp16 ({date})", ""]
    L += [f"- machine: {smi.get('name', '?')}, driver {smi.get('driver_version', '?')}, CUDA {m.get('cuda_version_smi', '?')}, "
          f"{smi.get('memory.total', '?')}, {m.get('cpus')} CPUs, kernel {m.get('kernel')}; GPU state at start: SM clock "
          f"{smi.get('clocks.sm', '?')} (max {smi.get('clocks.max.sm', '?')}), {smi.get('temperature.gpu', '?')} C, {smi.get('pstate', '?')}",
          "- versions there: " + ", ".join(f"{k} {val}" for k, val in v.items()) + f", Python {m.get('python')}",
          "- built here (CPU machine): see `.gpu/build.json` — " + note,
          "- IREE latency: `iree-benchmark-module --device=cuda|vulkan " + " ".join(r0["bench_flags"]) +
          " --input=@inputN.npy` (median of 10 repetitions, p10-p90 over the repetitions); the exact command of each module is in the .json",
          f"- PyTorch latency: {r0['torch_timing']}; median (p10-p90); torch.compile with `dynamic=False`, "
          "`torch._dynamo.reset()` before each mode; model `.half().cuda()`, inputs the same .npy files",
          "- runs: " + "; ".join(f"{r['run']} ({r['elapsed_s']} s, started {r['date']})" for r in data["runs"]), ""]
    L += ["## Models", "", "| case | model |", "|---|---|"]
    L += [f"| {n} | {MODEL_DESC.get(cases[n]['model'], cases[n]['model'])}, batch {cases[n]['batch']} |" for n in names]
    L += ["", "## Latency (ms, median (p10-p90); lower is better)", "",
          "| case | " + " | ".join(lbl for lbl, _ in IREE_COLS + TORCH_COLS) + " |", "|---" * (1 + len(IREE_COLS) + len(TORCH_COLS)) + "|"]
    for n in names:
        L.append(f"| {n} | " + " | ".join(cell_ms(cases[n], k) for _, k in IREE_COLS + TORCH_COLS) + " |")
    L += ["", "## Ratios (torch time / IREE time: above 1x the IREE module is faster, below 1x PyTorch is)", "",
          "cuvil = `cuda:h200` as shipped (ptx-jit), or where a case has no such module `cuda:h200{hopper-mode=target-description}` "
          "(marked td); best torch = the fastest of the torch modes measured (max-autotune only where the case has it).", "",
          "| case | cuvil vs eager | cuvil vs torch.compile | cuvil vs reduce-overhead | cuvil vs max-autotune | cuvil vs best torch | "
          "cuvil vs plain IREE | vulkan:ampere vs cuvil cuda |", "|---|---|---|---|---|---|---|---|"]
    for n in names:
        c = cases[n]
        cu, td = latency(c, "cuvil_h200"), ""
        if cu is None and latency(c, "cuvil_h200_td"):
            cu, td = latency(c, "cuvil_h200_td"), " (td)"
        torch_ms = [latency(c, k) for _, k in TORCH_COLS]
        best = min((t for t in torch_ms if t), default=None)
        L.append(f"| {n}{td} | {ratio(torch_ms[0], cu)} | {ratio(torch_ms[1], cu)} | {ratio(torch_ms[2], cu)} | {ratio(torch_ms[3], cu)} | "
                 f"{ratio(best, cu)} | {ratio(latency(c, 'plain_h200'), cu)} | {ratio(cu, latency(c, 'cuvil_vulkan_ampere'))} |")
    L += ["", "## Numerics: max|out - ref| / max|ref| against the PyTorch CPU fp32 reference", "",
          "(same input values; fp16 modules, so ~1e-3 is expected; flagged above 2e-2)", "",
          "| case | " + " | ".join(lbl for lbl, _ in IREE_COLS + TORCH_COLS) + " |", "|---" * (1 + len(IREE_COLS) + len(TORCH_COLS)) + "|"]
    for n in names:
        c = cases[n]
        cells = [err_cell(iree_row(c, k)) for _, k in IREE_COLS]
        t = c.get("torch") or {}
        for _, k in TORCH_COLS:
            tt = t.get(k) or {}
            cells.append(f"{tt['max_rel_err']:.1e}" if tt.get("numerics") == "ok" else (tt.get("numerics") or "-")[:30])
        L.append(f"| {n} | " + " | ".join(cells) + " |")
    L += ["", "## Hopper: ptx-jit (sm_89 PTX, JIT-compiled by the driver) vs target-description (sm_90 PTX)", "",
          "| case | ptx-jit ms | target-description ms | td / ptx-jit | load s (ptx-jit / td; includes the PTX JIT) | max rel err (ptx-jit / td) |",
          "|---|---|---|---|---|---|"]
    ratios = []
    for n in names:
        c = cases[n]
        a, b = latency(c, "cuvil_h200"), latency(c, "cuvil_h200_td")
        ca, cb = iree_row(c, "cuvil_h200").get("check") or {}, iree_row(c, "cuvil_h200_td").get("check") or {}
        if a and b:
            ratios.append(b / a)
        L.append(f"| {n} | {a and f'{a:.4f}' or '-'} | {b and f'{b:.4f}' or '-'} | {ratio(b, a)} | "
                 f"{ca.get('module_load_s', '-')} / {cb.get('module_load_s', '-')} | {err_cell(iree_row(c, 'cuvil_h200'))} / {err_cell(iree_row(c, 'cuvil_h200_td'))} |")
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        L += ["", f"Geometric mean of td / ptx-jit over {len(ratios)} cases: {geo:.3f} (below 1: target-description is faster)."]
    L += ["", "## Failures (verbatim, shortened; a message shared by several cases is listed once)", ""]
    shown = {}
    keys = {k for _, k in IREE_COLS}
    for n in names:
        for k, row in cases[n]["iree"].items():
            if k not in keys:
                continue
            for a in row.get("compile_attempts", []):
                if a["status"] != "ok":
                    L.append(f"- {n} {k} compile ({a['dtype']}): `{a['status'][:300]}`")
            c, b = row.get("check") or {}, row.get("bench") or {}
            if c and c.get("status") != "ok":
                L.append(f"- {n} {k} load/run (iree.runtime): `{c['status'][:400]}`")
            if c.get("status") == "ok" and c.get("numerics") != "ok":
                L.append(f"- {n} {k} numerics: `{c.get('numerics')}`")
            if b and b.get("status") != "ok":
                L.append(f"- {n} {k} iree-benchmark-module: `{b['status'][:400]}`")
            if "with_caching_allocator" in b:
                L.append(f"- {n} {k} iree-benchmark-module with --device_allocator=caching: `{b['with_caching_allocator']['status'][:300]}` (timed without it)")
        t = cases[n].get("torch") or {}
        for k, tt in t.items():
            if isinstance(tt, dict) and tt.get("status", "ok") != "ok":
                L.append(f"- {n} torch {k}: `{tt['status'][:300]}`")
    out, seen = [], {}
    for line in L:  # "- case variant what: `message`" -> one line per message, naming every case
        head, sep, msg = line.partition(": `")
        if line.startswith("- ") and sep:
            if msg in seen:
                out[seen[msg]] = out[seen[msg]].replace(": `", f", {head[2:]}: `", 1)
                continue
            seen[msg] = len(out)
        out.append(line)
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- ablation and precision


def header(data: dict, title: str, note: str) -> list[str]:
    r0 = data["runs"][0]
    m, v = r0["machine"], r0["versions"]
    smi = m.get("nvidia_smi") if isinstance(m.get("nvidia_smi"), dict) else {}
    return [f"# {title}", "",
            f"- machine: {smi.get('name', '?')}, driver {smi.get('driver_version', '?')}, CUDA {m.get('cuda_version_smi', '?')}, "
            f"{smi.get('memory.total', '?')}, {m.get('cpus')} CPUs; SM clock at start {smi.get('clocks.sm', '?')} "
            f"(max {smi.get('clocks.max.sm', '?')}), {smi.get('temperature.gpu', '?')} C, {smi.get('pstate', '?')}",
            "- versions there: " + ", ".join(f"{k} {val}" for k, val in v.items()) + f", Python {m.get('python')}",
            "- built on the CPU machine with `benchmarks/gpu/build.py` (`.gpu/build.json`); run there with "
            "`bash benchmarks/gpu/device_run.sh .gpu/runN` (benchmarks/gpu/run_on_h200.py) — " + note,
            "- IREE latency: `iree-benchmark-module " + " ".join(r0["bench_flags"]) + "` (median of 10 repetitions; p10-p90)",
            f"- PyTorch: {r0['torch_timing']}; median (p10-p90)",
            "- runs: " + "; ".join(f"{r['run']} ({r.get('elapsed_s')} s, started {r['date']})" for r in data["runs"]), ""]


def fired_passes(row: dict) -> str:
    fired = row.get("patterns_fired") or {}
    return ", ".join(f"{p}: " + "+".join(f"{k}x{n}" for k, n in pats.items()) for p, pats in fired.items()
                     if p.startswith("fuse-") and pats) or "none"


def ablation_markdown(data: dict, build: dict, date: str, note: str) -> str:
    cases = data["cases"]
    L = header(data, f"H200: fusion ablation on cuda:h200, fp16 ({date})", note)
    L += ["Each row switches one fusion pass off (`disabled_passes=(pass,)`); a pass that fired nowhere in the "
          "default module is not rebuilt (its row would be the default module again). delta = (without - default) / "
          "default: **positive means the pass makes the model faster**. Plain IREE = no Cuvil at all.", ""]
    for n in sorted(cases):
        c = cases[n]
        meta = build.get(n, {})
        base = latency(c, "cuvil_h200")
        L += [f"## {n}: {meta.get('builder', '')} {json.dumps(meta.get('kwargs', {}))}", "",
              f"fusion passes that fired (default): {fired_passes(meta.get('variants', {}).get('cuvil_h200', {}))}", "",
              "| configuration | median ms (p10-p90) | delta vs default | max rel err |", "|---|---|---|---|"]
        for k, row in c["iree"].items():
            label = "default (all passes)" if k == "cuvil_h200" else ("plain IREE" if k == "plain_h200" else
                                                                      "without fuse-" + k.removeprefix("cuvil_h200_no_").replace("_", "-"))
            if "same_as" in row:
                why = row["status"].removeprefix("same module as cuvil_h200").strip(" ()") or \
                    "it fired, but the module came out byte-identical to the default's"
                L.append(f"| {label} | = default ({why}) | - | - |")
                continue
            ms = latency(c, k)
            d = f"{(ms - base) / base * 100:+.1f}%" if ms and base and k != "cuvil_h200" else "-"
            L.append(f"| {label} | {cell_ms(c, k)} | {d} | {err_cell(row)} |")
        t = c.get("torch") or {}
        for lbl, k in TORCH_COLS:
            if isinstance(t.get(k), dict):
                L.append(f"| {lbl} | {cell_ms(c, k)} | {ratio(latency(c, k), base)} of default's time | "
                         f"{t[k].get('max_rel_err', float('nan')):.1e} |")
        L.append("")
    return "\n".join(L) + "\n"


PREC_ROWS = [  # (label, variant, torch dtype it is compared with, error budget: harness PRECISION_RTOL / fp16 2e-2)
    ("cuvil fp32 (fp32 model)", "cuvil_h200_f32", "float32", 1e-4),
    ("plain IREE fp32", "plain_h200_f32", "float32", 1e-4),
    ("cuvil precision=fp16 (fp32 model in, fp16 compute)", "cuvil_h200_p16_f32", "float16", 2e-2),
    ("cuvil int8-weight (fp32 model, fp32 activations)", "cuvil_h200_int8w_f32", "float32", 5e-2),
    ("cuvil int4-weight (fp32 model, fp32 activations)", "cuvil_h200_int4w_f32", "float32", 2.5e-1),
    ("cuvil precision=fp16{io=fp16} (fp32 model, fp16 in/out)", "cuvil_h200_p16io_f32", "float16", 2e-2),
    ("cuvil precision=bf16 (fp32 model in, bf16 compute)", "cuvil_h200_bf16_f32", "bfloat16", 5e-2),
    ("cuvil int8 static, calibrated (fp32 model)", "cuvil_h200_int8_f32", "float32", 5e-2),
    ("cuvil precision=fp16+int8-weight (fp32 model, fp16 compute)", "cuvil_h200_w8a16_f32", "float16", 7e-2),
    ("cuvil fp16 (model.half())", "cuvil_h200", "float16", 2e-2),
    ("plain IREE fp16 (model.half())", "plain_h200", "float16", 2e-2),
    ("cuvil int8-weight (fp16 model)", "cuvil_h200_int8w", "float16", 5e-2),
    ("cuvil int4-weight (fp16 model)", "cuvil_h200_int4w", "float16", 2.5e-1),
    ("cuvil int8 static, calibrated (fp16 model)", "cuvil_h200_int8", "float16", 5e-2),
]


def torch_at(case: dict, dtype: str, mode: str):
    t = case.get("torch") or {}
    t = t.get(dtype, {}) if dtype in ("float32", "bfloat16") else t
    t = t.get(mode) or {}
    return t.get("median_ms") if t.get("status") == "ok" else None


def precision_markdown(data: dict, build: dict, date: str, note: str) -> str:
    cases = data["cases"]
    L = header(data, f"H200: precision policies on cuda:h200 ({date})", note)
    L += ["Module size is the .vmfb (weights embedded). Ratios: torch time / cuvil time at the precision the row computes "
          "in (fp32 rows against torch fp32, fp16 rows and quantized rows with fp16 activations against torch fp16, bf16 "
          "against torch bf16, the fp32 model's int8 rows against torch fp32); above 1x cuvil is faster. PyTorch has no "
          "int8/int4 mode on this GPU machine (no torchao), so the quantized rows are compared with torch at their "
          "activation precision. Errors: against the PyTorch CPU fp32 reference, flagged above the policy's budget "
          "(fp32 1e-4, fp16 2e-2, bf16/int8-weight/int8 5e-2, int4-weight 2.5e-1: the harness's PRECISION_RTOL). A ' fp32' "
          "after a time means the module was built from the fp32 model (its inputs and outputs are fp32, except the "
          "io=fp16 row's: fp16).", ""]
    for n in sorted(cases):
        c = cases[n]
        meta = build.get(n, {})
        sign = meta.get("kwargs", {}).get("weights") == "sign"
        L += [f"## {n}: {meta.get('builder', '')} {json.dumps(meta.get('kwargs', {}))}", ""]
        if sign:
            L += ["Sign weights (two values per tensor): int8/int4 quantize them exactly, so their errors here say "
                  "nothing about quantization quality; sizes and speeds are real.", ""]
        L += ["| variant | module MiB | median ms (p10-p90) | vs torch eager | vs torch.compile | vs reduce-overhead | max rel err |",
              "|---|---|---|---|---|---|---|"]
        for label, k, dt, budget in PREC_ROWS:
            row = iree_row(c, k)
            if not row:
                continue
            size = row.get("bytes")
            ms = latency(c, k)
            L.append(f"| {label} | {size / 2**20:.2f} | {cell_ms(c, k)} | " if size else f"| {label} | - | {cell_ms(c, k)} | ")
            L[-1] += " | ".join(ratio(torch_at(c, dt, m), ms) for m in ("eager", "compile_default", "compile_reduce_overhead"))
            L[-1] += f" | {err_cell(row, budget)} |"
        for dt in ("float32", "float16", "bfloat16"):
            if dt == "bfloat16" and not (c.get("torch") or {}).get("bfloat16"):
                continue
            cells = [f"{torch_at(c, dt, m):.3f}" if torch_at(c, dt, m) else "-" for m in ("eager", "compile_default", "compile_reduce_overhead")]
            L.append(f"| torch {dt} eager / compile / reduce-overhead (ms) | - | {' / '.join(cells)} | | | | |")
        L.append("")
    return "\n".join(L) + "\n"


def build_cases() -> dict:
    """case name -> its case.json (builder, kwargs, variants with patterns_fired and sizes)."""
    out = {}
    for f in (REPO / ".gpu" / "cases").glob("*/case.json"):
        out[f.parent.name] = json.loads(f.read_text())
    return out


def compare_files(report_json: Path, date: str, out: Path, note: str) -> str:
    """The JSON `cuvil compare --from DIR --json` wrote there -> gpu-compare-<date>.{json,md,png}:
    the table as `cuvil compare` prints it (cuvil_mlir.eval.render, which works from the JSON alone) and its chart."""
    import io

    from rich.console import Console

    from cuvil_mlir.eval import render

    report = json.loads(report_json.read_text())
    stem = out / f"gpu-compare-{date}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1))
    render.plot(report, stem.with_suffix(".png"))
    console = Console(file=io.StringIO(), width=200, record=True)
    console.print(render.table(report))
    m = report.get("machine", {})
    md = [f"# H200: `cuvil compare --from` ({date})", "", note, "",
          f"- machine (there): {json.dumps({k: m[k] for k in list(m)[:8]})}",
          f"- versions (there): {json.dumps(report.get('versions', {}))}",
          f"- settings: {json.dumps(report.get('settings', {}))}", "", "```", console.export_text().rstrip(), "```", "",
          f"Chart: gpu-compare-{date}.png; the full report: gpu-compare-{date}.json.", ""]
    stem.with_suffix(".md").write_text("\n".join(md))
    return "\n".join(md)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "compare":
        p = argparse.ArgumentParser()
        p.add_argument("kind")
        p.add_argument("report", type=Path)
        p.add_argument("--date", required=True)
        p.add_argument("--note", default="")
        p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
        opts = p.parse_args()
        print(compare_files(opts.report, opts.date, opts.out, opts.note))
        return
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=("e2e", "ablation", "precision"))
    p.add_argument("results", type=Path, nargs="+")
    p.add_argument("--date", required=True)
    p.add_argument("--note", default="")
    p.add_argument("--cases", default="", help="comma-separated case-name prefixes to keep (default all)")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    opts = p.parse_args()
    data = merge(opts.results)
    keep = tuple(filter(None, opts.cases.split(",")))
    if keep:
        data["cases"] = {k: v for k, v in data["cases"].items() if k.startswith(keep)}
    build = build_cases()
    data["build"] = {k: v for k, v in build.items() if k in data["cases"]}
    opts.out.mkdir(parents=True, exist_ok=True)
    stem = opts.out / f"gpu-{opts.kind}-{opts.date}"
    stem.with_suffix(".json").write_text(json.dumps(data, indent=1))
    if opts.kind == "e2e":
        md = markdown(data, opts.date, opts.note)
    elif opts.kind == "ablation":
        md = ablation_markdown(data, build, opts.date, opts.note)
    else:
        md = precision_markdown(data, build, opts.date, opts.note)
    stem.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()

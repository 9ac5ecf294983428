"""Turn the results-*.json files that run_on_h200.py wrote on the GPU machine into
benchmarks/results/gpu-h200-<date>.md and .json.

    python benchmarks/gpu/report.py /work/.device/.../results-run1.json ... [--runs-note TEXT]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# columns of the latency table: (label, where in a case's results)
IREE_COLS = [
    ("cuvil h200 ptx-jit (= sm_89)", "cuvil_h200"),
    ("cuvil h200 target-description", "cuvil_h200_td"),
    ("plain IREE (h200 ptx-jit flags)", "plain_h200"),
    ("cuvil vulkan:ampere", "cuvil_vulkan_ampere"),
    ("cuvil vulkan (portable)", "cuvil_vulkan"),
]
TORCH_COLS = [("torch eager", "eager"), ("torch.compile", "compile_default"), ("reduce-overhead", "compile_reduce_overhead")]
MODEL_ORDER = ["mlp", "cnn", "transformer", "gpt2", "gpt2s"]
MODEL_DESC = {
    "mlp": "MLP 64-256-256-32 (gelu, silu)",
    "cnn": "SmallCNN 3-16-32 conv+BN+ReLU+pool, 32x32",
    "transformer": "pre-norm GPT block d=64, 4 heads, T=16",
    "gpt2": "HF GPT-2, 2 layers, d=64, 4 heads, T=16, vocab 256",
    "gpt2s": "HF GPT-2, 1 layer, d=768, 12 heads, T=128, vocab 256 (GPT-2-small width)",
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


def err_cell(row: dict) -> str:
    c = row.get("check") or {}
    if c.get("status") != "ok":
        return "-"
    if c.get("numerics") != "ok":
        return c.get("numerics", "?")
    e = c["max_rel_err"]
    return f"{e:.1e}" + (" **WRONG**" if e > 2e-2 else "")


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
    L += ["", "## Ratios (other / this: above 1x means this IREE module is faster)", "",
          "| case | " + " | ".join(f"{lbl} vs reduce-overhead | vs eager" for lbl, _ in IREE_COLS[:4]) + " | torch.compile vs eager | reduce-overhead vs eager |",
          "|---" * (3 + 2 * 4) + "|"]
    for n in names:
        c = cases[n]
        ro, eager = latency(c, "compile_reduce_overhead"), latency(c, "eager")
        cells = []
        for _, k in IREE_COLS[:4]:
            cells += [ratio(ro, latency(c, k)), ratio(eager, latency(c, k))]
        cells += [ratio(eager, latency(c, "compile_default")), ratio(eager, ro)]
        L.append(f"| {n} | " + " | ".join(cells) + " |")
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
    L += ["", "## Failures (verbatim, shortened)", ""]
    for n in names:
        for k, row in cases[n]["iree"].items():
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
    return "\n".join(L) + "\n"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("results", type=Path, nargs="+")
    p.add_argument("--date", required=True)
    p.add_argument("--note", default="")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    opts = p.parse_args()
    data = merge(opts.results)
    build = REPO / ".gpu" / "build.json"
    if build.exists():
        data["build"] = json.loads(build.read_text())
    opts.out.mkdir(parents=True, exist_ok=True)
    (opts.out / f"gpu-h200-{opts.date}.json").write_text(json.dumps(data, indent=1))
    md = markdown(data, opts.date, opts.note)
    (opts.out / f"gpu-h200-{opts.date}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()

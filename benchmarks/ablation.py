"""Ablation: what each fusion pass is worth, pass by pass, on one target.

    python benchmarks/ablation.py                          # cpu, every model below
    python benchmarks/ablation.py --models gpt2-eager,cnn --target cpu --out /tmp/ablation

For each model this runs cuvil_mlir.eval.harness.compare on one target with the configurations
    default                 every built-in pass
    without:<pass>          one fusion pass switched off (for each pass of targets/base.py FUSION_PASSES)
    plain-iree              torch-mlir's own import straight into IREE, no Cuvil
plus PyTorch eager as the competitor, timed side by side in interleaved rounds (the harness).
A pass that fired nowhere in a model is reported as such (its "without" row is the default
module again, so its delta is noise). Results: a Markdown table and the harness JSON per model
in benchmarks/results/ablation-<target>-<size>-<date>.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

MODELS = ("mlp", "cnn", "transformer", "gpt2", "gpt2-eager", "bert-eager", "llama-eager")
# --size medium: sizes where the kernels, not the call overhead, decide (sequence 128, width 256)
MEDIUM = {"mlp": dict(batch=64), "cnn": dict(batch=8, size=64), "transformer": dict(seq=128, d_model=256)}
MEDIUM_HF = dict(d_model=256, seq=128)


def model_factory(name: str, size: str = "small"):
    from models import E2E_MODELS, EAGER_ATTENTION_MODELS

    table = {**E2E_MODELS, **EAGER_ATTENTION_MODELS}
    if name not in table:
        raise SystemExit(f"unknown model '{name}'; models: {', '.join(table)}")
    if size == "small":
        return table[name]
    kwargs = MEDIUM.get(name, MEDIUM_HF)
    return lambda: table[name](**kwargs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--size", choices=("small", "medium"), default="medium",
                        help="the builders' example sizes (small) or sequence 128 / width 256 (medium, default)")
    parser.add_argument("--repetitions", type=int, default=50)
    parser.add_argument("--min-time", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args(argv)

    import torch

    from cuvil_mlir.eval.harness import compare
    from cuvil_mlir.targets.base import FUSION_PASSES

    torch.set_num_threads(max(1, torch.get_num_threads()))
    configs = ["default", *(f"without:{p}" for p in FUSION_PASSES), "plain-iree"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"ablation-{args.target.replace(':', '_')}-{args.size}-{date.today().isoformat()}"
    rows, reports = [], {}
    for name in args.models.split(","):
        model, inputs = model_factory(name, args.size)()
        report = compare(model, inputs, targets=[args.target], configs=configs, competitors=["eager"],
                         repetitions=args.repetitions, min_time=args.min_time, rounds=args.rounds, progress=True)
        reports[name] = report.to_json()
        rows += _rows(name, report.to_json())
        print(f"{name}: done", file=sys.stderr)
    stem.with_suffix(".json").write_text(json.dumps(reports, indent=2))
    stem.with_suffix(".md").write_text(_markdown(rows, args, reports))
    print(stem.with_suffix(".md").read_text())
    return 0


def _rows(model: str, report: dict) -> list[dict]:
    entries = {e["name"]: e for e in report["entries"]}
    default = next(e for e in report["entries"] if e.get("config") == "default")
    base = (default.get("latency") or {}).get("median_ms")
    fired = default.get("patterns_fired") or {}
    out = []
    for e in report["entries"]:
        lat = (e.get("latency") or {}).get("median_ms")
        config = e.get("config") or e["name"]
        pass_name = config.removeprefix("without:") if config.startswith("without:") else None
        out.append({
            "model": model, "config": config, "status": e.get("status"),
            "median_ms": lat, "p10_ms": (e.get("latency") or {}).get("p10_ms"), "p90_ms": (e.get("latency") or {}).get("p90_ms"),
            "vs_default": (lat / base) if lat and base else None,
            "max_rel_error": (e.get("numerics") or {}).get("max_rel_err"),
            "fired_in_default": (sum(fired.get(pass_name, {}).values()) if pass_name else None),
        })
    del entries
    return out


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def _markdown(rows: list[dict], args, reports: dict) -> str:
    any_report = next(iter(reports.values()))
    machine = any_report.get("machine", {})
    lines = [
        f"# Ablation of the fusion passes on `{args.target}` ({date.today().isoformat()})",
        "",
        f"- machine: {machine.get('cpu') or platform.processor() or platform.machine()}, "
        f"{machine.get('logical_cpus', '?')} logical CPUs, load at start {machine.get('loadavg_start')}",
        f"- command: `python benchmarks/{Path(__file__).name} {shlex.join(sys.argv[1:])}`",
        "- each row: median latency (p10-p90) of one configuration, timed side by side with the others",
        "  and PyTorch eager in interleaved rounds; `vs default` > 1 means slower than the default.",
        "- `fired` = how often the switched-off pass fired in the default build (0: the row is the default module again).",
        "",
        "| model | configuration | status | median ms | p10-p90 ms | vs default | fired | max rel. error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        spread = f"{_fmt(r['p10_ms'], '.3f')}-{_fmt(r['p90_ms'], '.3f')}"
        lines.append(f"| {r['model']} | {r['config']} | {r['status']} | {_fmt(r['median_ms'], '.3f')} | {spread} | "
                     f"{_fmt(r['vs_default'], '.2f')} | {_fmt(r['fired_in_default'], 'd')} | {_fmt(r['max_rel_error'], '.1e')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

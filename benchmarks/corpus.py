"""The differential corpus as a benchmark: pass rates of cuvil and of plain torch-mlir + IREE.

    python benchmarks/corpus.py                      # the whole corpus (~530 programs, ~20 min on 2 cores)
    python benchmarks/corpus.py --sample 60          # the CI sample
    python benchmarks/corpus.py -k inplace/ -k pytree/   # programs whose name contains a string
    python benchmarks/corpus.py --out benchmarks/results/corpus-before-2026-12-03

Writes OUT.jsonl (one line per program, appended as it goes: a rerun with the same --out
skips what is done), OUT.json (summary) and OUT.md (table, and every program where the two
paths disagree). Programs and the comparison rules: tests/corpus/programs.py, differential.py.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shlex
import sys
import time
import warnings
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "corpus"))


def _preload() -> None:
    """Import every cuvil module now, so that editing the tree during a long run cannot
    change the code half-way through it."""
    import pkgutil

    import cuvil_mlir

    for info in pkgutil.walk_packages(cuvil_mlir.__path__, "cuvil_mlir."):
        if not info.name.endswith(("pytest_plugin", "__main__")):
            try:
                importlib.import_module(info.name)
            except Exception:
                pass
    for package in ("cuvil_mlir.lowering", "cuvil_mlir.targets", "cuvil_mlir.dialects"):
        mod = importlib.import_module(package)
        for info in pkgutil.iter_modules(mod.__path__, package + "."):
            importlib.import_module(info.name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, help="about N programs spread over every family")
    ap.add_argument("-k", action="append", default=[], help="only programs whose name contains this (repeatable)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / f"corpus-{datetime.now(timezone.utc):%Y-%m-%d}"))
    ap.add_argument("--paths", default="cuvil,plain", help="which paths to run (cuvil, plain)")
    ap.add_argument("--failed-in", metavar="RUN.jsonl", help="only programs cuvil failed in that run (to iterate on fixes)")
    args = ap.parse_args(argv)

    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(1)
    _preload()
    import differential as D
    import programs as P

    progs = P.all_programs()
    if args.k:
        progs = [p for p in progs if any(k in p.name for k in args.k)]
    if args.sample:
        progs = P.sample(progs, args.sample)
    if args.failed_in:
        rows = [json.loads(line) for line in Path(args.failed_in).read_text().splitlines()]
        failed = {r["name"] for r in rows if not r.get("cuvil", {}).get("ok", False)}
        progs = [p for p in progs if p.name in failed]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    jsonl = out.with_suffix(".jsonl")
    done = {}
    if jsonl.exists():
        for line in jsonl.read_text().splitlines():
            row = json.loads(line)
            done[row["name"]] = row
    paths = args.paths.split(",")
    start = time.time()
    with jsonl.open("a") as f:
        for i, p in enumerate(progs):
            if p.name in done:
                continue
            row = {"name": p.name, "family": p.family, "tags": list(p.tags)}
            try:
                ref = D.reference(p)
            except Exception as e:
                row["reference"] = D._why(e)
                print(f"[{i + 1}/{len(progs)}] {p.name}: eager failed: {row['reference']}", flush=True)
                continue
            if "cuvil" in paths:
                row["cuvil"] = D.run_cuvil(p, ref).to_json()
            if "plain" in paths:
                row["plain"] = D.run_plain(p, ref).to_json()
            done[p.name] = row
            f.write(json.dumps(row) + "\n")
            f.flush()
            marks = " ".join(f"{k}={'ok' if row[k]['ok'] else row[k]['stage']}" for k in paths)
            print(f"[{i + 1}/{len(progs)}] {p.name}: {marks}", flush=True)
    rows = [done[p.name] for p in progs if p.name in done]
    summary = summarize(rows, paths)
    summary.update({
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch threads 1",
        "command": "python " + shlex.join(["benchmarks/corpus.py", *(argv if argv is not None else sys.argv[1:])]),
        "wall_seconds": round(time.time() - start, 1),
        "versions": _versions(),
    })
    out.with_suffix(".json").write_text(json.dumps({**summary, "programs": rows}, indent=1))
    out.with_suffix(".md").write_text(render(summary, rows, paths))
    print(render(summary, rows, paths)[:3000])
    return 0


def summarize(rows, paths) -> dict:
    out = {"programs": len(rows)}
    for k in paths:
        passed = sum(1 for r in rows if r[k]["ok"])
        out[k] = {"passed": passed, "rate": round(passed / max(1, len(rows)), 4)}
    fam = defaultdict(Counter)
    for r in rows:
        fam[r["family"]]["n"] += 1
        for k in paths:
            fam[r["family"]][k] += r[k]["ok"]
    out["families"] = {f: dict(c) for f, c in sorted(fam.items())}
    if set(paths) == {"cuvil", "plain"}:
        out["plain_only"] = [r["name"] for r in rows if r["plain"]["ok"] and not r["cuvil"]["ok"]]
        out["cuvil_only"] = [r["name"] for r in rows if r["cuvil"]["ok"] and not r["plain"]["ok"]]
    return out


def render(summary, rows, paths) -> str:
    lines = [f"# Differential corpus: {summary['programs']} programs", "",
             f"- date: {summary.get('date')}", f"- machine: {summary.get('machine')}", f"- command: `{summary.get('command')}`",
             f"- versions: {summary.get('versions')}", ""]
    lines += ["| path | passed | rate |", "|---|---|---|"]
    lines += [f"| {k} | {summary[k]['passed']} / {summary['programs']} | {100 * summary[k]['rate']:.1f}% |" for k in paths]
    lines += ["", "| family | programs | " + " | ".join(paths) + " |", "|---|---|" + "---|" * len(paths)]
    for f, c in summary["families"].items():
        lines.append(f"| {f} | {c['n']} | " + " | ".join(str(c.get(k, 0)) for k in paths) + " |")
    by_name = {r["name"]: r for r in rows}
    for key, title in (("plain_only", "plain passes, cuvil fails (each is a bug)"), ("cuvil_only", "cuvil passes, plain fails")):
        if key in summary:
            lines += ["", f"## {title}: {len(summary[key])}", ""]
            for name in summary[key]:
                r = by_name[name]
                loser = "cuvil" if key == "plain_only" else "plain"
                lines.append(f"- `{name}`: {loser} {r[loser]['stage']}: {r[loser]['detail'][:200]}")
    failing = [r for r in rows if all(not r[k]["ok"] for k in paths)]
    lines += ["", f"## both fail: {len(failing)}", ""]
    lines += [f"- `{r['name']}`: " + "; ".join(f"{k} {r[k]['stage']}: {r[k]['detail'][:160]}" for k in paths) for r in failing]
    return "\n".join(lines) + "\n"


def _versions() -> dict:
    from importlib.metadata import version

    out = {}
    for dist in ("torch", "torch-mlir", "iree-base-compiler", "iree-base-runtime"):
        try:
            out[dist] = version(dist)
        except Exception:
            out[dist] = "unknown"
    try:
        import subprocess

        out["cuvil-mlir commit"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except Exception:
        pass
    return out


if __name__ == "__main__":
    sys.exit(main())

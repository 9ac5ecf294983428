"""The example models through both front ends: torch.export and torch.onnx.export.

    python benchmarks/onnx_models.py                       # every model of examples/models.py E2E_MODELS
    python benchmarks/onnx_models.py --models gpt2,bert --out /tmp/r

For each model (Hugging Face GPT-2 / BERT / Llama from configs with random weights, small
sizes; the MLP, CNN and transformer block): export it with ``torch.onnx.export(dynamo=True)``,
compile the .onnx and the nn.Module for the CPU, run both, and record
- the max abs error of each against PyTorch eager, and of the ONNX one against onnxruntime;
- the patterns fired by each form (lower-cuvil-to-torch left out), and where they differ.
Results: benchmarks/results/onnx-models-<date>.{json,md}, with the machine and the command.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import platform
import shlex
import sys
import tempfile
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))


def _fired(compiled) -> dict:
    return {p: dict(c) for p, c in compiled.metadata["patterns_fired"].items() if p != "lower-cuvil-to-torch"}


def _flat(fired: dict) -> dict:
    return {f"{p}/{name}": n for p, patterns in fired.items() for name, n in patterns.items()}


def fused_ops(model, args=()) -> dict:
    """The Cuvil ops of the "fused" stage by kind: ``linear[gelu]``, ``attention[causal]``,
    ``norm[layer]``, ... (what the patterns made, whatever their names)."""
    import re
    from collections import Counter

    from cuvil_mlir.compiler.pipeline import Options, compile_program

    text = compile_program(model, args, Options(), emit="fused").text
    out = Counter()
    for op, attrs in re.findall(r'"cuvil\.(\w+)"\([^)]*\)\s*(\{[^}]*\})?', text):
        detail = re.search(r'(?:activation|kind) = "(\w+)"', attrs or "")
        tag = detail.group(1) if detail else ""
        if op == "attention" and "is_causal = true" in (attrs or ""):
            tag = "causal"
        out[f"{op}[{tag}]" if tag and tag != "none" else op] += 1
    return dict(sorted(out.items()))


def run_model(name, factory, tmp: Path) -> dict:
    import numpy as np
    import torch

    import cuvil_mlir
    from cuvil_mlir.eval.onnx_reference import OnnxReference

    model, inputs = factory()
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    path = tmp / f"{name}.onnx"
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(model.eval(), inputs, str(path), dynamo=True)
    export_s = time.perf_counter() - start
    with torch.no_grad():
        ref = model(*inputs)
    ref = (ref if isinstance(ref, torch.Tensor) else ref[0]).numpy()
    start = time.perf_counter()
    c_onnx = cuvil_mlir.compile(str(path))
    onnx_s = time.perf_counter() - start
    start = time.perf_counter()
    c_torch = cuvil_mlir.compile(model, inputs)
    torch_s = time.perf_counter() - start
    arrays = [x.numpy() for x in inputs]
    def first(out):
        return np.asarray(out[0] if isinstance(out, (tuple, list)) else out)

    y_onnx, y_torch = first(c_onnx(*arrays)), first(c_torch(*arrays))
    ort = OnnxReference(str(path))
    y_ort = ort(*arrays)[0].numpy()
    f_onnx, f_torch = _flat(_fired(c_onnx)), _flat(_fired(c_torch))
    ops_onnx, ops_torch = fused_ops(str(path)), fused_ops(model, inputs)
    return {
        "model": name, "inputs": [list(a.shape) for a in arrays], "onnx_bytes": path.stat().st_size,
        "export_s": round(export_s, 2), "compile_s": {"onnx": round(onnx_s, 2), "torch.export": round(torch_s, 2)},
        "max_abs_err": {"onnx vs torch eager": float(np.abs(y_onnx - ref).max()),
                        "onnx vs " + ort.runtime: float(np.abs(y_onnx - y_ort).max()),
                        "torch.export vs torch eager": float(np.abs(y_torch - ref).max())},
        "fired": {"onnx": _fired(c_onnx), "torch.export": _fired(c_torch)},
        "fused_ops": {"onnx": ops_onnx, "torch.export": ops_torch},
        "fused_ops_differ": {k: {"onnx": ops_onnx.get(k, 0), "torch.export": ops_torch.get(k, 0)}
                             for k in sorted(set(ops_onnx) | set(ops_torch)) if ops_onnx.get(k, 0) != ops_torch.get(k, 0)},
        "differs": {k: {"onnx": f_onnx.get(k, 0), "torch.export": f_torch.get(k, 0)}
                    for k in sorted(set(f_onnx) | set(f_torch)) if f_onnx.get(k, 0) != f_torch.get(k, 0)},
    }


def _ops_text(ops: dict) -> str:
    return ", ".join(f"{k} x{v}" for k, v in ops.items()) or "-"


def _markdown(report) -> str:
    lines = [f"# The example models through torch.export and torch.onnx.export ({report['date'][:10]})", "",
             f"- machine: {report['machine']}", f"- command: `{report['command']}`",
             f"- versions: {', '.join(f'{k} {v}' for k, v in report['versions'].items())}", "",
             "| model | onnx vs torch eager | onnx vs ORT | torch.export vs eager | compile s (onnx / torch.export) |",
             "|---|---:|---:|---:|---:|"]
    for r in report["models"]:
        e = r["max_abs_err"]
        ort_key = next(k for k in e if k.startswith("onnx vs ") and "torch" not in k)
        lines.append(f"| {r['model']} | {e['onnx vs torch eager']:.2e} | {e[ort_key]:.2e} | {e['torch.export vs torch eager']:.2e} "
                     f"| {r['compile_s']['onnx']} / {r['compile_s']['torch.export']} |")
    lines += ["", "## Cuvil ops after fusion (stage \"fused\"), by form", "",
              "| model | onnx | torch.export | differ |", "|---|---|---|---|"]
    for r in report["models"]:
        o, t = r["fused_ops"]["onnx"], r["fused_ops"]["torch.export"]
        differ = ", ".join(f"{k} ({v['onnx']} vs {v['torch.export']})" for k, v in r["fused_ops_differ"].items())
        lines.append(f"| {r['model']} | {_ops_text(o)} | {_ops_text(t)} | {differ or 'same'} |")
    lines += ["", "## Patterns fired (names differ by form: ONNX's MatMul+Add is raise/matmul + bias_add where "
              "torch.export keeps aten.linear)", ""]
    for r in report["models"]:
        lines.append(f"### {r['model']}")
        for form in ("onnx", "torch.export"):
            fired = "; ".join(f"{p}: " + ", ".join(f"{k} x{v}" for k, v in pats.items()) for p, pats in r["fired"][form].items())
            lines.append(f"- {form}: {fired or 'none'}")
        if r["differs"]:
            lines.append("- differ: " + ", ".join(f"{k} ({v['onnx']} vs {v['torch.export']})" for k, v in r["differs"].items()))
        else:
            lines.append("- differ: nothing")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    import models

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(models.E2E_MODELS), help="comma-separated names of E2E_MODELS")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from cuvil_mlir.core.versions import versions

    results = []
    with tempfile.TemporaryDirectory(prefix="cuvil-onnx-models-") as tmp:
        for name in args.models.split(","):
            print(f"{name} ...", flush=True)
            results.append(run_model(name, models.E2E_MODELS[name], Path(tmp)))
            print(json.dumps(results[-1]["max_abs_err"]), "differs:", results[-1]["differs"], flush=True)
    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": f"{platform.node()} ({platform.machine()}, {platform.platform()}); shared with other jobs",
              "command": "python benchmarks/onnx_models.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
              "versions": versions(("cuvil-mlir", "torch", "torch-mlir", "iree-base-compiler", "onnx", "onnxruntime", "onnxscript")),
              "models": results}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"onnx-models-{report['date'][:10]}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    stem.with_suffix(".md").write_text(_markdown(report))
    print(f"wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())

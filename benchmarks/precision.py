"""Precision policies side by side: speed, module size and error of each policy against fp32,
and against PyTorch at the same precision, on one target (default: the CPU).

    python benchmarks/precision.py                                   # cpu, every model below
    python benchmarks/precision.py --models mlp-large --policies fp32,int8-weight --out /tmp/prec

Per model, one run of cuvil_mlir.eval.harness.compare times these configurations in interleaved
rounds, next to PyTorch eager (fp32), each held to its policy's error budget:
    default (fp32), precision:fp16, precision:bf16, precision:int8-weight,
    precision:int4-weight, precision:int8 (calibrated on the comparison's input sets)
Then PyTorch at the same precisions is timed the same way (interleaved rounds, same inputs),
with fp32 eager again as the anchor both runs share:
    eager bf16 / eager fp16   model and float inputs converted (``.to(dtype)``)
    dynamic int8              ``torch.ao.quantization.quantize_dynamic`` on every nn.Linear
                              (int8 weights, activations quantized per call: PyTorch's CPU int8
                              path for linear layers; cuvil's int8-weight keeps activations float)
A policy or competitor that fails is a row with its reason. Results: benchmarks/results/
precision-<target>-<date>.{md,json}.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import shlex
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

POLICIES = ("fp32", "fp16", "bf16", "int8-weight", "int4-weight", "int8")
MODELS = ("mlp-large", "transformer", "gpt2", "llama")


def model_factory(name: str):
    import torch

    import models

    if name == "mlp-large":  # weights large enough that their bytes matter (8 MiB in fp32)
        torch.manual_seed(0)
        return lambda: (models.MLP(d_in=512, d_hidden=1024, d_out=512).eval(), (torch.randn(8, 512),))
    table = {**models.E2E_MODELS, **models.EAGER_ATTENTION_MODELS}
    if name not in table:
        raise SystemExit(f"unknown model '{name}'; models: mlp-large, {', '.join(table)}")
    return table[name]


def torch_variants(model, inputs, policies):
    """PyTorch at the policies' precisions: name -> (callable, inputs, what it is)."""
    import torch

    out = {}
    for policy, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        if policy in policies:
            m = copy.deepcopy(model).to(dtype)
            xs = tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs)
            out[f"torch eager {policy}"] = (m, xs, policy)
    if {"int8-weight", "int8"} & set(policies):
        q = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8)
        out["torch dynamic int8"] = (q, inputs, "int8")
    return out


def time_torch(model, inputs, policies, settings):
    """fp32 eager and the PyTorch variants, interleaved rounds: name -> row."""
    import torch

    from cuvil_mlir.eval.measure import Timer, wall_clock
    from cuvil_mlir.runtime.arrays import to_numpy

    ref = [to_numpy(o) for o in _leaves(model(*inputs))]
    rows, timers = {}, {}
    candidates = {"torch eager fp32": (model, inputs, "fp32"), **torch_variants(model, inputs, policies)}
    for name, (fn, xs, policy) in candidates.items():
        try:
            with torch.no_grad():
                got = [to_numpy(o).astype("float32") for o in _leaves(fn(*xs))]
            rows[name] = {"name": name, "policy": policy, "status": "ok", "max_rel_err": _rel_err(got, ref)}
            call = _no_grad(fn)
            timers[name] = Timer(wall_clock(call), [xs], settings)
            timers[name].warm_up()
        except Exception as e:  # a competitor that cannot run this model is a row, not a crash
            rows[name] = {"name": name, "policy": policy, "status": "failed", "reason": f"{type(e).__name__}: {str(e)[:200]}"}
    for _ in range(settings.rounds):
        for timer in timers.values():
            timer.run_round()
    for name, timer in timers.items():
        lat = timer.latency()
        rows[name]["latency"] = lat.to_json() if lat else None
    return rows


def _no_grad(fn):
    import torch

    def call(*xs):
        with torch.no_grad():
            return fn(*xs)

    return call


def _leaves(out):
    if isinstance(out, (tuple, list)):
        return [leaf for o in out for leaf in _leaves(o)]
    if hasattr(out, "to_tuple"):  # Hugging Face ModelOutput
        return _leaves(out.to_tuple())
    return [out]


def _rel_err(got, ref) -> float:
    import numpy as np

    worst = 0.0
    for g, r in zip(got, ref):
        r = r.astype("float64")
        worst = max(worst, float(np.max(np.abs(g.astype("float64") - r)) / max(float(np.max(np.abs(r))), 1e-30)))
    return worst


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--repetitions", type=int, default=50)
    parser.add_argument("--min-time", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args(argv)

    from cuvil_mlir.eval.harness import compare
    from cuvil_mlir.eval.measure import TimingSettings

    policies = args.policies.split(",")
    configs = [("default" if p == "fp32" else f"precision:{p}") for p in policies]
    settings = TimingSettings(args.repetitions, 5, args.min_time, 10.0, args.rounds, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"precision-{args.target.replace(':', '_')}-{date.today().isoformat()}"
    results = {}
    for name in args.models.split(","):
        model, inputs = model_factory(name)()
        report = compare(model, inputs, targets=[args.target], configs=configs, competitors=["eager"],
                         repetitions=args.repetitions, min_time=args.min_time, rounds=args.rounds, progress=True)
        results[name] = {"cuvil": report.to_json(), "torch": time_torch(model, inputs, policies, settings)}
        print(f"{name}: done", file=sys.stderr)
    stem.with_suffix(".json").write_text(json.dumps(results, indent=2))
    stem.with_suffix(".md").write_text(markdown(results, args))
    print(stem.with_suffix(".md").read_text())
    return 0


def _ms(row) -> float | None:
    return ((row or {}).get("latency") or {}).get("median_ms")


def _fmt(v, spec) -> str:
    return "-" if v is None else format(v, spec)


def markdown(results: dict, args) -> str:
    first = next(iter(results.values()))["cuvil"]
    machine = first.get("machine", {})
    lines = [
        f"# Precision policies on `{args.target}` ({date.today().isoformat()})",
        "",
        f"- machine: {machine.get('cpu') or platform.processor() or platform.machine()}, "
        f"{machine.get('logical_cpus', '?')} logical CPUs; versions: "
        + ", ".join(f"{k} {v}" for k, v in sorted(first.get("versions", {}).items())),
        f"- command: `python benchmarks/{Path(__file__).name} {shlex.join(sys.argv[1:])}`",
        "- cuvil rows: one harness.compare run per model (interleaved rounds, with PyTorch eager fp32);",
        "  PyTorch rows: a second interleaved run with eager fp32 again as the shared anchor.",
        "  `vs cuvil fp32` < 1 is faster than cuvil's fp32 module; `vs torch same` compares with",
        "  PyTorch at the same precision, each normalized by its own run's eager fp32 time.",
        "- error: max |got - fp32 PyTorch| / max |fp32 PyTorch| over the outputs; `ok` = within the policy's budget.",
        "",
        "| model | policy | status | median ms | vs cuvil fp32 | module KiB | size vs fp32 | max rel. error | PyTorch same precision (ms) | vs torch same |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model, r in results.items():
        entries = r["cuvil"]["entries"]
        eager_cuvil_run = _ms(next((e for e in entries if e["kind"] == "competitor"), None))
        torch_rows = r["torch"]
        eager_torch_run = _ms(torch_rows.get("torch eager fp32"))
        fp32 = next((e for e in entries if e.get("config") == "default"), None)
        for e in entries:
            if e["kind"] == "competitor":
                continue
            policy = "fp32" if e["config"] == "default" else e["config"].removeprefix("precision:")
            ms = _ms(e)
            same = next((t for t in torch_rows.values() if t["policy"] == policy.split("{")[0]
                         or (policy.startswith("int8") and t["policy"] == "int8")), None)
            if policy == "fp32":
                same = torch_rows.get("torch eager fp32")
            same_ms = _ms(same)
            vs_same = None
            if ms and same_ms and eager_cuvil_run and eager_torch_run:
                vs_same = (ms / eager_cuvil_run) / (same_ms / eager_torch_run)
            size, size32 = e.get("module_bytes"), (fp32 or {}).get("module_bytes")
            err = (e.get("numerics") or {}).get("max_rel_err")
            same_text = "-" if same is None else (f"{same['name']}: {_fmt(same_ms, '.3f')}" if same.get("status") == "ok"
                                                   else f"{same['name']}: failed ({same.get('reason', '')[:60]})")
            status = e["status"] if e["status"] != "failed" else f"failed ({(e.get('reason') or '')[:80]})"
            lines.append(
                f"| {model} | {policy} | {status} | {_fmt(ms, '.3f')} | {_fmt(ms / _ms(fp32) if ms and _ms(fp32) else None, '.2f')} | "
                f"{_fmt(size / 1024 if size else None, '.0f')} | {_fmt(size32 / size if size and size32 else None, '.2f')}x | "
                f"{_fmt(err, '.1e')} | {same_text} | {_fmt(vs_same, '.2f')} |")
        for t in torch_rows.values():
            if t["status"] == "ok":
                lines.append(f"| {model} | ({t['name']}) | ok | {_fmt(_ms(t), '.3f')} | - | - | - | {_fmt(t['max_rel_err'], '.1e')} | - | - |")
            else:
                lines.append(f"| {model} | ({t['name']}) | failed ({t.get('reason', '')[:80]}) | - | - | - | - | - | - | - |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

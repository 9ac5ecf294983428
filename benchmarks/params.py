"""Real model sizes: compile time, peak memory, package size and load time with the weights
inline in the module (before) and as external parameters (after, cuvil_mlir/core/params.py).

    python benchmarks/params.py one --model gpt2 --params inline --json OUT.jsonl   # one compile, this process
    python benchmarks/params.py all --models gpt2 --out benchmarks/results --tag 2026-12-04

``one`` builds the model (Hugging Face config, random weights), compiles it in this process and
appends one JSON line: compile seconds, peak RSS of this process (``ru_maxrss``) and of the
largest child (``iree-compile`` runs as one), the RSS before compiling (Python, torch, the model),
the package's size, and, in fresh processes, the time ``cuvil_mlir.load`` takes (with and
without the archive's sha256 check) and the largest error against PyTorch on the same input.
``all`` runs ``one`` per model and params mode, each in its own process, and writes
``params-<tag>.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

MODELS = {
    # HF GPT-2 small: 124M parameters (tied embeddings), T=128
    "gpt2": dict(kind="gpt2", seq=128),
    # TinyLlama-1.1B's shape: d 2048, 22 layers, 32/4 heads, FFN 5632, vocab 32000, T=128
    "llama-1b": dict(kind="llama", seq=128, hidden=2048, layers=22, heads=32, kv_heads=4, ffn=5632, vocab=32000),
}


def build(name: str):
    import torch

    spec = MODELS[name]
    torch.manual_seed(0)
    if spec["kind"] == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        model = GPT2LMHeadModel(GPT2Config(attn_implementation="sdpa"))
        vocab = model.config.vocab_size
    else:
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(hidden_size=spec["hidden"], num_hidden_layers=spec["layers"], num_attention_heads=spec["heads"],
                             num_key_value_heads=spec["kv_heads"], intermediate_size=spec["ffn"], vocab_size=spec["vocab"],
                             attn_implementation="sdpa", bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)
        with torch.device("cpu"):
            model = LlamaForCausalLM(config)
        vocab = spec["vocab"]

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.model = m

        def forward(self, input_ids):
            return self.model(input_ids=input_ids, use_cache=False).logits

    args = (torch.randint(0, vocab, (1, spec["seq"])),)
    return Logits(model).eval(), args


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def one(a) -> dict:
    import numpy as np
    import torch

    import cuvil_mlir

    torch.set_grad_enabled(False)
    model, args = build(a.model)
    weight_bytes = sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())
    rss_before = _rss_mib()
    start = time.perf_counter()
    compiled = cuvil_mlir.compile(model, args, target=a.target, precision=a.precision, params=a.params)
    compile_s = time.perf_counter() - start
    peak_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peak_child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    out = Path(a.package or tempfile.mkdtemp(prefix="cuvil-params-")) / f"{a.model}-{a.params}-{a.precision}.cuvilpkg"
    start = time.perf_counter()
    compiled.save(out, compress=False)
    save_s = time.perf_counter() - start
    ref = model(*args).float().numpy() if a.check else None
    got = compiled(*args).float().numpy() if a.check else None
    del compiled
    row = {
        "model": a.model, "params": a.params, "precision": a.precision, "target": a.target,
        "weight_mib": round(weight_bytes / 2**20, 1), "compile_s": round(compile_s, 1), "save_s": round(save_s, 1),
        "rss_before_compile_mib": round(rss_before), "peak_rss_mib": round(peak_self), "peak_child_rss_mib": round(peak_child),
        "package_mib": round(out.stat().st_size / 2**20, 1),
        "max_abs_err": None if ref is None else float(np.abs(ref - got).max()),
        "ref_max_abs": None if ref is None else float(np.abs(ref).max()),
        "package": str(out),
    }
    for verify in (True, False):
        row[f"load_s_verify_{str(verify).lower()}"] = _load_seconds(out, verify, a.target.split(",")[0])
    if not a.package:
        out.unlink()
    return row


_LOAD = """
import sys, time
t = time.perf_counter()
import cuvil_mlir
t0 = time.perf_counter()
m = cuvil_mlir.load(sys.argv[1], prefer=sys.argv[3], verify=sys.argv[2] == "1")
print(time.perf_counter() - t0)
"""


def _load_seconds(path: Path, verify: bool, target: str) -> float:
    """``cuvil_mlir.load`` in a fresh process (the page cache is warm: the file was just written)."""
    done = subprocess.run([sys.executable, "-c", _LOAD, str(path), "1" if verify else "0", target],
                          capture_output=True, text=True, check=True)
    return round(float(done.stdout.strip().splitlines()[-1]), 2)


def run_all(a) -> None:
    rows = []
    for model in a.models.split(","):
        for mode in a.modes.split(","):
            with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as tmp:
                cmd = [sys.executable, __file__, "one", "--model", model, "--params", mode, "--precision", a.precision,
                       "--target", a.target, "--json", tmp.name]
                print("$", " ".join(cmd), flush=True)
                done = subprocess.run(cmd)
                lines = [json.loads(line) for line in Path(tmp.name).read_text().splitlines() if line.strip()]
                rows += lines or [{"model": model, "params": mode, "failed": f"exit {done.returncode}"}]
                print(json.dumps(rows[-1]), flush=True)
    write_results(rows, Path(a.out), a.tag, " ".join([Path(sys.executable).name, *sys.argv]))


def write_results(rows: list[dict], out: Path, tag: str, command: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    meta = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.node(),
            "cpus": os.cpu_count(), "command": command, "rows": rows}
    (out / f"params-{tag}.json").write_text(json.dumps(meta, indent=2))
    cols = ["model", "params", "precision", "weight_mib", "compile_s", "rss_before_compile_mib", "peak_rss_mib",
            "peak_child_rss_mib", "package_mib", "save_s", "load_s_verify_true", "load_s_verify_false", "max_abs_err"]
    lines = [f"# External parameters: before (inline) and after (external), {meta['date']}", "",
             f"Machine: {meta['machine']}, {meta['cpus']} cores (shared). Command: `{command}`", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, r.get("failed", ""))) for c in cols) + " |" for r in rows]
    (out / f"params-{tag}.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("one")
    o.add_argument("--model", choices=sorted(MODELS), required=True)
    o.add_argument("--params", default="external", choices=("inline", "external", "auto"))
    o.add_argument("--precision", default="fp32")
    o.add_argument("--target", default="cpu")
    o.add_argument("--package", help="keep the package in this folder (default: a temporary one, removed)")
    o.add_argument("--no-check", dest="check", action="store_false", help="skip the comparison with PyTorch")
    o.add_argument("--json", required=True, help="append the result line here")
    r = sub.add_parser("all")
    r.add_argument("--models", default="gpt2")
    r.add_argument("--modes", default="inline,external")
    r.add_argument("--precision", default="fp32")
    r.add_argument("--target", default="cpu")
    r.add_argument("--out", default="benchmarks/results")
    r.add_argument("--tag", default=datetime.now(timezone.utc).date().isoformat())
    a = p.parse_args()
    if a.cmd == "one":
        row = one(a)
        with open(a.json, "a") as f:
            f.write(json.dumps(row) + "\n")
    else:
        run_all(a)


if __name__ == "__main__":
    main()

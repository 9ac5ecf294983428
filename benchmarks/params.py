"""Real model sizes: compile time, peak memory, package size and load time, with the weights
inline in the module or external parameters (cuvil_mlir/core/params.py), compiled the two ways
a user compiles:

- ``--via python``: ``cuvil_mlir.compile(model, args)`` on the nn.Module in this process (which
  holds PyTorch, transformers and the model's own weights);
- ``--via cli``: the model exported to a ``.pt2`` first, then ``cuvil compile model.pt2`` in a
  fresh process (importing nothing but cuvil's CLI).

    python benchmarks/params.py one --model gpt2 --via cli --json OUT.jsonl     # one measurement
    python benchmarks/params.py all --models gpt2 --vias python,cli --modes external --tag 2026-12-05-gpt2

``one`` appends one JSON line: compile seconds; the compiling process's peak RSS (``ru_maxrss``)
and, sampled every 5 ms, the peak RSS of it and its children together (``iree-compile`` runs as
one); for ``python``, the RSS before compiling (PyTorch, transformers, the model) and what the
compile and save added to it (cuvil's libraries, torch.export's, the compile's own); the package's size; in fresh processes, ``cuvil_mlir.load``
time (with and without the archive's sha256 check); and the largest error against PyTorch.
``all`` runs ``one`` per model, way and params mode, each in its own process, and writes
``params-<tag>.{json,md}``. ``--pythonpath DIR`` runs the measured processes on another copy of
cuvil_mlir (an earlier commit: the "before" of a before/after in one run).
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
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

MODELS = {
    # HF GPT-2 small: 124M parameters (tied embeddings), T=128
    "gpt2": dict(kind="gpt2", seq=128),
    # TinyLlama-1.1B's shape: d 2048, 22 layers, 32/4 heads, FFN 5632, vocab 32000, T=128
    # a 0.15B Llama (d 1024, 8 layers, 16/4 heads, FFN 2816, vocab 32000): the 1.1B shape's passes at a size that runs in a minute
    "llama-small": dict(kind="llama", seq=128, hidden=1024, layers=8, heads=16, kv_heads=4, ffn=2816, vocab=32000),
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


def _rss_mib(pid: int | str = "self") -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _descendants(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                for child in f.read().split():
                    out += [int(child), *_descendants(int(child))]
    except OSError:
        pass
    return out


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


class TreePeak:
    """The peak RSS of process ``pid`` and its descendants together, sampled every 5 ms in a thread."""

    def __init__(self, pid: int):
        self.pid, self.peak, self.self_peak, self._done = pid, 0.0, 0.0, threading.Event()
        # a child between fork and exec shares the process's memory: counted once it runs its own program
        self.exe = _exe(pid)
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self):
        while not self._done.is_set():
            own = _rss_mib(self.pid)
            self.self_peak = max(self.self_peak, own)
            self.peak = max(self.peak, own + sum(_rss_mib(c) for c in _descendants(self.pid) if _exe(c) != self.exe))
            time.sleep(0.005)

    def stop(self) -> float:
        self._done.set()
        self._thread.join()
        return self.peak


def one(a) -> dict:
    import torch

    torch.set_grad_enabled(False)
    model, args = build(a.model)
    weight_bytes = sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())
    out = Path(a.package or tempfile.mkdtemp(prefix="cuvil-params-")) / f"{a.model}-{a.via}-{a.params}-{a.precision}.cuvilpkg"
    row = {"model": a.model, "via": a.via, "params": a.params, "precision": a.precision, "target": a.target,
           "weight_mib": round(weight_bytes / 2**20, 1)}
    if a.via == "python":
        row.update(_compile_here(a, model, args, out))
    else:
        row.update(_compile_with_cli(a, model, args, out))
    row["peak_x_weights"] = round(row["peak_rss_mib"] * 2**20 / weight_bytes, 2)
    row["package_mib"] = round(out.stat().st_size / 2**20, 1)
    for verify in (True, False):
        row[f"load_s_verify_{str(verify).lower()}"] = _load_seconds(out, verify, a.target.split(",")[0])
    if a.check:
        import numpy as np

        ref = model(*args).float().numpy()
        got = _run_package(out, args[0].numpy(), a.target.split(",")[0])
        row["max_abs_err"], row["ref_max_abs"] = float(np.abs(ref - got).max()), float(np.abs(ref).max())
    row["package"] = str(out)
    if not a.package:
        out.unlink()
    return row


def _compile_here(a, model, args, out: Path) -> dict:
    import cuvil_mlir

    rss_before = _rss_mib()
    exact = _reset_peak()  # the peak from here: building the model (its init's temporaries) is not the compile's
    tree = TreePeak(os.getpid())
    start = time.perf_counter()
    compiled = cuvil_mlir.compile(model, args, target=a.target, precision=a.precision, params=a.params)
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    compiled.save(out, compress=False)
    save_s = time.perf_counter() - start
    peak_tree = tree.stop()
    peak = _status_mib("VmHWM") if exact else tree.self_peak
    return {"compile_s": round(compile_s, 1), "save_s": round(save_s, 1), "rss_before_compile_mib": round(rss_before),
            "peak_rss_mib": round(peak), "compile_added_mib": round(peak - rss_before), "peak_tree_mib": round(peak_tree)}


def _reset_peak() -> bool:
    """Reset this process's peak RSS (VmHWM) to its RSS now (Linux: clear_refs 5); False if not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


# VmHWM, not ru_maxrss: a process started by one that holds the model inherits its ru_maxrss
_CLI = """
import json, sys, time
from cuvil_mlir.cli import main
start = time.perf_counter()
code = main(sys.argv[1:])
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"code": code, "seconds": time.perf_counter() - start, "peak_rss_mib": hwm / 1024}))
"""


def _compile_with_cli(a, model, args, out: Path) -> dict:
    """Export ``model`` to a .pt2, then ``cuvil compile`` it in a fresh process (its peak and its tree's)."""
    import torch

    with tempfile.TemporaryDirectory(prefix="cuvil-params-") as tmp:
        pt2 = Path(a.package or tmp) / f"{a.model}.pt2"  # kept beside the package with --package
        torch.export.save(torch.export.export(model, args), pt2)
        cmd = [sys.executable, "-P", "-c", _CLI, "compile", str(pt2), "-o", str(out), "--target", a.target,
               "--precision", a.precision, "--params", a.params]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        tree = TreePeak(proc.pid)
        stdout, _ = proc.communicate()
        peak_tree = tree.stop()
    if proc.returncode != 0:
        raise SystemExit(f"cuvil compile failed (exit {proc.returncode}): {stdout[-2000:]}")
    result = json.loads(stdout.strip().splitlines()[-1])
    return {"compile_s": round(result["seconds"], 1), "peak_rss_mib": round(result["peak_rss_mib"]), "peak_tree_mib": round(peak_tree)}


# children run with -P: the current folder (a checkout) must not shadow --pythonpath
_RUN = """
import sys, numpy as np, cuvil_mlir
m = cuvil_mlir.load(sys.argv[1], prefer=sys.argv[3])
np.save(sys.argv[4], np.asarray(m(np.load(sys.argv[2]))))
"""


def _run_package(path: Path, x, target: str):
    """The package's output on ``x``, in a fresh process (this one may hold other cuvil code: --pythonpath)."""
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="cuvil-params-") as tmp:
        np.save(Path(tmp) / "x.npy", x)
        subprocess.run([sys.executable, "-P", "-c", _RUN, str(path), str(Path(tmp) / "x.npy"), target, str(Path(tmp) / "y.npy")],
                       check=True)
        return np.load(Path(tmp) / "y.npy")


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
    done = subprocess.run([sys.executable, "-P", "-c", _LOAD, str(path), "1" if verify else "0", target],
                          capture_output=True, text=True, check=True)
    return round(float(done.stdout.strip().splitlines()[-1]), 2)


def run_all(a) -> None:
    rows = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [a.pythonpath, os.environ.get("PYTHONPATH")]))} \
        if a.pythonpath else None
    for model in a.models.split(","):
        for via in a.vias.split(","):
            for mode in a.modes.split(","):
                with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as tmp:
                    cmd = [sys.executable, __file__, "one", "--model", model, "--via", via, "--params", mode,
                           "--precision", a.precision, "--target", a.target, "--json", tmp.name]
                    print("$", " ".join(cmd), flush=True)
                    done = subprocess.run(cmd, env=env)
                    lines = [json.loads(line) for line in Path(tmp.name).read_text().splitlines() if line.strip()]
                    rows += lines or [{"model": model, "via": via, "params": mode, "failed": f"exit {done.returncode}"}]
                    if a.label:
                        rows[-1] = {"code": a.label, **rows[-1]}
                    print(json.dumps(rows[-1]), flush=True)
    write_results(rows, Path(a.out), a.tag, " ".join([Path(sys.executable).name, *sys.argv]))


def write_results(rows: list[dict], out: Path, tag: str, command: str) -> None:
    """``params-<tag>.{json,md}``; rows already there (another ``all`` with the same tag: the
    "before" of a before/after) are kept, and this run's command is added to theirs."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"params-{tag}.json"
    meta = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.node(),
            "cpus": os.cpu_count(), "commands": [command], "rows": rows}
    if path.exists():
        earlier = json.loads(path.read_text())
        meta["commands"] = [*earlier.get("commands", [earlier.get("command")]), command]
        meta["rows"] = [*earlier["rows"], *rows]
    path.write_text(json.dumps(meta, indent=2))
    cols = ["code", "model", "via", "params", "precision", "weight_mib", "compile_s", "save_s", "rss_before_compile_mib",
            "peak_rss_mib", "peak_x_weights", "compile_added_mib", "peak_tree_mib", "package_mib", "load_s_verify_true", "load_s_verify_false", "max_abs_err"]
    cols = [c for c in cols if any(c in r for r in meta["rows"])]
    lines = [f"# Compile memory and external parameters, {meta['date']}", "",
             f"Machine: {meta['machine']}, {meta['cpus']} cores (shared). Commands:", "",
             *[f"    {c}" for c in meta["commands"]], "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, r.get("failed", "") if c == "compile_s" else "")) for c in cols) + " |"
              for r in meta["rows"]]
    (out / f"params-{tag}.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("one")
    o.add_argument("--model", choices=sorted(MODELS), required=True)
    o.add_argument("--via", default="python", choices=("python", "cli"), help="cuvil_mlir.compile here, or cuvil compile of a .pt2")
    o.add_argument("--params", default="external", choices=("inline", "external", "auto"))
    o.add_argument("--precision", default="fp32")
    o.add_argument("--target", default="cpu")
    o.add_argument("--package", help="keep the package (and with --via cli the .pt2) in this folder (default: a temporary one, removed)")
    o.add_argument("--no-check", dest="check", action="store_false", help="skip the comparison with PyTorch")
    o.add_argument("--json", required=True, help="append the result line here")
    r = sub.add_parser("all")
    r.add_argument("--models", default="gpt2")
    r.add_argument("--vias", default="python,cli")
    r.add_argument("--modes", default="external")
    r.add_argument("--pythonpath", help="run the measured processes with this PYTHONPATH (another copy of cuvil_mlir)")
    r.add_argument("--label", help="a name for the code measured (a column: before, after)")
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

"""Build what the H200 profile run needs (issue 14), on this CPU machine, into .gpu/profile/:
packages compiled with their dispatch call sites recorded (cuvil_mlir/eval/profiler.py), xz-compressed
for the device tool, and their inputs. profile_run.py measures them there.

    python benchmarks/gpu/profile_build.py [--out /work/main/.gpu/profile] [--cases gpt2-12l-b1,block768-b8]
"""

from __future__ import annotations

import argparse
import json
import lzma
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_models  # noqa: E402

# case -> (builder, its arguments, compile options[, target]); fp16 models, sign weights (gpu_models.py)
GPT2_12L = {"layers": 12, "d_model": 768, "heads": 12, "seq": 128, "batch": 1, "weights": "sign"}
CASES = {
    # HF GPT-2 small: 12 layers, d=768, 12 heads, T=128, vocab 256 (small vocab: the module travels)
    "gpt2-12l-b1": ("gpt2", GPT2_12L, {}),
    # the same for Hopper described to IREE (sm_90 PTX, 132 SMs: IREE's tile heuristics see the chip)
    "gpt2-12l-b1-td": ("gpt2", GPT2_12L, {}, "cuda:h200{hopper-mode=target-description}"),
    # one GPT block at batch 8: 1.5 MiB in, 1.5 MiB out, for the I/O paths
    "block768-b8": ("gpt_block", {"batch": 8, "seq": 128, "d_model": 768, "heads": 12, "weights": "sign"}, {}),
    # GPT-2's QKV projection + attention alone (T=128, d=768), two weight layouts: q, k, v as column slices of
    # one [128, 2304] result (as HF GPT-2 writes it: IREE copies each out, 3 slow_memcpy dispatches) or as
    # outer slices of a [3, 128, 768] batched matmul (contiguous: no copy)
    "qkv-packed": ("qkv", {"layout": "packed"}, {}),
    "qkv-outer": ("qkv", {"layout": "outer"}, {}),
    "qkv-packed-td": ("qkv", {"layout": "packed"}, {}, "cuda:h200{hopper-mode=target-description}"),
    "qkv-outer-td": ("qkv", {"layout": "outer"}, {}, "cuda:h200{hopper-mode=target-description}"),
}


def qkv_attention(layout: str):
    """(model, inputs): the QKV projection and causal attention of one GPT-2 layer, in ``layout``."""
    import torch
    import torch.nn.functional as F

    class QKVAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            shape = (768, 2304) if layout == "packed" else (3, 768, 768)
            self.w = torch.nn.Parameter(torch.randn(*shape) * 0.02)
            self.b = torch.nn.Parameter(torch.zeros(2304) if layout == "packed" else torch.zeros(3, 1, 768))

        def forward(self, x):
            heads = lambda t: t.reshape(1, 128, 12, 64).transpose(1, 2)  # noqa: E731
            if layout == "packed":
                q, k, v = (x @ self.w + self.b).split(768, dim=-1)
            else:
                q, k, v = torch.matmul(x[0].unsqueeze(0), self.w) + self.b
            return F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)

    torch.manual_seed(0)
    model = QKVAttention().eval()
    gpu_models.sign_weights(model)
    return model, (torch.randn(1, 128, 768),)


def build(name: str, out: Path, target: str) -> dict:
    import torch

    from cuvil_mlir.compiler.pipeline import Options, compile_program

    builder, kwargs, options, *own_target = CASES[name]
    target = own_target[0] if own_target else target
    model, args = qkv_attention(**kwargs) if builder == "qkv" else gpu_models.build(builder, kwargs)
    model = model.half()
    args = tuple(a.half() if a.is_floating_point() else a for a in args)
    start = time.perf_counter()
    compiled = compile_program(model, args, Options(target=target, record_dispatches=True, **options))
    seconds = time.perf_counter() - start
    pkg = out / f"{name}.cuvilpkg"
    compiled.save(pkg)
    (out / f"{name}.cuvilpkg.xz").write_bytes(lzma.compress(pkg.read_bytes(), preset=6))
    pkg.unlink()
    for i, a in enumerate(args):
        np.save(out / f"{name}.input{i}.npy", a.numpy())
    sites = compiled.metadata["dispatches"][compiled.modules[0].target]
    return {"case": name, "builder": builder, "kwargs": kwargs, "target": target, "compile_seconds": round(seconds, 1),
            "dispatches": len(sites), "xz_bytes": (out / f"{name}.cuvilpkg.xz").stat().st_size, "inputs": len(args)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="/work/main/.gpu/profile")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--target", default="cuda:h200")
    opts = p.parse_args()
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    for name in opts.cases.split(","):
        manifest[name] = build(name, out, opts.target)
        print(json.dumps(manifest[name]), flush=True)
        manifest_path.write_text(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main()

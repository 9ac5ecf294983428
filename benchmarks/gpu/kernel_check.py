"""Correctness of the Hopper kernels through the real pipeline: models compiled with
``cuvil_mlir.compile(target="cuda:h200")`` (here), run on the H200 (there) against PyTorch.

    python benchmarks/gpu/kernel_check.py build .gpu/hopper/check      # here: packages, inputs, references
    python benchmarks/gpu/kernel_check.py build .gpu/hopper/check --target 'cuda:h200{hopper-mode=target-description}' --only ...
    xz -d .gpu/hopper/check/*.xz; CUVIL_KERNEL_CHECK_DIR=.gpu/hopper/check python3 -m pytest -q tests/python/test_cuda_kernels_gpu.py   # there

Each case is a small model over one edge of the kernel contract (odd M, K not a multiple of
the tile, batch 1, M = 1 decode, every activation, gated FFN, bf16, large) or just outside it
(K or N not a multiple of 8: kept for IREE's codegen). case.json says how many linears the
kernels should take and what tolerance applies; the reference is the fp32 model on the same
(16-bit) inputs, on the CPU, here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]


class Linears(torch.nn.Module):
    """Linears in a chain, each with its activation."""

    def __init__(self, sizes, activations, bias=True):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b, bias=bias) for a, b in zip(sizes, sizes[1:]))
        self.acts = activations

    def forward(self, x):
        for layer, act in zip(self.layers, self.acts):
            x = {"none": lambda v: v, "relu": torch.relu, "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu,
                 "gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh"), "sigmoid": torch.sigmoid,
                 "relu6": torch.nn.functional.relu6}[act](layer(x))
        return x


class GatedFFN(torch.nn.Module):
    """Llama's MLP: down(silu(gate(x)) * up(x)) (fuse-gated-ffn makes one gated linear)."""

    def __init__(self, d, f):
        super().__init__()
        self.gate = torch.nn.Linear(d, f, bias=False)
        self.up = torch.nn.Linear(d, f, bias=False)
        self.down = torch.nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))


# name -> (model factory, input shape, dtype, linears the kernels take, linears kept for IREE)
CASES = {
    "gpt2_mlp_b1": (lambda: Linears([768, 3072, 768], ["gelu_tanh", "none"]), (1, 128, 768), "f16", 2, 0),
    "odd_m_k_gelu": (lambda: Linears([1000, 776], ["gelu"]), (3, 111, 1000), "f16", 1, 0),
    "decode_m1": (lambda: Linears([2048, 1024], ["none"], bias=False), (1, 1, 2048), "f16", 1, 0),
    "decode_m16_rank2": (lambda: Linears([1024, 2048], ["silu"]), (16, 1024), "f16", 1, 0),
    "activations": (lambda: Linears([264, 136, 200, 264, 72], ["relu", "silu", "sigmoid", "relu6"]), (4, 50, 264), "f16", 4, 0),
    "gated_ffn": (lambda: GatedFFN(512, 1376), (2, 100, 512), "f16", 2, 0),
    "large_bf16": (lambda: Linears([1024, 2048, 1024], ["relu", "none"]), (1, 512, 1024), "bf16", 2, 0),
    "gated_ffn_bf16": (lambda: GatedFFN(512, 1408), (1, 77, 512), "bf16", 2, 0),
    # M >= 1024: the persistent kernels (K, N and M not multiples of their tiles)
    "persistent_odd": (lambda: Linears([1000, 1032], ["gelu"]), (3, 700, 1000), "f16", 1, 0),
    "gated_persistent": (lambda: GatedFFN(512, 1376), (4, 600, 512), "f16", 2, 0),
    "fallback_k770_n13": (lambda: Linears([770, 256, 13], ["relu", "none"]), (2, 40, 770), "f16", 0, 2),
    # HF GPT-2 (Conv1D: torch.export's 16-bit addmm is an f32 mm of upcast operands): the widened form
    "hf_gpt2_widened": (lambda: _hf_gpt2(), "ids", "f16", 9, 0),
}


def _hf_gpt2():
    sys.path.insert(0, str(REPO / "examples"))
    import models

    model, _ = models.gpt2(layers=2, d_model=256, heads=4, seq=64)
    return model
TOLERANCE = {"f16": 1e-2, "bf16": 3e-2}  # max |y - ref| / max |ref|


@torch.no_grad()
def sign_weights(model) -> None:
    """Each weight matrix becomes sign(w) * std(w): still a random matrix at the same scale, but
    its module compresses ~10x (xz) for the trip to the GPU machine (as gpu_models.py does)."""
    for p in model.parameters():
        if p.dim() >= 2:
            std = float(p.std())
            p.copy_(torch.where(p >= 0, std, -std))


TD = "cuda:h200{hopper-mode=target-description}"


def build(out: Path, only: set[str] | None = None, target: str = "cuda:h200") -> None:
    """Every case (or those in ``only``) for ``target``; cases for another target than cuda:h200
    are saved as <case>_td (the Hopper target description) or <case>_<target>."""
    import lzma

    import cuvil_mlir

    suffix = "" if target == "cuda:h200" else "_td" if target == TD else "_" + "".join(c if c.isalnum() else "_" for c in target)

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    for name, (factory, shape, dtype, taken, kept) in CASES.items():
        if only and name not in only:
            continue
        model = factory().eval()
        sign_weights(model)
        tdt = torch.float16 if dtype == "f16" else torch.bfloat16
        if shape == "ids":  # token ids in, logits out
            x = torch.randint(0, 256, (2, 64))
            with torch.no_grad():
                ref = model.float()(x).numpy()
            compiled = cuvil_mlir.compile(model.half(), (x,), target=target)
            inputs = x.numpy()
            _finish(out, name + suffix, compiled, inputs, ref, dtype, taken, kept, lzma)
            continue
        x = torch.randn(*shape)
        with torch.no_grad():
            ref = model.float()(x.to(tdt).float()).numpy()
        # bf16 models keep fp32 I/O (precision=bf16 demotes inside): numpy has no bf16 for the caller
        if dtype == "f16":
            compiled = cuvil_mlir.compile(model.half(), (x.half(),), target=target)
            inputs = x.half().numpy()
        else:
            compiled = cuvil_mlir.compile(model.float(), (x.to(tdt).float(),), target=target, precision="bf16")
            inputs = x.to(tdt).float().numpy()
        _finish(out, name + suffix, compiled, inputs, ref, dtype, taken, kept, lzma)


def _finish(out, name, compiled, inputs, ref, dtype, taken, kept, lzma):
    """Check what the kernels took, then save the package (xz), input, reference and case.json."""
    kernels = compiled.metadata["kernels"]
    got = sum(len(k.get("sites", [""])) for k in kernels if k.get("kernel"))
    fired = compiled.metadata["patterns_fired"].get("lower-cuvil-to-kernels", {})
    kept_now = sum(v for k, v in fired.items() if k.startswith("kept"))
    if (got, kept_now) != (taken, kept):
        raise SystemExit(f"{name}: kernels took {got} linears and kept {kept_now}; expected {taken} and {kept}: {fired} {kernels}")
    compiled.save(out / f"{name}.cuvilpkg")
    path = out / f"{name}.cuvilpkg"  # xz for the trip (unpack there: xz -d *.xz)
    (out / f"{name}.cuvilpkg.xz").write_bytes(lzma.compress(path.read_bytes(), preset=6))
    path.unlink()
    np.save(out / f"{name}.input.npy", inputs)
    np.save(out / f"{name}.ref.npy", ref)
    (out / f"{name}.json").write_text(json.dumps({"dtype": dtype, "tolerance": TOLERANCE[dtype], "kernels": kernels,
                                                  "kept": kept, "taken": taken}, indent=1))
    print(f"{name}: {taken} linears on kernels, {kept} kept; {[k.get('config') for k in kernels]}", file=sys.stderr)


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("out", type=Path)
    b.add_argument("--only", default="", help="comma-separated case names (default: all)")
    b.add_argument("--target", default="cuda:h200", help=f"e.g. '{TD}' (cases saved as <case>_td)")
    a = p.parse_args()
    build(a.out, set(filter(None, a.only.split(","))), a.target)


if __name__ == "__main__":
    main()

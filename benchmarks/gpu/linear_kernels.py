"""The Hopper linear kernel (targets/cuda_kernels.py) against cuBLAS and IREE's own codegen, per
shape and tile configuration: the sweep that fills targets/cuda_kernel_configs.json.

    python benchmarks/gpu/linear_kernels.py build .gpu/hopper/lk [--quick]   # here: one .vmfb per shape
    python3 benchmarks/gpu/linear_kernels.py run .gpu/hopper/lk --out $OUT    # there (H200)
    python benchmarks/gpu/linear_kernels.py sweep-build .gpu/gemm/sweep [--dtypes f16,bf16] [--odd|--models]   # here: cubins
    python3 benchmarks/gpu/linear_kernels.py sweep-run .gpu/gemm/sweep --out $OUT              # there

``build`` (the CPU machine, needs triton and the IREE compiler): per shape one module whose
functions are ``k_<config>`` (the kernel through ``hal.dispatch.extern``, as cuvil embeds it) and
``iree`` (the same computation as linalg ops, IREE's codegen), plus shapes.json.
``run`` (the GPU machine: torch, the IREE runtime wheel): per function the max error against
torch (fp32 math on the same fp16/bf16 inputs) through iree.runtime, then its latency with
iree-benchmark-module; torch's F.linear(+activation) with CUDA events (cuBLAS) beside it.
iree-benchmark-module has a floor of ~50 us per call, so small shapes measure that, not the kernel:
``sweep-build`` / ``sweep-run`` time the kernels themselves. ``sweep-build`` compiles every
(goal shape, dtype, tile config) to the very cubin cuvil embeds (targets/cuda_kernels.build_linear);
``sweep-run`` loads each with the CUDA driver API (ctypes: cuModuleLoadData, cuLaunchKernel with
the same grid, block, dynamic shared memory and pointer arguments IREE passes), checks it against
torch, and times it and torch's F.linear (cuBLAS) alike: ``SWEEP_LAUNCHES`` back-to-back launches
captured in one CUDA graph, replayed, timed with CUDA events (median of 5 replays / launches).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# (name, M, N (W rows; 2F gated), K, dtype, activation, bias)
SHAPES = [
    ("gemm4096", 4096, 4096, 4096, "f16", "none", False),
    ("gemm4096_ptx", 4096, 4096, 4096, "f16", "none", False),
    ("gemm4096_bf16", 4096, 4096, 4096, "bf16", "none", False),
    ("llama_qkv_t4096", 4096, 3072, 2048, "f16", "none", False),
    ("llama_o_t4096", 4096, 2048, 2048, "f16", "none", False),
    ("llama_gateup_t4096", 4096, 16384, 2048, "f16", "swiglu", False),
    ("llama_down_t4096", 4096, 2048, 8192, "f16", "none", False),
    ("llama_qkv_t512", 512, 3072, 2048, "f16", "none", False),
    ("llama_gateup_t512", 512, 16384, 2048, "f16", "swiglu", False),
    ("llama_down_t512", 512, 2048, 8192, "f16", "none", False),
    ("gpt2_qkv_t1024", 1024, 2304, 768, "f16", "none", True),
    ("gpt2_fc_t1024", 1024, 3072, 768, "f16", "gelu_tanh", True),
    ("gpt2_proj_t1024", 1024, 768, 3072, "f16", "none", True),
    ("gpt2_fc_t128", 128, 3072, 768, "f16", "gelu_tanh", True),
    ("gpt2_proj_t128", 128, 768, 3072, "f16", "none", True),
    ("decode_m1", 1, 2048, 2048, "f16", "none", False),
    ("decode_m16", 16, 8192, 2048, "f16", "none", False),
    ("odd_m_k", 1000, 776, 1000, "bf16", "gelu", True),
]
CONFIGS = [  # bm, bn, bk, warps, stages
    (128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (128, 128, 64, 4, 4), (128, 128, 64, 8, 4),
    (64, 256, 64, 4, 4), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4), (64, 64, 128, 4, 4),
]
GATED_CONFIGS = [(128, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (64, 64, 64, 4, 4)]
# the second sweep: one program per tile against persistent programs (one per SM), on the shapes
# where the first sweep left the kernel furthest from cuBLAS
PERSISTENT_SHAPES = {"gemm4096", "llama_gateup_t4096", "llama_down_t4096", "gemm4096_bf16", "gpt2_fc_t1024", "odd_m_k"}
PERSISTENT_CONFIGS = [(128, 256, 64, 8, 3, 8, "tiles"), (128, 256, 64, 8, 3, 8, "persistent"), (128, 256, 64, 8, 4, 8, "persistent"),
                      (128, 128, 64, 8, 4, 8, "persistent"), (128, 256, 64, 8, 3, 8, "pointers"), (128, 256, 64, 8, 4, 8, "pointers"),
                      (128, 128, 64, 4, 4, 8, "pointers")]
PERSISTENT_GATED = [(128, 128, 64, 8, 3, 8, "tiles"), (128, 128, 64, 8, 3, 8, "persistent"), (128, 128, 64, 8, 4, 8, "persistent"),
                    (128, 128, 64, 8, 3, 8, "pointers"), (128, 64, 64, 4, 4, 8, "pointers")]
# The issue's goal: M x the N/K of GPT-2-small, Llama-3.2-1B and Llama-3.1-8B layers (name, N, K, activation):
# qkv, attention output, FFN up (and the fused gate+up SwiGLU form cuvil makes), FFN down.
GOAL_MS = (1, 16, 128, 2048, 8192)
GOAL_LAYERS = [
    ("gpt2_qkv", 2304, 768, "none"), ("gpt2_attn_proj", 768, 768, "none"), ("gpt2_fc", 3072, 768, "none"),
    ("gpt2_fc_proj", 768, 3072, "none"),
    ("llama1b_qkv", 3072, 2048, "none"), ("llama1b_o", 2048, 2048, "none"), ("llama1b_up", 8192, 2048, "none"),
    ("llama1b_down", 2048, 8192, "none"), ("llama1b_gateup", 16384, 2048, "swiglu"),
    ("llama8b_qkv", 6144, 4096, "none"), ("llama8b_o", 4096, 4096, "none"), ("llama8b_up", 14336, 4096, "none"),
    ("llama8b_down", 4096, 14336, "none"), ("llama8b_gateup", 28672, 4096, "swiglu"),
]
# split-K (kind "splitk", (bm, bn, bk, warps, stages, kind, ws, subtile, split)): M <= 256, where one program per
# tile leaves most of the 132 SMs idle (GPT-2's 128 x 768 x 3072 has 24 tiles of 64 x 64)
SPLITK_CONFIGS = [(64, 64, 64, 4, 4, "splitk", False, False, 2), (64, 64, 64, 4, 4, "splitk", False, False, 4),
                  (64, 64, 128, 4, 3, "splitk", False, False, 4), (64, 32, 128, 4, 3, "splitk", False, False, 4),
                  (64, 128, 64, 4, 4, "splitk", False, False, 2), (64, 64, 64, 4, 4, "splitk", False, False, 8)]
SPLITK_SMALL = [(16, 64, 128, 4, 4, "splitk", False, False, 4), (16, 32, 256, 4, 4, "splitk", False, False, 4),
                (16, 64, 128, 4, 4, "splitk", False, False, 8), (16, 128, 128, 4, 4, "splitk", False, False, 4)]
# tile configs per M class: (bm, bn, bk, warps, stages, kind, ws, subtile); bf16 is timed with the
# first SWEEP_BF16 of each list (fp16 with all)
SWEEP_CONFIGS = {
    "small": [(16, 32, 256, 4, 4, "pointers"), (16, 64, 128, 4, 6, "pointers"), (16, 32, 256, 4, 4, "tiles"),
              (16, 16, 256, 4, 4, "pointers"), (16, 32, 128, 4, 6, "pointers"), (64, 256, 64, 4, 4, "tiles")] + SPLITK_SMALL,
    "mid": [(64, 128, 64, 4, 4, "tiles"), (128, 128, 64, 8, 4, "tiles"), (64, 64, 128, 4, 4, "tiles"),
            (64, 256, 64, 4, 4, "tiles"), (128, 64, 64, 4, 4, "tiles"), (64, 128, 64, 4, 4, "pointers")] + SPLITK_CONFIGS,
    "large": [(128, 256, 64, 8, 4, "persistent", False, True), (128, 256, 64, 8, 4, "persistent", True, True),
              (128, 256, 64, 8, 3, "tiles"), (128, 256, 64, 8, 3, "persistent"), (128, 128, 64, 8, 4, "persistent", True),
              (128, 256, 64, 8, 4, "tiles", False, True)],
    "gated_small": [(16, 32, 128, 4, 4, "pointers"), (16, 32, 128, 4, 4, "tiles"), (64, 128, 64, 4, 4, "tiles"),
                    (16, 32, 128, 4, 4, "splitk", False, False, 4)],
    "gated": [(128, 128, 64, 8, 3, "tiles"), (128, 128, 64, 8, 3, "persistent", True), (64, 128, 64, 4, 4, "tiles"),
              (128, 128, 64, 8, 4, "tiles")],
}
SWEEP_BF16 = 3
# edges of the contract, every config of their class (fp16): M = 1 and odd M, K not a multiple of
# any BK, N not a multiple of any BN (name, M, N, K, activation)
SWEEP_ODD = [("odd_m1", 1, 776, 1000, "none"), ("odd_m7", 7, 2056, 1000, "none"), ("odd_m333", 333, 776, 1000, "none"),
             ("odd_m2049", 2049, 1032, 1000, "none"), ("odd_gated_m2049", 2049, 2064, 1000, "swiglu")]
SWEEP_LAUNCHES = 20
# The M the real-size e2e models run their linears at (benchmarks/gpu/gpu_models.py: GPT-2 12 layers
# and BERT-base at T=128, B 1/8; Llama-2048 at T=512, B 1/8), which the goal's M grid steps over:
# every config of the mid and large classes plus persistent forms of the smaller tiles.
MODEL_SHAPES = [(layer, m) for layer in ("gpt2_qkv", "gpt2_attn_proj", "gpt2_fc", "gpt2_fc_proj") for m in (128, 1024)] + \
               [(layer, m) for layer in ("llama1b_qkv", "llama1b_o", "llama1b_down", "llama1b_gateup") for m in (512, 4096)]
MODEL_CONFIGS = SWEEP_CONFIGS["mid"] + SWEEP_CONFIGS["large"] + [
    (64, 128, 64, 4, 4, "persistent"), (64, 256, 64, 4, 4, "persistent"), (128, 128, 64, 8, 4, "persistent"),
    (128, 64, 64, 4, 4, "persistent"), (64, 64, 128, 4, 4, "persistent"), (128, 128, 64, 8, 4, "tiles", False, True)]
MODEL_GATED_CONFIGS = SWEEP_CONFIGS["gated"] + [(64, 128, 64, 4, 4, "persistent"), (128, 128, 64, 8, 4, "persistent", True),
                                                (128, 64, 64, 4, 4, "tiles"), (64, 64, 64, 4, 4, "tiles")]


def sweep_class(m: int, gated: bool) -> str:
    if gated:
        return "gated_small" if m <= 16 else "gated"
    return "small" if m <= 16 else "mid" if m <= 512 else "large"


QUICK = {"gemm4096", "llama_gateup_t4096", "llama_o_t4096", "gpt2_fc_t128", "decode_m1", "odd_m_k"}


def _iree_function(name: str, m, n, k, t, activation, bias) -> str:
    """The same linear in linalg: IREE's codegen (fp32 accumulation, epilogue fused by IREE)."""
    f = n // 2 if activation == "swiglu" else n
    x, w, y = f"tensor<{m}x{k}x{t}>", f"tensor<{n}x{k}x{t}>", f"tensor<{m}x{f}x{t}>"
    args = [f"%x: {x}", f"%w: {w}"] + ([f"%b: tensor<{n}x{t}>"] if bias else [])
    acc = f"tensor<{m}x{n}xf32>"
    body = [
        "%z = arith.constant 0.0 : f32",
        f"%e = tensor.empty() : {acc}",
        f"%f = linalg.fill ins(%z : f32) outs(%e : {acc}) -> {acc}",
        f"%r = linalg.matmul indexing_maps = [affine_map<(i,j,l)->(i,l)>, affine_map<(i,j,l)->(j,l)>, affine_map<(i,j,l)->(i,j)>] ins(%x, %w : {x}, {w}) outs(%f : {acc}) -> {acc}",
        f"%e2 = tensor.empty() : {y}",
    ]
    ins, maps, block = ["%r"], ["affine_map<(i,j)->(i,j)>"], [f"^bb0(%a: f32"]
    if activation == "swiglu":  # gate = r[:, :f], up = r[:, f:]
        body.append(f"%g = tensor.extract_slice %r[0, 0] [{m}, {f}] [1, 1] : {acc} to tensor<{m}x{f}xf32>")
        body.append(f"%u = tensor.extract_slice %r[0, {f}] [{m}, {f}] [1, 1] : {acc} to tensor<{m}x{f}xf32>")
        ins, maps, block = ["%g", "%u"], maps * 2, ["^bb0(%a: f32, %up: f32"]
    if bias:
        ins.append("%b"); maps.append("affine_map<(i,j)->(j)>"); block.append(f", %bv: {t}")
    types = [f"tensor<{m}x{f}xf32>"] * (2 if activation == "swiglu" else 1) + ([f"tensor<{n}x{t}>"] if bias else [])
    if activation != "swiglu":
        types[0] = acc
    ops = ["%v0 = arith.addf %a, %bx : f32" if bias else "%v0 = arith.addf %a, %cz : f32"]
    pre = [f"%bx = arith.extf %bv : {t} to f32"] if bias else ["%cz = arith.constant 0.0 : f32"]
    act = {
        "none": ["%v = arith.addf %v0, %cz2 : f32"],
        "relu": ["%v = arith.maximumf %v0, %cz2 : f32"],
        "gelu": ["%h = arith.constant 0.7071067811865476 : f32", "%s = arith.mulf %v0, %h : f32", "%er = math.erf %s : f32",
                 "%o1 = arith.constant 1.0 : f32", "%p = arith.addf %er, %o1 : f32", "%hf = arith.constant 0.5 : f32",
                 "%q = arith.mulf %v0, %p : f32", "%v = arith.mulf %q, %hf : f32"],
        "gelu_tanh": ["%c0 = arith.constant 0.044715 : f32", "%c1 = arith.constant 0.7978845608028654 : f32",
                      "%x2 = arith.mulf %v0, %v0 : f32", "%x3 = arith.mulf %x2, %v0 : f32", "%t1 = arith.mulf %x3, %c0 : f32",
                      "%t2 = arith.addf %v0, %t1 : f32", "%t3 = arith.mulf %t2, %c1 : f32", "%th = math.tanh %t3 : f32",
                      "%o1 = arith.constant 1.0 : f32", "%p = arith.addf %th, %o1 : f32", "%hf = arith.constant 0.5 : f32",
                      "%q = arith.mulf %v0, %p : f32", "%v = arith.mulf %q, %hf : f32"],
        "swiglu": ["%ng = arith.negf %v0 : f32", "%ex = math.exp %ng : f32", "%o1 = arith.constant 1.0 : f32",
                   "%dn = arith.addf %ex, %o1 : f32", "%sg = arith.divf %v0, %dn : f32", "%v = arith.mulf %sg, %up : f32"],
    }[activation]
    generic = (
        f"%y = linalg.generic {{indexing_maps = [{', '.join(maps + ['affine_map<(i,j)->(i,j)>'])}], "
        f"iterator_types = [\"parallel\", \"parallel\"]}} ins({', '.join(ins)} : {', '.join(types)}) outs(%e2 : {y}) {{\n"
        f"  {''.join(block)}, %o: {t}):\n    %cz2 = arith.constant 0.0 : f32\n"
        + "".join(f"    {l}\n" for l in pre + ops + act)
        + f"    %out = arith.truncf %v : f32 to {t}\n    linalg.yield %out : {t}\n  }} -> {y}"
    )
    body.append(generic)
    lines = "".join(f"  {l}\n" for l in body)
    return f"func.func @{name}({', '.join(args)}) -> {y} {{\n{lines}  return %y : {y}\n}}\n"


def build(out: Path, quick: bool, persistent: bool = False) -> None:
    sys.path.insert(0, str(REPO))
    from targets import cuda_kernels as ck

    out.mkdir(parents=True, exist_ok=True)
    flags = ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_89", "--iree-opt-level=O3"]
    shapes = []
    for name, m, n, k, t, act, bias in SHAPES:
        if (quick and name not in QUICK) or (persistent and name not in PERSISTENT_SHAPES):
            continue
        spec = ck.LinearSpec(m, n, k, t, act, bias)
        configs = GATED_CONFIGS if spec.gated else CONFIGS
        if persistent:
            configs = PERSISTENT_GATED if spec.gated else PERSISTENT_CONFIGS
        funcs, kernels = [], {}
        for cfg in configs if name != "gemm4096_ptx" else []:
            config = ck.TileConfig(*cfg[:5], *(cfg[5:6] or [8]), *(cfg[6:7] or ["tiles"]))
            if config.bm > 64 and m <= 16:
                continue
            try:
                kb = ck.build_linear(spec, config)
            except Exception as e:
                print(f"{name} {config.key}: {e}", file=sys.stderr)
                continue
            sym = f"kernel_{config.key}_g{config.group}"
            funcs.append(ck.dispatch_function(sym, kb, torch_types=False))
            kernels[f"k_{config.key}_g{config.group}"] = kb.describe()
            y = f"tensor<{m}x{spec.out_features}x{t}>"
            args = [f"%x: tensor<{m}x{k}x{t}>", f"%w: tensor<{n}x{k}x{t}>"] + ([f"%b: tensor<{n}x{t}>"] if bias else [])
            names = ", ".join(a.split(":")[0] for a in args)
            types = ", ".join(a.split(": ")[1] for a in args)
            funcs.append(f"func.func @k_{config.key}_g{config.group}({', '.join(args)}) -> {y} {{\n  %y = call @{sym}({names}) : ({types}) -> {y}\n  return %y : {y}\n}}\n")
        if name == "gemm4096_ptx":  # the kernel as PTX, JIT-compiled by the driver at load
            funcs = []
            kb = ck.build_linear(spec, ck.TileConfig(*configs[0]))
            funcs.append(ck.dispatch_function("kernel_ptx", kb, embed="ptx", torch_types=False))
            funcs.append(f"func.func @k_ptx_{kb.config.key}(%x: tensor<{m}x{k}x{t}>, %w: tensor<{n}x{k}x{t}>) -> tensor<{m}x{n}x{t}> {{\n"
                         f"  %y = call @kernel_ptx(%x, %w) : (tensor<{m}x{k}x{t}>, tensor<{n}x{k}x{t}>) -> tensor<{m}x{n}x{t}>\n  return %y : tensor<{m}x{n}x{t}>\n}}\n")
            kernels[f"k_ptx_{kb.config.key}"] = kb.describe()
        funcs.append(_iree_function("iree", m, n, k, t, act, bias))
        src = out / f"{name}.mlir"
        src.write_text("\n".join(funcs))
        start = time.time()
        r = subprocess.run([str(Path(sys.executable).parent / "iree-compile"), str(src), *flags, "-o", str(out / f"{name}.vmfb")],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{name}: iree-compile failed: {r.stderr[:2000]}", file=sys.stderr)
            continue
        src.unlink()
        print(f"{name}: {len(kernels)} kernels, compiled in {time.time() - start:.1f} s", file=sys.stderr)
        shapes.append({"name": name, "m": m, "n": n, "k": k, "dtype": t, "activation": act, "bias": bias,
                       "functions": ["iree", *kernels], "kernels": kernels})
    (out / "shapes.json").write_text(json.dumps({"flags": flags, "shapes": shapes}, indent=1))


# ------------------------------------------------------------------------------ there


def _torch_ref(torch, x, w, b, act):
    import torch.nn.functional as F

    y = F.linear(x.float(), w.float(), None if b is None else b.float())
    if act == "swiglu":
        g, u = y.chunk(2, dim=-1)
        return F.silu(g) * u
    return {"none": lambda v: v, "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"),
            "silu": F.silu}[act](y)


def _torch_eager(torch, act):
    import torch.nn.functional as F

    def fn(x, w, b):
        y = F.linear(x, w, b)
        if act == "swiglu":
            g, u = y.chunk(2, dim=-1)
            return F.silu(g) * u
        return {"none": lambda v: v, "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"),
                "silu": F.silu}[act](y)
    return fn


def _cuda_time(torch, fn, reps=200, warmup=25) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        start.record()
        for _ in range(reps // 5):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / (reps // 5))
    return sorted(times)[len(times) // 2]


def run(folder: Path, out: Path, deadline: float) -> None:
    import numpy as np
    import torch

    begin = time.time()
    site = Path(os.environ.get("IREE_SITE", "/tmp/iree-site"))
    sys.path.insert(0, str(site))
    import iree.runtime as rt

    bench = site / "iree" / "_runtime_libs" / "iree-benchmark-module"
    meta = json.loads((folder / "shapes.json").read_text())
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": torch.cuda.get_device_name(),
               "torch": torch.__version__, "flags": meta["flags"], "shapes": []}
    tmp = Path("/tmp/lk"); tmp.mkdir(exist_ok=True)
    config = rt.Config("cuda")
    for shape in meta["shapes"]:
        if time.time() - begin > deadline:
            print("deadline reached", file=sys.stderr)
            break
        m, n, k, t, act, bias = (shape[c] for c in ("m", "n", "k", "dtype", "activation", "bias"))
        tdt = torch.float16 if t == "f16" else torch.bfloat16
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(m, k, device="cuda", generator=gen).to(tdt)
        w = (torch.randn(n, k, device="cuda", generator=gen) / k ** 0.5).to(tdt)
        b = torch.randn(n, device="cuda", generator=gen).to(tdt) if bias else None
        ref = _torch_ref(torch, x, w, b, act)
        row = {**{c: shape[c] for c in ("name", "m", "n", "k", "dtype", "activation", "bias")}, "functions": {}}
        eager = _torch_eager(torch, act)
        row["torch_eager_ms"] = _cuda_time(torch, lambda: eager(x, w, b))
        flops = 2 * m * n * k
        host = [a.cpu() for a in (x, w, b) if a is not None]
        files = []
        for i, a in enumerate(host):  # for iree-benchmark-module (bf16: splat inputs, numpy has no bf16)
            p = tmp / f"{shape['name']}_{i}.npy"
            if t == "f16":
                np.save(p, a.numpy())
            files.append(p)
        vmfb = folder / f"{shape['name']}.vmfb"
        ctx = rt.SystemContext(config=config)
        ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb.read_bytes()))
        elt = rt.HalElementType.FLOAT_16 if t == "f16" else rt.HalElementType.BFLOAT_16
        dev_args = [_typed_view(rt, ctx, a, elt) for a in host]
        for fname in shape["functions"]:
            entry = {}
            try:
                y = ctx.modules.module[fname](*dev_args)
                yt = torch.from_numpy(_host_bits(np, y).copy()).view(tdt).cuda()
                err = ((yt.float() - ref).abs().max() / ref.abs().max().clamp(min=1e-6)).item()
                entry["max_rel_err"] = err
            except Exception as e:
                entry["error"] = str(e)[:500]
            if "error" not in entry:
                args = [f"--input=@{p}" if t == "f16" else f"--input={'x'.join(map(str, a.shape))}x{t}=0.5" for p, a in zip(files, host)]
                cmd = [str(bench), f"--module={vmfb}", "--device=cuda", f"--function={fname}", *args,
                       "--benchmark_repetitions=3", "--benchmark_min_warmup_time=0.2", "--benchmark_min_time=0.05s",
                       "--device_allocator=caching", "--benchmark_format=json"]
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                try:
                    data = json.loads(r.stdout[r.stdout.index("{"):])
                    med = [bm for bm in data["benchmarks"] if bm.get("aggregate_name") == "median"][0]
                    ms = med["real_time"] / (1e6 if med["time_unit"] == "ns" else 1e3 if med["time_unit"] == "us" else 1)
                    entry["ms"] = ms
                    entry["tflops"] = flops / ms / 1e9
                except Exception:
                    entry["bench_error"] = (r.stderr or r.stdout)[-500:]
            row["functions"][fname] = entry
            print(shape["name"], fname, entry, file=sys.stderr, flush=True)
        kernels = {f: e["ms"] for f, e in row["functions"].items() if f.startswith("k_") and "ms" in e and e.get("max_rel_err", 1) < 2e-2}
        if kernels:
            best = min(kernels, key=kernels.get)
            row["best_kernel"], row["best_ms"] = best, kernels[best]
            row["vs_torch"] = row["torch_eager_ms"] / kernels[best]
            row["vs_iree"] = row["functions"]["iree"].get("ms", float("nan")) / kernels[best]
        results["shapes"].append(row)
        print(f"== {shape['name']}: torch {row['torch_eager_ms']:.4f} ms, best {row.get('best_kernel')} {row.get('best_ms')}", file=sys.stderr, flush=True)
        (out / "linear_kernels.json").write_text(json.dumps(results, indent=1))
        del ctx


def _typed_view(rt, ctx, a, elt):
    """A device buffer view of a torch CPU tensor with the element type ``elt`` (bf16 has no numpy dtype)."""
    import numpy as np
    import torch

    raw = (a.view(torch.int16) if a.dtype == torch.bfloat16 else a).numpy()
    return ctx.config.device.allocator.allocate_buffer_copy(
        memory_type=rt.MemoryType.DEVICE_LOCAL, allowed_usage=rt.BufferUsage.DEFAULT, device=ctx.config.device,
        buffer=np.ascontiguousarray(raw), element_type=elt)


def _host_bits(np, y):
    """A result's elements on the host as 16-bit integers (bf16 and f16 alike; torch views them back)."""
    try:
        return np.ascontiguousarray(y.to_host()).view(np.int16)
    except Exception:  # no ml_dtypes for bf16 there
        return y._buffer_view.map().asarray(list(y.shape), np.dtype(np.int16))


# ------------------------------------------------------------------------------ kernel sweep


def sweep_build(out: Path, dtypes: list[str], only: str = "", odd: bool = False, models: bool = False,
                kinds: tuple[str, ...] = (), only_ms: tuple[int, ...] = ()) -> None:
    """Here: the cubin of every (goal shape, dtype, config) -> out/cubins/, listed in
    out/sweep-<dtype>.json; with ``odd`` the SWEEP_ODD shapes (fp16) -> out/sweep-odd.json; with
    ``models`` the MODEL_SHAPES with MODEL_CONFIGS (fp16) -> out/sweep-models.json. ``kinds``,
    ``only_ms``: only configs of those kernel kinds, only those M."""
    import shutil

    sys.path.insert(0, str(REPO))
    from targets import cuda_kernels as ck

    (out / "cubins").mkdir(parents=True, exist_ok=True)
    layers = {layer: (n, k, act) for layer, n, k, act in GOAL_LAYERS}
    for t in ["f16"] if odd or models else dtypes:
        entries = []
        shapes = [(name, n, k, act, [m]) for name, m, n, k, act in SWEEP_ODD] if odd else \
            [(layer, *layers[layer], [m]) for layer, m in MODEL_SHAPES] if models else \
            [(layer, n, k, act, GOAL_MS) for layer, n, k, act in GOAL_LAYERS]
        for layer, n, k, act, ms in shapes:
            if only and only not in layer:
                continue
            for m in ms:
                if only_ms and m not in only_ms:
                    continue
                spec = ck.LinearSpec(m, n, k, t, act, False)
                configs = (MODEL_GATED_CONFIGS if spec.gated else MODEL_CONFIGS) if models else \
                    SWEEP_CONFIGS[sweep_class(m, spec.gated)]
                for cfg in configs if t == "f16" else configs[:SWEEP_BF16]:
                    if cfg[5:6] == ("splitk",) and m > 256:  # split-K is for the M that leaves SMs idle
                        continue
                    if kinds and (cfg[5] if len(cfg) > 5 else "tiles") not in kinds:
                        continue
                    config = ck.TileConfig(*cfg[:5], 8, *cfg[5:])
                    try:
                        kb = ck.build_linear(spec, config)
                    except Exception as e:
                        print(f"{layer} m={m} {t} {config.key}: {e}", file=sys.stderr)
                        continue
                    shutil.copyfile(kb.cubin_path, out / "cubins" / f"{kb.name}.cubin")
                    entries.append({"layer": layer, "m": m, "n": n, "k": k, "dtype": t, "activation": act,
                                    **kb.describe(), "config": asdict(config), "key": config.key, "scratch": kb.scratch_bytes,
                                    "tiles": ck.output_tiles(spec, config), "workspace": ck.workspace_bytes(spec, config)})
            print(f"{t} {layer}: {len(entries)} kernels so far", file=sys.stderr, flush=True)
        (out / f"sweep-{'odd' if odd else 'models' if models else t}.json").write_text(json.dumps(entries, indent=0))


class _Driver:
    """Just enough of the CUDA driver API (ctypes) to launch a cubin the way IREE does."""

    def __init__(self):
        import ctypes

        self.c = ctypes
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self.lib.cuModuleLoadData.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        self.lib.cuModuleGetFunction.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p]
        self.lib.cuFuncSetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        self.lib.cuModuleUnload.argtypes = [ctypes.c_void_p]

    def check(self, r: int, what: str) -> None:
        if r != 0:
            name = self.c.c_char_p()
            self.lib.cuGetErrorName(r, self.c.byref(name))
            raise RuntimeError(f"{what}: {name.value.decode() if name.value else r}")

    def load(self, image: bytes, name: str, shared: int):
        c = self.c
        mod, fn = c.c_void_p(), c.c_void_p()
        self.check(self.lib.cuModuleLoadData(c.byref(mod), image), "cuModuleLoadData")
        self.check(self.lib.cuModuleGetFunction(c.byref(fn), mod, name.encode()), "cuModuleGetFunction")
        self.check(self.lib.cuFuncSetAttribute(fn, 8, shared), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
        return mod, fn

    def launcher(self, fn, grid: int, threads: int, shared: int, pointers: list[int], stream_of):
        c = self.c
        values = [c.c_void_p(p) for p in pointers]
        params = (c.c_void_p * len(values))(*[c.addressof(v) for v in values])

        def launch():
            self.check(self.lib.cuLaunchKernel(fn, grid, 1, 1, threads, 1, 1, shared, stream_of(), params, None), "cuLaunchKernel")
        launch.keep = (values, params)
        return launch


def _graph_time(torch, fn, launches: int = SWEEP_LAUNCHES) -> float:
    """ms per call: ``launches`` calls captured in one CUDA graph, 5 timed replays, the median."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / launches)
    del graph
    return sorted(times)[2]


def sweep_run(folder: Path, out: Path, deadline: float) -> None:
    """There: per goal shape torch F.linear (cuBLAS) and every kernel config, same inputs, same timing."""
    import torch

    begin = time.time()
    drv = _Driver()
    torch.cuda.init()
    torch.empty(1, device="cuda")
    stream_of = lambda: torch.cuda.current_stream().cuda_stream
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": torch.cuda.get_device_name(),
               "torch": torch.__version__, "launches_per_graph": SWEEP_LAUNCHES, "shapes": []}
    groups: dict = {}
    for manifest in sorted(folder.glob("sweep-*.json")):
        for e in json.loads(manifest.read_text()):
            groups.setdefault((e["layer"], e["m"], e["dtype"]), []).append(e)
    out.mkdir(parents=True, exist_ok=True)
    for (layer, m, t), entries in groups.items():
        if time.time() - begin > deadline:
            print("deadline reached", file=sys.stderr)
            break
        n, k, act = entries[0]["n"], entries[0]["k"], entries[0]["activation"]
        f = n // 2 if act == "swiglu" else n
        tdt = torch.float16 if t == "f16" else torch.bfloat16
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(m, k, device="cuda", generator=gen).to(tdt)
        w = (torch.randn(n, k, device="cuda", generator=gen) / k ** 0.5).to(tdt)
        ref = _torch_ref(torch, x, w, None, act)
        eager = _torch_eager(torch, act)
        row = {"layer": layer, "m": m, "n": n, "k": k, "dtype": t, "activation": act, "configs": {}}
        row["torch_ms"] = _graph_time(torch, lambda: eager(x, w, None))
        y = torch.empty(m, f, device="cuda", dtype=tdt)
        for e in entries:
            entry = {}
            try:
                mod, fn = drv.load((folder / "cubins" / f"{e['kernel']}.cubin").read_bytes(), e["kernel"], e["shared_bytes"])
                scratch = torch.zeros(max(e["scratch"] * e["grid"], 16), dtype=torch.uint8, device="cuda")
                profile = torch.zeros(16, dtype=torch.uint8, device="cuda")
                # x fills the unused bias and residual slots, as in the IREE dispatch; split-K also takes its
                # counters (after the inputs) and its workspace (after y), and is timed with the fill of its
                # counters that IREE runs before each call
                split = e["config"]["kind"] == "splitk"
                counters = torch.zeros(max(e.get("tiles", 0), 4), dtype=torch.int32, device="cuda")
                workspace = torch.empty(max(e.get("workspace", 0), 16), dtype=torch.uint8, device="cuda")
                ptrs = [x.data_ptr(), w.data_ptr(), x.data_ptr(), x.data_ptr()] + ([counters.data_ptr()] if split else []) + \
                    [y.data_ptr()] + ([workspace.data_ptr()] if split else []) + [scratch.data_ptr(), profile.data_ptr()]
                kernel = drv.launcher(fn, e["grid"], e["threads"], e["shared_bytes"], ptrs, stream_of)
                launch = (lambda kernel=kernel, counters=counters: (counters.zero_(), kernel())) if split else kernel
                y.fill_(float("nan"))
                launch()
                torch.cuda.synchronize()
                entry["max_rel_err"] = ((y.float() - ref).abs().max() / ref.abs().max().clamp(min=1e-6)).item()
                entry["ms"] = _graph_time(torch, launch)
                drv.lib.cuModuleUnload(mod)
            except Exception as ex:
                entry["error"] = str(ex)[:300]
            row["configs"][e["key"]] = entry
        ok = {key: c["ms"] for key, c in row["configs"].items() if "ms" in c and c["max_rel_err"] < (1e-2 if t == "f16" else 3e-2)}
        if ok:
            row["best"] = min(ok, key=ok.get)
            row["best_ms"] = ok[row["best"]]
            row["vs_torch"] = row["torch_ms"] / row["best_ms"]
        results["shapes"].append(row)
        print(f"{layer} m={m} {t}: torch {row['torch_ms']:.4f} best {row.get('best')} {row.get('best_ms', 0):.4f} "
              f"({row.get('vs_torch', 0):.2f}x)", file=sys.stderr, flush=True)
        (out / "sweep.json").write_text(json.dumps(results, indent=0))
        del x, w, ref, y
        torch.cuda.empty_cache()


def sweep_report(results: Path) -> str:
    """A markdown table of a sweep: per goal shape torch (cuBLAS) against the best kernel config."""
    d = json.loads(results.read_text())
    lines = [f"{d['date']}, {d['device']}, torch {d['torch']}; each time: {d['launches_per_graph']} launches in one CUDA graph, "
             "median of 5 replays", "",
             "| layer | M | N | K | dtype | torch F.linear ms | best kernel | kernel ms | TFLOP/s | kernel vs torch | max rel err |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in d["shapes"]:
        best = r.get("best")
        c = r["configs"].get(best, {})
        tf = 2 * r["m"] * r["n"] * r["k"] / c["ms"] / 1e9 if best else float("nan")
        lines.append(f"| {r['layer']} | {r['m']} | {r['n']} | {r['k']} | {r['dtype']} | {r['torch_ms']:.4f} | {best or '-'} | "
                     f"{c.get('ms', float('nan')):.4f} | {tf:.0f} | {r.get('vs_torch', float('nan')):.2f}x | {c.get('max_rel_err', float('nan')):.1e} |")
    return "\n".join(lines) + "\n"


def report(results: Path) -> str:
    """A markdown table of a run's JSON: per shape torch (cuBLAS), IREE, the best kernel config."""
    d = json.loads(results.read_text())
    lines = [f"{d['date']}, {d['device']}, torch {d['torch']}; IREE flags {' '.join(d['flags'])}", "",
             "| shape | M x N x K | dtype | epilogue | torch eager (cuBLAS) ms | IREE codegen ms | best kernel | kernel ms | TFLOP/s | kernel vs torch | kernel vs IREE | max rel err |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in d["shapes"]:
        f = r["functions"]
        best = r.get("best_kernel")
        b = f.get(best, {})
        epi = r["activation"] + (" + bias" if r["bias"] else "")
        n = r["n"] // 2 if r["activation"] == "swiglu" else r["n"]
        lines.append(f"| {r['name']} | {r['m']} x {r['n']} x {r['k']} | {r['dtype']} | {epi} | {r['torch_eager_ms']:.4f} | "
                     f"{f['iree'].get('ms', float('nan')):.4f} | {(best or '-')[2:]} | {b.get('ms', float('nan')):.4f} | "
                     f"{b.get('tflops', float('nan')):.0f} | {r.get('vs_torch', float('nan')):.2f}x | {r.get('vs_iree', float('nan')):.2f}x | "
                     f"{b.get('max_rel_err', float('nan')):.1e} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build"); b.add_argument("out", type=Path); b.add_argument("--quick", action="store_true")
    b.add_argument("--persistent", action="store_true", help="the second sweep (PERSISTENT_*)")
    r = sub.add_parser("run"); r.add_argument("folder", type=Path); r.add_argument("--out", type=Path, required=True)
    r.add_argument("--deadline", type=float, default=400)
    m = sub.add_parser("report"); m.add_argument("results", type=Path)
    sb = sub.add_parser("sweep-build"); sb.add_argument("out", type=Path); sb.add_argument("--dtypes", default="f16,bf16")
    sb.add_argument("--only", default="", help="layers whose name contains this")
    sb.add_argument("--odd", action="store_true", help="the SWEEP_ODD shapes instead of the goal's")
    sb.add_argument("--models", action="store_true", help="the MODEL_SHAPES (the e2e models' M) instead of the goal's")
    sb.add_argument("--kinds", default="", help="only configs of these kernel kinds (tiles, persistent, pointers, splitk)")
    sb.add_argument("--ms", default="", help="only these M, comma-separated")
    sr = sub.add_parser("sweep-run"); sr.add_argument("folder", type=Path); sr.add_argument("--out", type=Path, required=True)
    sr.add_argument("--deadline", type=float, default=300)
    sp = sub.add_parser("sweep-report"); sp.add_argument("results", type=Path)
    a = p.parse_args()
    if a.cmd == "sweep-build":
        sweep_build(a.out, a.dtypes.split(","), a.only, a.odd, a.models, tuple(filter(None, a.kinds.split(","))),
                    tuple(int(m) for m in a.ms.split(",") if m))
    elif a.cmd == "sweep-run":
        sweep_run(a.folder, a.out, a.deadline)
    elif a.cmd == "sweep-report":
        print(sweep_report(a.results), end="")
    elif a.cmd == "build":
        build(a.out, a.quick, a.persistent)
    elif a.cmd == "report":
        print(report(a.results), end="")
    else:
        run(a.folder, a.out, a.deadline)


if __name__ == "__main__":
    main()

"""Build everything the H200 measurement needs, on this (CPU) machine, into the git-ignored .gpu/.

    python benchmarks/gpu/build.py fetch      # IREE runtime wheel (cp312, trimmed) + Debian's libvulkan1, libglvnd0 .debs
    python benchmarks/gpu/build.py fetch-tf   # transformers (trimmed) for the torch side of the HF models
    python benchmarks/gpu/build.py compile    # every model x batch x variant -> .gpu/cases/<model>-b<batch>/
    python benchmarks/gpu/build.py pack       # split the cases into runs that fit the device tool -> .gpu/runN/
    python benchmarks/gpu/build.py all        # the three, in order

Variants of each case (one .vmfb each; VARIANTS below; --variants default|ablation|precision|NAME,...):
  cuvil_h200            cuvil_mlir.compile(target="cuda:h200")            hopper-mode=ptx-jit (sm_89 PTX)
  cuvil_h200_td         cuvil_mlir.compile(target="cuda:h200{hopper-mode=target-description}")  (sm_90 PTX)
  cuvil_h200_nokern     cuvil_mlir.compile(target="cuda:h200{kernels=off}"): no Hopper kernels (IREE codegen only)
  cuvil_h200_ktable     the kernels with the tile table $CUVIL_KERNEL_CONFIGS_ALT (a tuning experiment)
  cuvil_sm90_td         the same description without the chip entry
  plain_h200            cuvil_mlir.compiler.pipeline.compile_plain_iree (torch-mlir's import, default decompositions)
                        with the flags of cuda:h200: IREE without any Cuvil pass
  cuvil_vulkan_ampere   cuvil_mlir.compile(target="vulkan:ampere")
  cuvil_h200_int8w ...  precision policies (int8-weight, int4-weight, int8, fp16, fp16{io=fp16}, bf16);
                        *_f32: from the fp32 model; int8 is calibrated on 4 input sets (calibration_samples)
  cuvil_h200_no_<pass>  one fusion pass disabled (not built when the pass fired nowhere in cuvil_h200)
Every variant not ending in _f32 is compiled from the fp16 model (``.half()`` on model and float inputs);
where fp16 fails to compile, from the fp32 model, and case.json says so. Inputs and the PyTorch CPU
reference outputs (from the fp32 model on the same input values) are saved as .npy beside the modules.
``pack`` compresses modules to .vmfb.xz (sign-weight models shrink ~10x; run_on_h200.py unpacks them);
the real-size cases (gpt2-12l, llama-2048: tiled weights) go through benchmarks/gpu/dedup.py instead (~600x).

The plain-IREE baseline runs no Cuvil pass (cuvil_mlir.compiler.pipeline.compile_plain_iree, as the harness's
plain-iree configuration).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
import warnings
import zipfile
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
GPU_DIR = REPO / ".gpu"
sys.path.insert(0, str(Path(__file__).resolve().parent))

import dedup  # noqa: E402
import gpu_models  # noqa: E402

RUNTIME_WHEEL = "iree-base-runtime==3.13.0"

# model name -> (builder in examples/models.py, its keyword arguments; batch is added per case)
MODELS = {
    "mlp": ("mlp", {}),
    "cnn": ("small_cnn", {}),
    "transformer": ("transformer_block", {}),
    "gpt2": ("gpt2", {}),  # the e2e size: 2 layers, width 64, seq 16, vocab 256
    # GPT-2-small width (d=768, 12 heads, seq 128), 2 layers, vocab 256; sign weights so the ~28 MB
    # fp16 module compresses to ~3 MB for the trip (gpu_models.py)
    "gpt2s": ("gpt2", {"layers": 2, "d_model": 768, "heads": 12, "seq": 128, "weights": "sign"}),
    # the same width as one examples TransformerBlock
    "block768": ("gpt_block", {"seq": 128, "d_model": 768, "heads": 12, "weights": "sign"}),
    # fusion ablation (issue 6 item 6): HF GPT-2 and a Llama layer with attention written out
    # (attn="eager", so fuse-attention has something to fuse), d=768, at 512 and 2048 tokens
    "abl-gpt2-t512": ("gpt2", {"layers": 1, "d_model": 768, "heads": 12, "seq": 512, "attn": "eager", "weights": "sign"}),
    "abl-gpt2-t2048": ("gpt2", {"layers": 1, "d_model": 768, "heads": 12, "seq": 2048, "attn": "eager", "weights": "sign"}),
    "abl-llama-t512": ("llama_ffn", {"layers": 1, "d_model": 768, "heads": 12, "kv_heads": 4, "ffn": 2048, "seq": 512, "weights": "sign"}),
    "abl-llama-t2048": ("llama_ffn", {"layers": 1, "d_model": 768, "heads": 12, "kv_heads": 4, "ffn": 2048, "seq": 2048, "weights": "sign"}),
    # real model sizes (issues 14, 15): HF GPT-2 12 layers at T=128, HF Llama d=2048 (32/8 heads,
    # FFN 8192) 2 layers at T=512, HF BERT-base width (12 layers, d=768) at T=128; sign weights
    # (dedup.py packs them at ~1 bit per weight: 11-16 MiB per module). The 2026-12-03 runs used
    # tiled sign weights (rank 64; gpu_models.tiled_sign_weights) for gpt2-12l and llama-2048.
    "gpt2-12l": ("gpt2", {"layers": 12, "d_model": 768, "heads": 12, "seq": 128, "weights": "sign"}),
    "llama-2048": ("llama_ffn", {"layers": 2, "d_model": 2048, "heads": 32, "kv_heads": 8, "ffn": 8192, "seq": 512,
                                 "attn": "sdpa", "weights": "sign"}),
    "bert-base": ("bert", {"layers": 12, "d_model": 768, "heads": 12, "seq": 128, "weights": "sign"}),
    # precision (issue 5 item 4): normal random weights, so quantization error means something
    "prec-block256": ("gpt_block", {"seq": 128, "d_model": 256, "heads": 4}),
}
BATCHES = (1, 8)

# variant -> (how it is built, target spec[, options for cuvil_mlir.compile])
VARIANTS = {
    "cuvil_h200": ("cuvil", "cuda:h200"),
    "cuvil_h200_td": ("cuvil", "cuda:h200{hopper-mode=target-description}"),
    # the Hopper kernels (issue 15) off: IREE's codegen for every cuvil.linear (today's path before them)
    "cuvil_h200_nokern": ("cuvil", "cuda:h200{kernels=off}"),
    # the target description without the kernels: what the kernels alone change
    "cuvil_h200_td_nokern": ("cuvil", "cuda:h200{hopper-mode=target-description,kernels=off}"),
    # the kernels with another tile table (CUVIL_KERNEL_CONFIGS; a tuning experiment)
    "cuvil_h200_ktable": ("cuvil", "cuda:h200", {"kernel_configs": os.environ.get("CUVIL_KERNEL_CONFIGS_ALT", "")}),
    # the same description without the chip entry (a bare sm_90 gets none): IREE's heuristics then
    # do not know the SM count; with it, a LayerNorm dispatch of gpt2s-b8 "failed to distribute"
    "cuvil_sm90_td": ("cuvil", "cuda:sm_90{hopper-mode=target-description}"),
    "cuvil_sm_89": ("cuvil", "cuda:sm_89"),
    "cuvil_sm_86": ("cuvil", "cuda:sm_86"),  # an Ampere build, JIT-compiled by the driver for sm_90
    "plain_h200": ("plain", "cuda:h200"),
    # fp32 builds (the variants above are fp16 where fp16 compiles)
    "cuvil_h200_f32": ("cuvil", "cuda:h200"),
    "cuvil_h200_td_f32": ("cuvil", "cuda:h200{hopper-mode=target-description}"),
    "plain_h200_f32": ("plain", "cuda:h200"),
    "cuvil_vulkan_ampere": ("cuvil", "vulkan:ampere"),
    "cuvil_vulkan": ("cuvil", "vulkan"),
    # only to try run_on_h200.py on this CPU machine (BENCH_TORCH_DEVICE=cpu); not measured there
    "cuvil_cpu": ("cuvil", "cpu"),
    "cuvil_cpu_ext": ("cuvil", "cpu", {"params": "external"}),  # the same with the weights in a parameter archive
    # precision policies, from the fp32 model (names end in _f32: the fp32 model is the input)
    "cuvil_h200_p16_f32": ("cuvil", "cuda:h200", {"precision": "fp16"}),
    "cuvil_h200_int8w_f32": ("cuvil", "cuda:h200", {"precision": "int8-weight"}),
    "cuvil_h200_int4w_f32": ("cuvil", "cuda:h200", {"precision": "int4-weight"}),
    "cuvil_h200_bf16_f32": ("cuvil", "cuda:h200", {"precision": "bf16"}),
    # fp16 compute with fp16 model inputs and outputs (the runner feeds the fp16 inputs)
    "cuvil_h200_p16io_f32": ("cuvil", "cuda:h200", {"precision": "fp16{io=fp16}"}),
    # static int8, calibrated on the case's input and 3 more drawn like it (calibration_samples)
    "cuvil_h200_int8_f32": ("cuvil", "cuda:h200", {"precision": "int8"}),
    # int8 weights with fp16 compute, from the fp32 model (a combination: demote, then quantize)
    "cuvil_h200_w8a16_f32": ("cuvil", "cuda:h200", {"precision": "fp16+int8-weight"}),
    # and from the fp16 model: weight-only int8/int4 with fp16 activations
    "cuvil_h200_int8w": ("cuvil", "cuda:h200", {"precision": "int8-weight"}),
    "cuvil_h200_int4w": ("cuvil", "cuda:h200", {"precision": "int4-weight"}),
    "cuvil_h200_int8": ("cuvil", "cuda:h200", {"precision": "int8"}),
    # fusion ablation on cuda:h200: one fusion pass off each
    **{f"cuvil_h200_no_{p.removeprefix('fuse-').replace('-', '_')}": ("cuvil", "cuda:h200", {"disabled_passes": (p,)})
       for p in ("fuse-conv-bn", "fuse-norms", "fuse-attention", "fuse-linear-epilogue", "fuse-gated-ffn", "fuse-horizontal")},
}
# what `compile` builds when --variants is not given
DEFAULT_VARIANTS = ("cuvil_h200", "cuvil_h200_td", "plain_h200", "cuvil_vulkan_ampere")
# the end-to-end comparison at real sizes (issue 15): the Hopper kernels with the Hopper target description
# and, the "before" of the kernels in the same run, cuda:h200{kernels=off} (ptx-jit, IREE's codegen for every op:
# the path issue 14's table measured)
E2E_VARIANTS = ("cuvil_h200_td", "cuvil_h200_nokern", "cuvil_h200_td_nokern")
# when a variant compiled only below O3 (the compile ladder), also build this one
FALLBACK_ALSO = {"cuvil_h200_td": "cuvil_h200"}
ABLATION_VARIANTS = ("cuvil_h200", *(v for v in VARIANTS if v.startswith("cuvil_h200_no_")), "plain_h200")
PRECISION_VARIANTS = ("cuvil_h200", "cuvil_h200_f32", "cuvil_h200_p16_f32", "cuvil_h200_p16io_f32", "cuvil_h200_bf16_f32",
                      "cuvil_h200_int8w_f32", "cuvil_h200_int4w_f32", "cuvil_h200_int8_f32", "cuvil_h200_w8a16_f32",
                      "cuvil_h200_int8w", "cuvil_h200_int4w", "cuvil_h200_int8", "plain_h200", "plain_h200_f32")
# Variants left out of a model by default
SKIP = {"block768": {"cuvil_vulkan", "cuvil_vulkan_ampere", "cuvil_sm90_td"}}

# What the device tool carries per run: 64 MiB for the whole tree; keep a margin for the repo itself.
RUN_BUDGET_MIB = 62.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- fetch


def fetch(out: Path) -> None:
    """The IREE runtime wheel for CPython 3.12 (trimmed: tracy builds and tools we do not run are
    dropped, ~14 -> ~4 MB) and Debian's Vulkan loader, into out/common/."""
    whl_dir, deb_dir, orig = out / "common" / "whl", out / "common" / "deb", out / "orig-whl"
    for d in (whl_dir, deb_dir, orig):
        d.mkdir(parents=True, exist_ok=True)
    if not list(orig.glob("iree_base_runtime-*.whl")):
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
                        "-d", str(orig), RUNTIME_WHEEL], check=True)
    for w in whl_dir.glob("*.whl"):
        w.unlink()
    for w in orig.glob("iree_base_runtime-*.whl"):
        trim_wheel(w, whl_dir / w.name)
    # libglvnd0: NVIDIA's Vulkan ICD (libGLX_nvidia.so.0) needs libGLdispatch.so.0
    for pkg in ("libvulkan1", "libglvnd0"):
        if not list(deb_dir.glob(f"{pkg}_*.deb")):
            subprocess.run(["apt-get", "update", "-qq"], check=False)
            subprocess.run(["apt-get", "download", pkg], cwd=deb_dir, check=True)
    for p in sorted((out / "common").rglob("*.*")):
        log(f"  {p.relative_to(out)}: {p.stat().st_size / 2**20:.2f} MiB")


# transformers for the GPU side's torch models (gpt2, llama), with the deps torch does not bring there
TF_WHEELS = ("transformers==5.24.0", "huggingface_hub", "tokenizers", "safetensors", "regex", "pyyaml", "tqdm", "httpx2",
             "httpcore2", "h11", "anyio", "idna", "typer", "click", "shellingham", "annotated_doc")
TF_MODELS_KEPT = {"gpt2", "llama", "auto", "__pycache__"}


def fetch_tf(out: Path) -> None:
    """out/common/tfsite.tar.xz: transformers (cp312 wheels) unpacked and trimmed to the models the
    benchmark builds (~6 MB); device_run.sh unpacks it where the GPU machine has no transformers."""
    wheels, site = out / "tf-whl", out / "tfsite-build" / "tfsite"
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--python-version", "3.12",
                    "--implementation", "cp", "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
                    "--platform", "manylinux2014_x86_64", "-d", str(wheels), TF_WHEELS[0]], check=True)
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    for name in TF_WHEELS:
        base = name.split("==")[0].replace("-", "_")
        for w in wheels.glob(f"{base}-*.whl"):
            zipfile.ZipFile(w).extractall(site)
    for d in (site / "transformers" / "models").iterdir():
        if d.is_dir() and d.name not in TF_MODELS_KEPT:
            shutil.rmtree(d)
    subprocess.run(["tar", "-cJf", str(out / "common" / "tfsite.tar.xz"), "-C", str(site.parent), "tfsite"], check=True)


# Inside the wheel we keep the Python packages, the runtime extension and these tools.
KEEP_TOOLS = {"iree-benchmark-module", "iree-run-module", "iree-dump-module"}


def trim_wheel(src: Path, dst: Path) -> None:
    """A copy of the runtime wheel without the tracy-instrumented build and the tools not used there
    (RECORD lists exactly what is left, so pip installs it as usual)."""
    def keep(name: str) -> bool:
        if name.startswith("iree/_runtime_libs_tracy/"):
            return False
        if name.startswith("iree/_runtime_libs/") and "/" not in name[len("iree/_runtime_libs/"):]:
            base = name.rsplit("/", 1)[1]
            return base.endswith((".py", ".so")) or base in KEEP_TOOLS
        return True

    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if not keep(info.filename):
                continue
            data = zin.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = [line for line in data.decode().splitlines() if keep(line.split(",", 1)[0])]
                data = ("\n".join(lines) + "\n").encode()
            zout.writestr(info, data)


# ---------------------------------------------------------------- compile


def build_model(name: str, batch: int):
    builder, kwargs = MODELS[name]
    kwargs = {**kwargs, "batch": batch}
    model, args = gpu_models.build(builder, kwargs)
    return model, args, builder, kwargs


def param_checksum(model) -> list[float]:
    """sum and sum of squares of every parameter and buffer (float64): the GPU side rebuilds the model
    from the same seed and compares, to know whether its torch outputs can be checked against ours."""
    s = s2 = 0.0
    for t in list(model.state_dict().values()):
        if t.is_floating_point():
            t = t.detach().double()
            s += float(t.sum())
            s2 += float((t * t).sum())
    return [s, s2]


def half_inputs(args):
    return tuple(a.half() if a.is_floating_point() else a for a in args)


def calibration_samples(args, count: int = 4, seed: int = 0) -> list[tuple]:
    """``args`` and ``count - 1`` more input sets drawn like it (floats: normal with the same mean
    and std; integers: uniform over the same range), for static int8's calibration."""
    g = torch.Generator().manual_seed(seed)
    samples = [tuple(args)]
    for _ in range(count - 1):
        samples.append(tuple(
            (torch.randn(a.shape, generator=g) * a.float().std() + a.float().mean()).to(a.dtype) if a.is_floating_point()
            else torch.randint(int(a.min()), int(a.max()) + 1, a.shape, generator=g, dtype=a.dtype) for a in args))
    return samples


def compile_cuvil(model, args, spec: str, **options):
    import cuvil_mlir
    from cuvil_mlir.compiler.precision import parse_policy

    table = options.pop("kernel_configs", None)
    if table:  # the tile table the kernels are built with (targets/cuda_kernels.py reads it)
        os.environ["CUVIL_KERNEL_CONFIGS"] = table
    try:
        return _compile_cuvil(model, args, spec, **options)
    finally:
        os.environ.pop("CUVIL_KERNEL_CONFIGS", None)


def _compile_cuvil(model, args, spec: str, **options):
    import cuvil_mlir
    from cuvil_mlir.compiler.pipeline import Options, compile_program
    from cuvil_mlir.compiler.precision import parse_policy

    if parse_policy(options.get("precision")).name == "int8":
        options["calibration"] = cuvil_mlir.calibrate(model, calibration_samples(args), target=spec)
    for key in ("disabled_passes", "patterns", "disabled_patterns"):
        if key in options:
            options[key] = tuple(options[key])
    cm = compile_program(model, args, Options(target=spec, **options))
    m = cm.modules[0]
    extra = {"iree_flags": list(m.iree_flags), "passes": list(m.passes),
             "compile_breakdown_s": cm.metadata["compile_seconds"], "patterns_fired": cm.patterns_fired,
             "kernels": [{k: v for k, v in r.items() if k in ("function", "kernel", "config", "why", "sites")}
                         for r in cm.metadata.get("kernels", [])]}
    if cm.metadata.get("dispatches"):  # record_dispatches: the profiler's half from here (eval/profiler.py join)
        extra["_profile_meta"] = {"target": m.target, "dispatches": cm.metadata["dispatches"][m.target],
                                  "pattern_sites": cm.metadata.get("pattern_sites")}
    if cm.parameters is not None:  # external weights (params="auto" makes them so from 64 MiB): the archive travels too
        extra["_parameters"] = cm.parameters
    return m.vmfb, extra


def compile_plain(model, args, spec: str):
    """IREE without Cuvil: cuvil_mlir.compiler.pipeline.compile_plain_iree, i.e. torch-mlir's FX import with
    its default decompositions straight into IREE with the target's flags (no Cuvil pass runs; the
    same baseline as the harness's plain-iree configuration)."""
    from cuvil_mlir.compiler.pipeline import Options, compile_plain_iree

    cm = compile_plain_iree(model, args, Options(target=spec))
    return cm.modules[0].vmfb, {"iree_flags": list(cm.modules[0].iree_flags)}


COMPILERS = {"cuvil": compile_cuvil, "plain": compile_plain}


def failure_text(e: BaseException) -> str:
    """The first 'error:' line (IREE's diagnostics), else the first line; short."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    first = next((line for line in lines if "error:" in line), lines[0] if lines else "")
    # "/long/path/file.py:12:0: error: ..." -> "file.py:12:0: error: ..." (the message is what matters)
    for prefix in re.findall(r"/\S+/", first):
        first = first.replace(prefix, "")
    return f"{type(e).__name__}: {first[:400]}"


def compile_case(name: str, batch: int, variants: list[str], out: Path, record_dispatches=()) -> dict:
    case_dir = out / "cases" / f"{name}-b{batch}"
    case_dir.mkdir(parents=True, exist_ok=True)
    model32, args32, builder, kwargs = build_model(name, batch)
    model16, args16 = copy.deepcopy(model32).half(), half_inputs(args32)
    # the reference sees exactly the fp16 inputs' values, in fp32
    ref_args = tuple(a.float() if a.is_floating_point() else a for a in args16)
    with torch.no_grad():
        ref = model32(*ref_args)
    refs = ref if isinstance(ref, tuple) else (ref,)

    case = {"case": case_dir.name, "model": name, "batch": batch, "builder": builder, "kwargs": kwargs,
            "param_checksum": param_checksum(model32), "inputs": {}, "refs": [], "variants": {}}
    for dtype, args in (("float16", args16), ("float32", ref_args)):
        files = []
        for i, a in enumerate(args):
            f = f"input{i}_{dtype}.npy" if a.is_floating_point() else f"input{i}.npy"
            np.save(case_dir / f, a.numpy())
            files.append(f)
        case["inputs"][dtype] = files
    for i, r in enumerate(refs):
        np.save(case_dir / f"ref{i}.npy", r.numpy())
        case["refs"].append(f"ref{i}.npy")

    # compiling more variants into a case keeps the ones compiled before
    old = case_dir / "case.json"
    if old.exists():
        case["variants"] = {v: i for v, i in json.loads(old.read_text())["variants"].items() if v not in variants}
    by_hash = {i["sha256"]: v for v, i in case["variants"].items() if "file" in i}
    variants = list(variants)
    for variant in variants:  # (grows while it runs: FALLBACK_ALSO)
        how, spec, *rest = VARIANTS[variant]
        options = rest[0] if rest else {}
        info = {"how": how, "target": spec, "options": {k: list(v) if isinstance(v, tuple) else v for k, v in options.items()}, "driver": {"cpu": "local-task"}.get(d := spec.split(":")[0].split("{")[0], d), "attempts": []}
        fired = case["variants"].get("cuvil_h200", {}).get("patterns_fired")
        off = [p for p in options.get("disabled_passes", ()) if fired is not None and not fired.get(p)]
        if off:  # the module would be cuvil_h200's again: not compiled, and said so
            info.update(status="same", same_reason=f"{', '.join(off)} fired nowhere in cuvil_h200", attempts=[])
            info["same_as"] = "cuvil_h200"
            case["variants"][variant] = info
            log(f"    {variant}: not built, {info['same_reason']}")
            continue
        if variant in record_dispatches:
            options = {**options, "record_dispatches": True}
        tries = (("float16", model16, args16), ("float32", model32, ref_args))
        for dtype, model, args in tries[1:] if variant.endswith("_f32") else tries:
            start = time.perf_counter()
            try:
                vmfb, extra = COMPILERS[how](model, args, spec, **dict(options))
            except Exception as e:  # a failing variant is a result: record it, try fp32, go on
                info["attempts"].append({"dtype": dtype, "status": failure_text(e), "compile_s": round(time.perf_counter() - start, 2)})
                log(f"    {variant} {dtype}: FAILED {failure_text(e)[:200]}")
                continue
            seconds = round(time.perf_counter() - start, 2)
            params = extra.pop("_parameters", None)
            if params is not None:  # one archive per distinct weight set, named by its content (B=1 and 8 share it)
                info["parameters"] = write_parameters(params, case_dir)
            prof = extra.pop("_profile_meta", None)
            if prof is not None:  # the dispatch call sites for the profiler there (benchmarks/gpu/e2e_profile.py)
                (case_dir / f"{variant}.dispatches.json").write_text(json.dumps(prof))
                info["dispatches_file"] = f"{variant}.dispatches.json"
                info["dispatch_counts"] = dispatch_counts(prof["dispatches"])
            digest = hashlib.sha256(vmfb).hexdigest()
            info.update(extra, dtype=dtype, compile_s=seconds, bytes=len(vmfb), sha256=digest)
            if "io=fp16" in options.get("precision", ""):  # the module takes fp16: the runner feeds the fp16 inputs
                info["input_dtype"] = "float16"
            info["attempts"].append({"dtype": dtype, "status": "ok", "compile_s": seconds})
            if digest in by_hash:  # e.g. cuda:h200 (ptx-jit) and cuda:sm_89 give the same flags
                info["same_as"] = by_hash[digest]
            else:
                by_hash[digest] = variant
                info["file"] = f"{variant}.vmfb"
                (case_dir / info["file"]).write_bytes(vmfb)
            log(f"    {variant} {dtype}: {len(vmfb) / 2**20:.2f} MiB in {seconds:.1f} s" + (f" (= {info['same_as']})" if "same_as" in info else ""))
            break
        info["status"] = "ok" if "dtype" in info else "failed"
        case["variants"][variant] = info
        if variant in FALLBACK_ALSO and info["status"] == "ok" and opt_level(info) < 3:
            also = FALLBACK_ALSO[variant]
            if also not in variants:
                log(f"    {variant} was compiled at O{opt_level(info)}: {also} too")
                variants.append(also)
    (case_dir / "case.json").write_text(json.dumps(case, indent=1))
    return case


def write_parameters(params, case_dir: Path) -> str:
    """The external parameters as an IREE archive ``params-<sha256[:16]>.irpa`` in ``case_dir``;
    returns the file name (two variants or batches with the same weights get the same file)."""
    from cuvil_mlir.runtime.session import write_parameter_archive

    tmp = case_dir / "params.tmp.irpa"
    write_parameter_archive(params.arrays, tmp)
    digest = hashlib.sha256()
    with open(tmp, "rb") as f:
        while chunk := f.read(64 << 20):
            digest.update(chunk)
    name = f"params-{digest.hexdigest()[:16]}.irpa"
    if (case_dir / name).exists():
        tmp.unlink()
    else:
        tmp.rename(case_dir / name)
    return name


def opt_level(info: dict) -> int:
    """The IREE opt level a variant was compiled at (the compile ladder drops to O1 when O3 fails)."""
    levels = [f.rsplit("=O", 1)[1] for f in info.get("iree_flags", []) if f.startswith("--iree-opt-level=O")]
    return int(levels[-1]) if levels and levels[-1].isdigit() else 3


def dispatch_counts(sites: list[dict]) -> dict:
    """Dispatches per call and per layer from the recorded call sites (eval/profiler.py's counting)."""
    from cuvil_mlir.core.diagnostics import module_path
    from cuvil_mlir.eval.profiler import count_layers

    layers = count_layers([module_path(s["location"]) for s in sites])
    return {"dispatches": len(sites), "layers": layers, "distinct": len({s["key"] for s in sites}),
            "per_layer": round(len(sites) / layers, 2) if layers else None}


def compile_all(out: Path, names: list[str], batches: list[int], variants: list[str], record_dispatches=()) -> None:
    summary = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "versions": {}, "cases": []}
    for dist in ("cuvil-mlir", "torch", "torch-mlir", "iree-base-compiler", "transformers", "numpy"):
        try:
            summary["versions"][dist] = version(dist)
        except Exception:
            summary["versions"][dist] = "not installed"
    for name in names:
        for batch in batches:
            log(f"  {name} batch {batch}")
            try:
                case = compile_case(name, batch, [v for v in variants if v not in SKIP.get(name, ())], out,
                                    record_dispatches=record_dispatches)
            except Exception as e:
                traceback.print_exc()
                log(f"  {name} batch {batch}: FAILED before compiling: {failure_text(e)}")
                continue
            summary["cases"].append(case["case"])
    path = out / "build.json"  # one file for every compile step run into this folder
    steps = json.loads(path.read_text()).get("steps", []) if path.exists() else []
    path.write_text(json.dumps({"steps": [*steps, summary]}, indent=1))


# ---------------------------------------------------------------- pack


def size_mib(paths) -> float:
    return sum(p.stat().st_size for p in paths) / 2**20


def pack(out: Path, budget_mib: float, runs_spec: str = "") -> list[Path]:
    """Split the cases into run folders out/runN/<case>/ (hard links), each small enough for one
    device call with out/common/. runs_spec: runs separated by ';', entries by ','; an entry is a
    case (gpt2-b1), a model (all its batches) or case:variant+variant (only those modules). A case's
    torch competitors are measured in the first run that has it (torch.flag). Without runs_spec:
    modules in case order, a new run when the next one would not fit."""
    for old in out.glob("run[0-9]*"):
        shutil.rmtree(old)
    common = size_mib(p for p in (out / "common").rglob("*") if p.is_file())
    cases = sorted((out / "cases").iterdir(), key=_case_order)
    runs = _runs_from_spec(cases, runs_spec) if runs_spec else _runs_by_size(cases, budget_mib - common)
    paths, seen = [], set()
    for i, run in enumerate(runs, 1):
        run_dir = out / f"run{i}"
        for case_dir, files in run.items():
            dst = run_dir / case_dir.name
            dst.mkdir(parents=True)
            variants = json.loads((case_dir / "case.json").read_text())["variants"]
            dtypes = {i.get("dtype") for i in variants.values()}
            # the parameter archives of the modules in this run (external weights): once per run, in _params/
            for name in {variants[f.stem]["parameters"] for f in files if f.suffix == ".vmfb" and variants.get(f.stem, {}).get("parameters")}:
                packed = run_dir / "_params" / (name + ".dd.xz")
                if not packed.exists():
                    packed.parent.mkdir(exist_ok=True)
                    packed.write_bytes(dedup.pack((case_dir / name).read_bytes()))
            for f in files:
                if f.name.endswith("_float32.npy") and "float32" not in dtypes:
                    continue  # no fp32 module and no fp32 torch run: the fp32 inputs stay here
                if f.suffix == ".vmfb":  # dedup.py (chunks deduplicated, sign weights as bits, xz); run_on_h200.py unpacks
                    packed = f.with_name(f.name + ".dd.xz")
                    if not packed.exists() or packed.stat().st_mtime < f.stat().st_mtime:
                        packed.write_bytes(dedup.pack(f.read_bytes()))
                    os.link(packed, dst / packed.name)
                else:
                    os.link(f, dst / f.name)
            (dst / "torch.flag").write_text("0" if case_dir in seen else "1")
            seen.add(case_dir)
        total = common + size_mib(p for p in run_dir.rglob("*") if p.is_file())
        log(f"  {run_dir.name}: {total:.1f} MiB with common/: " + ", ".join(
            f"{c.name}[{' '.join(f.stem for f in fs if f.suffix == '.vmfb')}]" for c, fs in run.items()))
        if total > budget_mib:
            log(f"  {run_dir.name}: OVER the budget of {budget_mib} MiB")
        paths.append(run_dir)
    log("  (modules travel as .vmfb.dd.xz; the sizes above are the compressed ones)")
    return paths


def _small_files(case_dir: Path) -> list[Path]:
    return [p for p in case_dir.iterdir() if p.suffix not in (".vmfb", ".xz", ".irpa") and p.name != "torch.flag"]


def _runs_from_spec(cases: list[Path], spec: str) -> list[dict[Path, list[Path]]]:
    by_name = {c.name: c for c in cases}
    runs = []
    for group in filter(None, (g.strip() for g in spec.split(";"))):
        run: dict[Path, list[Path]] = {}
        for entry in filter(None, (e.strip() for e in group.split(","))):
            name, _, variants = entry.partition(":")
            matched = [by_name[name]] if name in by_name else [c for c in cases if c.name.rpartition("-b")[0] == name]
            if not matched:
                raise SystemExit(f"pack: no case or model '{name}' in {[c.name for c in cases]}")
            for case_dir in matched:
                wanted = set(variants.split("+")) if variants else None
                modules = [m for m in sorted(case_dir.glob("*.vmfb")) if wanted is None or m.stem in wanted]
                run.setdefault(case_dir, _small_files(case_dir)).extend(modules)
        runs.append(run)
    return runs


def _runs_by_size(cases: list[Path], room: float) -> list[dict[Path, list[Path]]]:
    runs: list[dict[Path, list[Path]]] = [{}]
    used = [0.0]
    for case_dir in cases:
        small = _small_files(case_dir)
        modules = sorted(case_dir.glob("*.vmfb"), key=lambda p: p.stat().st_size)
        for files in [[m] for m in modules] or [[]]:
            size = size_mib(files) + (0 if case_dir in runs[-1] else size_mib(small))
            if runs[-1] and used[-1] + size > room:
                runs.append({})
                used.append(0.0)
                size = size_mib(files + small)
            runs[-1].setdefault(case_dir, list(small)).extend(files)
            used[-1] += size
    return runs


def _case_order(case_dir: Path):
    name, _, batch = case_dir.name.rpartition("-b")
    order = list(MODELS)
    return (order.index(name) if name in order else len(order), int(batch) if batch.isdigit() else 0)


# ---------------------------------------------------------------- main


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("step", choices=("fetch", "fetch-tf", "compile", "pack", "all"))
    p.add_argument("--out", type=Path, default=GPU_DIR)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--batches", default=",".join(map(str, BATCHES)))
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                   help="comma-separated, or the sets: default, ablation, precision, e2e")
    p.add_argument("--budget-mib", type=float, default=RUN_BUDGET_MIB)
    p.add_argument("--record-dispatches", default="",
                   help="variants compiled with their dispatch call sites recorded (for the profiler and dispatch counts)")
    p.add_argument("--runs", default="", help='pack: e.g. "mlp,cnn,gpt2s-b8;gpt2,gpt2s-b1:cuvil_h200+cuvil_h200_td"')
    opts = p.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    if opts.step in ("fetch", "all"):
        fetch(opts.out)
    if opts.step in ("fetch-tf", "all"):
        fetch_tf(opts.out)
    if opts.step in ("compile", "all"):
        sets = {"default": DEFAULT_VARIANTS, "ablation": ABLATION_VARIANTS, "precision": PRECISION_VARIANTS, "e2e": E2E_VARIANTS}
        variants = list(dict.fromkeys(v for item in opts.variants.split(",") for v in sets.get(item, (item,))))
        unknown = [v for v in variants if v not in VARIANTS]
        if unknown:
            raise SystemExit(f"unknown variants {unknown}; variants: {', '.join(VARIANTS)}")
        compile_all(opts.out, opts.models.split(","), [int(b) for b in opts.batches.split(",")], variants,
                    record_dispatches=tuple(filter(None, opts.record_dispatches.split(","))))
    if opts.step in ("pack", "all"):
        pack(opts.out, opts.budget_mib, opts.runs)


if __name__ == "__main__":
    main()

"""Issue 16: the fp16 ResNet-18 (ONNX) is wrong on the H200 (rel. L2 0.19) while fp32 there and
fp16 on the CPU are right. Which part of IREE's CUDA codegen breaks it? Built here, run there.

    python benchmarks/gpu/conv_fp16.py build /work/main/.gpu/big3     # here: modules, inputs, references, run.sh
    OUT=$OUT DEADLINE=150 bash .gpu/big3/run.sh                        # there (copies this file beside the modules)
    python benchmarks/gpu/conv_fp16.py run DIR --out OUT               # what run.sh runs
    python benchmarks/gpu/conv_fp16.py build /tmp/d --dry-run && ... run /tmp/d --out /tmp/o --driver local-task   # try it here

Two parts, every module a bare .vmfb (runs with the IREE runtime wheel, numpy and torch only):
- ``resnet/``: big_models.py's ResNet-18 (half width, 64 px, BN folded), from its .onnx, in the
  variants of RESNET (precision, target, extra IREE flags), against PyTorch fp32 on the CPU here
  (ref_fp32.npy); rel. L2 and the median ms of a call (device-resident input, host copy of the
  100 logits out). Each whole-model module is ~5 MiB (fp16) or ~10 MiB (fp32) of
  weights that do not compress: 45 MiB travel at most, so the fix under the sm_90 description
  is checked conv by conv only (sweep mode direct-td).
- ``sweep/``: every distinct conv of that ResNet alone (fp16 in and out, weights as arguments,
  + bias + relu) in the codegen modes of SWEEP, against a float64 conv of the same fp16 values
  (computed there by torch on the CPU): which conv shapes break, and under which mode.

Extra IREE flags and the no-MMA / f32-accumulate-only Hopper descriptions are experiment-only:
they are patched into CudaTarget here, not options a user can type.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import lzma
import os
import shutil
import statistics
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TD = "hopper-mode=target-description"
IGEMM, DIRECT = "conv=igemm", "conv=direct"
KEEP_CONV = "fp16{keep=softmax,norm,reduction,exp,log,conv2d}"  # the default kept kinds, and conv2d
NO_PAD = ("--iree-codegen-llvmgpu-igemm-pad-convolution=false",)
DIRECT_TF = ("--iree-codegen-llvmgpu-use-direct-convolution=true",)

# name -> (precision, target, extra IREE flags, mma list for the Hopper description or None, what it shows)
RESNET = {
    "fp32": ("fp32", f"cuda:h200{{{IGEMM}}}", (), None,
             "harness check: fp32 with IREE's igemm (right on 2026-12-05: 2.8e-7)"),
    "fp16-igemm": ("fp16", f"cuda:h200{{{IGEMM}}}", (), None,
                   "the bug as shipped before conv=direct (ptx-jit, sm_89 PTX JIT-compiled for sm_90)"),
    "fp16-igemm-td": ("fp16", f"cuda:h200{{{TD},{IGEMM}}}", (), None,
                      "the bug as measured on 2026-12-05 (sm_90 target description): 0.19"),
    "fp16-direct": ("fp16", "cuda:h200", (), None, "the fix: conv=direct (--iree-codegen-llvmgpu-use-igemm=false)"),
    "fp16-igemm-nomma-td": ("fp16", f"cuda:h200{{{TD},{IGEMM}}}", (), "", "igemm without MMA intrinsics: "
                            "right -> the MMA path of igemm; wrong -> igemm's im2col/tiling itself"),
    "fp16-igemm-keepconv": (KEEP_CONV, f"cuda:h200{{{IGEMM}}}", (), None,
                            "igemm, convs in fp32, the rest fp16: right -> the fp16 convs; wrong -> another fp16 op"),
}

# The Hopper description's mma list (targets/cuda.py _HOPPER_WGP), and the one without f16 accumulators
MMA_ALL = ("[<NV_MMA_SYNC_F32_16x8x16_F16>, <NV_MMA_SYNC_F16_16x8x16_F16>, <NV_MMA_SYNC_F32_16x8x16_BF16>, "
           "<NV_MMA_SYNC_F32_16x8x32_F8E4M3FN>, <NV_MMA_SYNC_F32_16x8x32_F8E5M2>, "
           "<NV_WMMA_F32_16x16x16_F16>, <NV_WMMA_F16_16x16x16_F16>]")
MMA_F32_ACC = "[<NV_MMA_SYNC_F32_16x8x16_F16>, <NV_MMA_SYNC_F32_16x8x16_BF16>, <NV_WMMA_F32_16x16x16_F16>]"

# mode -> (target, extra IREE flags, mma list or None, what it shows), for each conv alone
SWEEP = {
    "igemm": (f"cuda:h200{{{IGEMM}}}", (), None, "IREE's default (ptx-jit)"),
    "direct": ("cuda:h200", (), None, "conv=direct (the fix)"),
    "igemm-td": (f"cuda:h200{{{TD},{IGEMM}}}", (), None, "igemm, sm_90 description"),
    "direct-td": (f"cuda:h200{{{TD}}}", (), None, "conv=direct, sm_90 description"),
    "igemm-nopad": (f"cuda:h200{{{IGEMM}}}", NO_PAD, None, "igemm without its pre-padding of the conv"),
    "igemm-nomma-td": (f"cuda:h200{{{TD},{IGEMM}}}", (), "", "igemm without MMA intrinsics"),
    "igemm-f32acc-td": (f"cuda:h200{{{TD},{IGEMM}}}", (), MMA_F32_ACC, "igemm with only f32-accumulating MMAs"),
    "direct-conv-td": (f"cuda:h200{{{TD}}}", DIRECT_TF, None, "IREE's tile-and-fuse direct convolution"),
}


def resnet_convs(width: int = 32, size: int = 64) -> list[dict]:
    """The distinct convs of big_models.resnet18(width, size): cin, cout, k, stride, pad, input h/w."""
    convs = [dict(cin=3, cout=width, k=7, s=2, p=3, hw=size)]
    hw, cin = size // 4, width  # after the stem (/2) and the max pool (/2)
    for i, w in enumerate((width, 2 * width, 4 * width, 8 * width)):
        if i:
            convs += [dict(cin=cin, cout=w, k=3, s=2, p=1, hw=hw), dict(cin=cin, cout=w, k=1, s=2, p=0, hw=hw)]
            hw //= 2
        convs.append(dict(cin=w, cout=w, k=3, s=1, p=1, hw=hw))
        cin = w
    return convs


def conv_name(c: dict) -> str:
    return f"c{c['cin']}-{c['cout']}-k{c['k']}s{c['s']}-hw{c['hw']}"


# ---------------------------------------------------------------------------------------
# build (here)


@contextlib.contextmanager
def patched(flags=(), mma=None):
    """CudaTarget with extra IREE flags (before the opt level) and/or another mma list in the Hopper description."""
    from cuvil_mlir.targets import cuda

    flags_before, wgp_before = cuda.CudaTarget.iree_flags, cuda._HOPPER_WGP
    if flags:
        cuda.CudaTarget.iree_flags = lambda self: [*flags_before(self)[:-1], *flags, flags_before(self)[-1]]
    if mma is not None:
        assert MMA_ALL in wgp_before, "the Hopper description's mma list changed: update MMA_ALL"
        cuda._HOPPER_WGP = wgp_before.replace(MMA_ALL, f"[{mma.strip('[]')}]")
    try:
        yield
    finally:
        cuda.CudaTarget.iree_flags, cuda._HOPPER_WGP = flags_before, wgp_before


def save_vmfb(compiled, path: Path, xz: bool) -> dict:
    module = compiled.modules[0]
    data = module.vmfb
    if xz:
        path = path.with_name(path.name + ".xz")
        path.write_bytes(lzma.compress(data, preset=6))
    else:
        path.write_bytes(data)
    return {"file": path.name, "iree_flags": list(module.iree_flags), "bytes": path.stat().st_size}


def build_resnet(out: Path, names, dry_run: bool = False) -> dict:
    import contextlib as cl
    import io

    import numpy as np
    import torch

    import cuvil_mlir

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from big_models import resnet18

    folder = out / "resnet"
    folder.mkdir(parents=True, exist_ok=True)
    torch.set_grad_enabled(False)
    model, (x,) = resnet18()
    onnx_path = Path("/tmp/conv_fp16_resnet18.onnx")
    with cl.redirect_stdout(io.StringIO()):
        torch.onnx.export(model, (x,), str(onnx_path), dynamo=True)
    np.save(folder / "x.npy", x.numpy())
    np.save(folder / "ref_fp32.npy", model(x).numpy())
    variants = {}
    for name in names:
        precision, target, flags, mma, shows = RESNET[name]
        if dry_run:
            target, flags, mma = "cpu", (), None
        t = time.perf_counter()
        with patched(flags, mma):
            compiled = cuvil_mlir.compile(str(onnx_path), target=target, precision=precision, params="inline")
        # the CPU target's answer for the same policy, the yardstick the GPU should meet
        variants[name] = {"precision": precision, "target": target, "mma": mma, "shows": shows,
                          "compile_s": round(time.perf_counter() - t, 1),
                          **save_vmfb(compiled, folder / f"{name}.vmfb", xz=True)}
        print(f"  resnet {name}: {variants[name]['bytes'] / 2**20:.1f} MiB", flush=True)
    cpu = {}
    for precision in sorted({RESNET[n][0] for n in names}):
        got = np.asarray(cuvil_mlir.compile(str(onnx_path), target="cpu", precision=precision)(x.numpy()))
        ref = np.load(folder / "ref_fp32.npy")
        cpu[precision] = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    return {"input": "x.npy", "reference": "ref_fp32.npy", "cpu_rel_l2": cpu, "variants": variants}


def build_sweep(out: Path, modes, dry_run: bool = False) -> dict:
    import torch

    import cuvil_mlir

    folder = out / "sweep"
    folder.mkdir(parents=True, exist_ok=True)
    torch.set_grad_enabled(False)

    class ConvReluBias(torch.nn.Module):
        def __init__(self, s, p):
            super().__init__()
            self.s, self.p = s, p

        def forward(self, x, w, b):
            return torch.relu(torch.nn.functional.conv2d(x, w, b, self.s, self.p))

    convs = {}
    for c in resnet_convs():
        args = (torch.zeros(1, c["cin"], c["hw"], c["hw"], dtype=torch.float16),
                torch.zeros(c["cout"], c["cin"], c["k"], c["k"], dtype=torch.float16), torch.zeros(c["cout"], dtype=torch.float16))
        name = conv_name(c)
        convs[name] = {**c, "modules": {}}
        for mode in modes:
            target, flags, mma, _ = ("cpu", (), None, "") if dry_run else SWEEP[mode]
            try:
                with patched(flags, mma):
                    compiled = cuvil_mlir.compile(ConvReluBias(c["s"], c["p"]), args, target=target)
                convs[name]["modules"][mode] = save_vmfb(compiled, folder / f"{name}.{mode}.vmfb", xz=False)
            except Exception as e:
                convs[name]["modules"][mode] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
        print(f"  sweep {name}: {len(convs[name]['modules'])} modes", flush=True)
    return {"modes": {m: {"target": SWEEP[m][0], "flags": list(SWEEP[m][1]), "mma": SWEEP[m][2], "shows": SWEEP[m][3]}
                      for m in modes}, "convs": convs}


RUN_SH = """#!/bin/bash
# Issue 16 on the GPU machine, from the repo root: OUT=$OUT DEADLINE=150 bash .gpu/big3/run.sh
# Installs the IREE runtime wheel (.gpu/common/whl) into a scratch dir, then runs every variant
# (benchmarks/gpu/conv_fp16.py, copied here as conv_fp16.py) and writes $OUT/big3.json.
# DRIVER=local-task and COMMON=<dir with whl/> run a --dry-run build on a CPU machine.
set -u
export PYTHONUNBUFFERED=1
HERE=$(cd "$(dirname "$0")" && pwd); COMMON=${COMMON:-$HERE/../common}; SITE=/tmp/big3-site
START=$(date +%s)
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE $COMMON/whl/iree_base_runtime-*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv > "$OUT/nvidia-smi.txt" 2>&1
LEFT=$(( ${DEADLINE:-150} - ($(date +%s) - START) - 5 ))
PYTHONPATH=$SITE timeout $(( LEFT + 3 )) python3 "$HERE/conv_fp16.py" run "$HERE" --out "$OUT" --deadline $LEFT \
  --driver ${DRIVER:-cuda} 2>&1 | tee "$OUT/big3.log"
"""


def build(a) -> int:
    import warnings

    warnings.filterwarnings("ignore")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"built": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "dry_run": a.dry_run,
                "resnet": build_resnet(out, a.resnet.split(","), a.dry_run), "sweep": build_sweep(out, a.sweep.split(","), a.dry_run)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    shutil.copy(__file__, out / "conv_fp16.py")
    (out / "run.sh").write_text(RUN_SH)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out} ({size / 2**20:.1f} MiB)")
    return 0


# ---------------------------------------------------------------------------------------
# run (there)


class Module:
    """A .vmfb (or .vmfb.xz) on the cuda driver, called with device-resident inputs."""

    def __init__(self, path: Path, config):
        import iree.runtime as rt

        data = lzma.decompress(path.read_bytes()) if path.suffix == ".xz" else path.read_bytes()
        self.config = config
        self.vm = rt.VmModule.copy_buffer(config.vm_instance, data)
        self.ctx = rt.SystemContext(config=config)
        self.ctx.add_vm_module(self.vm)
        self.fn = self.ctx.modules[self.vm.name]["main"]

    def __call__(self, *device_arrays):
        res = self.fn(*device_arrays)
        return (res[0] if isinstance(res, (tuple, list)) else res).to_host()


def rel_l2(got, ref) -> float:
    import numpy as np

    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def median_ms(fn, seconds: float = 0.7, warmup: int = 3, max_iters: int = 300) -> float:
    for _ in range(warmup):
        fn()
    times, stop = [], time.perf_counter() + seconds
    while len(times) < max_iters and time.perf_counter() < stop:
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return round(statistics.median(times), 4)


def run(a) -> int:
    import numpy as np

    import iree.runtime as rt

    start, here, out = time.monotonic(), Path(a.dir), Path(a.out)
    left = lambda: a.deadline - (time.monotonic() - start)  # noqa: E731
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((here / "manifest.json").read_text())
    result = {"manifest_built": manifest["built"], "resnet": {}, "sweep": {}, "cpu_rel_l2": manifest["resnet"]["cpu_rel_l2"]}
    save = lambda: (out / "big3.json").write_text(json.dumps(result, indent=1))  # noqa: E731
    config = rt.Config(a.driver)

    r = manifest["resnet"]
    x = np.load(here / "resnet" / r["input"])
    ref = np.load(here / "resnet" / r["reference"])
    xd = rt.asdevicearray(config.device, x)
    for name, v in r["variants"].items():
        if left() < 8:
            result["resnet"][name] = {"skipped": f"deadline ({left():.0f} s left)"}
            continue
        row = result["resnet"][name] = {"precision": v["precision"], "target": v["target"], "shows": v["shows"]}
        try:
            m = Module(here / "resnet" / v["file"], config)
            got = m(xd)
            row["rel_l2"] = rel_l2(got, ref)
            row["max_abs"] = float(np.abs(np.asarray(got, np.float64) - ref).max())
            row["finite"] = bool(np.isfinite(got).all())
            row["median_ms"] = median_ms(lambda: m(xd))
            row["repeat_same"] = bool(np.array_equal(m(xd), got))  # a race would show as a changing answer
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:800]}"
        save()
        print(f"resnet {name:22s} {row.get('rel_l2', float('nan')):10.3e} {row.get('median_ms', float('nan')):8.3f} ms  "
              f"{row.get('error', '')[:100]}", flush=True)

    try:
        import torch
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    for name, c in manifest["sweep"]["convs"].items():
        if left() < 12 or torch is None:  # a row loads one module per mode
            result["sweep"][name] = {"skipped": "no torch" if torch is None else f"deadline ({left():.0f} s left)"}
            continue
        xs = (rng.random((1, c["cin"], c["hw"], c["hw"])) * 2 - 1).astype(np.float16)
        bound = 1 / np.sqrt(c["cin"] * c["k"] * c["k"])  # torch's default conv init range
        ws = ((rng.random((c["cout"], c["cin"], c["k"], c["k"])) * 2 - 1) * bound).astype(np.float16)
        bs = ((rng.random(c["cout"]) * 2 - 1) * bound).astype(np.float16)
        ref = torch.relu(torch.nn.functional.conv2d(*(torch.from_numpy(t.astype(np.float64)) for t in (xs, ws, bs)),
                                                    stride=c["s"], padding=c["p"])).numpy()
        devs = [rt.asdevicearray(config.device, t) for t in (xs, ws, bs)]
        row = result["sweep"][name] = {}
        for mode, built in c["modules"].items():
            if "error" in built:
                row[mode] = {"compile_error": built["error"][:300]}
                continue
            try:
                row[mode] = {"rel_l2": rel_l2(Module(here / "sweep" / built["file"], config)(*devs), ref)}
            except Exception as e:
                row[mode] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        save()
        print(f"sweep  {name:22s} " + "  ".join(f"{m}={v.get('rel_l2', float('nan')):.1e}" for m, v in row.items()), flush=True)
    result["wall_s"] = round(time.monotonic() - start, 1)
    save()
    print_table(result)
    return 0


def print_table(result: dict) -> None:
    print("\n| variant | precision | target | rel L2 vs torch fp32 | ms | shows |\n|---|---|---|---:|---:|---|")
    for name, row in result["resnet"].items():
        print(f"| {name} | {row.get('precision', '')} | {row.get('target', '')} | "
              f"{row['rel_l2']:.2e} | {row.get('median_ms')} | {row.get('shows', '')} |" if "rel_l2" in row else
              f"| {name} | | | {row.get('error') or row.get('skipped')} | | |")
    print(f"(cuvil on the CPU, same policy: {result['cpu_rel_l2']}; a right fp16 answer is ~1e-3)")
    modes = sorted({m for row in result["sweep"].values() for m in row if isinstance(row.get(m), dict)})
    if modes:
        print("\n| conv (rel L2 vs float64) | " + " | ".join(modes) + " |\n|---|" + "---:|" * len(modes))
        for name, row in result["sweep"].items():
            cells = [row.get(m, {}) for m in modes]
            print(f"| {name} | " + " | ".join(f"{c['rel_l2']:.1e}" if "rel_l2" in c else ("err" if c else "-") for c in cells) + " |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("out")
    b.add_argument("--resnet", default=",".join(RESNET), help="comma-separated variants of RESNET")
    b.add_argument("--sweep", default=",".join(SWEEP), help="comma-separated modes of SWEEP")
    b.add_argument("--dry-run", action="store_true", help="every module for the CPU target: to try `run` here")
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--out", required=True)
    r.add_argument("--deadline", type=float, default=140)
    r.add_argument("--driver", default="cuda", help="local-task for a --dry-run build")
    a = p.parse_args()
    if a.cmd == "build":
        sys.path.insert(0, str(ROOT))
    return {"build": build, "run": run}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())

"""Issue 16: the fp16 ResNet-18 (ONNX) was wrong on the H200 (rel. L2 0.19). The cause, measured
on 2026-12-06 (H200 .gpu/big3, H100 .gpu/big4 and .gpu/big5): IREE 3.13's CUDA MMA codegen
computes 16-bit 1x1 convs of 32 and 64 input channels wrong (0.62-0.80), stride 1 or 2, as IREE
convs and as IREE matmuls alike; 128 input channels and every 3x3 / 7x7 conv are right. The same
convs as a channels-last linear through the sm_90 Triton kernel are right (2e-4). The fix:
conv1x1-as-linear (lowering/workarounds/), first in the lowering stage of the cuda targets with
the sm_90 kernels. This experiment checks it there. Built here, run there.

    python benchmarks/gpu/conv_fp16.py build /work/main/.gpu/big6     # here: modules, inputs, references, run.sh
    OUT=$OUT DEADLINE=150 bash .gpu/big6/run.sh                        # there (copies this file beside the modules)
    python benchmarks/gpu/conv_fp16.py run DIR --out OUT               # what run.sh runs
    python benchmarks/gpu/conv_fp16.py build /tmp/d --dry-run && ... run /tmp/d --out /tmp/o --driver local-task   # try it here

Two parts, every module a bare .vmfb (runs with the IREE runtime wheel, numpy and torch only);
results in OUT/<folder name>.json:
- ``resnet/``: big_models.py's ResNet-18 (half width, 64 px, BN folded), from its .onnx, fp16,
  in the variants of RESNET (the fix, and the bug: the same without the pass), against PyTorch
  fp32 on the CPU here (ref_fp32.npy); rel. L2 and the median ms of a call (device-resident
  input, host copy of the 100 logits out), timed in interleaved rounds. Each module is ~5 MiB
  of weights that do not compress.
- ``sweep/``: the ResNet's 1x1 stride-2 convs and 1x1 stride-1 convs of the same channels at
  the strided sizes alone (fp16 in and out, weights as arguments, + bias + relu) in the modes of
  SWEEP (IREE's conv; the model written as a slice + linear, by the kernel or by IREE's matmul),
  against a float64 conv of the same fp16 values (computed there by torch on the CPU).
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TD = "cuda:h200{hopper-mode=target-description}"
FIX = "conv1x1-as-linear"  # the workaround pass; a variant without it shows the bug

# name -> (target, passes switched off, what it shows); all fp16
RESNET = {
    "fp16-fix": ("cuda:h200", (), "the fix (ptx-jit, sm_89 PTX JIT-compiled for sm_90): expect ~5e-4"),
    "fp16-fix-td": (TD, (), "the fix, sm_90 target description: expect ~5e-4"),
    "fp16-bug": ("cuda:h200", (FIX,), "without the fix (ptx-jit): 0.19 on the H200, 2026-12-06"),
    "fp16-bug-td": (TD, (FIX,), "without the fix (sm_90 description): 0.19 on the H200, 2026-12-06"),
}

# mode -> (target, passes switched off, what it shows), for each conv alone
SWEEP = {
    "igemm": ("cuda:h200", (FIX,), "IREE's default codegen (implicit GEMM, ptx-jit), no rewrite"),
    "igemm-td": (TD, (FIX,), "implicit GEMM, sm_90 description, no rewrite"),
    "fix": ("cuda:h200", (), "the conv with conv1x1-as-linear (the pipeline's own rewrite)"),
    # the 1x1 conv written as a strided slice and a linear over channels-last pixels (the model
    # does it: torch.export gives cuvil.linear), by the Hopper kernel or by IREE's matmul codegen
    "linear": ("cuda:h200", (FIX,), "1x1 conv as slice + channels-last linear: the Triton kernel", "linear"),
    "linear-iree": ("cuda:h200{kernels=off}", (FIX,), "1x1 conv as slice + channels-last linear: IREE's matmul", "linear"),
}


def resnet_convs(width: int = 32, size: int = 64) -> list[dict]:
    """big_models.resnet18(width, size)'s 1x1 stride-2 downsample convs (cin, cout, input h/w),
    and for each a 1x1 stride-1 conv of the same channels at half the size (the fix's conv)."""
    convs, hw = [], size // 4  # after the stem (/2) and the max pool (/2)
    for w in (width, 2 * width, 4 * width):
        convs.append(dict(cin=w, cout=2 * w, k=1, s=2, p=0, hw=hw))
        convs.append(dict(cin=w, cout=2 * w, k=1, s=1, p=0, hw=hw // 2))
        hw //= 2
    return convs


def conv_name(c: dict) -> str:
    return f"c{c['cin']}-{c['cout']}-k{c['k']}s{c['s']}-hw{c['hw']}"


# ---------------------------------------------------------------------------------------
# build (here)


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
        target, disabled, shows = RESNET[name]
        target = "cpu" if dry_run else target
        t = time.perf_counter()
        compiled = cuvil_mlir.compile(str(onnx_path), target=target, precision="fp16", params="inline",
                                      disabled_passes=disabled)
        variants[name] = {"precision": "fp16", "target": target, "disabled_passes": list(disabled), "shows": shows,
                          "fired": compiled.patterns_fired.get(FIX, {}), "compile_s": round(time.perf_counter() - t, 1),
                          **save_vmfb(compiled, folder / f"{name}.vmfb", xz=True)}
        print(f"  resnet {name}: {variants[name]['bytes'] / 2**20:.1f} MiB, {FIX}: {variants[name]['fired']}", flush=True)
    # the CPU target's answer for the same policy, the yardstick the GPU should meet
    got = np.asarray(cuvil_mlir.compile(str(onnx_path), target="cpu", precision="fp16")(x.numpy()))
    ref = np.load(folder / "ref_fp32.npy")
    cpu = {"fp16": float(np.linalg.norm(got - ref) / np.linalg.norm(ref))}
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

    class LinearReluBias(ConvReluBias):  # a 1x1 conv, unpadded: pixels (strided) x channels
        def forward(self, x, w, b):
            pixels = x[:, :, ::self.s, ::self.s].permute(0, 2, 3, 1)
            return torch.relu(torch.nn.functional.linear(pixels, w[:, :, 0, 0], b)).permute(0, 3, 1, 2)

    convs = {}
    for c in resnet_convs():
        args = (torch.zeros(1, c["cin"], c["hw"], c["hw"], dtype=torch.float16),
                torch.zeros(c["cout"], c["cin"], c["k"], c["k"], dtype=torch.float16), torch.zeros(c["cout"], dtype=torch.float16))
        name = conv_name(c)
        convs[name] = {**c, "modules": {}}
        for mode in modes:
            target, disabled, _, *form = SWEEP[mode]
            target = "cpu" if dry_run else target
            model = (LinearReluBias if form == ["linear"] else ConvReluBias)(c["s"], c["p"])
            try:
                compiled = cuvil_mlir.compile(model, args, target=target, disabled_passes=disabled)
                convs[name]["modules"][mode] = {**save_vmfb(compiled, folder / f"{name}.{mode}.vmfb", xz=False),
                                                "fired": compiled.patterns_fired.get(FIX, {})}
            except Exception as e:
                convs[name]["modules"][mode] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
        print(f"  sweep {name}: {len(convs[name]['modules'])} modes", flush=True)
    return {"modes": {m: {"target": SWEEP[m][0], "disabled_passes": list(SWEEP[m][1]), "shows": SWEEP[m][2],
                          "form": (SWEEP[m][3:] or ("conv",))[0]}
                      for m in modes}, "convs": convs}


RUN_SH = """#!/bin/bash
# Issue 16 on the GPU machine, from the repo root: OUT=$OUT DEADLINE=150 bash .gpu/@NAME@/run.sh
# Installs the IREE runtime wheel (.gpu/common/whl) into a scratch dir, then runs every variant
# (benchmarks/gpu/conv_fp16.py, copied here as conv_fp16.py) and writes $OUT/@NAME@.json.
# DRIVER=local-task and COMMON=<dir with whl/> run a --dry-run build on a CPU machine.
set -u
export PYTHONUNBUFFERED=1
HERE=$(cd "$(dirname "$0")" && pwd); COMMON=${COMMON:-$HERE/../common}; SITE=/tmp/@NAME@-site
START=$(date +%s)
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE $COMMON/whl/iree_base_runtime-*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv > "$OUT/nvidia-smi.txt" 2>&1
LEFT=$(( ${DEADLINE:-150} - ($(date +%s) - START) - 5 ))
PYTHONPATH=$SITE timeout $(( LEFT + 3 )) python3 "$HERE/conv_fp16.py" run "$HERE" --out "$OUT" --deadline $LEFT \
  --driver ${DRIVER:-cuda} 2>&1 | tee "$OUT/@NAME@.log"
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
    (out / "run.sh").write_text(RUN_SH.replace("@NAME@", out.name))
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


def timed_ms(fn, seconds: float, warmup: int = 3, max_iters: int = 300) -> list[float]:
    """The ms of each call of ``fn`` for ``seconds`` (after ``warmup`` calls)."""
    for _ in range(warmup):
        fn()
    times, stop = [], time.perf_counter() + seconds
    while len(times) < max_iters and time.perf_counter() < stop:
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return times


def run(a) -> int:
    import numpy as np

    import iree.runtime as rt

    start, here, out = time.monotonic(), Path(a.dir), Path(a.out)
    left = lambda: a.deadline - (time.monotonic() - start)  # noqa: E731
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((here / "manifest.json").read_text())
    result = {"manifest_built": manifest["built"], "resnet": {}, "sweep": {}, "cpu_rel_l2": manifest["resnet"]["cpu_rel_l2"]}
    save = lambda: (out / f"{here.name}.json").write_text(json.dumps(result, indent=1))  # noqa: E731
    config = rt.Config(a.driver)

    r = manifest["resnet"]
    x = np.load(here / "resnet" / r["input"])
    ref = np.load(here / "resnet" / r["reference"])
    xd = rt.asdevicearray(config.device, x)
    loaded = {}
    for name, v in r["variants"].items():
        if left() < 8:
            result["resnet"][name] = {"skipped": f"deadline ({left():.0f} s left)"}
            continue
        row = result["resnet"][name] = {k: v[k] for k in ("precision", "target", "disabled_passes", "fired", "shows")}
        try:
            m = loaded[name] = Module(here / "resnet" / v["file"], config)
            got = m(xd)
            row["rel_l2"] = rel_l2(got, ref)
            row["max_abs"] = float(np.abs(np.asarray(got, np.float64) - ref).max())
            row["finite"] = bool(np.isfinite(got).all())
            row["repeat_same"] = bool(np.array_equal(m(xd), got))  # a race would show as a changing answer
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:800]}"
        save()
        print(f"resnet {name:14s} {row.get('rel_l2', float('nan')):10.3e}  {row.get('error', '')[:100]}", flush=True)
    # latency: every loaded variant in interleaved rounds (a slower GPU clock hits each alike)
    samples = {name: [] for name in loaded}
    for _ in range(5):
        for name, m in loaded.items():
            if left() > 40:
                samples[name] += timed_ms(lambda: m(xd), seconds=0.3)
    for name, times in samples.items():
        if times:
            result["resnet"][name].update(median_ms=round(statistics.median(times), 4), calls_timed=len(times))
    save()

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
                row[mode] = {"rel_l2": rel_l2(Module(here / "sweep" / built["file"], config)(*devs), ref), "fired": built["fired"]}
            except Exception as e:
                row[mode] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        save()
        print(f"sweep  {name:22s} " + "  ".join(f"{m}={v.get('rel_l2', float('nan')):.1e}" for m, v in row.items()), flush=True)
    result["wall_s"] = round(time.monotonic() - start, 1)
    save()
    print_table(result)
    return 0


def print_table(result: dict) -> None:
    print("\n| variant | target | passes off | rewrites | rel L2 vs torch fp32 | median ms | shows |\n|---|---|---|---:|---:|---:|---|")
    for name, row in result["resnet"].items():
        print(f"| {name} | {row.get('target', '')} | {','.join(row.get('disabled_passes', [])) or '-'} | "
              f"{sum(row.get('fired', {}).values())} | {row['rel_l2']:.2e} | {row.get('median_ms')} | {row.get('shows', '')} |"
              if "rel_l2" in row else f"| {name} | | | | {row.get('error') or row.get('skipped')} | | |")
    print(f"(cuvil on the CPU, same policy: {result['cpu_rel_l2']}; a right fp16 answer is ~5e-4)")
    modes = list(dict.fromkeys(m for row in result["sweep"].values() for m in row if isinstance(row.get(m), dict)))
    if modes:
        print("\n(* the rewrite fired)\n| conv (rel L2 vs float64) | " + " | ".join(modes) + " |\n|---|" + "---:|" * len(modes))
        for name, row in result["sweep"].items():
            cells = [row.get(m, {}) for m in modes]
            print(f"| {name} | " + " | ".join(f"{c['rel_l2']:.1e}{'*' if c.get('fired') else ''}" if "rel_l2" in c else ("err" if c else "-") for c in cells) + " |")


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

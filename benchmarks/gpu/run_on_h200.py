"""Measure the modules built by build.py on the GPU machine (the H200), next to PyTorch on the same GPU.

    python3 benchmarks/gpu/run_on_h200.py .gpu/run1 --out $OUT          # there, from the repository root

Runs THERE: Python 3.12 with torch (CUDA), no cuvil_mlir, no torch-mlir, no IREE. It installs the
IREE runtime from the wheel in .gpu/common/whl into a scratch folder, unpacks the Vulkan loader from
.gpu/common/deb, and points VK_DRIVER_FILES at the NVIDIA driver's ICD. Then, per case folder
(<model>-b<batch>/ with case.json, inputs, references and .vmfb files):
  - every module: numerics through iree.runtime (in a child process, so a crashing driver costs one
    row, not the run): load time (includes the driver's PTX JIT), first call, max rel. error against
    the PyTorch CPU fp32 reference; then latency with iree-benchmark-module (the IREE way);
  - PyTorch on the same GPU (fp16, examples/models.py rebuilt from the same seed): eager,
    torch.compile default and mode="reduce-overhead" (CUDA graphs), timed with CUDA events.
Everything goes to $OUT/results-<run>.json, written after each item.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shlex
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
SITE = Path(os.environ.get("IREE_SITE", "/tmp/iree-site"))  # the runtime wheel is installed here
DEVICE = os.environ.get("BENCH_TORCH_DEVICE", "cuda")  # "cpu" only to try this script without a GPU
ICD_GLOBS = ("/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd*.json", "/usr/share/vulkan/icd.d/nvidia_icd*.json",
             "/etc/vulkan/icd.d/nvidia_icd*.json", "/usr/local/nvidia/**/nvidia_icd*.json")
# 10 repetitions of >= 0.2 s each (Google Benchmark's default is 0.5 s; 0.2 s is still thousands of
# calls of these models) after 1 s of warm-up: ~3 s a module, so one device call measures them all
BENCH_FLAGS = ["--benchmark_repetitions=10", "--benchmark_min_warmup_time=1", "--benchmark_min_time=0.2s",
               "--device_allocator=caching", "--function=main"]
# more runtime flags for every module (e2e_device.sh's ALT_FLAGS item: --cuda_use_streams=false, IREE's
# CUDA graphs for command buffers); the report's bench_flags say which were used
BENCH_FLAGS += os.environ.get("IREE_BENCH_FLAGS", "").split()
CHECK_TIMEOUT_S = 180
BENCH_TIMEOUT_S = 120
TORCH_REPS = int(os.environ.get("TORCH_REPS", 200))  # fewer only to try the script on a CPU
# which models torch also runs in fp32 (each torch.compile costs seconds of device time): "all" or names
TORCH_FP32 = lambda model: os.environ.get("TORCH_FP32", "all") == "all" or model in os.environ["TORCH_FP32"].split(",")  # noqa: E731
TORCH_WARMUP = int(os.environ.get("TORCH_WARMUP", 25))


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def short(text, n: int = 600) -> str:
    """What a failure said, in one line: IREE's status lines (file.c:line: CODE; ...) first, then
    other error lines, each once; else the last lines. Cut to n characters."""
    lines = list(dict.fromkeys(line.strip() for line in str(text).splitlines() if line.strip()))
    status = [line for line in lines if ".c:" in line or ".cc:" in line]
    errors = [line for line in lines if line not in status and any(
        k in line for k in ("error", "ERROR", "Error", "INTERNAL", "UNAVAILABLE", "UNKNOWN", "FAILED", "failed"))]
    return " | ".join((status + errors) or lines[-3:])[:n]


# ---------------------------------------------------------------- setup there


def setup(common: Path) -> dict:
    """Install the IREE runtime wheel, bring the Vulkan loader, find the NVIDIA ICD."""
    env: dict = {}
    if not (SITE / "iree" / "runtime").exists():
        wheels = sorted(str(p) for p in (common / "whl").glob("*.whl"))
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(SITE), *wheels],
                           capture_output=True, text=True)
        env["pip"] = "ok" if r.returncode == 0 else short(r.stderr)
    sys.path.insert(0, str(SITE))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(SITE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)

    # the Vulkan loader, and glvnd: NVIDIA's ICD (libGLX_nvidia.so.0) does not load without
    # libGLdispatch (vkCreateInstance then says VK_ERROR_INCOMPATIBLE_DRIVER)
    libs = sh(["ldconfig", "-p"])[1]
    have_loader = "libvulkan.so.1" in libs and "libGLdispatch.so.0" in libs
    env["vulkan_loader"] = "already there" if have_loader else "unpacked from " + ", ".join(p.name for p in sorted((common / "deb").glob("*.deb")))
    if not have_loader:
        for deb in (common / "deb").glob("*.deb"):
            subprocess.run(["dpkg", "-x", str(deb), "/"], check=False)
        subprocess.run(["ldconfig"], check=False)
    icds = [p for g in ICD_GLOBS for p in sorted(glob.glob(g, recursive=True))]
    env["vulkan_icd_candidates"] = icds
    if icds:
        os.environ["VK_DRIVER_FILES"] = icds[0]
        env["VK_DRIVER_FILES"] = icds[0]
    return env


def tool(name: str) -> str:
    return str(SITE / "iree" / "_runtime_libs" / name)


def sh(cmd: list[str], timeout: float = 60) -> tuple[int, str]:
    """(exit code, stdout + stderr); a missing program or a hang is an answer, not a crash."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return r.returncode, (r.stdout + r.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, f"{type(e).__name__}: {e}"


def machine() -> dict:
    out = {"python": platform.python_version(), "hostname": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count()}
    q = "name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,pstate"
    rc, text = sh(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"])
    out["nvidia_smi"] = dict(zip(q.split(","), [v.strip() for v in text.split(",")])) if rc == 0 else text
    rc, text = sh(["nvidia-smi"])
    out["cuda_version_smi"] = next((line.split("CUDA Version:")[1].strip(" |") for line in text.splitlines() if "CUDA Version" in line), "")
    out["iree_devices"] = sh([tool("iree-run-module"), "--list_devices"])[1].splitlines()[:12]
    # what the Vulkan loader says about the ICD it was given (errors and warnings only)
    rc, text = sh(["env", "VK_LOADER_DEBUG=error,warn", tool("iree-run-module"), "--list_devices"])
    out["vulkan_loader_messages"] = [line for line in text.splitlines() if "LOADER" in line or "ERROR" in line][:12]
    return out


def versions() -> dict:
    from importlib.metadata import version

    out = {}
    for dist in ("torch", "triton", "transformers", "numpy"):
        try:
            out[dist] = version(dist)
        except Exception:
            out[dist] = "not installed"
    try:
        import iree.runtime  # noqa: F401  (the wheel installed into SITE imports)
        out["iree-base-runtime"] = version("iree-base-runtime")
    except Exception as e:
        out["iree-base-runtime"] = f"import failed: {short(e)}"
    import torch

    out["torch_cuda"] = torch.version.cuda
    return out


# ---------------------------------------------------------------- IREE: numerics (child process)


def check(case_dir: Path, variant: str) -> dict:
    """Load one module on its device, call main once on the saved inputs, compare with the refs."""
    import iree.runtime as rt

    case = json.loads((case_dir / "case.json").read_text())
    info = case["variants"][variant]
    inputs = [np.load(case_dir / f) for f in case["inputs"][info.get("input_dtype", info["dtype"])]]
    refs = [np.load(case_dir / f) for f in case["refs"]]
    out = {}
    t0 = time.perf_counter()
    config = rt.Config(info["driver"])
    device = config.device
    t1 = time.perf_counter()
    vm = rt.VmModule.copy_buffer(config.vm_instance, (case_dir / info["file"]).read_bytes())
    if info.get("parameters"):  # external weights: IREE's parameter provider over the archive (mapped)
        index = rt.ParameterIndex()
        index.load(str(parameters_path(case_dir, info)))
        io = rt.create_io_parameters_module(config.vm_instance, index.create_provider(scope="model"))
        ctx = rt.SystemContext(vm_modules=[io, vm], config=config)
    else:
        ctx = rt.SystemContext(vm_modules=[vm], config=config)
    t2 = time.perf_counter()
    out["device_create_s"], out["module_load_s"] = round(t1 - t0, 4), round(t2 - t1, 4)
    fn = vm.lookup_function("main")
    for i in range(2):  # first call (lazy work), then a second one, timed alone
        args = rt.VmVariantList(len(inputs))
        for a in inputs:  # copy into device buffers: importing host pointers is not reliable on Vulkan
            args.push_ref(device.allocator.allocate_buffer_copy(
                memory_type=rt.MemoryType.DEVICE_LOCAL, allowed_usage=rt.BufferUsage.DEFAULT, device=device,
                buffer=np.ascontiguousarray(a), element_type=rt.array_interop.map_dtype_to_element_type(a.dtype)))
        results = rt.VmVariantList(4)
        t3 = time.perf_counter()
        ctx.vm_context.invoke(fn, args, results)
        views = [results.get_as_object(j, rt.HalBufferView) for j in range(len(results))]
        got = [to_host(rt, device, v) for v in views]
        out["first_call_s" if i == 0 else "second_call_s"] = round(time.perf_counter() - t3, 4)
    out.update(compare(got, refs))
    return out


def parameters_path(case_dir: Path, info: dict) -> Path:
    """A variant's parameter archive (external weights): beside the module, or in the run's _params/
    (build.py pack puts each distinct archive there once)."""
    name = info["parameters"]
    return case_dir / name if (case_dir / name).exists() else case_dir.parent / "_params" / name


def to_host(rt, device, view) -> np.ndarray:
    """Device buffer -> a host-visible staging buffer -> numpy (no mapping of device memory)."""
    source = view.get_buffer()
    host = device.allocator.allocate_buffer(
        memory_type=rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE,
        allowed_usage=rt.BufferUsage.TRANSFER_TARGET | rt.BufferUsage.MAPPING_SCOPED,
        allocation_size=source.byte_length())
    sem = device.create_semaphore(0)
    device.queue_copy(source, host, wait_semaphores=rt.HalFence.create_at(sem, 0), signal_semaphores=rt.HalFence.create_at(sem, 1))
    rt.HalFence.create_at(sem, 1).wait()
    dtype = rt.HalElementType.map_to_dtype(view.element_type)
    return np.array(host.map().asarray(list(view.shape), dtype))


def compare(got: list[np.ndarray], refs: list[np.ndarray]) -> dict:
    """max|got-ref|/max|ref| (the e2e tests' measure) and ||got-ref||/||ref||, worst over outputs."""
    if len(got) != len(refs):
        return {"numerics": f"{len(got)} outputs, expected {len(refs)}"}
    max_rel = norm_rel = 0.0
    for g, r in zip(got, refs):
        if tuple(g.shape) != tuple(r.shape):
            return {"numerics": f"shape {list(g.shape)}, expected {list(r.shape)}"}
        g64, r64 = np.asarray(g, np.float64), np.asarray(r, np.float64)
        if not np.isfinite(g64).all():
            return {"numerics": "non-finite values in the output", "nonfinite": int((~np.isfinite(g64)).sum())}
        d = np.abs(g64 - r64)
        max_rel = max(max_rel, float(d.max() / max(np.abs(r64).max(), 1e-30)))
        norm_rel = max(norm_rel, float(np.linalg.norm(d) / max(np.linalg.norm(r64), 1e-30)))
    return {"numerics": "ok", "max_rel_err": max_rel, "norm_rel_err": norm_rel, "out_dtype": str(got[0].dtype)}


def run_check(case_dir: Path, variant: str) -> dict:
    cmd = [sys.executable, __file__, "--check", str(case_dir), variant]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"status": f"timed out after {CHECK_TIMEOUT_S} s"}
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode == 0 and lines:
        return {"status": "ok", **json.loads(lines[-1])}
    return {"status": f"failed (exit {r.returncode}): {short(r.stdout + r.stderr)}"}


# ---------------------------------------------------------------- IREE: latency


def run_benchmark(case_dir: Path, case: dict, variant: str, out_dir: Path) -> dict:
    """iree-benchmark-module with BENCH_FLAGS; a Vulkan module that fails with the caching
    allocator is run once more without it (lavapipe rejects its queue allocations), and says so."""
    info = case["variants"][variant]
    res = bench_once(case_dir, case, info, out_dir / f"bench-{case['case']}-{variant}.json", BENCH_FLAGS)
    if res["status"] != "ok" and info["driver"] == "vulkan":
        flags = [f for f in BENCH_FLAGS if not f.startswith("--device_allocator")]
        retry = bench_once(case_dir, case, info, out_dir / f"bench-{case['case']}-{variant}.json", flags)
        res = {**retry, "with_caching_allocator": res} if retry["status"] == "ok" else {**res, "without_caching_allocator": retry}
    return res


def bench_once(case_dir: Path, case: dict, info: dict, json_out: Path, flags: list[str]) -> dict:
    cmd = [tool("iree-benchmark-module"), f"--module={case_dir / info['file']}", f"--device={info['driver']}", *flags,
           *[f"--input=@{case_dir / f}" for f in case["inputs"][info.get("input_dtype", info["dtype"])]],
           *([f"--parameters=model={parameters_path(case_dir, info)}"] if info.get("parameters") else []),
           f"--benchmark_out={json_out}", "--benchmark_out_format=json"]
    res = {"command": shlex.join(cmd).replace(str(REPO) + "/", "").replace(str(SITE) + "/", "$SITE/")}
    json_out.unlink(missing_ok=True)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {**res, "status": f"timed out after {BENCH_TIMEOUT_S} s"}
    if r.returncode != 0 or not json_out.exists():
        return {**res, "status": f"failed (exit {r.returncode}): {short(r.stdout + r.stderr)}"}
    data = json.loads(json_out.read_text())
    json_out.unlink()
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    ms = lambda b: b["real_time"] * scale[b.get("time_unit", "ns")]  # noqa: E731
    reps = [ms(b) for b in data["benchmarks"] if b.get("run_type") == "iteration"]
    if not reps or any(b.get("error_occurred") for b in data["benchmarks"]):
        return {**res, "status": f"failed: {short(r.stdout + r.stderr)}"}
    agg = {b["aggregate_name"]: ms(b) for b in data["benchmarks"] if b.get("run_type") == "aggregate"}
    return {**res, "status": "ok", "median_ms": agg.get("median", float(np.median(reps))),
            "p10_ms": float(np.percentile(reps, 10)), "p90_ms": float(np.percentile(reps, 90)),
            "mean_ms": agg.get("mean"), "stddev_ms": agg.get("stddev"), "reps_ms": reps,
            "iterations": [b["iterations"] for b in data["benchmarks"] if b.get("run_type") == "iteration"],
            "benchmark": data["benchmarks"][0].get("run_name", data["benchmarks"][0].get("name"))}


# ---------------------------------------------------------------- PyTorch on the GPU


DEADLINE_AT: float | None = None  # time.monotonic() after which no torch mode starts (main sets it)
SAVE = lambda: None  # noqa: E731  (main: write the results file; called after each torch mode)


def past_deadline() -> bool:
    return DEADLINE_AT is not None and time.monotonic() > DEADLINE_AT


def torch_case(case_dir: Path, case: dict, out: dict | None = None) -> dict:
    """``out``: the dict the results go into as they come (saved after each mode)."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import gpu_models

    out = {} if out is None else out
    model, _ = gpu_models.build(case["builder"], case["kwargs"])
    checksum = param_checksum(model)
    ref_cs = case["param_checksum"]
    same = all(abs(a - b) <= 1e-6 * max(abs(b), 1.0) for a, b in zip(checksum, ref_cs))
    out["same_weights_as_reference"] = same
    out["param_checksum"] = checksum
    refs = [np.load(case_dir / f) for f in case["refs"]]
    torch_modes(model.half().to(DEVICE).eval(), case_dir, case["inputs"]["float16"], refs, same,
                max_autotune=case["case"] in os.environ.get("TORCH_MAX_AUTOTUNE", "").split(","), out=out)
    # fp32 too where the case has fp32 modules (its *_f32 variants)
    if any(v.endswith("_f32") for v in case["variants"]) and TORCH_FP32(case["model"]):
        model32, _ = gpu_models.build(case["builder"], case["kwargs"])
        out["float32"] = torch_modes(model32.float().to(DEVICE).eval(), case_dir, case["inputs"]["float32"], refs, same)
    # bf16 where the case has a bf16 policy (no bf16 .npy: the fp32 inputs, cast on the device)
    if any("bf16" in v for v in case["variants"]):
        model_bf, _ = gpu_models.build(case["builder"], case["kwargs"])
        out["bfloat16"] = torch_modes(model_bf.bfloat16().to(DEVICE).eval(), case_dir, case["inputs"]["float32"], refs, same,
                                      cast=torch.bfloat16)
    return out


def torch_modes(model, case_dir: Path, input_files: list[str], refs, same: bool, cast=None, max_autotune=False,
                out: dict | None = None) -> dict:
    """eager, torch.compile default and reduce-overhead of one model (one dtype) on DEVICE, and
    max-autotune (CUDA graphs too; ~2 min of compiling per model on the H200) with ``max_autotune``
    (the cases named in $TORCH_MAX_AUTOTUNE); ``cast``: the dtype floating inputs are converted to first.
    $TORCH_MODES picks modes and their order; a mode is not started past the deadline; ``out`` is
    filled as the modes finish (SAVE() after each)."""
    import torch

    out = {} if out is None else out
    inputs = [torch.from_numpy(np.load(case_dir / f)).to(DEVICE) for f in input_files]
    if cast is not None:
        inputs = [x.to(cast) if x.is_floating_point() else x for x in inputs]

    def eager():
        return model(*inputs)

    modes = {"eager": lambda: eager}
    modes["compile_default"] = lambda: torch.compile(model, dynamic=False)
    modes["compile_reduce_overhead"] = lambda: torch.compile(model, mode="reduce-overhead", dynamic=False)
    if max_autotune:
        modes["compile_max_autotune"] = lambda: torch.compile(model, mode="max-autotune", dynamic=False)
    if os.environ.get("TORCH_MODES"):  # e.g. eager,compile_reduce_overhead: fewer torch.compile runs, in this order
        modes = {k: modes[k] for k in os.environ["TORCH_MODES"].split(",") if k in modes}
    for mode, make in modes.items():
        if past_deadline():
            out[mode] = {"status": "skipped: deadline"}
            SAVE()
            continue
        out[mode] = {"status": "started, did not finish (the call's time limit?)"}  # replaced below unless killed
        SAVE()
        torch._dynamo.reset()
        try:
            with torch.no_grad():
                fn = make()
                call = (lambda: fn(*inputs)) if mode != "eager" else fn
                if mode in ("compile_reduce_overhead", "compile_max_autotune"):
                    def call(fn=fn):  # a new step for the CUDA-graph tree: earlier outputs may be overwritten
                        torch.compiler.cudagraph_mark_step_begin()
                        return fn(*inputs)
                t0 = time.perf_counter()
                first = call()
                sync()
                first_s = time.perf_counter() - t0
                res = {"status": "ok", "first_call_s": round(first_s, 3)}
                got = first if isinstance(first, tuple) else (first,)
                got = [g.detach().float().cpu().numpy() for g in got]
                res.update(compare(got, refs) if same else {"numerics": "not checked: weights differ from the reference's"})
                res.update(time_torch(call))
                if mode == "compile_reduce_overhead":  # >0: inductor ran it without CUDA graphs
                    from torch._dynamo.utils import counters
                    res["cudagraph_skips"] = int(counters["inductor"]["cudagraph_skips"])
        except Exception as e:
            res = {"status": f"failed: {type(e).__name__}: {short(e, 400)}"}
            traceback.print_exc()
        out[mode] = res
        SAVE()
        log(f"    torch {mode} {inputs[0].dtype}: {res.get('status')} {res.get('median_ms', '')}")
    return out


def sync() -> None:
    import torch

    if DEVICE == "cuda":
        torch.cuda.synchronize()


def param_checksum(model) -> list[float]:
    s = s2 = 0.0
    for t in model.state_dict().values():
        if t.is_floating_point():
            t = t.detach().double()
            s += float(t.sum())
            s2 += float((t * t).sum())
    return [s, s2]


def time_torch(call) -> dict:
    """Per call: CUDA events around it and a wait for its end (the latency of one call, host
    launch included), after a warm-up; also the host wall time of the same span."""
    import torch

    for _ in range(TORCH_WARMUP):
        call()
    sync()
    ev, wall = [], []
    for _ in range(TORCH_REPS):
        if DEVICE != "cuda":  # trying the script on a CPU: host time only
            t0 = time.perf_counter()
            call()
            wall.append((time.perf_counter() - t0) * 1e3)
            ev.append(wall[-1])
            continue
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        s.record()
        call()
        e.record()
        e.synchronize()
        wall.append((time.perf_counter() - t0) * 1e3)
        ev.append(s.elapsed_time(e))
    q = np.percentile(ev, [10, 50, 90])
    return {"median_ms": float(q[1]), "p10_ms": float(q[0]), "p90_ms": float(q[2]), "reps": TORCH_REPS,
            "wall_median_ms": float(np.median(wall)), "wall_p10_ms": float(np.percentile(wall, 10)),
            "wall_p90_ms": float(np.percentile(wall, 90))}


# ---------------------------------------------------------------- unpacking


def _unxz(path: str) -> None:
    import bz2
    import lzma

    src = Path(path)
    if src.name.endswith(".dd.xz"):  # dedup.py (tiled weights)
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import dedup

        dst, data = src.with_name(src.name[: -len(".dd.xz")]), dedup.unpack(src.read_bytes())
    else:
        unpack_one = bz2.decompress if src.suffix == ".bz2" else lzma.decompress
        dst, data = src.with_suffix(""), unpack_one(src.read_bytes())
    tmp = dst.with_name(dst.name + ".part")  # whole or absent: a run stopped midway never leaves half a file
    tmp.write_bytes(data)
    tmp.rename(dst)


def unpack(runs: list[Path]) -> float:
    """The modules travel as .vmfb.xz (build.py pack), .vmfb.bz2, or .vmfb.dd.xz (dedup.py: tiled
    weights, ~600x): decompress them beside themselves, in parallel."""
    from concurrent.futures import ProcessPoolExecutor

    t0 = time.perf_counter()
    files = [str(f) for r in runs for kind in ("vmfb", "irpa") for ext in ("xz", "bz2", "dd.xz") for f in r.glob(f"*/*.{kind}.{ext}")
             if not Path(str(f).split(f".{kind}.")[0] + f".{kind}").exists()]
    with ProcessPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:
        list(pool.map(_unxz, files))
    return round(time.perf_counter() - t0, 2)


# ---------------------------------------------------------------- main


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "--check":  # the child: one module's numerics
        sys.path.insert(0, str(SITE))
        print(json.dumps(check(Path(sys.argv[2]), sys.argv[3])), flush=True)
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, nargs="+", help="run folders made by build.py pack (e.g. .gpu/run1)")
    p.add_argument("--common", type=Path, default=REPO / ".gpu" / "common")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    p.add_argument("--deadline", type=float, default=540, help="seconds after which no new item starts")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--no-iree", action="store_true", help="only the torch side (the modules were measured in another call)")
    p.add_argument("--variants", default="", help="comma-separated variants to measure (default all), in this order")
    p.add_argument("--name", default="", help="results-NAME.json (default: the run folders' names)")
    p.add_argument("--cases", default="", help="comma-separated case names to run (default all)")
    opts = p.parse_args()
    start = time.monotonic()
    opts.out.mkdir(parents=True, exist_ok=True)
    name = opts.name or "-".join(r.name for r in opts.run)
    global DEADLINE_AT, SAVE
    DEADLINE_AT = start + opts.deadline
    report = {"run": name, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": shlex.join(sys.argv),
              "setup": setup(opts.common), "cases": {}}
    report["machine"], report["versions"] = machine(), versions()
    report["bench_flags"] = BENCH_FLAGS
    report["torch_timing"] = f"{TORCH_WARMUP} warm-up calls, then {TORCH_REPS} calls, each between two CUDA events and waited for"
    result_file = opts.out / f"results-{name}.json"
    def save():  # whole or not at all: a run killed while writing keeps the previous file
        tmp = result_file.with_name(result_file.name + ".part")
        tmp.write_text(json.dumps(report, indent=1))
        tmp.rename(result_file)

    SAVE = save
    save()
    log(json.dumps({k: report[k] for k in ("setup", "machine", "versions")}, indent=1))
    report["unpack_s"] = unpack(opts.run)
    save()
    wanted = set(filter(None, opts.cases.split(",")))
    case_dirs = [d for r in opts.run for d in sorted(r.iterdir()) if (d / "case.json").exists() and (not wanted or d.name in wanted)]
    if wanted:  # in the order given: the first ones are measured before the deadline
        order = [c for c in opts.cases.split(",") if c]
        case_dirs.sort(key=lambda d: order.index(d.name))
    for case_dir in case_dirs:
        case = json.loads((case_dir / "case.json").read_text())
        res = report["cases"].setdefault(case["case"], {"model": case["model"], "batch": case["batch"], "iree": {}, "torch": None})
        log(f"== {case['case']}")
        chosen = [v for v in opts.variants.split(",") if v in case["variants"]] if opts.variants else list(case["variants"])
        for variant, info in ((v, case["variants"][v]) for v in ([] if opts.no_iree else chosen)):
            row = {"target": info["target"], "how": info["how"], "dtype": info.get("dtype"),
                   "compile_attempts": info["attempts"], "bytes": info.get("bytes"),
                   **{k: info[k] for k in ("iree_flags", "kernels", "dispatch_counts", "parameters") if k in info}}
            if "same_as" in info:
                row["status"] = f"same module as {info['same_as']}" + (f" ({info['same_reason']})" if "same_reason" in info else "")
                row["same_as"] = info["same_as"]
            elif info["status"] != "ok":
                row["status"] = "compile failed here: " + "; ".join(f"{a['dtype']}: {a['status']}" for a in info["attempts"])
            elif not (case_dir / info["file"]).exists():
                continue  # in another run folder
            elif time.monotonic() - start > opts.deadline:
                row["status"] = "skipped: deadline"
            else:
                row["check"] = run_check(case_dir, variant)
                row["bench"] = run_benchmark(case_dir, case, variant, opts.out)
                row["status"] = "measured"
                log(f"    {variant}: check {row['check'].get('status')} {row['check'].get('max_rel_err', '')}; "
                    f"bench {row['bench'].get('status')} {row['bench'].get('median_ms', '')}")
            res["iree"][variant] = row
            save()
        if not opts.no_torch and (case_dir / "torch.flag").read_text().strip() == "1":
            if time.monotonic() - start > opts.deadline:
                res["torch"] = {"status": "skipped: deadline"}
            else:
                res["torch"] = {}
                try:
                    torch_case(case_dir, case, res["torch"])
                except Exception as e:
                    traceback.print_exc()
                    res["torch"]["status"] = f"failed: {type(e).__name__}: {short(e, 400)}"
            save()
    report["machine_after"] = machine()["nvidia_smi"]
    report["elapsed_s"] = round(time.monotonic() - start, 1)
    save()
    print_table(report)


def print_table(report: dict) -> None:
    print(f"\n{report['run']}: {report['machine'].get('nvidia_smi')}  elapsed {report['elapsed_s']} s")
    for case, res in report["cases"].items():
        cells = []
        for v, row in res["iree"].items():
            b = row.get("bench", {})
            c = row.get("check", {})
            cells.append(f"{v}={b['median_ms']:.4f}ms/err{c.get('max_rel_err', float('nan')):.1e}" if b.get("status") == "ok"
                         else f"{v}={row['status'][:60]}/{(b.get('status') or '')[:80]}/{(c.get('status') or '')[:80]}")
        t = res.get("torch") or {}
        for m in ("eager", "compile_default", "compile_reduce_overhead"):
            if isinstance(t.get(m), dict):
                cells.append(f"{m}={t[m].get('median_ms', float('nan')):.4f}ms" if t[m].get("status") == "ok" else f"{m}={t[m]['status'][:60]}")
        print(f"{case}: " + "; ".join(cells))


if __name__ == "__main__":
    main()

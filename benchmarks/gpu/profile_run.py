"""The H200 side of issue 14 (runs THERE, with the IREE runtime wheel, torch with CUDA and
cuvil_mlir's runtime side on PYTHONPATH; profile_device.sh sets that up):

  1. profile: cuvil_mlir.eval.profiler.profile_compiled on each package profile_build.py made, with
     IREE's CUDA runtime as it is (streams) and with CUDA-graph command buffers
     (--cuda_use_streams=false) -> $OUT/<case>.<mode>.profile.json
  2. I/O paths: a CompiledModel call with numpy in/out (host path) and with torch CUDA tensors
     in/out (device-resident, DLPack), the raw Session.invoke_dlpack, and whether IREE and torch
     share the primary CUDA context -> $OUT/io.json

    python3 benchmarks/gpu/profile_run.py .gpu/profile --out $OUT
"""

from __future__ import annotations

import argparse
import ctypes
import json
import lzma
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np

WARMUP, CALLS = 30, 300


def unpack(folder: Path, case: str, tmp: Path) -> Path:
    pkg = tmp / f"{case}.cuvilpkg"
    if not pkg.exists():
        pkg.write_bytes(lzma.decompress((folder / f"{case}.cuvilpkg.xz").read_bytes()))
    return pkg


def timed(fn) -> dict:
    for _ in range(WARMUP):
        fn()
    samples = []
    for _ in range(CALLS):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    return {"median_us": statistics.median(samples), "p10_us": float(np.percentile(samples, 10)),
            "p90_us": float(np.percentile(samples, 90))}


def profiles(folder: Path, case: str, pkg: Path, out: Path) -> dict:
    from cuvil_mlir import load
    from cuvil_mlir.eval.profiler import print_profile, profile_compiled, write_json

    compiled = load(pkg)
    inputs = [np.load(folder / f"{case}.input{i}.npy") for i in range(len(compiled.signature.inputs))]
    result = {}
    configs = [("streams", ())] if case.startswith("qkv-") else [("streams", ()), ("graphs", ("--cuda_use_streams=false",))]
    if case == "gpt2-12l-b1":
        configs.append(("sync_alloc", ("--cuda_async_allocations=false",)))
    for name, flags in configs:
        try:
            prof = profile_compiled(compiled, inputs, runtime_flags=flags, model=case,
                                    keep_profile=out / f"{case}.{name}.dispatches.raw")
        except Exception as e:
            result[name] = f"failed: {type(e).__name__}: {e}"
            print(f"{case} {name}: {result[name]}", flush=True)
            continue
        write_json(prof, out / f"{case}.{name}.profile.json")
        print_profile(prof, limit=12)
        t = prof["totals"]
        result[name] = {k: t[k] for k in ("wall_us", "dispatch_us", "gap_us", "dispatches")} | {"mode": prof["profiling_mode"]}
    return result


def cuda_contexts():
    """(IREE's current context after a call, the device's primary context) as integers, via libcuda."""
    cuda = ctypes.CDLL("libcuda.so.1")
    current, primary, dev = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_int()
    cuda.cuCtxGetCurrent(ctypes.byref(current))
    cuda.cuDeviceGet(ctypes.byref(dev), 0)
    cuda.cuDevicePrimaryCtxRetain(ctypes.byref(primary), dev)
    cuda.cuDevicePrimaryCtxRelease(dev)
    return current.value, primary.value


def prepared_call(session, on_gpu):
    """The floor of an in-process call: arguments imported once, only the VM invoke timed."""
    import iree.runtime as rt

    function = session._vm_function("main")
    args = rt.VmVariantList(len(on_gpu))
    for t in on_gpu:
        args.push_ref(session._device.from_dlpack_capsule(t.__dlpack__()))
    return lambda: session._ctx.vm_context.invoke(function, args, rt.VmVariantList(4))


def wall_us(pkg: Path, case: str, folder: Path, flags) -> float:
    """iree-benchmark-module's median for the package's module, as cuvil_mlir.eval.profiler measures it."""
    import subprocess
    import zipfile

    from cuvil_mlir.eval.profiler import DEVICE_FLAGS, _wall_samples
    from cuvil_mlir.runtime.session import tool_path

    meta = json.loads(zipfile.ZipFile(pkg).read("metadata.json"))
    vmfb = Path(f"/tmp/{case}.vmfb")
    vmfb.write_bytes(zipfile.ZipFile(pkg).read(meta["modules"][0]["file"]))
    cmd = [tool_path("iree-benchmark-module"), f"--module={vmfb}", "--device=cuda", "--function=main", *DEVICE_FLAGS["cuda"],
           *flags, f"--input=@{folder / f'{case}.input0.npy'}", "--benchmark_repetitions=10", "--benchmark_min_warmup_time=0.5",
           "--benchmark_format=json", "--benchmark_min_time=0.2s"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return statistics.median(_wall_samples(out)) * 1e3


def io_paths(folder: Path, case: str, pkg: Path, io_only: bool = False) -> dict:
    import torch

    from cuvil_mlir import load
    compiled = load(pkg)
    inputs = [np.load(folder / f"{case}.input{i}.npy") for i in range(len(compiled.signature.inputs))]
    on_gpu = [torch.from_numpy(a).cuda() for a in inputs]
    row = {"case": case, "input_bytes": int(sum(a.nbytes for a in inputs))}
    host = compiled(*inputs)
    host = host if isinstance(host, tuple) else (host,)
    row["output_bytes"] = int(sum(o.nbytes for o in host))
    iree_ctx, primary = cuda_contexts()  # right after an IREE call on this thread
    dev = compiled(*on_gpu)
    dev = dev if isinstance(dev, tuple) else (dev,)
    torch_sum = float(dev[0].float().sum())  # a torch kernel reading IREE's buffer
    torch_ctx, _ = cuda_contexts()
    row["contexts"] = {"iree_current": hex(iree_ctx or 0), "torch_current": hex(torch_ctx or 0), "primary": hex(primary or 0),
                       "shared": iree_ctx == primary == torch_ctx}
    row["device_outputs"] = [f"{o.device} {o.dtype} {list(o.shape)}" for o in dev]
    row["same_outputs"] = all(np.array_equal(h, d.cpu().numpy()) for h, d in zip(host, dev))
    row["torch_reads_output"] = abs(torch_sum - float(host[0].astype(np.float64).sum())) <= 1e-3 * max(1.0, abs(torch_sum))

    # a view 4 bytes into its allocation (IREE imports 64-byte aligned pointers only): copied first
    shifted = [torch.cat([torch.zeros(1, dtype=t.dtype, device=t.device), t.flatten()])[1:].view(t.shape) for t in on_gpu]
    again = compiled(*shifted)
    row["unaligned_view_ok"] = all(np.array_equal(h, d.cpu().numpy()) for h, d in zip(host, again if isinstance(again, tuple) else (again,)))
    session = compiled._session
    row["host_numpy"] = timed(lambda: compiled(*inputs))
    row["torch_cpu"] = timed(lambda: compiled(*[torch.from_numpy(a) for a in inputs]))
    row["torch_cuda"] = timed(lambda: compiled(*on_gpu))
    row["torch_cuda_then_sync"] = timed(lambda: (compiled(*on_gpu), torch.cuda.synchronize()))
    copy_out = session.exports_results is False
    row["invoke_dlpack_raw"] = timed(lambda: session.invoke_dlpack("main", on_gpu, copy_out=copy_out))
    # torch's own floor for comparison: a host sync with nothing queued
    row["torch_stream_sync"] = timed(lambda: torch.cuda.current_stream().synchronize())
    row["results"] = "exported" if session.exports_results else "copied on the device (copy_out)"
    row["invoke_prepared"] = timed(prepared_call(session, on_gpu))
    row["iree_benchmark_module"] = {name: wall_us(pkg, case, folder, flags) for name, flags in
                                    (("default", ()), ("sync_alloc", ("--cuda_async_allocations=false",)))}
    if io_only:
        return row
    row["cupti"] = cupti(compiled, on_gpu, len(compiled.metadata.get("dispatches", {}).get(compiled.active_target, [])))
    return row


def cupti(compiled, on_gpu, per_call: int, calls: int = 10) -> dict:
    """The kernels of ``calls`` CompiledModel calls as CUPTI (torch.profiler) sees them in a normal
    run (not serialized as under ncu): kernel time per call, and the span of a call's kernels on the
    device minus their sum (the gaps between kernels)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(5):
        compiled(*on_gpu)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            compiled(*on_gpu)
    path = Path("/tmp/cuvil-cupti.json")
    prof.export_chrome_trace(str(path))
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "kernel"]
    events.sort(key=lambda e: e["ts"])
    iree = [e for e in events if "_dispatch_" in e["name"]]
    out = {"kernels": len(events), "iree_kernels": len(iree), "other_kernels": sorted({e["name"][:60] for e in events} - {e["name"][:60] for e in iree})[:5]}
    if not iree or not per_call or len(iree) % per_call:
        return out
    spans, sums = [], []
    for i in range(0, len(iree), per_call):
        chunk = iree[i:i + per_call]
        spans.append(chunk[-1]["ts"] + chunk[-1]["dur"] - chunk[0]["ts"])
        sums.append(sum(e["dur"] for e in chunk))
    by_name = {}
    for e in iree:
        by_name.setdefault(e["name"], []).append(e["dur"])
    out.update({"calls": len(spans), "kernel_us_per_call": statistics.median(sums), "span_us_per_call": statistics.median(spans),
                "gaps_us_per_call": statistics.median(s - k for s, k in zip(spans, sums)),
                "per_kernel_us": {k: sum(v) / len(spans) for k, v in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))}})
    return out


def export_mode(folder: Path, case: str, pkg: Path) -> dict:
    """Device-resident calls with IREE's results exported as they are: IREE's CUDA allocations made
    synchronous (--cuda_async_allocations=false, a process-wide runtime flag: run in its own process)."""
    import iree.runtime as rt
    import torch

    rt.flags.parse_flags("--cuda_async_allocations=false")
    from cuvil_mlir import load
    compiled = load(pkg)
    inputs = [np.load(folder / f"{case}.input{i}.npy") for i in range(len(compiled.signature.inputs))]
    on_gpu = [torch.from_numpy(a).cuda() for a in inputs]
    compiled(*on_gpu)
    return {"case": case, "results": "exported" if compiled._session.exports_results else "copied on the device",
            "torch_cuda": timed(lambda: compiled(*on_gpu)), "host_numpy": timed(lambda: compiled(*inputs))}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("folder")
    p.add_argument("--out", required=True)
    p.add_argument("--cases", default=None)
    p.add_argument("--export-mode", action="store_true", help="only export_mode() for --cases (own process)")
    p.add_argument("--io-only", action="store_true", help="only the I/O paths, without CUPTI")
    opts = p.parse_args()
    folder, out = Path(opts.folder), Path(opts.out)
    manifest = json.loads((folder / "manifest.json").read_text())
    cases = opts.cases.split(",") if opts.cases else list(manifest)
    tmp = Path("/tmp/cuvil-profile-pkgs")
    tmp.mkdir(exist_ok=True)
    if opts.export_mode:
        rows = [export_mode(folder, case, unpack(folder, case, tmp)) for case in cases if not case.endswith("-td")]
        (out / "export_mode.json").write_text(json.dumps(rows, indent=1))
        print(json.dumps(rows, indent=1))
        return
    summary = {"profiles": {}, "io": []}
    if opts.io_only:
        for case in cases:
            summary["io"].append(io_paths(folder, case, unpack(folder, case, tmp), io_only=True))
            print(json.dumps(summary["io"][-1]), flush=True)
        (out / "io_only.json").write_text(json.dumps(summary, indent=1))
        return
    for case in cases:
        pkg = unpack(folder, case, tmp)
        steps = [("profiles", lambda: summary["profiles"].__setitem__(case, profiles(folder, case, pkg, out)))]
        if not case.endswith("-td") and not case.startswith("qkv-"):  # the I/O paths of one build are enough
            steps.insert(0, ("io", lambda: summary["io"].append(io_paths(folder, case, pkg))))
        for what, fn in steps:
            try:
                fn()
            except Exception:
                summary.setdefault("errors", []).append(f"{case} {what}: {traceback.format_exc()[-1500:]}")
                print(summary["errors"][-1], file=sys.stderr, flush=True)
            (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()

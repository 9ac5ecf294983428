"""H200: GPT-2 12 layers fp16 (cuda:h200, built at branch overhead with the f32-reduction fix): error vs the fp32
reference, and per-call time in-process (bare VM invoke; DLPack import + invoke + export + torch.from_dlpack;
with torch's stream sync) against iree-benchmark-module."""
import json, os, statistics, subprocess, sys, time
import numpy as np, torch
import iree.runtime as rt
rt.flags.parse_flags("--cuda_async_allocations=false")
here = os.path.dirname(os.path.abspath(__file__)); out = os.environ["OUT"]
vmfb = open(f"{here}/gpt2-12l-b1.vmfb", "rb").read()
x = np.load(f"{here}/input0.npy"); ref = np.load(f"{here}/ref.npy")
dev = rt.get_driver("cuda").create_default_device(allocators=["caching"])
ctx = rt.SystemContext(config=rt.Config(device=dev)); vm = rt.VmModule.copy_buffer(ctx.instance, vmfb); ctx.add_vm_module(vm)
f = vm.lookup_function("main")
res = {}
xt = torch.from_numpy(x).cuda()
def call_dlpack(sync=False):
    if sync: torch.cuda.current_stream().synchronize()
    a = rt.VmVariantList(1); a.push_ref(dev.from_dlpack_capsule(xt.__dlpack__()))
    r = rt.VmVariantList(4); ctx.vm_context.invoke(f, a, r)
    return [torch.from_dlpack(dev.create_dlpack_capsule(r.get_as_object(i, rt.HalBufferView), 2, 0)) for i in range(len(r))]
y = call_dlpack()[0].float().cpu().numpy()
res["rel_err_vs_fp32"] = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
res["max_abs_err"] = float(np.abs(y - ref).max())
pre = rt.VmVariantList(1); pre.push_ref(dev.from_dlpack_capsule(xt.__dlpack__()))
def bare():
    r = rt.VmVariantList(4); ctx.vm_context.invoke(f, pre, r)
def timed(fn, n=300):
    for _ in range(30): fn()
    s = []
    for _ in range(n):
        t0 = time.perf_counter(); o = fn(); s.append((time.perf_counter() - t0) * 1e6)
    return {"median_us": statistics.median(s), "p10_us": float(np.percentile(s, 10)), "p90_us": float(np.percentile(s, 90))}
res["bare_vm_invoke"] = timed(bare)
res["dlpack_in_out"] = timed(call_dlpack)
res["dlpack_in_out_stream_sync"] = timed(lambda: call_dlpack(True))
res["bare_vm_invoke_again"] = timed(bare)
np.save(f"{here}/x_in.npy", x)
tool = os.path.join(os.path.dirname(rt.__file__), "..", "_runtime_libs", "iree-benchmark-module")
cmd = [tool, f"--module={here}/gpt2-12l-b1.vmfb", "--device=cuda", "--function=main", f"--input=@{here}/x_in.npy",
       "--benchmark_repetitions=10", "--benchmark_min_warmup_time=1", "--device_allocator=caching", "--cuda_async_allocations=false"]
p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
res["iree_benchmark_module_cmd"] = " ".join(cmd[1:]); res["iree_benchmark_module_out"] = p.stdout[-3000:] + p.stderr[-1000:]
print(json.dumps(res, indent=1)); open(f"{out}/check.json", "w").write(json.dumps(res, indent=1))

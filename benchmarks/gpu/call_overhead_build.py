"""Builds what benchmarks/gpu/call_overhead.py measures on the H200: HF GPT-2, 12 layers, d=768, T=128, batch 1,
tiled sign weights, fp16, compiled for cuda:h200, with its input ids and the fp32 CPU reference logits.

    python benchmarks/gpu/call_overhead_build.py /work/main/.gpu/overhead && python benchmarks/gpu/dedup.py ...vmfb
"""
import sys, copy, json, torch, numpy as np
sys.path.insert(0, "benchmarks/gpu")
import gpu_models, cuvil_mlir
out = sys.argv[1]
m, args = gpu_models.build("gpt2", {"layers": 12, "d_model": 768, "heads": 12, "seq": 128, "weights": "tiled", "batch": 1})
with torch.no_grad():
    ref = m(*args).float()
cm = cuvil_mlir.compile(copy.deepcopy(m).half(), args, target="cuda:h200")
open(f"{out}/gpt2-12l-b1.vmfb", "wb").write(cm.modules[0].vmfb)
np.save(f"{out}/input0.npy", args[0].numpy()); np.save(f"{out}/ref.npy", ref.numpy())
print("ok", len(cm.modules[0].vmfb), cm.metadata.get("function", "main"), flush=True)

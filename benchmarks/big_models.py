"""Real model sizes and ONNX models on the H200: modules built here, weights generated there.

    python benchmarks/big_models.py build --out .gpu/big                 # here: compile everything (cuda:h200)
    python benchmarks/big_models.py build --out /tmp/dry --dry-run       # a CPU-target, small-size copy to try `device` here
    python benchmarks/big_models.py build --only onnx-resnet18 --variant 'fp16-td=fp16@cuda:h200{hopper-mode=target-description}' ...
    python benchmarks/big_models.py device .gpu/big --out $OUT --deadline 420   # there (.gpu/big/run.sh)
    python benchmarks/big_models.py report DIR --date 2026-12-05          # DIR: the files that came back

Cases (one folder each under --out, with case.json):
- ``llama-1b``: TinyLlama-1.1B's shape (d 2048, 22 layers, 32/4 heads, FFN 5632, vocab 32000), fp16,
  T=128, compiled for ``cuda:h200{hopper-mode=target-description}`` with external parameters and saved
  WITHOUT them (``save(parameters="none")``: a few MiB). On the device the parameters are generated
  from a seed (cuvil_mlir/runtime/parameters.py ``generate``: the source weights, then every derived
  weight by the recipe the package records), written as an .irpa, and the package loaded with
  ``load(pkg, parameters=irpa)``; the same weights go into the same HF model in torch on the GPU
  (fp16, and fp32 as the reference both are measured against); timed against torch eager and
  torch.compile(mode="reduce-overhead") where the deadline allows.
- ``llama-8b``: Llama-3-8B's shape (d 4096, 32 layers, 32/8 heads, FFN 14336, vocab 128256), when
  it could be built here (see ``build``'s report of why not).
- ``onnx-<model>``: HF GPT-2, BERT, Llama (the e2e sizes of examples/models.py) and a
  torchvision-style ResNet-18 at half width (written here: torchvision is not installed), exported with
  ``torch.onnx.export(dynamo=True)``, compiled from the .onnx for ``cuda:h200`` (fp32, and fp16 for
  the ResNet and GPT-2), with inputs, onnxruntime's and PyTorch's outputs as .npy; the fused Cuvil
  ops of the .onnx and the torch.export forms are compared here and recorded in case.json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import time
import traceback
import warnings
from datetime import datetime, timezone
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "benchmarks"))

H200 = "cuda:h200{hopper-mode=target-description}"
LLAMAS = {
    "llama-1b": dict(hidden_size=2048, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
                     intermediate_size=5632, vocab_size=32000),
    "llama-8b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                     intermediate_size=14336, vocab_size=128256, rope_theta=500000.0),
    # --dry-run: the same code path at a size this machine runs in seconds
    "llama-dry": dict(hidden_size=1024, num_hidden_layers=2, num_attention_heads=16, num_key_value_heads=4,
                      intermediate_size=2816, vocab_size=4096),
}
STUBBED = ("llama-8b",)  # compiled from stub weights (no values here): too big for this machine's memory
SEQ = 128
SEED = 0
ONNX_MODELS = ("gpt2", "bert", "llama", "resnet18")
ONNX_FP16 = ("gpt2", "resnet18")  # also compiled with precision="fp16" (fp32 inputs/outputs)


# ---------------------------------------------------------------------------------------
# Models (both sides build them with these functions).


def llama_config(name: str):
    from transformers import LlamaConfig

    return LlamaConfig(**LLAMAS[name], max_position_embeddings=2048, attn_implementation="sdpa", bos_token_id=0,
                       eos_token_id=0, tie_word_embeddings=False)


class Logits(torch.nn.Module):
    """Input ids -> logits (no cache): the function both sides compile / run."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def llama(name: str, device: str = "cpu", dtype=None):
    """The HF Llama of ``name`` wrapped to return logits (state-dict keys ``model.model...``),
    random weights, in eval mode on ``device``."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(SEED)
    with torch.device(device):
        model = LlamaForCausalLM(llama_config(name))
    if dtype is not None:
        model = model.to(dtype)
    return Logits(model).eval()


def llama_stub(name: str, dtype=torch.float16):
    """The same model with stub weights (cuvil_mlir.core.params.stub_weights: shapes, no memory),
    built on the meta device: a Llama-3-8B shape compiles here without its 16 GB of weights.
    The rotary frequencies (a buffer computed at init) are made for real on the CPU."""
    from transformers import LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    from cuvil_mlir.core.params import stub_weights

    config = llama_config(name)
    with torch.device("meta"):
        model = LlamaForCausalLM(config).to(dtype)
    stub_weights(model, min_bytes=0)  # every parameter, the small norm weights too (no values here)
    model.model.rotary_emb = LlamaRotaryEmbedding(config=config)
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.device.type == "meta"]
    if left:
        raise RuntimeError(f"tensors left on the meta device: {left[:5]}")
    return Logits(model).eval()


def input_ids(name: str, batch: int = 1):
    import torch

    g = torch.Generator().manual_seed(SEED)
    return torch.randint(0, LLAMAS[name]["vocab_size"], (batch, SEQ), generator=g)


def resnet18(batch: int = 1, size: int = 64, classes: int = 100, width: int = 32):
    """torchvision's ResNet-18 layout (examples/models.py ResNet, BasicBlock x [2, 2, 2, 2]) with
    ``width`` channels in the first stage (torchvision: 64), doubling per stage. At 32 (2.8M
    parameters) its fp32 and fp16 packages (weights inline: ONNX models have no external
    parameters yet) fit the device trip."""
    import models

    return models.resnet(batch, size, width, (2, 2, 2, 2), classes, seed=SEED)


def onnx_model(name: str):
    import models

    if name == "resnet18":
        return resnet18()
    return models.E2E_MODELS[name]()


# ---------------------------------------------------------------------------------------
# build (here)


def _peak_rss_mib() -> dict:
    return {"self": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "children": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)}


def build_llama(name: str, target: str, out: Path, stubs: bool = False) -> dict:
    import torch

    import cuvil_mlir

    torch.set_grad_enabled(False)
    stubs = stubs or name in STUBBED
    model = llama_stub(name) if stubs else llama(name, dtype=torch.float16)
    ids = input_ids(name)
    start = time.perf_counter()
    compiled = cuvil_mlir.compile(model, (ids,), target=target, params="external")
    compile_s = time.perf_counter() - start
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    compiled.save(folder / "model.cuvilpkg", parameters="none")
    import numpy as np

    np.save(folder / "input_ids.npy", ids.numpy())
    described = compiled.metadata["parameters"]
    derived = {k: e for k, e in described["entries"].items() if k.startswith("derived.")}
    case = {
        "kind": "llama", "name": name, "config": LLAMAS[name], "weights_here": "stubs (no values)" if stubs else "random", "seq": SEQ, "batch": 1, "dtype": "float16", "seed": SEED,
        "target": target, "compile_s": round(compile_s, 1), "peak_rss_mib": _peak_rss_mib(),
        "parameters": {"count": described["count"], "weight_mib": round(described["weight_bytes"] / 2**20, 1),
                       "derived": len(derived), "derived_with_recipe": sum("recipe" in e for e in derived.values()),
                       "sources_not_in_modules": len(described["sources"])},
        "package_mib": round((folder / "model.cuvilpkg").stat().st_size / 2**20, 2),
        "patterns_fired": compiled.patterns_fired,
    }
    (folder / "case.json").write_text(json.dumps(case, indent=1))
    return case


def build_onnx(name: str, target: str, out: Path, precisions=("fp32",), variants: dict | None = None) -> dict:
    """``variants``: name -> (precision, target), each compiled to ``<name>.cuvilpkg``; by default
    one per precision, named after it, for ``target``."""
    import numpy as np
    import torch

    import cuvil_mlir
    from cuvil_mlir.eval.onnx_reference import OnnxReference
    from onnx_models import fused_ops

    torch.set_grad_enabled(False)
    folder = out / f"onnx-{name}"
    folder.mkdir(parents=True, exist_ok=True)
    model, inputs = onnx_model(name)
    path = folder / "model.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(model.eval(), inputs, str(path), dynamo=True)
    arrays = [x.numpy() for x in inputs]
    for i, a in enumerate(arrays):
        np.save(folder / f"input_{i}.npy", a)
    ref = model(*inputs)
    np.save(folder / "ref_torch.npy", (ref if isinstance(ref, torch.Tensor) else ref[0]).numpy())
    ort = OnnxReference(str(path))
    np.save(folder / "ref_ort.npy", ort(*arrays)[0].numpy())
    ops_onnx, ops_torch = fused_ops(str(path)), fused_ops(model, inputs)
    case = {"kind": "onnx", "name": name, "target": target, "inputs": [list(a.shape) for a in arrays],
            "reference_runtime": ort.runtime, "onnx_mib": round(path.stat().st_size / 2**20, 2),
            "fused_ops": {"onnx": ops_onnx, "torch.export": ops_torch},
            "fused_ops_differ": {k: {"onnx": ops_onnx.get(k, 0), "torch.export": ops_torch.get(k, 0)}
                                 for k in sorted(set(ops_onnx) | set(ops_torch)) if ops_onnx.get(k, 0) != ops_torch.get(k, 0)},
            "variants": {}}
    for variant, (precision, variant_target) in (variants or {p: (p, target) for p in precisions}).items():
        start = time.perf_counter()
        built = case["variants"][variant] = {"precision": precision, "target": variant_target}
        try:
            compiled = cuvil_mlir.compile(str(path), target=variant_target, precision=precision, params="inline")
        except Exception as e:  # recorded: the device side skips it
            built["error"] = f"{type(e).__name__}: {str(e)[:2000]}"
            continue
        compiled.save(folder / f"{variant}.cuvilpkg")
        built.update({"compile_s": round(time.perf_counter() - start, 1), "patterns_fired": compiled.patterns_fired,
                      "iree_flags": list(compiled.modules[0].iree_flags),
                      "package_mib": round((folder / f"{variant}.cuvilpkg").stat().st_size / 2**20, 2)})
    path.unlink()  # the modules and .npy files are what travels (torch.onnx may write the weights beside)
    path.with_name(path.name + ".data").unlink(missing_ok=True)
    (folder / "case.json").write_text(json.dumps(case, indent=1))
    return case


def parse_variants(specs: list[str]) -> dict[str, tuple[str, str]]:
    """``["fp16-td=fp16@cuda:h200{hopper-mode=target-description}", ...]`` -> {name: (precision, target)}. The
    name is up to the first ``=`` (a policy or a target may hold more), the precision up to ``@``."""
    out = {}
    for spec in specs:
        name, _, rest = spec.partition("=")
        precision, _, target = rest.partition("@")
        if not name or not precision or not target or name in out:
            raise SystemExit(f"bad or repeated --variant '{spec}' (expected NAME=PRECISION@TARGET, names distinct)")
        out[name] = (precision, target)
    return out


def build(a) -> int:
    warnings.filterwarnings("ignore")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    target = "cpu" if a.dry_run else a.target
    variants = parse_variants(a.variant) if a.variant else None
    names = a.only.split(",") if a.only else (["llama-dry"] if a.dry_run else ["llama-1b"]) + [f"onnx-{m}" for m in ONNX_MODELS]
    failed = 0
    for name in names:
        print(f"== {name} ({target})", flush=True)
        try:
            if name.startswith("onnx-"):
                m = name.removeprefix("onnx-")
                case = build_onnx(m, target, out, ("fp32", "fp16") if m in ONNX_FP16 else ("fp32",), variants=variants)
            else:
                case = build_llama(name, target, out, stubs=a.stubs)
            print(json.dumps({k: v for k, v in case.items() if k not in ("patterns_fired", "fused_ops", "variants")}), flush=True)
        except Exception:
            failed += 1
            traceback.print_exc()
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------
# device (there): DEADLINE-aware, writes results.json after every step


class Results:
    def __init__(self, path: Path, deadline: float):
        self.path, self.deadline, self.start = path, deadline, time.monotonic()
        self.data = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.node(),
                     "command": " ".join(shlex.quote(x) for x in sys.argv), "cases": {}}

    def left(self) -> float:
        return self.deadline - (time.monotonic() - self.start)

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        os.replace(tmp, self.path)


def _sync(torch_device: str) -> None:
    import torch

    if torch_device == "cuda":
        torch.cuda.synchronize()


def _time(fn, torch_device: str, seconds: float = 3.0, warmup: int = 3, max_iters: int = 200) -> dict:
    """Median and min wall ms of ``fn()`` (synchronized), over up to ``seconds``."""
    import statistics

    for _ in range(warmup):
        fn()
    _sync(torch_device)
    times, begin = [], time.perf_counter()
    while len(times) < max_iters and (time.perf_counter() - begin < seconds or len(times) < 5):
        t = time.perf_counter()
        fn()
        _sync(torch_device)
        times.append((time.perf_counter() - t) * 1e3)
    return {"median_ms": round(statistics.median(times), 4), "min_ms": round(min(times), 4), "iters": len(times)}


def _gpu_mem_mib() -> float | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20)
        return float(out.stdout.split()[0])
    except Exception:
        return None


def _errors(got, ref) -> dict:
    import numpy as np

    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    err = np.abs(got - ref)
    return {"max_abs": float(err.max()), "ref_max_abs": float(np.abs(ref).max()),
            "rel_l2": float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)),
            "argmax_agree": float((got.argmax(-1) == ref.argmax(-1)).mean()) if got.ndim >= 2 else None}


def device_llama(folder: Path, case: dict, r: Results, torch_device: str, scratch: Path, reserve: float = 0) -> None:
    """``reserve``: seconds the cases after this one need (torch.compile runs only beyond them)."""
    import numpy as np
    import torch

    import cuvil_mlir
    from cuvil_mlir.runtime import package, session
    from cuvil_mlir.runtime.parameters import generate

    row = r.data["cases"].setdefault(case["name"], {"kind": "llama", "build": case})
    meta, _ = package.read(folder / "model.cuvilpkg")
    t = time.perf_counter()
    entries, sources = generate(meta["parameters"], seed=case["seed"], workers=min(16, os.cpu_count() or 4))
    row["generate_s"] = round(time.perf_counter() - t, 2)
    irpa = scratch / f"{case['name']}.irpa"
    t = time.perf_counter()
    session.write_parameter_archive(entries, irpa)
    row["write_irpa_s"], row["irpa_mib"] = round(time.perf_counter() - t, 2), round(irpa.stat().st_size / 2**20, 1)
    del entries
    r.save()
    print(f"  generated {row['irpa_mib']} MiB in {row['generate_s']} s, written in {row['write_irpa_s']} s", flush=True)

    gpu_before = _gpu_mem_mib()
    t = time.perf_counter()
    compiled = cuvil_mlir.load(folder / "model.cuvilpkg", parameters=irpa)
    row["load_s"] = round(time.perf_counter() - t, 2)
    row["active_target"] = compiled.active_target
    ids = np.load(folder / "input_ids.npy")
    t = time.perf_counter()
    got = compiled(ids)
    row["first_call_s"] = round(time.perf_counter() - t, 2)
    row["gpu_mem_mib_cuvil"] = None if gpu_before is None else round(_gpu_mem_mib() - gpu_before)
    row["host_peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    r.save()
    print(f"  cuvil: load {row['load_s']} s, first call {row['first_call_s']} s on {row['active_target']}", flush=True)

    # the same weights in the same HF model, in torch: fp32 (the reference) then fp16
    torch.set_grad_enabled(False)
    t = time.perf_counter()
    model = llama(case["name"], device=torch_device, dtype=torch.float32)
    missing = model.load_state_dict({k: torch.from_numpy(v) for k, v in sources.items()}, strict=False)
    row["torch_keys_not_generated"] = sorted(missing.missing_keys)
    del sources
    row["torch_build_s"] = round(time.perf_counter() - t, 2)
    ids_t = torch.from_numpy(ids).to(torch_device)
    ref32 = model(ids_t).float().cpu().numpy()
    model = model.half()
    if torch_device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    ref16 = model(ids_t).float().cpu().numpy()
    got = np.asarray(got, np.float32)
    row["errors"] = {"cuvil fp16 vs torch fp32": _errors(got, ref32), "torch fp16 vs torch fp32": _errors(ref16, ref32),
                     "cuvil fp16 vs torch fp16": _errors(got, ref16)}
    r.save()
    e = row["errors"]
    print(f"  rel_l2 vs fp32: cuvil {e['cuvil fp16 vs torch fp32']['rel_l2']:.2e}, torch fp16 {e['torch fp16 vs torch fp32']['rel_l2']:.2e}", flush=True)

    timing = row.setdefault("timing", {})
    try:  # torch tensors on the GPU in and out (device-resident I/O), as torch itself runs
        timing["cuvil"] = _time(lambda: compiled(ids_t), torch_device)
        timing["cuvil"]["io"] = f"torch tensors ({torch_device}), device-resident where cuda"
    except Exception as ex:
        timing["cuvil device-resident error"] = f"{type(ex).__name__}: {str(ex)[:500]}"
        timing["cuvil"] = {**_time(lambda: compiled(ids), torch_device), "io": "numpy (host copies)"}
    timing["torch eager"] = _time(lambda: model(ids_t), torch_device)
    if torch_device == "cuda":
        row["gpu_mem_mib_torch_peak"] = round(torch.cuda.max_memory_allocated() / 2**20)
    r.save()
    print(f"  timing: {timing}", flush=True)
    if r.left() - reserve > 150 and torch_device == "cuda":
        t = time.perf_counter()
        try:
            compiled_model = torch.compile(model, mode="reduce-overhead")
            for _ in range(3):
                compiled_model(ids_t)
            row["torch_compile_s"] = round(time.perf_counter() - t, 1)
            timing["torch reduce-overhead"] = _time(lambda: compiled_model(ids_t), torch_device)
        except Exception as ex:
            timing["torch reduce-overhead"] = {"error": f"{type(ex).__name__}: {str(ex)[:500]}"}
        r.save()
    else:
        timing["torch reduce-overhead"] = {"skipped": f"{r.left():.0f} s left, {reserve:.0f} s reserved for later cases"
                                           if torch_device == "cuda" else "torch on the CPU"}
    del compiled, model
    irpa.unlink(missing_ok=True)
    import gc

    gc.collect()
    if torch_device == "cuda":
        torch.cuda.empty_cache()


def device_onnx(folder: Path, case: dict, r: Results, torch_device: str) -> None:
    import numpy as np

    import cuvil_mlir

    row = r.data["cases"].setdefault(f"onnx-{case['name']}", {"kind": "onnx", "build": case, "variants": {}})
    arrays = [np.load(folder / f"input_{i}.npy") for i in range(len(case["inputs"]))]
    ref_ort, ref_torch = np.load(folder / "ref_ort.npy"), np.load(folder / "ref_torch.npy")
    for variant, built in case["variants"].items():
        precision = built.get("precision", variant)  # cases built before --variant are named by their precision
        if "error" in built or r.left() < 20:
            row["variants"][variant] = {"skipped": built.get("error") or f"{r.left():.0f} s left"}
            continue
        out = row["variants"].setdefault(variant, {})
        try:
            t = time.perf_counter()
            compiled = cuvil_mlir.load(folder / f"{variant}.cuvilpkg")
            out["load_s"], out["active_target"] = round(time.perf_counter() - t, 2), compiled.active_target
            res = compiled(*arrays)
            got = np.asarray(res[0] if isinstance(res, (tuple, list)) else res)
            out["errors"] = {"vs onnxruntime": _errors(got, ref_ort), "vs torch eager": _errors(got, ref_torch)}
            tol = 1e-3 if precision == "fp32" else 3e-2
            out["tolerance_rel_l2"], out["ok"] = tol, out["errors"]["vs onnxruntime"]["rel_l2"] <= tol
            out["timing"] = _time(lambda: compiled(*arrays), "cpu", seconds=1.0)
        except Exception as ex:
            out["error"] = f"{type(ex).__name__}: {str(ex)[:1500]}"
        r.save()
        print(f"  {variant}: {json.dumps({k: out.get(k) for k in ('ok', 'active_target', 'error')})}", flush=True)


def device(a) -> int:
    warnings.filterwarnings("ignore")
    torch_device = os.environ.get("BENCH_TORCH_DEVICE", "cuda")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    r = Results(out / "big-models.json", float(a.deadline))
    try:
        import torch

        r.data["versions"] = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    except Exception as ex:
        r.data["versions"] = {"torch": f"unavailable: {ex}"}
    scratch = Path(a.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    folders = sorted((p for p in Path(a.folder).iterdir() if (p / "case.json").exists()),
                     key=lambda p: (not p.name.startswith("onnx-"), p.name))  # ONNX first: small and quick
    cases = [json.loads((folder / "case.json").read_text()) for folder in folders]
    needs = [30 if case["kind"] == "onnx" else 90 + case["parameters"]["weight_mib"] / 100 for case in cases]  # ~8B: 4 min
    for i, (folder, case, need) in enumerate(zip(folders, cases, needs)):
        if r.left() < need:
            r.data["cases"][folder.name] = {"skipped": f"deadline: {r.left():.0f} s left, needs ~{need}"}
            r.save()
            continue
        print(f"== {folder.name} ({r.left():.0f} s left)", flush=True)
        try:
            if case["kind"] == "onnx":
                device_onnx(folder, case, r, torch_device)
            else:
                device_llama(folder, case, r, torch_device, scratch, reserve=sum(needs[i + 1:]))
        except Exception as ex:
            r.data["cases"].setdefault(folder.name, {})["error"] = f"{type(ex).__name__}: {str(ex)[:3000]}"
            traceback.print_exc()
        r.save()
    r.data["wall_s"] = round(time.monotonic() - r.start, 1)
    r.save()
    print(f"wrote {r.path} ({r.data['wall_s']} s)")
    return 0


# ---------------------------------------------------------------------------------------
# report (here, on what came back)


def _fmt(v, spec=".3g"):
    return "-" if v is None else format(v, spec) if isinstance(v, (int, float)) else str(v)


def report(a) -> int:
    data = json.loads((Path(a.dir) / "big-models.json").read_text())
    out = Path(a.out)
    stem = out / f"big-models-h200-{a.date}"
    gpu_name = str(data.get("versions", {}).get("gpu", ""))
    gpu = next((g for g in ("H200", "H100") if g in gpu_name), gpu_name or "GPU")
    lines = [f"# Big models and ONNX models on the {gpu} ({a.date})", "",
             f"- device run: {data['date']} on `{data['machine']}`; {json.dumps(data.get('versions', {}))}",
             f"- device command: `{data['command']}` (wall {data.get('wall_s')} s)",
             f"- built here with `python benchmarks/big_models.py build --out .gpu/big`; report: "
             f"`python benchmarks/big_models.py report {a.dir} --date {a.date}`", ""]
    llamas = {k: v for k, v in data["cases"].items() if v.get("kind") == "llama" or k.startswith("llama")}
    if llamas:
        lines += ["## Llama, parameters generated on the device from a seed", "",
                  "Modules compiled here (fp16, external parameters, package saved without them); on the device "
                  "the parameters are generated from seed 0 (source weights, then derived ones by their recipes), "
                  "written as an .irpa and given to `cuvil_mlir.load(pkg, parameters=irpa)`; the same weights "
                  "in the same HF model in torch. Errors are relative L2 of the logits against torch fp32.", "",
                  "| model | package MiB | params MiB | generate s | write s | load s | first call s | GPU MiB (cuvil) "
                  "| cuvil vs fp32 | torch fp16 vs fp32 | argmax agree | cuvil ms | eager ms | reduce-overhead ms |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for name, row in llamas.items():
            if "errors" not in row:
                lines.append(f"| {name} | {row.get('error') or row.get('skipped') or 'incomplete'} |" + " |" * 13)
                continue
            b, e, t = row["build"], row["errors"], row.get("timing", {})
            ro = t.get("torch reduce-overhead", {})
            lines.append(f"| {name} | {b['package_mib']} | {row['irpa_mib']} | {row['generate_s']} | {row['write_irpa_s']} "
                         f"| {row['load_s']} | {row['first_call_s']} | {_fmt(row.get('gpu_mem_mib_cuvil'))} "
                         f"| {e['cuvil fp16 vs torch fp32']['rel_l2']:.2e} | {e['torch fp16 vs torch fp32']['rel_l2']:.2e} "
                         f"| {_fmt(e['cuvil fp16 vs torch fp16']['argmax_agree'])} | {_fmt(t.get('cuvil', {}).get('median_ms'))} "
                         f"| {_fmt(t.get('torch eager', {}).get('median_ms'))} "
                         f"| {_fmt(ro.get('median_ms')) if 'median_ms' in ro else ro.get('error', ro.get('skipped', '-'))} |")
        lines += ["", "Timings: medians of synchronized wall times per call (cuvil: `CompiledModel` called with a CUDA "
                  "tensor, device-resident I/O; torch: the HF model, fp16). Built here: "
                  + "; ".join(f"{n}: compile {r['build']['compile_s']} s, peak RSS {r['build']['peak_rss_mib']} MiB, "
                              f"{r['build']['parameters']['derived']} derived weights all with recipes: "
                              f"{r['build']['parameters']['derived'] == r['build']['parameters']['derived_with_recipe']}"
                              for n, r in llamas.items() if "build" in r), ""]
    onnx = {k: v for k, v in data["cases"].items() if k.startswith("onnx-")}
    if onnx:
        lines += ["## ONNX models (torch.onnx.export, compiled from the .onnx for cuda:h200)", "",
                  "| model | precision | target | rel L2 vs onnxruntime | max abs vs ORT | rel L2 vs torch | within tolerance | ms/call (host I/O) |",
                  "|---|---|---|---:|---:|---:|---|---:|"]
        for name, row in onnx.items():
            for precision, v in row.get("variants", {}).items():
                if "errors" not in v:
                    lines.append(f"| {name} | {precision} | - | {v.get('error') or v.get('skipped')} | | | no | |")
                    continue
                e = v["errors"]
                lines.append(f"| {name} | {precision} | {v['active_target']} | {e['vs onnxruntime']['rel_l2']:.2e} "
                             f"| {e['vs onnxruntime']['max_abs']:.2e} | {e['vs torch eager']['rel_l2']:.2e} "
                             f"| {'yes' if v['ok'] else 'NO'} (<= {v['tolerance_rel_l2']}) | {v.get('timing', {}).get('median_ms')} |")
            if "error" in row or "skipped" in row:
                lines.append(f"| {name} | - | - | {row.get('error') or row.get('skipped')} | | | no | |")
        lines += ["", "Fused Cuvil ops, .onnx form vs torch.export form (checked here at build time):", ""]
        for name, row in onnx.items():
            diff = row.get("build", {}).get("fused_ops_differ")
            lines.append(f"- {name}: " + ("same" if not diff else ", ".join(f"{k} ({v['onnx']} vs {v['torch.export']})" for k, v in diff.items())))
    out.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    stem.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {stem}.md and .json")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", default=str(ROOT / ".gpu" / "big"))
    b.add_argument("--target", default=H200)
    b.add_argument("--only", help="comma-separated case names (llama-1b, llama-8b, onnx-gpt2, ...)")
    b.add_argument("--dry-run", action="store_true", help="CPU target, llama-dry: to try `device` on this machine")
    b.add_argument("--stubs", action="store_true", help="compile every Llama from stub weights (as llama-8b always is)")
    b.add_argument("--variant", action="append", metavar="NAME=PRECISION@TARGET",
                   help="ONNX cases: compile this variant (repeatable; replaces the default fp32/fp16 for --target), "
                        "e.g. 'fp16-td=fp16@cuda:h200{hopper-mode=target-description}'")
    d = sub.add_parser("device")
    d.add_argument("folder")
    d.add_argument("--out", required=True)
    d.add_argument("--deadline", type=float, default=420)
    d.add_argument("--scratch", default="/tmp/big-scratch")
    r = sub.add_parser("report")
    r.add_argument("dir")
    r.add_argument("--date", default=datetime.now(timezone.utc).date().isoformat())
    r.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    a = p.parse_args()
    return {"build": build, "device": device, "report": report}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())

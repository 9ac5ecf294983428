"""LLM generation on the H200 (issue 18): compile_causal_lm packages against transformers' generate.

    python benchmarks/gpu/generate_h200.py build .gpu/gen/pkgs                 # here: packages, packed
    python3 benchmarks/gpu/generate_h200.py run .gpu/gen/pkgs --out $OUT       # there (run.sh): checks, timing
    python benchmarks/gpu/generate_h200.py report $DIR --date 2026-12-05      # here: benchmarks/results/

Both sides build every model from its config with deterministic weights that do not depend on
torch's random generator (``fill_hashed``, ``fill_tiled``: numpy integer hashes), so the torch side
there is the model the packages were compiled from here.

1. ``check`` packages: GPT-2, Llama, Mistral, Qwen2 at small configs (``SMALL``), fp32 and fp16,
   every weight hashed. There, per package and per target in it: teacher-forced logits (the prompt's
   prefill, then one decode per token of HF's greedy continuation) against HF eager fp32 on the GPU,
   next to HF eager fp16's error on the same tokens (the fp16 yardstick), and free-running greedy
   tokens against HF generate at the same precision.
2. ``timing`` packages: Llama-1B width (``LLAMA_1B``: hidden 2048, 16 layers, 32/8 heads, FFN 8192,
   vocab 32000; 1.1 B parameters, fp16, external parameters), weights one random 64x64 sign block
   tiled over each matrix (packs ~1000x for the trip; the timing does not depend on the values).
   Context C is the total length: a prompt of C - N random tokens and N new tokens (greedy, no
   early stop); the package's max_seq_len and HF's static cache are both C. For each (batch, C):
     prefill ms    t(generate 1 new token): the prompt's forward, one token chosen
     decode tok/s  batch * (N - 1) / (t(generate N) - t(generate 1))
   timed with CUDA synchronisation, medians over interleaved rounds, same prompts, for cuvil
   (the package's first target that loads: Hopper kernels; the same module with each greedy
   token through the host, ``cuvil_host_loop``; and the plain cuda:h200 module) and
   HF generate eager (dynamic cache) and with a static cache (cache_implementation="static", which
   HF generate compiles with torch.compile, mode reduce-overhead: CUDA graphs). The prompt is one
   prefill chunk at position 0: a package with ``prefill_first`` (causal attention over the
   chunk's own keys, no mask) runs that, an older one ``prefill`` (masked attention over the
   cache); the run records which (``cuvil_prefill_function``, ``cuvil_plain_prefill_function``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

TARGETS = "cuda:h200{hopper-mode=target-description},cuda:h200"
# head dim 64: what the Hopper attention kernels take (with 16, every attention stayed IREE's codegen);
# 2 q heads per kv head; small enough that the eight packages of hashed weights travel (~1-2 MB each)
SMALL = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=1, max_position_embeddings=512)
LLAMA_1B = dict(vocab_size=32000, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                num_key_value_heads=8, max_position_embeddings=2048)
# a CPU dry run's stand-in for LLAMA_1B (same code path, seconds to build and run)
LLAMA_TINY = dict(vocab_size=2048, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256)
ARCHS = ("gpt2", "llama", "mistral", "qwen2")
# the prompt is three chunks (prefill_first, then prefill twice), and decode at positions past 300 of a
# 512-slot cache runs the prefix kernel with two splits, the second one holding keys
CHECK = dict(batch=2, prompt=300, new_tokens=16, max_seq_len=512, prefill_len=128)
CASES = "1x128,8x128,1x2048,8x2048"
NEW_TOKENS = 32
ROUNDS = 3


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- models (both sides)


def hashed_uniform(seed: int, n: int) -> np.ndarray:
    """n numbers in [-1, 1) from splitmix64 of (seed, index): the same on every machine."""
    with np.errstate(over="ignore"):
        z = (np.arange(n, dtype=np.uint64) + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)) * np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(31)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(29)
    return (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -52 - 1.0


def fill_hashed(model, scale: float = 0.1) -> None:
    """Every floating-point parameter from its own hash stream: matrices uniform with std
    ``scale``, 1-D weights (norms) 1 + scale * u, biases scale * u."""
    import torch

    with torch.no_grad():
        for k, (name, p) in enumerate(model.named_parameters()):
            u = torch.from_numpy(hashed_uniform(k + 1, p.numel()).reshape(p.shape))
            value = u * (scale * 3 ** 0.5) if p.dim() >= 2 else (1 + scale * u if name.endswith("weight") else scale * u)
            p.copy_(value.to(p.dtype))


def fill_tiled(model, period: int = 64, scale: float = 0.02) -> None:
    """Each matrix: one ``period`` x ``period`` block of +-scale (signs hashed per matrix) tiled
    over it (gpu_models.tiled_sign_weights without torch's generator); 1-D weights stay as built
    (norms: ones)."""
    import torch

    with torch.no_grad():
        for k, (_, p) in enumerate(model.named_parameters()):
            if p.dim() < 2:
                continue
            signs = torch.from_numpy(np.where(hashed_uniform(k + 1, period * period) >= 0, scale, -scale).reshape(period, period))
            rows, cols = p.shape[0], p[0].numel()
            tiled = signs.to(device=p.device, dtype=p.dtype).repeat(-(-rows // period), -(-cols // period))[:rows, :cols]
            p.copy_(tiled.reshape(p.shape))


def small_model(arch: str, dtype: str = "fp32", device: str = "cpu"):
    import torch
    import transformers

    if arch == "gpt2":
        config = transformers.GPT2Config(vocab_size=SMALL["vocab_size"], n_embd=SMALL["hidden_size"], n_layer=SMALL["num_hidden_layers"],
                                         n_head=SMALL["num_attention_heads"], n_positions=SMALL["max_position_embeddings"])
    else:
        cls = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig, "qwen2": transformers.Qwen2Config}[arch]
        config = cls(**SMALL, **({"sliding_window": None} if arch == "mistral" else {}))
    model = transformers.AutoModelForCausalLM.from_config(config)
    fill_hashed(model)
    return _ready(model, dtype, device)


def llama(size: dict, dtype: str = "fp16", device: str = "cpu"):
    import torch
    import transformers

    with torch.device(device):
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**size))
    fill_tiled(model)
    return _ready(model, dtype, device)


def _ready(model, dtype: str, device: str):
    import torch

    model.generation_config.eos_token_id = None  # random weights: every row runs to N tokens
    model.generation_config.pad_token_id = 0
    return model.eval().to(device=device, dtype={"fp32": torch.float32, "fp16": torch.float16}[dtype])


def prompt(batch: int, length: int, vocab: int, seed: int):
    import torch

    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- build (here)


def build(args) -> None:
    import torch

    import cuvil_mlir
    import dedup

    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"packages": []}
    done = {p["file"] for p in manifest["packages"] if (out / p["file"]).exists()}
    manifest["packages"] = [p for p in manifest["packages"] if p["file"] in done]
    manifest.update(targets=args.targets, new_tokens=args.new_tokens, llama=LLAMA_TINY if args.tiny else LLAMA_1B, check=CHECK,
                    created=datetime.now(timezone.utc).isoformat(timespec="seconds"), command="python " + " ".join(sys.argv))

    def add(entry: dict, lm) -> None:
        path = out / entry["file"].removesuffix(".dd.xz")
        start = time.perf_counter()
        lm.save(path)
        data = path.read_bytes()
        packed = dedup.pack(data)
        (out / entry["file"]).write_bytes(packed)
        path.unlink()
        entry.update(bytes=len(data), packed_bytes=len(packed), active_targets=[m.target for m in lm.modules], functions=list(lm.functions),
                     save_pack_s=round(time.perf_counter() - start, 1), patterns_fired=lm.patterns_fired,
                     kernels=len(lm.metadata.get("kernels", [])))
        manifest["packages"].append(entry)
        manifest_path.write_text(json.dumps(manifest, indent=1))
        log(f"{entry['file']}: {len(data) / 2**20:.1f} -> {len(packed) / 2**20:.2f} MiB, compile {entry['compile_s']} s")

    if "check" in args.what:
        for arch in args.archs.split(","):
            for precision in ("fp32", "fp16"):
                name = f"check-{arch}-{precision}.cuvilpkg.dd.xz"
                if name in done:
                    continue
                model = small_model(arch, precision)
                start = time.perf_counter()
                lm = cuvil_mlir.compile_causal_lm(model, max_seq_len=CHECK["max_seq_len"], batch=CHECK["batch"],
                                                  prefill_len=CHECK["prefill_len"], target=args.targets, params="external")
                add({"kind": "check", "file": name, "arch": arch, "precision": precision,
                     "compile_s": round(time.perf_counter() - start, 1)}, lm)
    if "timing" in args.what:
        size = LLAMA_TINY if args.tiny else LLAMA_1B
        model = None
        for case in args.cases.split(","):
            batch, context = (int(x) for x in case.split("x"))
            name = f"timing-llama-b{batch}-c{context}.cuvilpkg.dd.xz"
            if name in done:
                continue
            model = model or llama(size, "fp16")
            prompt_len = context - args.new_tokens
            start = time.perf_counter()
            lm = cuvil_mlir.compile_causal_lm(model, max_seq_len=context, batch=batch, prefill_len=prompt_len,
                                              target=args.targets, params="external", record_dispatches=True)
            add({"kind": "timing", "file": name, "batch": batch, "context": context, "prompt_len": prompt_len,
                 "new_tokens": args.new_tokens, "compile_s": round(time.perf_counter() - start, 1)}, lm)
            del lm
    total = sum(p["packed_bytes"] for p in manifest["packages"])
    log(f"{len(manifest['packages'])} packages, {total / 2**20:.2f} MiB packed in {out}")


# ---------------------------------------------------------------- run (there)


class Results:
    """The JSON file of a run, rewritten after every item. An existing file is continued (run.sh
    starts the run again when its process died): items done are skipped, and the item that was
    in progress is recorded as crashed, not tried again."""

    def __init__(self, path: Path, head: dict):
        self.path = path
        self.data = {**head, "checks": [], "timing": [], "faulted_targets": []}
        if path.exists():
            old = json.loads(path.read_text())
            self.data.update(checks=old["checks"], timing=old["timing"], restarts=old.get("restarts", 0) + 1,
                             faulted_targets=old.get("faulted_targets", []))
            crashed = old.get("in_progress")
            if crashed:
                file, target = crashed if isinstance(crashed, list) else (crashed, None)
                for row in self.data["checks"] + self.data["timing"]:
                    if row.get("file") == file and row.get("status") == "started":
                        row["status"] = "crashed: the process died in this item"
                if not self.done(file, target):
                    self.data["checks"].append({"file": file, "target": target, "status": "crashed: the process died in this item"})
        self.flush()

    def done(self, file: str, target: str | None = None) -> bool:
        return any(row.get("file") == file and (target is None or row.get("target") == target)
                   for row in self.data["checks"] + self.data["timing"])

    def start(self, file: str, target: str | None = None) -> None:
        self.data["in_progress"] = [file, target] if target else file
        self.flush()

    def end_if_faulted(self, row: dict, target: str) -> None:
        """A GPU fault (an illegal address, a launch failure) leaves the process's CUDA context
        unusable: record the target as faulted and end the process with FAULT_EXIT; run.sh starts
        it again and the run goes on with the next item (faulted targets are not timed)."""
        if not gpu_fault(str(row.get("status", ""))):
            return
        if target not in self.data["faulted_targets"]:
            self.data["faulted_targets"].append(target)
        self.data["in_progress"] = None
        self.flush()
        log(f"GPU fault on {target}: ending this process so that the next item gets a fresh CUDA context")
        sys.stdout.flush()
        os._exit(FAULT_EXIT)

    def add(self, section: str, row: dict) -> None:
        self.data[section].append(row)
        self.flush()

    def flush(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        tmp.replace(self.path)


FAULT_EXIT = 75  # run.sh: the process ended itself after a GPU fault; start it again
_FAULTS = ("ILLEGAL_ADDRESS", "illegal memory access", "LAUNCH_FAILED", "unspecified launch failure", "misaligned address",
           "CUDA_ERROR_ILLEGAL_INSTRUCTION")


def gpu_fault(message: str) -> bool:
    return any(f in message for f in _FAULTS)


def unpacked(dir_: Path, entry: dict, scratch: Path) -> Path:
    import dedup

    path = scratch / entry["file"].removesuffix(".dd.xz")
    if not path.exists():
        path.write_bytes(dedup.unpack((dir_ / entry["file"]).read_bytes()))
    return path


def run(args) -> None:
    import torch
    import transformers

    import cuvil_mlir

    start = time.monotonic()
    deadline = start + args.deadline
    dir_ = Path(args.dir)
    manifest = json.loads((dir_ / "manifest.json").read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    device = args.device
    results = Results(out / args.name, {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": _machine(device),
        "torch": torch.__version__, "transformers": transformers.__version__, "device": device,
        "command": "python3 " + " ".join(sys.argv), "manifest": {k: v for k, v in manifest.items() if k != "packages"},
        "packages": manifest["packages"]})
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    only = set(args.only.split(",")) if args.only else {"check", "timing"}

    if "check" in only:
        for entry in [p for p in manifest["packages"] if p["kind"] == "check"]:
            for target in entry["active_targets"]:
                if results.done(entry["file"], target):
                    continue
                if time.monotonic() > deadline - args.reserve:
                    results.add("checks", {"file": entry["file"], "target": target, "status": "skipped: deadline"})
                    continue
                results.start(entry["file"], target)
                try:
                    row = check_package(unpacked(dir_, entry, scratch), entry, manifest, device, target)
                except Exception as e:
                    row = {"file": entry["file"], "target": target, "status": f"failed: {type(e).__name__}: {str(e)[:800]}",
                           "traceback": traceback.format_exc()[-2000:]}
                results.add("checks", row)
                log(f"check {row.get('file')} {target}: {row.get('status')} "
                    f"{_brief(row, ('rel_err', 'hf_fp16_rel_err', 'tokens_equal'))}")
                results.end_if_faulted(row, target)

    if "timing" in only:
        for entry in [p for p in manifest["packages"] if p["kind"] == "timing" and not results.done(p["file"])]:
            left = deadline - time.monotonic()
            if left < args.case_min_s:
                results.add("timing", {**_case_head(entry), "status": f"skipped: deadline ({left:.0f} s left)"})
                continue
            row = {**_case_head(entry), "status": "started"}
            results.start(entry["file"])
            results.add("timing", row)  # filled in as the case goes (flushed after each step)
            try:
                timing_case(unpacked(dir_, entry, scratch), entry, manifest, device, sync, deadline, args, row,
                            lambda: results.flush(), skip=set(results.data["faulted_targets"]))
                row["status"] = "ok" if not row.get("faults") else "faulted"
            except Exception as e:
                row["status"] = f"failed: {type(e).__name__}: {str(e)[:800]}"
                row["traceback"] = traceback.format_exc()[-2000:]
            results.flush()
            (scratch / entry["file"].removesuffix(".dd.xz")).unlink(missing_ok=True)
            log(f"timing b{entry['batch']} c{entry['context']}: {row['status']} {json.dumps(row.get('results', {}))}")
            if row.get("faults"):  # measured again in the next process, without the target that faulted
                results.data["timing"].remove(row)
                results.data.setdefault("faults", []).append({"file": entry["file"], **row["faults"]})
                for target, note in row["faults"].items():
                    results.end_if_faulted({"status": note}, target)
            torch.cuda.empty_cache() if device == "cuda" else None
    results.data["in_progress"] = None
    results.data["wall_s"] = round(results.data.get("wall_s", 0) + time.monotonic() - start, 1)
    results.flush()
    log(summary(results.data))


def _case_head(entry: dict) -> dict:
    return {"file": entry["file"], **{k: entry[k] for k in ("batch", "context", "prompt_len", "new_tokens")}}


def _brief(row: dict, keys) -> str:
    return " ".join(f"{k}={row[k]}" for k in keys if k in row)


def _machine(device: str) -> str:
    import torch

    gpu = torch.cuda.get_device_name() if device == "cuda" and torch.cuda.is_available() else "no GPU"
    return f"{platform.node()}, {gpu}, {os.cpu_count()} CPU cores"


def check_package(path: Path, entry: dict, manifest: dict, device: str, target: str) -> dict:
    """One target of the package: teacher-forced logits vs HF eager fp32 (and HF fp16's error on
    the same tokens), free-running greedy tokens vs HF generate at the package's precision."""
    import torch

    import cuvil_mlir

    check = manifest["check"]
    arch, precision = entry["arch"], entry["precision"]
    b, p, n = check["batch"], check["prompt"], check["new_tokens"]
    ref32 = small_model(arch, "fp32", device)
    ids = prompt(b, p, ref32.config.vocab_size, seed=p)
    with torch.no_grad():
        greedy32 = ref32.generate(ids.to(device), attention_mask=torch.ones_like(ids, device=device), max_new_tokens=n,
                                  do_sample=False, disable_compile=True).cpu()
        forced = greedy32[:, :-1]  # logits at positions p-1 .. p+n-2 predict the n new tokens
        want = ref32(forced.to(device)).logits[:, p - 1:].float().cpu()
        ref16 = small_model(arch, "fp16", device)
        hf16 = ref16(forced.to(device)).logits[:, p - 1:].float().cpu()
        greedy_same = greedy32 if precision == "fp32" else ref16.generate(
            ids.to(device), attention_mask=torch.ones_like(ids, device=device), max_new_tokens=n, do_sample=False,
            disable_compile=True).cpu()
    scale = float(want.abs().max())
    hf16_err = float((hf16 - want).abs().max()) / scale
    row = {"file": entry["file"], "arch": arch, "precision": precision, "target": target,
           "hf_fp16_rel_err": round(hf16_err, 6)}
    t0 = time.perf_counter()
    try:
        lm = cuvil_mlir.load(path, prefer=target)
        row["loaded_target"] = lm.active_target
        row["load_s"] = round(time.perf_counter() - t0, 2)
        row["prefill_function"] = prefill_functions(lm, p)
        got = [lm.prefill(ids)]
        for i in range(n - 1):
            got.append(lm.decode(forced[:, p + i:p + i + 1], p + i))
        got = torch.stack(got, dim=1).float()
        err = float((got - want).abs().max()) / scale
        row["rel_err"] = round(err, 6)
        row["argmax_agree"] = round(float((got.argmax(-1) == want.argmax(-1)).float().mean()), 4)
        tokens = lm.generate(ids, max_new_tokens=n)
        same = (tokens[:, p:] == greedy_same[:, p:])
        row["tokens_equal"] = bool(same.all())
        row["tokens_equal_prefix"] = int(same.all(0).long().cumprod(0).sum())  # new tokens equal in every row
        # fp32: within 1e-4 of HF fp32 and the same greedy tokens; fp16: no worse than 4x HF fp16's own error
        ok = err < 1e-4 and row["tokens_equal"] if precision == "fp32" else err <= max(4 * hf16_err, 2e-3)
        row["status"] = "ok" if ok and row["loaded_target"] == target else (
            "fallback" if row["loaded_target"] != target else "numerics off")
        del lm
    except Exception as e:
        row["status"] = f"failed: {type(e).__name__}: {str(e)[:800]}"
    return row


def prefill_functions(lm, length: int) -> str:
    """The functions that prefill a prompt of ``length`` tokens, in call order ("prefill_first",
    "prefill_first + prefill", or "prefill" for a package written before prefill_first)."""
    return " + ".join(function for function, _ in lm.prefill_calls(length))


def step(args) -> None:
    """The smallest reproducer of a fault: prefill then decode once on ``args.target``."""
    import torch

    import cuvil_mlir

    path = Path(args.package)
    if path.name.endswith(".dd.xz"):
        Path(args.scratch).mkdir(parents=True, exist_ok=True)
        path = unpacked(path.parent, {"file": path.name}, Path(args.scratch))
    lm = cuvil_mlir.load(path, prefer=args.target)
    print("loaded", lm.active_target, flush=True)
    ids = torch.randint(0, 100, (lm.batch, 5))
    print("prefill", tuple(lm.prefill(ids).shape), flush=True)
    print("decode", tuple(lm.decode(ids[:, :1], 5).shape), flush=True)
    print("step ok", flush=True)


def profile_steps(args) -> None:
    """Where a decode step's time goes (there): ``cuvil profile`` of the timing packages' decode at
    their last position (the longest cache read), per target, one JSON per (case, target)."""
    from cuvil_mlir.eval import profiler
    from cuvil_mlir.runtime.generation import load

    out = Path(args.out)
    stop = time.monotonic() + args.deadline
    for case, batch, entry, path in _timing_packages(args, "profile"):
        context = entry["context"]
        for target in args.targets.split(";"):
            if time.monotonic() > stop:
                log(f"profile {case} {target}: deadline")
                return
            name = f"profile-{args.function}-b{batch}-c{context}-{'kernels' if 'hopper' in target else 'plain'}.json"
            try:
                lm = load(path, prefer=target, verify=False)
                prof = profiler.profile_compiled(lm, function=args.function, position=args.position, model=f"llama-1b b{batch}",
                                                 repetitions=5, iterations=10)
                profiler.write_json(prof, out / name)
                profiler.print_profile(prof, limit=14)
                log(f"profile {case} {target}: wall {prof['totals']['wall_us']:.0f} us -> {name}")
            except Exception as e:  # the next case still runs
                log(f"profile {case} {target} failed: {type(e).__name__}: {str(e)[:800]}")
            finally:
                lm = None


def step_phases(args) -> None:
    """Where a generate loop's decode step goes on the host side (there): per step, the call
    (``invoke_resident``: the function runs and is waited on), reading the logits back, and
    choosing the token, medians over ``--steps`` steps after a prefill; one JSON line per case."""
    import torch

    from cuvil_mlir.runtime.generation import _choose, _step_inputs, load

    rows = []
    for case, batch, entry, path in _timing_packages(args, "phases"):
        lm = load(path, verify=False)
        prompt_ids = torch.randint(0, 1000, (batch, entry["prompt_len"]))
        logits = lm.prefill(prompt_ids)
        session = lm._session_with_cache()

        def call(token, position):  # one decode call, what CausalLM.decode passes, its results left on the device
            ids = np.ascontiguousarray(token[:, None].numpy().astype(np.int64))
            return session.invoke_resident("decode", [*_step_inputs("decode", ids, position, 0), *lm._cache])

        torch_calls = []  # the token chosen by torch's argmax instead (what _choose did before 2026-12-06)
        position = entry["prompt_len"]
        for _ in range(args.steps // 2):
            token = torch.as_tensor(logits).float().argmax(dim=-1)
            t1 = time.perf_counter()
            views = call(token, position)
            torch_calls.append((time.perf_counter() - t1) * 1e3)
            logits = session.to_host(views[:1])[0]
            position += 1
        phases = {"call_ms": [], "read_ms": [], "choose_ms": [], "step_ms": []}
        for _ in range(args.steps):
            t0 = time.perf_counter()
            token = _choose(torch.as_tensor(logits), False, 1.0, None, None, None)
            t1 = time.perf_counter()
            views = call(token, position)
            t2 = time.perf_counter()
            logits = session.to_host(views[:1])[0]
            t3 = time.perf_counter()
            for key, value in (("choose_ms", t1 - t0), ("call_ms", t2 - t1), ("read_ms", t3 - t2), ("step_ms", t3 - t0)):
                phases[key].append(value * 1e3)
            position += 1
        api = []  # the same steps through the public API (CausalLM.decode + the greedy choice)
        for _ in range(min(args.steps, lm.max_seq_len - position)):
            t0 = time.perf_counter()
            logits = lm.decode(_choose(torch.as_tensor(logits), False, 1.0, None, None, None)[:, None], position)
            api.append((time.perf_counter() - t0) * 1e3)
            position += 1
        t0 = time.perf_counter()
        lm.generate(prompt_ids, max_new_tokens=min(16, lm.max_seq_len - entry["prompt_len"]))
        row = {"case": case, "target": lm.active_target, "steps": args.steps, "api_step_ms": round(statistics.median(api), 3) if api else None,
               "generate_16_ms": round((time.perf_counter() - t0) * 1e3, 1), "logits": [list(logits.shape), str(logits.dtype)],
               **{k: round(statistics.median(v), 3) for k, v in phases.items()},
               "call_ms_after_torch_argmax": round(statistics.median(torch_calls), 3),
               "call_ms_after_torch_argmax_each": [round(v, 2) for v in torch_calls],
               "call_ms_each": [round(v, 2) for v in phases["call_ms"]], "api_ms_each": [round(v, 2) for v in api],
               "sm_clock_after": _sm_clock(),
               # what to_host copies: the view's bytes, or a longer buffer under it
               "logits_view_bytes": views[0].byte_length, "logits_buffer_bytes": views[0].get_buffer().byte_length()}
        log(json.dumps(row))
        rows.append(row)
        lm = None
    Path(args.out, "step-phases.json").write_text(json.dumps(rows, indent=1))


def host_split(args) -> None:
    """Where ``CausalLM.generate``'s time per decode step goes on the host (there): the loop through
    the host (``device_greedy`` off), its session's upload / call / read-back and the token choice
    each timed by wrappers (first, for a package whose steps return their greedy tokens, generate's
    own loop on the device, condition ``device_greedy``: its step time and reads); per
    step, means over ``--steps`` new tokens after a warm-up. Per case, the conditions: no torch
    CUDA in the process; after torch's CUDA context and a cuBLAS matmul (as the timing runs, which
    run HF in the same process); after a torch CPU argmax over [batch, vocab] (its intra-op
    threads); the small inputs in mapped pinned host memory instead of the kept device buffers.
    With ``--with-hf``: no torch CUDA, then after transformers' model generated on the GPU in the
    process, then the same with Python's garbage collector off. ``--runtime-flag``: extra IREE
    runtime flags for the whole process. One JSON line per case and condition (host-split*.json)."""
    import gc

    import torch

    from cuvil_mlir.runtime import generation, session as session_mod

    session_mod.RUNTIME_FLAGS = (*session_mod.RUNTIME_FLAGS, *args.runtime_flag)  # before the first driver
    rows, hf_model = [], None
    for case, batch, entry, path in _timing_packages(args, "host"):
        lm = generation.load(path, verify=False)
        session = lm._session_with_cache()
        spent = {}

        def timed(name, fn):
            def wrapper(*a, **k):
                t0 = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0
            return wrapper

        session._upload = timed("upload", session._upload)  # pinned_inputs swaps in its own below
        session.invoke_resident = timed("invoke_with_upload", session.invoke_resident)
        session.to_host = timed("read", session.to_host)
        session.queue_read = timed("queue_read", session.queue_read)
        session.invoke_async = timed("queue_call", session.invoke_async)
        choose = generation._choose
        generation._choose = timed("choose", choose)
        ids = torch.randint(0, 1000, (batch, entry["prompt_len"]))
        n = min(args.steps, lm.max_seq_len - entry["prompt_len"])
        kept_upload = session._upload
        pinned = {}

        def upload_pinned(arrays):  # the small inputs in mapped pinned host memory the kernels read: no copy, no wait
            import iree.runtime as rt

            views = []
            for index, a in enumerate(arrays):
                a = np.ascontiguousarray(a)
                key = (index, a.nbytes)
                if key not in pinned:
                    pinned[key] = session._device.allocator.allocate_buffer(
                        memory_type=rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE,
                        allowed_usage=rt.BufferUsage.DEFAULT | rt.BufferUsage.MAPPING_SCOPED,
                        allocation_size=a.nbytes)
                np.copyto(pinned[key].map().asarray(list(a.shape), a.dtype), a)
                views.append(rt.HalBufferView(pinned[key], list(a.shape), session_mod._element_type(a.dtype)))
            return views

        conditions = ("plain", "torch_cuda", "torch_cpu_argmax", "pinned_inputs") if not args.with_hf else \
            ("plain", "hf_generated", "hf_generated_gc_off")
        if lm.device_greedy:  # first, generate's own loop: tokens passed on the device, calls queued ahead
            conditions = ("device_greedy", *conditions)
        for condition in conditions:
            lm.device_greedy = condition == "device_greedy"  # every other condition: the loop through the host
            if condition == "hf_generated":  # transformers' model on the GPU, one generate run, as timing_case has
                if hf_model is None:
                    hf_model = llama(json.loads((Path(args.dir) / "manifest.json").read_text())["llama"], "fp16", "cuda")
                with torch.no_grad():
                    hf_model.generate(ids.cuda(), attention_mask=torch.ones_like(ids.cuda()), max_new_tokens=8, do_sample=False)
                torch.cuda.synchronize()
                row_gc = {"gc_objects": len(gc.get_objects())}
            if condition == "hf_generated_gc_off":
                gc.disable()
            if condition == "pinned_inputs":
                session._upload = timed("upload", upload_pinned)
            else:
                session._upload = kept_upload
            if condition == "torch_cuda":
                if not torch.cuda.is_available():
                    continue
                a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
                for _ in range(20):
                    a @ a
                torch.cuda.synchronize()
            if condition == "torch_cpu_argmax":
                torch.randn(batch, lm.vocab_size).argmax(-1)
            lm.generate(ids, max_new_tokens=n)  # warm
            rates, pers = [], []
            for _ in range(3):
                spent.clear()
                t0 = time.perf_counter()
                lm.generate(ids, max_new_tokens=1)
                t1 = time.perf_counter()
                first = dict(spent)
                spent.clear()
                t2 = time.perf_counter()
                lm.generate(ids, max_new_tokens=n)
                t3 = time.perf_counter()
                rates.append(((t3 - t2) - (t1 - t0)) / (n - 1))
                pers.append({k: (v - first.get(k, 0.0)) / (n - 1) for k, v in spent.items()})
            step = statistics.median(rates)
            per = {k: statistics.median(p.get(k, 0.0) for p in pers) for k in pers[0]}
            row = {"case": case, "condition": condition, "runtime_flags": args.runtime_flag, "step_ms": round(step * 1e3, 3),
                   "tok_s": round(batch / step, 1), **{f"{k}_ms": round(v * 1e3, 3) for k, v in per.items()}}
            if condition.startswith("hf_"):
                row.update(row_gc)
            row["call_ms"] = round(row.get("invoke_with_upload_ms", 0) - row.get("upload_ms", 0), 3)
            row["loop_rest_ms"] = round(row["step_ms"] - row.get("invoke_with_upload_ms", 0) - row.get("read_ms", 0)
                                        - row.get("choose_ms", 0), 3)
            log(json.dumps(row))
            rows.append(row)
            if condition == "hf_generated_gc_off":
                gc.enable()
        generation._choose = choose
        lm = None
    Path(args.out).mkdir(parents=True, exist_ok=True)
    name = "host-split" + "".join("-" + f.strip("-").replace("=", "-") for f in args.runtime_flag) + ".json"
    Path(args.out, name).write_text(json.dumps(rows, indent=1))


def _timing_packages(args, what: str):
    """(case, batch, manifest entry, unpacked path) of each of ``args.cases``' timing packages."""
    dir_, scratch = Path(args.dir), Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((dir_ / "manifest.json").read_text())
    for case in args.cases.split(","):
        batch, context = (int(x) for x in case.split("x"))
        entry = _timing_entry(manifest, batch, context)
        if entry is None:
            log(f"{what} {case}: no timing package")
            continue
        yield case, batch, entry, unpacked(dir_, entry, scratch)


def _timing_entry(manifest: dict, batch: int, context: int) -> dict | None:
    return next((p for p in manifest["packages"] if p["kind"] == "timing" and (p["batch"], p["context"]) == (batch, context)), None)


def _sm_clock() -> str:
    import subprocess

    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "-"


def timing_case(path: Path, entry: dict, manifest: dict, device: str, sync, deadline: float, args, row: dict, flush,
                skip: set = frozenset()) -> None:
    """One (batch, context): cuvil (each target) and HF eager / static-cache generate, timed in
    interleaved rounds; prefill logits compared with HF fp16 eager."""
    import torch

    import cuvil_mlir

    b, c, p, n = entry["batch"], entry["context"], entry["prompt_len"], entry["new_tokens"]
    size = manifest["llama"]
    if device == "cuda":
        torch._dynamo.reset()  # a fresh model per case: no stale guards, no recompile limit reached
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    t0 = time.perf_counter()
    model = llama(size, "fp16", device)
    row["hf_build_s"] = round(time.perf_counter() - t0, 1)
    ids = prompt(b, p, size["vocab_size"], seed=c)
    ids_dev = ids.to(device)
    mask = torch.ones_like(ids_dev)
    fns, tokens = {}, {}
    row["results"], row["notes"] = {}, {}

    for target in entry["active_targets"]:
        name = "cuvil" if target == entry["active_targets"][0] else "cuvil_plain"
        if target in skip:
            row["notes"][name] = f"skipped: {target} faulted the GPU earlier in this run"
            continue
        t0 = time.perf_counter()
        try:
            lm = cuvil_mlir.load(path, prefer=target, verify=name == "cuvil")  # the archive's sha256 checked once
            row["notes"][f"{name}_target"] = lm.active_target
            row["notes"][f"{name}_load_s"] = round(time.perf_counter() - t0, 1)
            if lm.active_target != target:
                row["notes"][name] = f"{target} did not load; ran {lm.active_target}"
                continue
            row[f"{name}_prefill_function"] = prefill_functions(lm, p)
            fns[name] = cuvil_generate(lm, ids, lm.device_greedy)
            if name == "cuvil" and lm.device_greedy:  # the same package, each token through the host (A/B)
                fns["cuvil_host_loop"] = cuvil_generate(lm, ids, False)
            with torch.no_grad():
                want = model(ids_dev).logits[:, -1].float().cpu()
            got = lm.prefill(ids).float()
            row["notes"][f"{name}_prefill_logits_rel_err_vs_hf_fp16"] = round(float((got - want).abs().max() / want.abs().max()), 5)
        except Exception as e:
            row["notes"][name] = f"failed: {type(e).__name__}: {str(e)[:600]}"
            if gpu_fault(row["notes"][name]):
                row.setdefault("faults", {})[target] = row["notes"][name]
                return  # the CUDA context is lost for everything after: the run restarts its process

    def hf(static: bool):
        extra = {"cache_implementation": "static"} if static else {"disable_compile": True}

        def generate(count):
            with torch.no_grad():
                return model.generate(ids_dev, attention_mask=mask, max_new_tokens=count, min_new_tokens=count,
                                      do_sample=False, **extra)
        return generate

    fns["hf_eager"] = hf(False)
    if time.monotonic() < deadline - args.compile_min_s:
        fns["hf_static_compile"] = hf(True)
    else:
        row["notes"]["hf_static_compile"] = "skipped: deadline"

    for name, fn in list(fns.items()):  # warm-up (torch.compile's and CUDA graphs' too), tokens kept
        t0 = time.perf_counter()
        try:
            for count in (n, 1, n):
                ids_out = fn(count)
                sync()
                if count == n:
                    tokens[name] = ids_out.cpu()
        except Exception as e:
            row["notes"][name] = f"failed: {type(e).__name__}: {str(e)[:600]}"
            del fns[name]
            continue
        row["notes"][f"{name}_warmup_s"] = round(time.perf_counter() - t0, 1)
        flush()
    times = {name: {1: [], n: []} for name in fns}
    for r in range(args.rounds):
        if r and time.monotonic() > deadline - 10:
            row["notes"]["rounds"] = f"{r} of {args.rounds}: deadline"
            break
        for name, fn in fns.items():
            for count in (1, n):
                sync()
                t0 = time.perf_counter()
                fn(count)
                sync()
                times[name][count].append(time.perf_counter() - t0)
    for name in fns:
        t1, tn = statistics.median(times[name][1]), statistics.median(times[name][n])
        row["results"][name] = {
            "prefill_ms": round(t1 * 1e3, 2), "decode_tok_s": round(b * (n - 1) / max(tn - t1, 1e-9), 1),
            "generate_ms": round(tn * 1e3, 1), "rounds": len(times[name][n]),
            "same_tokens_as_hf_eager": bool(torch.equal(tokens[name], tokens["hf_eager"])) if "hf_eager" in tokens else None}
        flush()


def cuvil_generate(lm, ids, device_greedy: bool):
    """generate(count) of ``lm`` on ``ids``, its greedy tokens passed between the steps on the
    device (``device_greedy``: CausalLM's default where the package's steps return them) or each
    read back, chosen on the host and uploaded."""
    def generate(count):
        lm.device_greedy = device_greedy
        return lm.generate(ids, max_new_tokens=count)
    return generate


def summary(data: dict) -> str:
    lines = [f"generate_h200: {data.get('wall_s')} s"]
    for r in data["checks"]:
        lines.append(f"  check {r.get('arch')} {r.get('precision')} {r.get('target', r.get('file'))}: {r['status']} "
                     f"{_brief(r, ('rel_err', 'hf_fp16_rel_err', 'tokens_equal'))}")
    for r in data["timing"]:
        cells = " ".join(f"{k}: {v['prefill_ms']} ms / {v['decode_tok_s']} tok/s" for k, v in r.get("results", {}).items())
        lines.append(f"  B={r['batch']} C={r['context']}: {r['status']} {cells} (cuvil prefill: {r.get('cuvil_prefill_function')})")
    return "\n".join(lines)


# ---------------------------------------------------------------- report (here)


def report(args) -> None:
    data = json.loads(Path(args.results).read_text() if Path(args.results).is_file() else (Path(args.results) / "generate.json").read_text())
    prefix = Path(args.out or f"benchmarks/results/generate-h200-{args.date}")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    data["report"] = {"date": args.date, "command": "python " + " ".join(sys.argv)}
    prefix.with_suffix(".json").write_text(json.dumps(data, indent=1))
    prefix.with_suffix(".md").write_text(render(data, args.date))
    print(f"wrote {prefix}.md and {prefix}.json")


def render(data: dict, date: str) -> str:
    m = data["manifest"]
    size = m["llama"]
    n = m["new_tokens"]
    lines = [f"# Generation on the GPU: cuvil compile_causal_lm vs transformers generate ({date})", "",
             f"Measured {data['date']} on {data['machine']} (device `{data['device']}`); torch {data['torch']}, "
             f"transformers {data['transformers']}; packages built with `{m['command']}` ({m['created']}), targets "
             f"`{m['targets']}`. Run: `{data['command']}` ({data.get('wall_s')} s). Report: `{data['report']['command']}`.", "",
             "## Numerics (small configs, hashed weights)", "",
             f"Batch {m['check']['batch']}, prompt {m['check']['prompt']} tokens (prefill chunk {m['check']['prefill_len']}), "
             f"{m['check']['new_tokens']} new tokens. rel err: max |logits - HF eager fp32| / max |HF fp32| over the prefill "
             "and every teacher-forced decode step (HF's greedy fp32 tokens fed); HF fp16: the same for HF eager fp16; tokens: "
             "cuvil's free-running greedy tokens vs HF generate at the package's precision.", "",
             "| arch | precision | target | status | prefill function | rel err | HF fp16 rel err | argmax agree | tokens equal (prefix) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in data["checks"]:
        lines.append(f"| {r.get('arch', r.get('file'))} | {r.get('precision', '')} | {r.get('target', '')} | {r['status'][:120]} | "
                     f"{r.get('prefill_function', '-')} | {r.get('rel_err', '')} | {r.get('hf_fp16_rel_err', '')} | {r.get('argmax_agree', '')} | "
                     f"{r.get('tokens_equal', '')} ({r.get('tokens_equal_prefix', '')}) |")
    params = 2 * size["vocab_size"] * size["hidden_size"] + size["num_hidden_layers"] * size["hidden_size"] * (
        2 * size["hidden_size"] + 2 * size["hidden_size"] * size["num_key_value_heads"] // size["num_attention_heads"]
        + 3 * size["intermediate_size"])
    lines += ["", f"## Speed: Llama (hidden {size['hidden_size']}, {size['num_hidden_layers']} layers, "
              f"{size['num_attention_heads']}/{size['num_key_value_heads']} heads, FFN {size['intermediate_size']}, vocab "
              f"{size['vocab_size']}: {params / 1e9:.2f} B parameters), fp16", "",
              f"Context C = the total length: prompt C - {n} random tokens, {n} new tokens (greedy, no early stop); cuvil's "
              "max_seq_len and HF's static cache are C, cuvil prefills the prompt in one call. prefill ms = t(generate 1 new "
              f"token); decode tok/s = batch x {n - 1} / (t(generate {n}) - t(generate 1)); CUDA-synchronized wall time, medians "
              "of interleaved rounds. Entries: cuvil (the package's first target, cuda:h200{hopper-mode=target-description}: "
              "IREE's code built for sm_90 plus the Hopper kernels), cuvil_plain (its second, cuda:h200: the same kernels, "
              "IREE's code built for sm_89 and JIT-compiled by the driver; not IREE's codegen alone), cuvil_host_loop (the first "
              "target's module with each greedy token read back, chosen on the host and uploaded, as before 2026-12-07's "
              "evening; the other cuvil entries pass tokens and positions between the steps on the device, calls queued "
              "ahead), hf_eager (generate, dynamic cache), hf_static_compile (generate with "
              "cache_implementation=\"static\": HF compiles the decode step with torch.compile, reduce-overhead). Weights: "
              "one random 64x64 sign block tiled over each matrix (timing does not depend on values; greedy tokens are then "
              "mostly ties, so token equality there is no check). prefill function: the package's function(s) that "
              "prefilled the prompt (prefill_first: causal attention over the chunk's own keys; prefill: masked "
              "attention over the cache; '-' for a run before this was recorded).", "",
              "| batch | context | entry | prefill function | prefill ms | decode tok/s | cuvil vs entry (decode) | same tokens as eager |",
              "|---|---|---|---|---|---|---|---|"]
    for r in data["timing"]:
        res = r.get("results", {})
        if not res:
            lines.append(f"| {r['batch']} | {r['context']} | - | | {r['status'][:150]} | | | |")
            continue
        ours = res.get("cuvil", {}).get("decode_tok_s")
        for name, v in res.items():
            ratio = f"{ours / v['decode_tok_s']:.2f}x" if ours and v["decode_tok_s"] and name != "cuvil" else ""
            function = r.get(f"{name}_prefill_function", "-") if name.startswith("cuvil") else ""
            lines.append(f"| {r['batch']} | {r['context']} | {name} | {function} | {v['prefill_ms']} | {v['decode_tok_s']} | "
                         f"{ratio} | {v['same_tokens_as_hf_eager']} |")
    lines += ["", "Per case (load and warm-up seconds, prefill logits vs HF fp16 eager, failures):", ""]
    for r in data["timing"]:
        lines.append(f"- B={r['batch']} C={r['context']} ({r['status'][:200]}): {json.dumps(r.get('notes', {}))}")
    lines += ["", "Packages: " + ", ".join(f"{p['file']} ({p['bytes'] / 2**20:.0f} MiB, compile {p['compile_s']} s)"
                                           for p in data["packages"]), ""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="compile and pack the packages (here)")
    b.add_argument("dir")
    b.add_argument("--targets", default=TARGETS)
    b.add_argument("--cases", default=CASES, help="BATCHxCONTEXT, comma-separated")
    b.add_argument("--new-tokens", type=int, default=NEW_TOKENS)
    b.add_argument("--what", default="check,timing")
    b.add_argument("--archs", default=",".join(ARCHS), help="the check packages' architectures")
    b.add_argument("--tiny", action="store_true", help="LLAMA_TINY instead of LLAMA_1B (a CPU dry run)")
    r = sub.add_parser("run", help="checks and timing (there)")
    r.add_argument("dir")
    r.add_argument("--out", required=True)
    r.add_argument("--name", default="generate.json")
    r.add_argument("--device", default="cuda")
    r.add_argument("--deadline", type=float, default=480, help="seconds; no new item starts after")
    r.add_argument("--reserve", type=float, default=300, help="checks stop when less than this is left (for timing)")
    r.add_argument("--case-min-s", type=float, default=45, help="a timing case starts only with this much left")
    r.add_argument("--compile-min-s", type=float, default=150, help="HF static+compile runs only with this much left")
    r.add_argument("--rounds", type=int, default=ROUNDS)
    r.add_argument("--only", default="", help="check,timing")
    r.add_argument("--scratch", default="/tmp/gen-pkgs")
    rep = sub.add_parser("report", help="benchmarks/results/generate-h200-DATE.{md,json} from a run's generate.json")
    rep.add_argument("results", help="generate.json or the folder that holds it")
    rep.add_argument("--date", required=True)
    rep.add_argument("--out", default="", help="PREFIX (default benchmarks/results/generate-h200-DATE)")
    d = sub.add_parser("step", help="load one package on one target, prefill, one decode step, synchronized (there, "
                                     "under compute-sanitizer when a target faulted: names the kernel)")
    d.add_argument("package", help="a check package (.cuvilpkg or .dd.xz)")
    d.add_argument("target")
    d.add_argument("--scratch", default="/tmp/gen-pkgs")
    f = sub.add_parser("profile", help="cuvil profile of the timing packages' decode step (there)")
    f.add_argument("dir")
    f.add_argument("--out", required=True)
    f.add_argument("--cases", default="1x128,8x2048")
    f.add_argument("--targets", default=TARGETS.replace(",", ";"), help="';'-separated, each profiled")
    f.add_argument("--function", default="decode")
    f.add_argument("--position", type=int, default=None, help="default: the function's last")
    f.add_argument("--deadline", type=float, default=240)
    f.add_argument("--scratch", default="/tmp/gen-pkgs")
    for name, steps, about in (("phases", 30, "a decode step's host-side phases in a generate loop (there)"),
                               ("host", 64, "CausalLM.generate's decode step split on the host (there)")):
        sp = sub.add_parser(name, help=about)
        sp.add_argument("dir")
        sp.add_argument("--out", required=True)
        sp.add_argument("--cases", default="1x128,8x128")
        sp.add_argument("--steps", type=int, default=steps)
        sp.add_argument("--scratch", default="/tmp/gen-pkgs")
    sp.add_argument("--with-hf", action="store_true", help="conditions: after transformers' model generated in the process")
    sp.add_argument("--runtime-flag", action="append", default=[], help="an extra IREE runtime flag (repeatable)")
    args = p.parse_args()
    {"host": host_split, "build": build, "run": run, "report": report, "step": step, "profile": profile_steps,
     "phases": step_phases}[args.cmd](args)


if __name__ == "__main__":
    main()

"""Token generation, side by side: cuvil_mlir.compile_causal_lm vs transformers' generate (eager,
and torch.compile with a static cache), same model, same prompts, in one process.

For each (batch, context) case: a prompt of ``context`` random tokens, greedy decoding.
  prefill ms    time of generate(max_new_tokens=1) (the prompt's forward and one token)
  decode tok/s  batch * (N - 1) / (t(generate N) - t(generate 1)): the steady decode rate
Entries are timed in interleaved rounds (median over rounds) so that load on a shared machine
hits them alike. Greedy tokens of every entry are compared with eager's (``same_tokens``).

    python benchmarks/generate.py --model gpt2 --cases 1x128,8x128 --new-tokens 32 \\
        --out benchmarks/results/generate-cpu-2026-12-04
    python benchmarks/generate.py --model llama-1b-2l --dtype fp16 --device cuda --target cuda:h200 ...
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from datetime import datetime, timezone


def build_model(name: str, dtype: str, positions: int):
    import torch
    import transformers

    torch.manual_seed(0)
    if name == "gpt2":  # GPT-2 124M
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_positions=positions))
    elif name == "llama-1b-2l":  # Llama 3.2 1B width, 2 layers
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=2, num_attention_heads=32,
            num_key_value_heads=8, max_position_embeddings=max(positions, 2048), tie_word_embeddings=True))
    else:
        raise SystemExit(f"unknown model '{name}' (gpt2, llama-1b-2l)")
    model.generation_config.eos_token_id = None  # random weights: always N tokens
    model.generation_config.pad_token_id = 0
    return model.eval().to({"fp32": torch.float32, "fp16": torch.float16}[dtype])


def entries(model, batch, context, new_tokens, args):
    """name -> generate(ids, n) for each backend (built and warmed up here)."""
    import torch

    import cuvil_mlir

    out, info = {}, {}
    dev = torch.device(args.device)

    def compile_lm(target, prefill_lens, name):  # the prefill chunk sizes cut to the context, the compile timed
        start = time.perf_counter()
        lm = cuvil_mlir.compile_causal_lm(model.cpu(), max_seq_len=context + new_tokens, batch=batch,
                                          prefill_len=sorted({min(n, context) for n in prefill_lens}), target=target)
        info[f"{name}_compile_s"] = round(time.perf_counter() - start, 1)
        return lm

    if "cuvil" in args.backends:
        lm = compile_lm(args.target, args.prefill_len, "cuvil")
        info["cuvil_vmfb_bytes"] = len(lm.modules[0].vmfb)
        out["cuvil"] = cuvil_generate(lm, lm.device_greedy)
        if lm.device_greedy and "host_loop" in args.backends:  # the same module, each greedy token read back,
            out["cuvil_host_loop"] = cuvil_generate(lm, False)  # chosen on the host and uploaded (A/B)
    if "baseline" in args.backends:  # the same model compiled for --baseline-target (A/B of a target option)
        base = compile_lm(args.baseline_target, args.baseline_prefill_len or args.prefill_len, "cuvil_baseline")
        out["cuvil_baseline"] = cuvil_generate(base, base.device_greedy)
    model = model.to(dev)
    if "eager" in args.backends:
        out["hf_eager"] = lambda ids, n: model.generate(ids.to(dev), attention_mask=torch.ones_like(ids, device=dev),
                                                         max_new_tokens=n, min_new_tokens=n, do_sample=False)
    if "compile" in args.backends:
        compiled = torch.compile(model.forward, fullgraph=True, mode=args.compile_mode)

        def hf_compiled(ids, n):
            original = model.forward
            model.forward = compiled
            try:
                return model.generate(ids.to(dev), attention_mask=torch.ones_like(ids, device=dev), max_new_tokens=n,
                                      min_new_tokens=n, do_sample=False, cache_implementation="static")
            finally:
                model.forward = original

        start = time.perf_counter()
        try:
            hf_compiled(torch.zeros(batch, context, dtype=torch.int64), 3)
            info["torch_compile_first_s"] = round(time.perf_counter() - start, 1)
            out["hf_compile_static"] = hf_compiled
        except Exception as e:  # recorded, not fatal
            info["hf_compile_static"] = f"failed: {type(e).__name__}: {str(e)[:300]}"
    return out, info


def cuvil_generate(lm, device_greedy: bool):
    """generate(ids, n) of ``lm``, its greedy tokens passed between the steps on the device
    (``device_greedy``, CausalLM's default) or through the host."""
    def generate(ids, n):
        lm.device_greedy = device_greedy
        return lm.generate(ids, max_new_tokens=n)
    return generate


def run_case(model, batch, context, args):
    import torch

    n = args.new_tokens
    load_before = os.getloadavg()[0]
    fns, info = entries(model, batch, context, n, args)
    ids = torch.randint(0, model.config.vocab_size, (batch, context), generator=torch.Generator().manual_seed(context))
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    tokens = {name: fn(ids, n).cpu() for name, fn in fns.items()}  # warm-up and the tokens compared
    times = {name: {"1": [], "n": []} for name in fns}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            for key, count in (("1", 1), ("n", n)):
                sync()
                start = time.perf_counter()
                fn(ids, count)
                sync()
                times[name][key].append(time.perf_counter() - start)
    rows = {}
    for name in fns:
        t1, tn = statistics.median(times[name]["1"]), statistics.median(times[name]["n"])
        rows[name] = {"prefill_ms": round(t1 * 1e3, 2), "decode_tok_s": round(batch * (n - 1) / max(tn - t1, 1e-9), 1),
                      "generate_ms": round(tn * 1e3, 1),
                      "same_tokens": bool(torch.equal(tokens[name], tokens["hf_eager"])) if "hf_eager" in tokens else None}
    # the 1-minute load average around the case: the machine may be shared (2 cores here)
    info["load_avg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    return {"batch": batch, "context": context, "new_tokens": n, "results": rows, **info}


def render(report) -> str:
    lines = [f"# Generation: {report['model']} ({report['dtype']}) on {report['device']}", "",
             f"{report['date']}, {report['machine']}, torch {report['torch']}, transformers {report['transformers']}.",
             f"Command: `{report['command']}`", "",
             "Greedy, prompt of `context` random tokens, N new tokens; prefill = generate(1 token); "
             "decode tok/s = batch*(N-1) / (t(N) - t(1)); medians over interleaved rounds.", "",
             "| batch | context | entry | prefill ms | decode tok/s | same tokens as eager |", "|---|---|---|---|---|---|"]
    for case in report["cases"]:
        for name, r in case["results"].items():
            lines.append(f"| {case['batch']} | {case['context']} | {name} | {r['prefill_ms']} | {r['decode_tok_s']} | {r['same_tokens']} |")
    lines.append("")
    for case in report["cases"]:
        extra = {k: v for k, v in case.items() if k not in ("batch", "context", "new_tokens", "results")}
        lines.append(f"- {case['batch']}x{case['context']}: {json.dumps(extra)}")
    return "\n".join(lines) + "\n"


def main() -> None:
    import sys

    import torch
    import transformers

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt2")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "fp16"])
    p.add_argument("--cases", default="1x128,8x128", help="BATCHxCONTEXT, comma-separated")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--prefill-len", type=lambda v: [int(n) for n in v.split(",")], default=[128],
                   help="prefill chunk size(s), comma-separated: each prompt in the largest chunks that fit")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--backends", default="cuvil,host_loop,eager,compile",
                   help="of cuvil, host_loop (the cuvil module with each token through the host), baseline "
                        "(cuvil compiled for --baseline-target and --baseline-prefill-len), eager, compile")
    p.add_argument("--baseline-target", default="cpu{data-tiling=false}", help="the target of the baseline entry")
    p.add_argument("--baseline-prefill-len", type=lambda v: [int(n) for n in v.split(",")], default=None,
                   help="the baseline entry's prefill chunk size(s) (default: --prefill-len's)")
    p.add_argument("--compile-mode", default=None, help="torch.compile mode (default: its default; reduce-overhead on a GPU)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--target", default="cpu")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--out", required=True, help="PREFIX: writes PREFIX.json and PREFIX.md")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cases = [tuple(int(x) for x in c.split("x")) for c in args.cases.split(",")]
    model = build_model(args.model, args.dtype, max(c + args.new_tokens for _, c in cases))
    report = {"model": args.model, "dtype": args.dtype, "device": args.device, "target": args.target,
              "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": f"{platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                         f"{torch.get_num_threads()} torch threads, IREE local-task with its default one worker per core",
              "torch": torch.__version__, "transformers": transformers.__version__,
              "command": "python " + " ".join(sys.argv), "cases": []}
    for batch, context in cases:
        report["cases"].append(run_case(model, batch, context, args))
        with open(args.out + ".json", "w") as f:
            json.dump(report, f, indent=1)
        with open(args.out + ".md", "w") as f:
            f.write(render(report))
        print(render(report))


if __name__ == "__main__":
    main()

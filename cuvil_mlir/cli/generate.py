"""``cuvil generate``: token generation with a causal LM's package (cuvil_mlir.compile_causal_lm)."""

from __future__ import annotations

from cuvil_mlir.cli.common import parameters_argument
from cuvil_mlir.core.diagnostics import InputError


def add_parsers(sub, common) -> None:
    p = sub.add_parser("generate", parents=[common], help="generate tokens with a causal LM's .cuvilpkg",
                       description="Load a package written by compile_causal_lm(...).save(), prefill the prompt "
                                   "(its first chunk with prefill_first where the package has it, later chunks with "
                                   "prefill) and decode new tokens with a progress bar that shows them as they come.")
    p.add_argument("package", metavar="PKG", help="a causal LM's .cuvilpkg")
    p.add_argument("--prompt-ids", required=True, metavar="IDS",
                   help="the prompt's token ids, comma-separated; rows separated by ';' for a batch (e.g. 1,2,3;4,5,6)")
    p.add_argument("--max-new-tokens", type=int, default=20, metavar="N", help="how many tokens to generate (default 20)")
    p.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=0, help="the sampling seed (default 0)")
    p.add_argument("--target", metavar="TARGETS", help="which of the package's targets to run on, in preference order")
    p.add_argument("--no-progress", action="store_true", help="print only the result")
    parameters_argument(p)
    p.set_defaults(command=_generate)


def parse_prompt_ids(text: str) -> list[list[int]]:
    try:
        rows = [[int(t) for t in row.split(",") if t.strip()] for row in text.split(";")]
    except ValueError as e:
        raise InputError(f"--prompt-ids: expected comma-separated integers (rows separated by ';'), got '{text}'") from e
    if not rows or any(not r for r in rows) or len({len(r) for r in rows}) != 1:
        raise InputError(f"--prompt-ids: every row needs the same number (>= 1) of token ids, got '{text}'")
    return rows


def _generate(args, parser) -> int:
    import torch

    from cuvil_mlir import load
    from cuvil_mlir.runtime.generation import CausalLM

    lm = load(args.package, prefer=args.target, parameters=args.parameters)
    if not isinstance(lm, CausalLM):
        raise InputError(f"{args.package} is not a causal LM's package (compile it with cuvil_mlir.compile_causal_lm)")
    ids = torch.tensor(parse_prompt_ids(args.prompt_ids), dtype=torch.int64)
    out = lm.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=args.sample, temperature=args.temperature,
                      top_k=args.top_k, top_p=args.top_p, progress=not args.no_progress,
                      generator=torch.Generator().manual_seed(args.seed))
    calls = " + ".join(f"{function}@{start}" for function, start in lm.prefill_calls(ids.shape[1]))
    print(f"ran on target {lm.active_target}; prefill: {calls}")
    for row in out.tolist():
        print(",".join(map(str, row)))
    return 0

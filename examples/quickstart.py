"""The main job on the CPU default: export a GPT-style transformer block, compile it through
the Cuvil dialect to an IREE module, run it, check it against PyTorch, save a .cuvilpkg.

    python examples/quickstart.py [--out quickstart.cuvilpkg]
"""

import argparse
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cuvil_mlir  # noqa: E402
import models  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="quickstart.cuvilpkg")
    args = parser.parse_args()

    model, inputs = models.transformer_block(batch=2, seq=16, d_model=64)
    cuvil_ir = cuvil_mlir.lower(model, inputs, stage="cuvil")
    print("Cuvil ops after raising:", ", ".join(sorted(set(re.findall(r'"(cuvil\.\w+)"', cuvil_ir)))))

    compiled = cuvil_mlir.compile(model, inputs, target="cpu")
    with torch.no_grad():
        expected = model(*inputs)
    got = compiled(*inputs)
    rel = float((got - expected).abs().max() / expected.abs().max())
    print(f"compiled for {compiled.target}: {compiled}")
    print(f"patterns fired: {compiled.patterns_fired}")
    print(f"max relative error vs PyTorch: {rel:.2e}")

    compiled.save(args.out)
    reloaded = cuvil_mlir.load(args.out)
    assert torch.equal(reloaded(*inputs), got)
    print(f"saved {args.out}; run it with: cuvil run {args.out} --input x.npy")
    if rel > 1e-4:
        print("FAILED: numerics do not match PyTorch", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

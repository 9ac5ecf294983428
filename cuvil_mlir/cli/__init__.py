"""The command line: ``cuvil`` (compile, run, inspect, passes, targets, compare, bench,
check-patterns, accuracy) and ``cuvil-opt`` (passes on IR files: cuvil_mlir/cli/opt.py).

    cuvil compile model.pt2|model.onnx -o model.cuvilpkg [--target cpu] [-O3] [--emit cuvil] [--patterns my.py]
    cuvil run model.cuvilpkg --input x.npy [--output y.npy]
    cuvil inspect model.cuvilpkg [--json]
    cuvil passes
    cuvil compare model.pt2 --targets cpu,vulkan,cuda [--configs default,plain-iree] [--json r.json] [--plot r.png]
    cuvil bench model.cuvilpkg [--target vulkan] [--repetitions 200]
    cuvil check-patterns [FILE.py ...] [--pass NAME] [--pattern NAME] [--seeds N] [--json OUT]
    cuvil accuracy model.pt2 --precision fp16 [--budget 1e-3] [--json r.json]
    cuvil-opt file.mlir -p raise-torch-to-cuvil,lower-cuvil-to-torch [--split-input-file] [-o out.mlir]

Every error a user can cause prints one line ``cuvil: error: ...`` (plus ``reproduce with:``
when a repro exists) and exits 1; usage errors exit 2; anything else is an internal error,
printed as one line too unless ``--verbose`` asks for the traceback (cli/common.py). Heavy
modules (torch, IREE) are imported inside the commands that need them, so ``inspect`` and
``passes`` start fast.

A command group is a module of this folder with ``add_parsers(sub, common)`` (or
``add_parser(sub, common)`` for one command) that adds its subcommands to ``sub``, each with
``parents=[common]`` and ``set_defaults(command=fn)``, ``fn(args, parser) -> exit code``.
A new group is a module with ``add_parsers(sub, common)``: one more entry in COMMAND_GROUPS (and its import).
"""

from __future__ import annotations

import argparse

from cuvil_mlir.cli import build
from cuvil_mlir.cli import cache
from cuvil_mlir.cli import evaluate
from cuvil_mlir.cli import generate
from cuvil_mlir.cli import info
from cuvil_mlir.cli import profile
from cuvil_mlir.cli.common import guarded, parse_args
from cuvil_mlir.core.versions import __version__

# The modules whose commands `cuvil` has, in the order `cuvil --help` lists them.
COMMAND_GROUPS = (
    build,  # compile, run, inspect
    info,  # passes, targets
    evaluate,  # compare, bench, check-patterns, accuracy
    generate,  # generate
    profile,  # profile
    cache,  # cache [info|clear|prune]
)


def main(argv: list[str] | None = None) -> int:
    """``cuvil``: compile, run, inspect packages, list passes and targets, compare and measure."""
    parser = make_parser()
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    return guarded("cuvil", args, lambda: args.command(args, parser))


def make_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks and warnings")

    parser = argparse.ArgumentParser(prog="cuvil", description="Compile exported PyTorch models to IREE modules "
                                     "through the Cuvil dialect, and run them.")
    parser.add_argument("--version", action="version", version=f"cuvil-mlir {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", default=False, help="show tracebacks and warnings")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for group in COMMAND_GROUPS:
        group.add_parsers(sub, common)
    return parser

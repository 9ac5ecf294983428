"""The command line: ``cuvil`` (compile, run, inspect, passes, compare, bench) and ``cuvil-opt``
(passes on IR files).

    cuvil compile model.pt2 -o model.cuvilpkg [--target cpu] [-O3] [--emit cuvil] [--patterns my.py]
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
printed as one line too unless ``--verbose`` asks for the traceback. Heavy modules (torch,
IREE) are imported inside the commands that need them, so ``inspect`` and ``passes`` start fast.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import traceback
import warnings
from pathlib import Path

from cuvil_mlir import __version__
from cuvil_mlir.diagnostics import CuvilError, ImportError_, InputError, location_text

SPLIT_MARKER = "// -----"
_BYTECODE_MAGIC = b"ML\xefR"


# ---------------------------------------------------------------------------------------
# Entry points.


def main(argv: list[str] | None = None) -> int:
    """``cuvil``: compile, run, inspect packages, list passes."""
    parser = _cuvil_parser()
    args = _parse_args(parser, argv)
    if isinstance(args, int):
        return args
    return _guarded("cuvil", args, lambda: args.command(args, parser))


def opt_main(argv: list[str] | None = None) -> int:
    """``cuvil-opt``: parse an MLIR file, run named passes, print the result (like mlir-opt)."""
    parser = _opt_parser()
    args = _parse_args(parser, argv)
    if isinstance(args, int):
        return args
    return _guarded("cuvil-opt", args, lambda: _opt(args))


def _parse_args(parser: argparse.ArgumentParser, argv):
    """The parsed namespace, or the exit code argparse chose (2 for usage errors, 0 for --help)."""
    try:
        return parser.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2


def _guarded(prog: str, args, run) -> int:
    """Run a command; turn every exception into one readable line and an exit code."""
    verbose = getattr(args, "verbose", False)
    if not verbose:  # torch's own deprecation noise is not the user's business
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.showwarning = lambda message, category, *rest: print(
        f"{prog}: warning: {_one_line(str(message))}", file=sys.stderr)  # e.g. a target falling back to the next
    try:
        return run()
    except SystemExit as e:  # parser.error() inside a command
        return e.code if isinstance(e.code, int) else 2
    except CuvilError as e:
        if verbose:
            traceback.print_exc()
        _report(prog, e)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `cuvil-opt big.mlir | head`
        return 1
    except OSError as e:  # a path the user gave cannot be read or written (permissions, disk full)
        if verbose:
            traceback.print_exc()
        print(f"{prog}: error: {_one_line(str(e))}", file=sys.stderr)
        return 1
    except Exception as e:
        if verbose:
            traceback.print_exc()
        hint = "" if verbose else "; rerun with --verbose for the traceback"
        print(f"{prog}: internal error: {type(e).__name__}: {_one_line(str(e))}{hint}", file=sys.stderr)
        return 1


def _report(prog: str, e: CuvilError) -> None:
    for line in _error_lines(e):
        print(f"{prog}: {line}", file=sys.stderr)
    if e.repro:
        print(f"  reproduce with: {e.repro}", file=sys.stderr)


def _error_lines(e: CuvilError) -> list[str]:
    """``error: ...`` lines: one per MLIR diagnostic for a parse failure, else exactly one."""
    if isinstance(e, _ParseFailure):
        return e.lines
    return [f"error: {_one_line(e.message)}"]


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in str(text).splitlines() if line.strip())


# ---------------------------------------------------------------------------------------
# cuvil: the argument parser.


def _cuvil_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks and warnings")

    parser = argparse.ArgumentParser(prog="cuvil", description="Compile exported PyTorch models to IREE modules "
                                     "through the Cuvil dialect, and run them.")
    parser.add_argument("--version", action="version", version=f"cuvil-mlir {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", default=False, help="show tracebacks and warnings")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    p = sub.add_parser("compile", parents=[common], help="compile a .pt2 model into a .cuvilpkg",
                       description="Compile a model saved with torch.export.save into a .cuvilpkg, "
                       "or print the IR of one stage with --emit.")
    p.add_argument("model", metavar="MODEL.pt2", help="a .pt2 file written by torch.export.save")
    p.add_argument("-o", "--output", metavar="OUT", help="the .cuvilpkg to write (with --emit: the IR file; default stdout)")
    p.add_argument("--target", default="cpu",
                   help="target(s), comma-separated in preference order: cpu, cpu:znver4, vmvx, cpu,vmvx (default: cpu)")
    p.add_argument("-O", dest="opt_level", type=int, choices=(0, 1, 2, 3), default=3, metavar="N",
                   help="optimization level -O0..-O3 (default: -O3)")
    p.add_argument("--precision", default="fp32", metavar="POLICY",
                   help="fp32 (default), fp16, bf16, int8-weight, int4-weight[{group=N}], int8, or a 16-bit policy + a "
                   "quantized one (fp16+int8-weight); see docs/precision.md")
    _calibration_arguments(p)
    p.add_argument("--emit", metavar="STAGE", help="print the IR after STAGE (torch, cuvil, fused, precision, lowered) instead of compiling")
    p.add_argument("--elide-weights", action=argparse.BooleanOptionalAction, default=None,
                   help="with --emit: hide large constants (default: on for stdout, off for -o)")
    p.add_argument("--patterns", action="append", default=[], metavar="FILE.py",
                   help="a Python file of PatternSets to run after raising (repeatable)")
    p.add_argument("--disable-pass", action="append", default=[], metavar="PASS",
                   help="skip a built-in pass (repeatable; for A/B comparisons)")
    p.add_argument("--dynamic", action="append", default=[], metavar="SPEC",
                   help="make input dims dynamic: [NAME=]I:D[,I:D...][@MIN..MAX], e.g. batch=0:0@1..64 (repeatable; cuvil_mlir/dynamic.py)")
    p.set_defaults(command=_compile)

    p = sub.add_parser("run", parents=[common], help="run a .cuvilpkg on .npy inputs",
                       description="Load a .cuvilpkg, call it with .npy inputs and write or print the outputs.")
    p.add_argument("package", metavar="PKG", help="a .cuvilpkg file")
    p.add_argument("--input", "-i", action="append", default=[], metavar="X.npy", help="an input array, in order (repeatable)")
    p.add_argument("--target", metavar="TARGETS", help="which of the package's targets to run on, in preference order "
                   "(specs or kinds, comma-separated; default: the package's order)")
    p.add_argument("--output", "-o", action="append", default=[], metavar="Y.npy",
                   help="where to write an output, in order (one per output; default: print a summary)")
    p.set_defaults(command=_run)

    p = sub.add_parser("inspect", parents=[common], help="show what a .cuvilpkg holds",
                       description="Print a .cuvilpkg's metadata: format, targets, signature, versions, patterns.")
    p.add_argument("package", metavar="PKG", help="a .cuvilpkg file")
    p.add_argument("--json", action="store_true", help="print metadata.json as it is stored")
    p.set_defaults(command=_inspect)

    p = sub.add_parser("passes", parents=[common], help="list the registered passes and their patterns",
                       description="List every registered pass with its description and patterns (before -> after).")
    p.add_argument("--patterns", action="append", default=[], metavar="FILE.py", help="also list the passes a pattern file defines")
    p.set_defaults(command=_passes)

    p = sub.add_parser("targets", parents=[common], help="list every target and the devices this machine has",
                       description="List every target kind: the names a --target takes, its options, the runtime "
                       "driver, what running it needs, and whether this machine has a device for it.")
    p.add_argument("--json", action="store_true", help="print the same as JSON")
    p.set_defaults(command=_targets)

    p = sub.add_parser("compare", parents=[common], help="compare targets, pattern configurations and PyTorch on one model",
                       description="Compile a .pt2 model for every target and configuration, run each where this machine "
                       "has a device, and show compile time, latency and errors against a reference side by side "
                       "(docs/harness.md). Exits 1 when a Cuvil entry fails or does not match the reference.")
    p.add_argument("model", metavar="MODEL", nargs="?",
                   help="a .pt2 file written by torch.export.save, or FILE.py:FACTORY / package.module:FACTORY "
                   "(a function returning (model, inputs)); not with --from")
    p.add_argument("--targets", default="cpu", help="targets, comma-separated (default: cpu); those without a device are skipped")
    p.add_argument("--build-only", metavar="DIR", help="only compile: write one .cuvilpkg per entry, the inputs, the reference "
                   "outputs and a manifest into DIR, to run elsewhere with --from DIR (no device needed here)")
    p.add_argument("--from", dest="from_dir", metavar="DIR", help="run a comparison built with --build-only DIR: load its "
                   "packages on this machine's devices, rebuild the model for the competitors; needs no compiler")
    p.add_argument("--input", "-i", action="append", default=None, metavar="X.npy",
                   help="an input array, in order (repeatable; default: random inputs from the model's signature)")
    p.add_argument("--reference", default="torch", metavar="REF",
                   help="what errors are measured against: torch (eager), torch-fp64, or a target spec (default: torch)")
    p.add_argument("--configs", default="default", metavar="CONFIGS",
                   help="pattern configurations, comma-separated: default, plain-iree (no Cuvil), without:PASS, "
                   "without:PATTERN, without:PASS/PATTERN (default: default)")
    p.add_argument("--competitors", default=None, metavar="NAMES",
                   help="PyTorch on the same device: eager, torch.compile, torch.compile:reduce-overhead, "
                   "torch.compile:max-autotune, all, or none (default: eager; with --from: the build's)")
    p.add_argument("--patterns", action="append", default=[], metavar="FILE.py",
                   help="a Python file of PatternSets to run after raising, in every Cuvil configuration (repeatable)")
    p.add_argument("-O", dest="opt_level", type=int, choices=(0, 1, 2, 3), default=3, metavar="N", help="optimization level (default: -O3)")
    p.add_argument("--tolerance", action="append", default=[], metavar="DTYPE=RTOL",
                   help="the max relative error that passes for a dtype, e.g. float32=1e-5 (repeatable)")
    p.add_argument("--json", metavar="OUT.json", help="write the report as JSON (schema: docs/harness.md)")
    p.add_argument("--plot", metavar="OUT.png", help="write a chart: latency per entry and error per entry")
    _timing_arguments(p, repetitions=50, min_time=0.5, max_time=10.0)
    p.set_defaults(command=_compare)

    p = sub.add_parser("bench", parents=[common], help="time a .cuvilpkg on this machine",
                       description="Load a .cuvilpkg on the first of its targets that runs here and time its calls.")
    p.add_argument("package", metavar="PKG", help="a .cuvilpkg file")
    p.add_argument("--target", "--device", dest="target", metavar="TARGETS",
                   help="which of the package's targets to run on, in preference order (specs or kinds, comma-separated)")
    p.add_argument("--input", "-i", action="append", default=None, metavar="X.npy",
                   help="an input array, in order (repeatable; default: random inputs from the package's signature)")
    p.add_argument("--json", metavar="OUT.json", help="write the result as JSON (schema: docs/harness.md)")
    _timing_arguments(p, repetitions=100, min_time=1.0, max_time=30.0)
    p.set_defaults(command=_bench)

    p = sub.add_parser("check-patterns", parents=[common], help="check rewrite patterns numerically on IREE CPU",
                       description="The differential checker (docs/testing.md): run each pattern's registered examples "
                       "before and after the pattern on IREE CPU and compare; a near miss must leave the IR untouched. "
                       "Checks every built-in pattern, or the patterns of the given files. Exits 1 on any failure.")
    p.add_argument("files", nargs="*", metavar="FILE.py", help="pattern files to check (default: every built-in pass)")
    p.add_argument("--pass", dest="pass_names", action="append", default=[], metavar="NAME",
                   help="only this pass (repeatable)")
    p.add_argument("--pattern", dest="pattern_names", action="append", default=[], metavar="NAME",
                   help="only this pattern, NAME or PASS/NAME (repeatable)")
    p.add_argument("--seeds", type=_positive(int), default=2, metavar="N", help="seeds 0..N-1 per example (default: 2)")
    p.add_argument("--target", default="cpu", help="where both versions run (default: cpu)")
    p.add_argument("--repro-dir", metavar="DIR", help="where failures write their repro folders (default: the temp dir)")
    p.add_argument("--json", metavar="OUT.json", help="write every check as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no line per check while running")
    p.set_defaults(command=_check_patterns)

    p = sub.add_parser("accuracy", parents=[common], help="what a precision policy costs, per op and end to end",
                       description="Compile a model under a precision policy and measure it against fp32 PyTorch: "
                       "end-to-end max abs/rel error, cosine similarity, top-1 agreement, and the error each demoted "
                       "or quantized op adds alone (docs/precision.md). With --budget, search which ops must stay in "
                       "higher precision and print the policy that meets it.")
    p.add_argument("model", metavar="MODEL", help="a .pt2 file written by torch.export.save, or FILE.py:FACTORY / "
                   "package.module:FACTORY (a function returning (model, inputs))")
    p.add_argument("--precision", default="fp16", metavar="POLICY", help="fp16 (default), bf16, int8-weight, int4-weight, int8, fp16+int8-weight, ...")
    p.add_argument("--input", "-i", action="append", default=None, metavar="X.npy",
                   help="an input array, in order (repeatable; default: the program's or factory's example inputs)")
    p.add_argument("--budget", type=float, metavar="REL_ERR", help="search for the ops to keep so that the max relative "
                   "error stays within REL_ERR")
    _calibration_arguments(p)
    p.add_argument("--no-per-op", dest="per_op", action="store_false", default=None,
                   help="end-to-end metrics only (one compile)")
    p.add_argument("--target", default="cpu", help="where to compile and run (default: cpu)")
    p.add_argument("-O", dest="opt_level", type=int, choices=(0, 1, 2, 3), default=3, metavar="N", help="optimization level (default: -O3)")
    p.add_argument("--json", metavar="OUT.json", help="write the report (and the search) as JSON")
    p.set_defaults(command=_accuracy)
    return parser


def _accuracy(args, parser) -> int:
    """``cuvil accuracy``: cuvil_mlir.accuracy.report / search on a .pt2 file or a model factory."""
    from cuvil_mlir import accuracy

    spec = args.model if not args.model.endswith(".pt2") and ":" in args.model else None
    if not spec and not Path(args.model).exists():  # before importing torch: a typo should not take seconds
        raise ImportError_(f"model file not found: {args.model}")
    if args.json:
        _check_writable(Path(args.json))
    _quiet_torch_logs(args)
    import torch

    from cuvil_mlir.harness import load_model_spec
    from cuvil_mlir.importers.fx import load_exported_program

    model, inputs = load_model_spec(spec) if spec else (load_exported_program(args.model), None)
    if args.input:
        inputs = [torch.from_numpy(_read_npy(p)) for p in args.input]
    elif inputs is None and isinstance(model, torch.export.ExportedProgram):
        inputs = model.example_inputs[0] if model.example_inputs else None
    if inputs is None:
        raise InputError(f"{args.model} carries no example inputs: pass them with --input X.npy")
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    calibration = _calibration(args, model, inputs) if _needs_calibration(args) else None
    result = {}
    if args.budget is not None:
        found = accuracy.search(model, inputs, precision=args.precision, budget=args.budget, target=args.target,
                                opt_level=args.opt_level, calibration=calibration)
        print(found.report.describe())
        verdict = "meets" if found.met else "does NOT meet"
        print(f"search: {found.policy} {verdict} the budget {found.budget:g} (max rel err {found.max_rel_err:.3g}; "
              f"{found.compiles} compiles)")
        result = {"search": found.to_json()}
    else:
        rep = accuracy.report(model, inputs, precision=args.precision, per_op=args.per_op, target=args.target,
                              opt_level=args.opt_level, calibration=calibration)
        print(rep.describe())
        result = {"report": rep.to_json()}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
        print(f"wrote {args.json}")
    return 0 if args.budget is None or result["search"]["met"] else 1


def _timing_arguments(p, *, repetitions: int, min_time: float, max_time: float) -> None:
    p.add_argument("--repetitions", "-n", type=_non_negative(int), default=repetitions, metavar="N",
                   help=f"timed calls, at least (default: {repetitions}; 0: no timing)")
    p.add_argument("--warmup", type=_non_negative(int), default=5, metavar="N", help="untimed calls first (default: 5)")
    p.add_argument("--min-time", type=_non_negative(float), default=min_time, metavar="S",
                   help=f"timed seconds, at least (default: {min_time:g})")
    p.add_argument("--max-time", type=_positive(float), default=max_time, metavar="S",
                   help=f"timed seconds, at most, whatever the repetitions (default: {max_time:g})")
    p.add_argument("--input-sets", type=_positive(int), default=3, metavar="N",
                   help="different input sets rotated through the calls (default: 3)")
    p.add_argument("--seed", type=int, default=0, help="seed of generated inputs (default: 0)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")


def _non_negative(kind):
    def parse(text: str):
        value = kind(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


# ---------------------------------------------------------------------------------------
# cuvil compile


def _compile(args, parser) -> int:
    from cuvil_mlir.pipeline import Options, compile_program

    if args.emit is None and not args.output:
        parser.error("compile needs -o OUT.cuvilpkg (or --emit STAGE to print IR)")
    pattern_files, patterns = _load_patterns(args.patterns)
    options = Options(target=args.target, opt_level=args.opt_level, patterns=tuple(patterns),
                      disabled_passes=tuple(args.disable_pass), precision=args.precision)
    if not Path(args.model).exists():  # before importing torch: a typo should not take seconds
        raise ImportError_(f"model file not found: {args.model}")
    if args.output:
        _check_writable(Path(args.output))
    _quiet_torch_logs(args)
    try:
        model = args.model
        if args.dynamic:  # the program exported again with these dims dynamic
            from cuvil_mlir.dynamic import with_dynamic_dims
            from cuvil_mlir.importers.fx import load_exported_program

            model = with_dynamic_dims(load_exported_program(args.model), args.dynamic)
        if _needs_calibration(args):  # the program is loaded once, for the calibration and the compile
            from cuvil_mlir.importers.fx import load_exported_program

            model = model if not isinstance(model, str) else load_exported_program(args.model)
            options.calibration = _calibration(args, model, model.example_inputs[0] if model.example_inputs else None,
                                               patterns=tuple(patterns), disabled_passes=tuple(args.disable_pass))
        if args.emit is not None:
            elide = args.elide_weights if args.elide_weights is not None else not args.output
            emitted = compile_program(model, (), options, emit=args.emit, elide_weights=elide)
            _write_text(emitted.text, args.output)
            return 0
        compiled = compile_program(model, (), options)
    except CuvilError as e:
        if "warnings above" in e.message and not getattr(args, "verbose", False):
            e.message += " (rerun with --verbose to see them)"
        raise _with_pattern_files(e, pattern_files) from e
    compiled.save(args.output)
    _print_compile_summary(args.model, args.output, compiled.metadata)
    return 0


def _print_compile_summary(model: str, output: str, meta: dict) -> None:
    from cuvil_mlir.signature import Signature

    seconds = meta.get("compile_seconds", {})
    stages = ", ".join(f"{k} {v:.2f}" for k, v in seconds.items())
    print(f"compiled {model} -> {output} ({_size(Path(output).stat().st_size)})")
    targets = meta.get("targets", [meta["target"]])
    first = f" (for {meta['target']})" if len(targets) > 1 else ""
    print(f"  targets:    {', '.join(targets)} (O{meta['opt_level']})")
    print(f"  signature:  {_describe_signature(Signature.from_json(meta['signature']))}")
    print(f"  patterns:   {_describe_fired(meta.get('patterns_fired', {}))}{first}")
    print(f"  seconds:    {sum(seconds.values()):.2f} ({stages})")


def _quiet_torch_logs(args) -> None:
    """torch.export.load logs a whole traceback as a warning before it raises; the error
    we print already says what failed, so that log only shows with --verbose."""
    import logging

    import torch  # noqa: F401  (torch configures its loggers on import: set levels after it)

    if not getattr(args, "verbose", False):
        logging.getLogger("torch.export").setLevel(logging.ERROR)


def _check_writable(path: Path) -> None:
    if path.is_dir():
        raise CuvilError(f"output path {path} is a directory")
    if not path.parent.is_dir():
        raise CuvilError(f"output directory {path.parent} does not exist")


def _write_text(text: str, output: str | None) -> None:
    if output:
        Path(output).write_text(text)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _load_patterns(files: list[str]):
    """(the files, the PatternSets they define), each file's sets in definition order."""
    from cuvil_mlir.passes import load_pattern_file

    sets = []
    for f in files:
        sets += load_pattern_file(f)
    return [str(Path(f).resolve()) for f in files], sets


def _with_pattern_files(e: CuvilError, pattern_files: list[str]) -> CuvilError:
    """A repro through ``cuvil-opt`` needs the user's pattern files to know their passes."""
    if not (e.repro and e.repro.startswith("cuvil-opt") and pattern_files):
        return e
    e.repro += "".join(f" --load-patterns {shlex.quote(f)}" for f in pattern_files)
    return e


# ---------------------------------------------------------------------------------------
# cuvil run


def _run(args, parser) -> int:
    import numpy as np

    from cuvil_mlir import load
    from cuvil_mlir.diagnostics import PackageError

    try:
        compiled = load(args.package, prefer=args.target)
    except (KeyError, TypeError, ValueError) as e:  # metadata.json parses but its signature does not
        raise PackageError(f"{args.package} is corrupt: malformed signature in metadata.json ({type(e).__name__}: {e})") from e
    n_out = len(compiled.boundary.outputs)  # the model's output leaves (not state updates or write-backs)
    if args.output and len(args.output) != n_out:
        raise InputError(f"the model has {n_out} output(s) but {len(args.output)} --output path(s) were given")
    arrays = [_read_npy(p) for p in args.input]
    from cuvil_mlir.boundary import output_leaves

    outputs = output_leaves(compiled(*arrays))  # a dict, nested or namedtuple result: its leaves in order
    print(f"ran on target {compiled.active_target}")
    if args.output:
        for i, (path, out) in enumerate(zip(args.output, outputs)):
            np.save(path, out)
            print(f"wrote output {i}: {_describe_array(out)} -> {path}")
        return 0
    for i, out in enumerate(outputs):
        print(f"output {i}: {_describe_array(out)} {_preview(out)}")
    return 0


def _calibration_arguments(p) -> None:
    p.add_argument("--calibration", action="append", default=[], metavar="FILE",
                   help="with --precision int8: a calibration saved as .json (Calibration.save), or sample inputs "
                   "to calibrate on: one .npz (the model's inputs in order) or .npy (one-input models) per sample, "
                   "repeatable (default: the model's example inputs)")
    p.add_argument("--calibration-method", choices=("minmax", "percentile"), default="minmax",
                   help="how sample inputs become ranges (default: minmax)")


def _needs_calibration(args) -> bool:
    """Whether the policy is static int8; --calibration with any other policy is a mistake."""
    from cuvil_mlir.precision import parse_policy

    if parse_policy(args.precision).uses("int8"):
        return True
    if args.calibration:
        raise CuvilError(f"--calibration applies to --precision int8 only, got --precision {args.precision}")
    return False


def _calibration(args, model, example_inputs, **pipeline):
    """The Calibration --calibration names: a saved .json, or ranges measured on sample files
    (.npz: the inputs in order; .npy: one input), or on the example inputs when none is given."""
    import numpy as np
    import torch

    from cuvil_mlir.calibration import Calibration, calibrate

    files = args.calibration
    for f in files:
        if not Path(f).is_file():
            raise InputError(f"calibration file not found: {f}")
    if any(f.endswith(".json") for f in files):
        if len(files) != 1:
            raise CuvilError("--calibration: give one saved calibration (.json) or sample inputs (.npz/.npy), not both")
        return Calibration.load(files[0])
    samples = []
    for f in files:
        if f.endswith(".npz"):
            with np.load(f, allow_pickle=False) as z:
                samples.append(tuple(torch.from_numpy(z[k]) for k in z.files))
        else:
            samples.append((torch.from_numpy(_read_npy(f)),))
    if not samples:
        if example_inputs is None:
            raise InputError(f"precision int8 needs sample inputs to calibrate on: {args.model} carries no example "
                             "inputs; pass --calibration SAMPLE.npz (repeatable) or a saved calibration .json")
        print("calibrating int8 on the example inputs (one sample; pass --calibration SAMPLE.npz for more)", file=sys.stderr)
        samples = [tuple(example_inputs)]
    return calibrate(model, samples, method=args.calibration_method, target=args.target, **pipeline)


def _read_npy(path: str):
    import numpy as np

    p = Path(path)
    if not p.is_file():
        raise InputError(f"input file not found: {p}")
    with open(p, "rb") as f:
        magic = f.read(6)
    if magic != b"\x93NUMPY" and magic[:2] != b"PK":
        raise InputError(f"{p} is not a .npy array file (no NumPy header); write inputs with numpy.save")
    try:
        array = np.load(p, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise InputError(f"{p} is not a .npy array file: {_one_line(str(e))}") from e
    if not isinstance(array, np.ndarray):  # an .npz archive
        raise InputError(f"{p} is an .npz archive; pass each array as its own .npy file")
    return array


def _describe_array(a) -> str:
    return f"{a.dtype}[{', '.join(str(d) for d in a.shape)}]"


def _preview(a, count: int = 6) -> str:
    import numpy as np

    flat = np.asarray(a).ravel()
    values = np.array2string(flat[:count], precision=5, separator=", ", max_line_width=10_000)
    return values[:-1] + ", ...]" if flat.size > count else values


# ---------------------------------------------------------------------------------------
# cuvil inspect


def _inspect(args, parser) -> int:
    from cuvil_mlir import package

    meta, modules = package.read(args.package)
    if args.json:
        print(json.dumps(meta, indent=2, sort_keys=True))
        return 0
    print(f"package:     {args.package} ({_size(Path(args.package).stat().st_size)})")
    print(f"format:      {meta['format']} version {meta['format_version']}")
    if "created" in meta:
        print(f"created:     {meta['created']}")
    print(f"function:    {meta.get('function', 'main')}")
    print(f"signature:   {_signature_text(meta, args.package)}")
    if "opt_level" in meta:
        print(f"opt level:   O{meta['opt_level']}")
    print("modules:")
    for entry, m in zip(meta["modules"], modules):
        print(f"  {m.target}: {entry['file']}, {_size(len(m.vmfb))}, driver {m.driver}, sha256 {entry['sha256'][:16]}")
        print(f"    iree flags: {' '.join(m.iree_flags) or '(none)'}")
    first = f" (for {modules[0].target})" if len(modules) > 1 else ""
    print(f"patterns:    {_describe_fired(meta.get('patterns_fired', {}))}{first}")
    for line in _describe_sites(meta.get("pattern_sites", {})):
        print(f"  {line}")
    seconds = meta.get("compile_seconds", {})
    if seconds:
        print(f"seconds:     {sum(seconds.values()):.2f} ({', '.join(f'{k} {v:.2f}' for k, v in seconds.items())})")
    versions = meta.get("versions", {})
    if versions:
        print(f"versions:    {', '.join(f'{k} {v}' for k, v in sorted(versions.items()))}")
    return 0


def _signature_text(meta: dict, path: str) -> str:
    from cuvil_mlir.diagnostics import PackageError
    from cuvil_mlir.signature import Signature

    try:
        return _describe_signature(Signature.from_json(meta["signature"]))
    except (KeyError, TypeError, ValueError) as e:
        raise PackageError(f"{path} is corrupt: malformed signature in metadata.json ({type(e).__name__}: {e})") from e


# ---------------------------------------------------------------------------------------
# cuvil passes


def _passes(args, parser) -> int:
    from cuvil_mlir.patterns import PatternSet

    registry = _registry(args.patterns)
    for name in registry.names():
        entry, p = registry.entry(name), registry.get(name)  # p: configured with default options
        print(f"{name}: {entry.description or p.description or '(no description)'}")
        for option, allowed in getattr(entry, "options", {}).items():
            print(f"  option {option}: {' | '.join(allowed)} (default {allowed[0]}; e.g. -p '{name}{{{option}={allowed[-1]}}}')")
        if not isinstance(p, PatternSet):
            continue
        width = max((len(pat.name) for pat in p.patterns), default=0)
        for pat in p.patterns:
            print(f"  {pat.name:<{width}}  on {pat.root}: {pat.rewrite_doc or '(no docstring)'}")
    return 0


def _targets(args, parser) -> int:
    from cuvil_mlir import hostcpu
    from cuvil_mlir.runtime import probe_drivers
    from cuvil_mlir.targets import describe_targets

    drivers = probe_drivers()
    kinds = describe_targets()
    for k in kinds:
        status = drivers.get(k["driver"])
        if status is None:
            k["device"] = {"available": False, "why": f"this IREE runtime has no '{k['driver']}' driver"}
        else:
            k["device"] = {"available": bool(status.devices), "devices": [d.name or d.path for d in status.devices],
                           "why": status.reason}
    host = {"arch": hostcpu.host_arch(), "cpu": _host_cpu_name()}
    if args.json:
        print(json.dumps({"host": host, "targets": kinds}, indent=2))
        return 0
    print(f"host: {host['arch']}, LLVM CPU '{host['cpu'] or 'unknown'}' (what target 'cpu' compiles for)")
    for k in kinds:
        dev = k["device"]
        here = (f"yes: {', '.join(dev['devices'])}" if dev["available"] else f"no ({_short_reason(dev['why'])})")
        others = [f"{k['kind']}:{n}" for n in k["archs"] if n != k["default"]]
        print(f"\n{k['kind']}  (driver {k['driver']}; device here: {here})")
        print(f"  needs:   {k['needs']}")
        print(f"  names:   {k['kind']} (= {k['kind']}:{k['default']})" + "".join(f", {n}" for n in others))
        if k["aliases"]:
            print("  aliases: " + ", ".join(f"{k['kind']}:{a} ({arch})" for a, arch in k["aliases"].items()))
        for option, allowed in k["options"].items():
            print(f"  option:  {option}={' | '.join(map(str, allowed))} (default {allowed[0]}; e.g. {k['kind']}{{{option}={allowed[-1]}}})")
    return 0


def _short_reason(why: str | None) -> str:
    """IREE's driver errors carry source paths and status codes; keep the sentence."""
    text = (why or "unknown").split("UNAVAILABLE; ")[-1]
    return text.split("; please")[0].split(": please")[0].strip()


def _host_cpu_name() -> str | None:
    """The LLVM CPU name IREE resolves 'host' to (None without the IREE compiler)."""
    try:
        from cuvil_mlir.targets import iree, parse_target

        return iree.llvm_cpu_requirements(tuple(parse_target("cpu").iree_flags())).get("cpu")
    except Exception:
        return None


def _registry(pattern_files: list[str]):
    """The built-in passes plus every PatternSet the files define (under its own name)."""
    from cuvil_mlir.lowering import builtin_registry

    registry = builtin_registry()
    for p in _load_patterns(pattern_files)[1]:
        registry.register(p)
    return registry


# ---------------------------------------------------------------------------------------
# cuvil compare / cuvil bench


def _compare(args, parser) -> int:
    from cuvil_mlir.harness import build_only, compare, load_model_spec, run_from

    if args.from_dir and (args.build_only or (args.model and (args.model.endswith(".pt2") or ":" not in args.model))):
        raise CuvilError("compare --from DIR takes no --build-only and no .pt2 MODEL (the packages and targets are in DIR's "
                         "manifest); a MODEL FILE.py:FACTORY there replaces the manifest's, for the competitors")
    if not args.from_dir and not args.model:
        raise CuvilError("compare: give a MODEL (.pt2 or FILE.py:FACTORY), or --from DIR")
    spec = args.model if args.model and not args.model.endswith(".pt2") and ":" in args.model else None
    if args.model and not spec and not Path(args.model).exists():  # before importing torch: a typo should not take seconds
        raise ImportError_(f"model file not found: {args.model}")
    for out in (args.json, args.plot):
        if out:
            _check_writable(Path(out))
    tolerances = _parse_tolerances(args.tolerance)
    competitors = () if args.competitors == "none" else args.competitors
    if competitors is None and not args.from_dir:
        competitors = "eager"
    _quiet_torch_logs(args)
    timing = dict(repetitions=args.repetitions, warmup=args.warmup, min_time=args.min_time, max_time=args.max_time)
    if args.from_dir:
        report = run_from(args.from_dir, competitors=competitors, model_spec=spec, progress=not args.quiet, **timing)
    else:
        _, patterns = _load_patterns(args.patterns)
        inputs = [_read_npy(p) for p in args.input] if args.input else None
        model = args.model
        if spec:
            model, made = load_model_spec(spec)
            inputs = inputs or made
        options = dict(targets=args.targets, reference=args.reference, configs=args.configs.split(","),
                       competitors=competitors, patterns=patterns, opt_level=args.opt_level, tolerances=tolerances,
                       input_sets=args.input_sets, seed=args.seed, progress=not args.quiet, **timing)
        if args.build_only:
            manifest = build_only(model, inputs, out_dir=args.build_only, model_spec=spec, **options)
            built = [e for e in manifest["entries"] if e["package"]]
            print(f"wrote {len(built)} package(s), inputs, references and {args.build_only}/manifest.json; "
                  f"run there: cuvil compare --from {args.build_only}")
            for e in manifest["entries"]:
                if not e["package"]:
                    print(f"  {e['name']}: compile failed: {e['reason']}")
            return 0
        report = compare(model, inputs, **options)
    report.print(_console())
    if args.json:
        report.save_json(args.json)
        print(f"wrote {args.json}")
    if args.plot:
        report.plot(args.plot)
        print(f"wrote {args.plot}")
    bad = [e for e in report.entries if e.kind != "competitor" and e.status in ("mismatch", "failed")]
    if bad:
        raise CuvilError(f"{len(bad)} entr{'y' if len(bad) == 1 else 'ies'} did not pass: "
                         + ", ".join(f"{e.name} ({e.status})" for e in bad))
    return 0


def _bench(args, parser) -> int:
    from rich.table import Table
    from rich.text import Text

    from cuvil_mlir.harness import bench_package

    inputs = [_read_npy(p) for p in args.input] if args.input else None
    if args.json:
        _check_writable(Path(args.json))
    result = bench_package(args.package, inputs, prefer=args.target, repetitions=args.repetitions, warmup=args.warmup,
                           min_time=args.min_time, max_time=args.max_time, input_sets=args.input_sets, seed=args.seed,
                           progress=not args.quiet)
    lat = result["latency"]
    table = Table(title=Text(f"{args.package}: latency in ms"), title_justify="left")
    for name in ("target", "driver", "first call", "median", "p10-p90", "mean", "min", "reps"):
        table.add_column(name, justify="left" if name in ("target", "driver") else "right")
    cells = ["-"] * 5 if lat is None else [f"{lat['median_ms']:.3f}", f"{lat['p10_ms']:.3f}-{lat['p90_ms']:.3f}",
                                           f"{lat['mean_ms']:.3f}", f"{lat['min_ms']:.3f}",
                                           f"{lat['repetitions']}{'*' if lat['capped'] else ''}"]
    table.add_row(Text(result["target"]), result["driver"], f"{result['first_call_ms']:.3f}", *cells)
    console = _console()
    console.print(table)
    for note in result["notes"]:
        console.print(Text(note))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
        print(f"wrote {args.json}")
    return 0


def _check_patterns(args, parser) -> int:
    from rich.text import Text

    from cuvil_mlir.pattern_check import check_patterns

    if args.json:
        _check_writable(Path(args.json))
    console = _console()

    def progress(check) -> None:
        if not args.quiet:
            style = "green" if check.passed else "bold red"
            example = f" {check.example} seed {check.seed}" if check.example else ""
            console.print(Text(f"{check.pass_name}/{check.pattern}{example}: ").append(check.status, style=style))

    report = check_patterns(args.files or None, passes=args.pass_names, patterns=args.pattern_names, seeds=args.seeds,
                            target=args.target, repro_dir=args.repro_dir, progress=progress)
    report.print(console)
    if args.json:
        report.save_json(args.json)
        print(f"wrote {args.json}")
    if not report.passed:
        names = sorted({f"{c.pass_name}/{c.pattern} ({c.status})" for c in report.failures})
        raise CuvilError(f"{len(report.failures)} of {len(report.checks)} checks failed: {', '.join(names)}")
    return 0


def _parse_tolerances(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        dtype, eq, value = item.partition("=")
        try:
            out[dtype.strip()] = float(value)
        except ValueError:
            raise CuvilError(f"--tolerance {item}: expected DTYPE=RTOL, e.g. float32=1e-5") from None
        if not eq or not dtype.strip() or out[dtype.strip()] < 0:
            raise CuvilError(f"--tolerance {item}: expected DTYPE=RTOL with RTOL >= 0, e.g. float32=1e-5")
    return out


def _console():
    """Rich output on stdout; wide enough for the table when stdout is a file or a pipe."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=160)


# ---------------------------------------------------------------------------------------
# cuvil-opt


def _opt_parser() -> argparse.ArgumentParser:
    from cuvil_mlir.lowering import builtin_registry

    parser = argparse.ArgumentParser(
        prog="cuvil-opt",
        description="Parse an MLIR file (text or bytecode) into a Cuvil context, run passes, print the result.",
        epilog="built-in passes: " + ", ".join(builtin_registry().names()),
    )
    parser.add_argument("input", metavar="FILE", nargs="?", default="-", help="MLIR text or bytecode; '-' = stdin (default)")
    parser.add_argument("-p", "--passes", "--pass-pipeline", dest="passes", default="", metavar="PASSES",
                        help="comma-separated pass names, run in order")
    parser.add_argument("-o", "--output", metavar="OUT", help="write the result here (default stdout)")
    parser.add_argument("--split-input-file", action="store_true",
                        help=f"process each '{SPLIT_MARKER}'-separated chunk on its own")
    parser.add_argument("--load-patterns", action="append", default=[], metavar="FILE.py",
                        help="register the PatternSets a Python file defines as passes (repeatable)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks")
    parser.add_argument("--version", action="version", version=f"cuvil-opt (cuvil-mlir {__version__})")
    return parser


class _ParseFailure(CuvilError):
    """MLIR text or bytecode that does not parse or verify; ``lines`` are its diagnostics."""

    def __init__(self, lines: list[str]):
        super().__init__(" ".join(lines))
        self.lines = lines


def _opt(args) -> int:
    from cuvil_mlir.passes import parse_pipeline

    registry = _registry(args.load_patterns)
    passes = [registry.get(name) for name in parse_pipeline(args.passes)]
    pattern_files = [str(Path(f).resolve()) for f in args.load_patterns]
    name = "<stdin>" if args.input == "-" else args.input
    data = _read_input(args.input)

    chunks = _split(data) if args.split_input_file and not data.startswith(_BYTECODE_MAGIC) else [data]
    results, failed = [], False
    for chunk in chunks:
        try:
            results.append(_opt_chunk(chunk, name, passes))
        except CuvilError as e:
            if not args.split_input_file:
                raise _with_pattern_files(e, pattern_files)
            failed = True
            e = _with_pattern_files(e, pattern_files)
            _report("cuvil-opt", e)
            results.append("\n".join(f"// {line}" for line in _error_lines(e)))
    _write_text(f"\n{SPLIT_MARKER}\n".join(r.rstrip("\n") for r in results) + "\n", args.output)
    return 1 if failed else 0


def _read_input(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    p = Path(path)
    if not p.is_file():
        raise CuvilError(f"input file not found: {p}" if not p.exists() else f"input is not a file: {p}")
    return p.read_bytes()


def _split(data: bytes) -> list[str]:
    """Chunks between ``// -----`` lines, each padded with blank lines so that
    line numbers in diagnostics are those of the whole file."""
    text = _decode(data)
    chunks, start, current = [], 0, []
    for i, line in enumerate(text.splitlines(keepends=True)):
        if line.strip() == SPLIT_MARKER:
            chunks.append("\n" * start + "".join(current))
            start, current = i + 1, []
        else:
            current.append(line)
    chunks.append("\n" * start + "".join(current))
    return chunks


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CuvilError(f"input is neither MLIR bytecode nor UTF-8 MLIR text ({e})") from e


def _opt_chunk(chunk: str | bytes, name: str, passes) -> str:
    from cuvil_mlir.context import make_context
    from cuvil_mlir.ir import module_to_text
    from cuvil_mlir.passes import run_pipeline

    if isinstance(chunk, bytes) and not chunk.startswith(_BYTECODE_MAGIC):
        chunk = _decode(chunk)
    ctx = make_context()
    module = _parse(chunk, ctx, name)
    with ctx:
        run_pipeline(module, passes)
        return module_to_text(module)


def _parse(source: str | bytes, ctx, name: str):
    """Parse into ``ctx``; a failure becomes a _ParseFailure of ``error: FILE:LINE:COL: message`` lines."""
    from cuvil_mlir.ir import ir, parse_module

    try:
        module = parse_module(source, ctx)
    except ir.MLIRError as e:
        raise _ParseFailure(_diagnostic_lines(e, name)) from e
    with ctx:
        _rename_locations(module, name)
    return module


def _diagnostic_lines(e, name: str) -> list[str]:
    lines = []

    def add(diag, depth: int) -> None:
        severity = str(diag.severity).rsplit(".", 1)[-1].lower()
        lines.append(f"{'  ' * depth}{severity}: {_location(diag.location, name)}: {diag.message}")
        for note in diag.notes:
            add(note, depth + 1)

    for diag in e.error_diagnostics:
        add(diag, 0)
    return lines or [f"error: {_one_line(str(e))}"]


_FILE_LOC = re.compile(r'^loc\("(.*)":(\d+):(\d+)\)$')


def _location(loc, name: str) -> str:
    """``loc("-":3:10)`` -> ``FILE:3:10`` (the parser names every buffer "-")."""
    m = _FILE_LOC.match(str(loc))
    if m is None:
        return location_text(loc)
    file = name if m.group(1) == "-" else m.group(1)
    return f"{file}:{m.group(2)}:{m.group(3)}"


def _rename_locations(module, name: str) -> None:
    """Give ops parsed from buffer "-" the real file name, so pass errors say where."""
    from cuvil_mlir.ir import ir

    def visit(op):
        loc = op.location
        if getattr(loc, "filename", None) == "-":
            op.location = ir.Location.file(name, loc.start_line, loc.start_col)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)


# ---------------------------------------------------------------------------------------
# Shared formatting.


def _describe_signature(sig) -> str:
    ins = ", ".join(s.describe() for s in sig.inputs)
    outs = ", ".join(s.describe() for s in sig.outputs)
    return f"({ins}) -> ({outs})"


def _describe_fired(fired: dict) -> str:
    parts = []
    for pass_name, counts in fired.items():
        items = ", ".join(f"{p} x{n}" for p, n in sorted(counts.items()))
        parts.append(f"{pass_name}: {items}")
    return "; ".join(parts) if parts else "none fired"


def _describe_sites(sites: dict, limit: int = 6) -> list[str]:
    """One line per pattern: where it fired (module paths, most frequent first)."""
    lines = []
    for pass_name, patterns in sites.items():
        for pattern, where in sorted(patterns.items()):
            ranked = sorted(where.items(), key=lambda kv: (-kv[1], kv[0]))
            shown = ", ".join(f"{path or '(forward)'} x{n}" for path, n in ranked[:limit])
            more = f", ... {len(ranked) - limit} more" if len(ranked) > limit else ""
            lines.append(f"{pass_name}/{pattern} at {shown}{more}")
    return lines


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"

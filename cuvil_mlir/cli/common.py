"""What every command of ``cuvil`` and ``cuvil-opt`` shares: the guarded runner that turns
errors into one line and an exit code, argument helpers, checks on the files a user names,
loading pattern files and calibrations, and the console.

Heavy modules (torch, IREE, rich) are imported inside the functions that need them.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import traceback
import warnings
from pathlib import Path

from cuvil_mlir.core.diagnostics import CuvilError, InputError, one_line, require_file


# ---------------------------------------------------------------------------------------
# Running a command: every error a user can cause is one line and exit 1.


def parse_args(parser: argparse.ArgumentParser, argv):
    """The parsed namespace, or the exit code argparse chose (2 for usage errors, 0 for --help)."""
    try:
        return parser.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2


def guarded(prog: str, args, run) -> int:
    """Run a command; turn every exception into one readable line and an exit code."""
    verbose = getattr(args, "verbose", False)
    if not verbose:  # torch's own deprecation noise is not the user's business
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.showwarning = lambda message, category, *rest: print(
        f"{prog}: warning: {one_line(str(message))}", file=sys.stderr)  # e.g. a target falling back to the next
    try:
        return run()
    except SystemExit as e:  # parser.error() inside a command
        return e.code if isinstance(e.code, int) else 2
    except CuvilError as e:
        if verbose:
            traceback.print_exc()
        report_error(prog, e)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `cuvil-opt big.mlir | head`
        return 1
    except OSError as e:  # a path the user gave cannot be read or written (permissions, disk full)
        if verbose:
            traceback.print_exc()
        print(f"{prog}: error: {one_line(str(e))}", file=sys.stderr)
        return 1
    except Exception as e:
        if verbose:
            traceback.print_exc()
        hint = "" if verbose else "; rerun with --verbose for the traceback"
        print(f"{prog}: internal error: {type(e).__name__}: {one_line(str(e))}{hint}", file=sys.stderr)
        return 1


def report_error(prog: str, e: CuvilError) -> None:
    for line in error_lines(e):
        print(f"{prog}: {line}", file=sys.stderr)
    if e.repro:
        print(f"  reproduce with: {e.repro}", file=sys.stderr)


def error_lines(e: CuvilError) -> list[str]:
    """``error: ...`` lines: one per MLIR diagnostic for a parse failure, else exactly one."""
    if isinstance(e, ParseFailure):
        return e.lines
    return [f"error: {one_line(e.message)}"]


class ParseFailure(CuvilError):
    """MLIR text or bytecode that does not parse or verify; ``lines`` are its diagnostics."""

    def __init__(self, lines: list[str]):
        super().__init__(" ".join(lines))
        self.lines = lines


# ---------------------------------------------------------------------------------------
# Arguments.


def timing_arguments(p, *, repetitions: int, min_time: float, max_time: float) -> None:
    p.add_argument("--repetitions", "-n", type=non_negative(int), default=repetitions, metavar="N",
                   help=f"timed calls, at least (default: {repetitions}; 0: no timing)")
    p.add_argument("--warmup", type=non_negative(int), default=5, metavar="N", help="untimed calls first (default: 5)")
    p.add_argument("--min-time", type=non_negative(float), default=min_time, metavar="S",
                   help=f"timed seconds, at least (default: {min_time:g})")
    p.add_argument("--max-time", type=positive(float), default=max_time, metavar="S",
                   help=f"timed seconds, at most, whatever the repetitions (default: {max_time:g})")
    p.add_argument("--input-sets", type=positive(int), default=3, metavar="N",
                   help="different input sets rotated through the calls (default: 3)")
    p.add_argument("--seed", type=int, default=0, help="seed of generated inputs (default: 0)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")


def parameters_argument(p) -> None:
    """``--parameters FILE.irpa`` for a command that loads a package."""
    p.add_argument("--parameters", metavar="FILE.irpa",
                   help="the weights of a package saved without them (cuvil compile --save-parameters): an IREE parameter "
                   "archive, checked against the keys, shapes and dtypes the package's modules need")


def non_negative(kind):
    def parse(text: str):
        value = kind(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


def positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


def calibration_arguments(p) -> None:
    p.add_argument("--calibration", action="append", default=[], metavar="FILE",
                   help="with --precision int8: a calibration saved as .json (Calibration.save), or sample inputs "
                   "to calibrate on: one .npz (the model's inputs in order) or .npy (one-input models) per sample, "
                   "repeatable (default: the model's example inputs)")
    p.add_argument("--calibration-method", choices=("minmax", "percentile"), default="minmax",
                   help="how sample inputs become ranges (default: minmax)")


# ---------------------------------------------------------------------------------------
# Files the user names: inputs, outputs, models.


def is_model_spec(model: str) -> bool:
    """Whether a MODEL argument is FILE.py:FACTORY / package.module:FACTORY rather than a .pt2 path."""
    return not model.endswith(".pt2") and ":" in model


def model_spec(model: str) -> str | None:
    """A MODEL argument's factory spec, or None for a .pt2 path, which must then exist (checked
    before torch is imported: a typo should not take seconds)."""
    if is_model_spec(model):
        return model
    require_file(model, "model file")
    return None


def check_writable(*outputs: str | None) -> None:
    """Fail before any work when an output path (an option's value; None: not asked for) cannot be written."""
    for output in outputs:
        if output is None:
            continue
        path = Path(output)
        if path.is_dir():
            raise CuvilError(f"output path {path} is a directory")
        if not path.parent.is_dir():
            raise CuvilError(f"output directory {path.parent} does not exist")


def read_npy(path: str):
    import numpy as np

    p = require_file(path, "input file")
    with open(p, "rb") as f:
        magic = f.read(6)
    if magic != b"\x93NUMPY" and magic[:2] != b"PK":
        raise InputError(f"{p} is not a .npy array file (no NumPy header); write inputs with numpy.save")
    try:
        array = np.load(p, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise InputError(f"{p} is not a .npy array file: {one_line(str(e))}") from e
    if not isinstance(array, np.ndarray):  # an .npz archive
        raise InputError(f"{p} is an .npz archive; pass each array as its own .npy file")
    return array


def write_text(text: str, output: str | None) -> None:
    if output:
        Path(output).write_text(text)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


# ---------------------------------------------------------------------------------------
# Pattern files and calibrations.


def load_patterns(files: list[str]):
    """(the files, the PatternSets they define), each file's sets in definition order."""
    from cuvil_mlir.core.passes import load_pattern_file

    sets = []
    for f in files:
        sets += load_pattern_file(f)
    return [str(Path(f).resolve()) for f in files], sets


def with_pattern_files(e: CuvilError, pattern_files: list[str]) -> CuvilError:
    """A repro through ``cuvil-opt`` needs the user's pattern files to know their passes."""
    if not (e.repro and e.repro.startswith("cuvil-opt") and pattern_files):
        return e
    e.repro += "".join(f" --load-patterns {shlex.quote(f)}" for f in pattern_files)
    return e


def pattern_registry(pattern_sets=()):
    """The built-in passes plus ``pattern_sets`` (``load_patterns``' PatternSets), each under its own name."""
    from cuvil_mlir.lowering import builtin_registry

    registry = builtin_registry()
    for p in pattern_sets:
        registry.register(p)
    return registry


def needs_calibration(args) -> bool:
    """Whether the policy is static int8; --calibration with any other policy is a mistake."""
    from cuvil_mlir.compiler.precision import parse_policy

    if parse_policy(args.precision).uses("int8"):
        return True
    if args.calibration:
        raise CuvilError(f"--calibration applies to --precision int8 only, got --precision {args.precision}")
    return False


def read_calibration(args, model, example_inputs, **pipeline):
    """The Calibration --calibration names: a saved .json, or ranges measured on sample files
    (.npz: the inputs in order; .npy: one input), or on the example inputs when none is given."""
    import numpy as np
    import torch

    from cuvil_mlir.compiler.calibrate import calibrate
    from cuvil_mlir.compiler.calibration import Calibration

    files = args.calibration
    for f in files:
        require_file(f, "calibration file")
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
            samples.append((torch.from_numpy(read_npy(f)),))
    if not samples:
        if example_inputs is None:
            raise InputError(f"precision int8 needs sample inputs to calibrate on: {args.model} carries no example "
                             "inputs; pass --calibration SAMPLE.npz (repeatable) or a saved calibration .json")
        print("calibrating int8 on the example inputs (one sample; pass --calibration SAMPLE.npz for more)", file=sys.stderr)
        samples = [tuple(example_inputs)]
    return calibrate(model, samples, method=args.calibration_method, target=args.target, **pipeline)


# ---------------------------------------------------------------------------------------
# Output.


def quiet_torch_logs(args) -> None:
    """torch.export.load logs a whole traceback as a warning before it raises; the error
    we print already says what failed, so that log only shows with --verbose."""
    import logging

    import torch  # noqa: F401  (torch configures its loggers on import: set levels after it)

    if not getattr(args, "verbose", False):
        logging.getLogger("torch.export").setLevel(logging.ERROR)


def stdout_console():
    """Rich output on stdout; wide enough for the table when stdout is a file or a pipe."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=160)

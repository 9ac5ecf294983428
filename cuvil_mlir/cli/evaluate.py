"""``cuvil compare``, ``cuvil bench``, ``cuvil check-patterns``, ``cuvil accuracy``: measure what the
compiler does (the harness, docs/harness.md; the pattern checker, docs/testing.md; precision, docs/precision.md)."""

from __future__ import annotations

import json
from pathlib import Path

from cuvil_mlir.cli.common import (
    calibration_arguments, check_writable, is_model_spec, load_patterns, model_spec, needs_calibration, parameters_argument,
    positive, quiet_torch_logs, read_calibration, read_npy, stdout_console, timing_arguments,
)
from cuvil_mlir.core.diagnostics import CuvilError, InputError


def add_parsers(sub, common) -> None:
    """Add this group's commands to ``sub`` (the subparsers of ``cuvil``); ``common``: the parent parser of every command."""
    p = sub.add_parser("compare", parents=[common], help="compare targets, pattern configurations and PyTorch on one model",
                       description="Compile a .pt2 model for every target and configuration, run each where this machine "
                       "has a device, and show compile time, latency and errors against a reference side by side "
                       "(docs/harness.md). Exits 1 when a Cuvil entry fails or does not match the reference.")
    p.add_argument("model", metavar="MODEL", nargs="?",
                   help="a .pt2 file written by torch.export.save, a .onnx file (checked against onnxruntime), or "
                   "FILE.py:FACTORY / package.module:FACTORY (a function returning (model, inputs)); not with --from")
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
    timing_arguments(p, repetitions=50, min_time=0.5, max_time=10.0)
    p.set_defaults(command=_compare)

    p = sub.add_parser("bench", parents=[common], help="time a .cuvilpkg on this machine",
                       description="Load a .cuvilpkg on the first of its targets that runs here and time its calls.")
    p.add_argument("package", metavar="PKG", help="a .cuvilpkg file")
    p.add_argument("--target", "--device", dest="target", metavar="TARGETS",
                   help="which of the package's targets to run on, in preference order (specs or kinds, comma-separated)")
    p.add_argument("--input", "-i", action="append", default=None, metavar="X.npy",
                   help="an input array, in order (repeatable; default: random inputs from the package's signature)")
    p.add_argument("--json", metavar="OUT.json", help="write the result as JSON (schema: docs/harness.md)")
    p.add_argument("--io", choices=("host", "device"), default="host", help="host: numpy in and out (default); device: "
                   "torch CUDA tensors in and out, no host copy (a cuda target)")
    parameters_argument(p)
    timing_arguments(p, repetitions=100, min_time=1.0, max_time=30.0)
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
    p.add_argument("--seeds", type=positive(int), default=2, metavar="N", help="seeds 0..N-1 per example (default: 2)")
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
    calibration_arguments(p)
    p.add_argument("--no-per-op", dest="per_op", action="store_false", default=None,
                   help="end-to-end metrics only (one compile)")
    p.add_argument("--target", default="cpu", help="where to compile and run (default: cpu)")
    p.add_argument("-O", dest="opt_level", type=int, choices=(0, 1, 2, 3), default=3, metavar="N", help="optimization level (default: -O3)")
    p.add_argument("--json", metavar="OUT.json", help="write the report (and the search) as JSON")
    p.set_defaults(command=_accuracy)


def _compare(args, parser) -> int:
    from cuvil_mlir.eval.harness import build_only, compare, load_model_spec, run_from

    if args.from_dir and (args.build_only or (args.model and not is_model_spec(args.model))):
        raise CuvilError("compare --from DIR takes no --build-only and no .pt2 MODEL (the packages and targets are in DIR's "
                         "manifest); a MODEL FILE.py:FACTORY there replaces the manifest's, for the competitors")
    if not args.from_dir and not args.model:
        raise CuvilError("compare: give a MODEL (.pt2 or FILE.py:FACTORY), or --from DIR")
    spec = model_spec(args.model) if args.model else None
    check_writable(args.json, args.plot)
    tolerances = _parse_tolerances(args.tolerance)
    competitors = () if args.competitors == "none" else args.competitors
    if competitors is None and not args.from_dir:
        competitors = "eager"
    quiet_torch_logs(args)
    timing = dict(repetitions=args.repetitions, warmup=args.warmup, min_time=args.min_time, max_time=args.max_time)
    if args.from_dir:
        report = run_from(args.from_dir, competitors=competitors, model_spec=spec, progress=not args.quiet, **timing)
    else:
        _, patterns = load_patterns(args.patterns)
        inputs = [read_npy(p) for p in args.input] if args.input else None
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
    report.print(stdout_console())
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

    from cuvil_mlir.eval.harness import bench_package

    inputs = [read_npy(p) for p in args.input] if args.input else None
    check_writable(args.json)
    result = bench_package(args.package, inputs, prefer=args.target, repetitions=args.repetitions, warmup=args.warmup,
                           min_time=args.min_time, max_time=args.max_time, input_sets=args.input_sets, seed=args.seed,
                           progress=not args.quiet, io=args.io, parameters=args.parameters)
    lat = result["latency"]
    table = Table(title=Text(f"{args.package}: latency in ms"), title_justify="left")
    for name in ("target", "driver", "first call", "median", "p10-p90", "mean", "min", "reps"):
        table.add_column(name, justify="left" if name in ("target", "driver") else "right")
    cells = ["-"] * 5 if lat is None else [f"{lat['median_ms']:.3f}", f"{lat['p10_ms']:.3f}-{lat['p90_ms']:.3f}",
                                           f"{lat['mean_ms']:.3f}", f"{lat['min_ms']:.3f}",
                                           f"{lat['repetitions']}{'*' if lat['capped'] else ''}"]
    table.add_row(Text(result["target"]), result["driver"], f"{result['first_call_ms']:.3f}", *cells)
    console = stdout_console()
    console.print(table)
    for note in result["notes"]:
        console.print(Text(note))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
        print(f"wrote {args.json}")
    return 0


def _check_patterns(args, parser) -> int:
    from rich.text import Text

    from cuvil_mlir.eval.pattern_check import check_patterns

    check_writable(args.json)
    console = stdout_console()

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


def _accuracy(args, parser) -> int:
    """``cuvil accuracy``: cuvil_mlir.eval.accuracy.report / search on a .pt2 file or a model factory."""
    from cuvil_mlir.eval import accuracy

    spec = model_spec(args.model)
    check_writable(args.json)
    quiet_torch_logs(args)
    import torch

    from cuvil_mlir.eval.harness import load_model_spec
    from cuvil_mlir.compiler.importers.fx import load_exported_program

    model, inputs = load_model_spec(spec) if spec else (load_exported_program(args.model), None)
    if args.input:
        inputs = [torch.from_numpy(read_npy(p)) for p in args.input]
    elif inputs is None and isinstance(model, torch.export.ExportedProgram):
        inputs = model.example_inputs[0] if model.example_inputs else None
    if inputs is None:
        raise InputError(f"{args.model} carries no example inputs: pass them with --input X.npy")
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    calibration = read_calibration(args, model, inputs) if needs_calibration(args) else None
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

"""``cuvil profile``: where a model's time goes, dispatch by dispatch (cuvil_mlir/eval/profiler.py).

    cuvil profile model.pt2 [--target cuda:h200] [--json p.json] [--plot p.png]
    cuvil profile model.pt2 --target cuda:h200 --build-only m.cuvilpkg   # compile here (dispatches recorded) ...
    cuvil profile m.cuvilpkg --json p.json                                # ... time where the device is
    cuvil profile p.json --plot p.png                                     # show a profile written before
    cuvil profile lm.cuvilpkg --function decode --position 2047           # one step of a causal LM's package
"""

from __future__ import annotations

from pathlib import Path

from cuvil_mlir.cli.common import parameters_argument
from cuvil_mlir.core.diagnostics import CuvilError, ImportError_, InputError


def add_parsers(sub, common) -> None:
    p = sub.add_parser("profile", parents=[common], help="time per dispatch, mapped back to module paths and Cuvil ops",
                       description="Profile a model: each IREE dispatch's time per call (IREE's HAL profiling: device "
                       "timestamps on CUDA, host execution events on CPU), its share, achieved TFLOP/s and GB/s against "
                       "the device's peak, the nn.Module paths and Cuvil ops it came from, and the gap between the wall "
                       "time of a call and its dispatches' sum (docs/profiling.md).")
    p.add_argument("model", metavar="PKG|MODEL", help="a .cuvilpkg, a .pt2 file, FILE.py:FACTORY / package.module:FACTORY, "
                   "or a profile .json written by --json (shown again)")
    p.add_argument("--target", default=None, help="the target to compile a model for (default: cpu); for a package, "
                   "the target to run (default: its first that runs here)")
    p.add_argument("--precision", default="fp32", metavar="POLICY", help="precision policy when compiling (default: fp32)")
    p.add_argument("-O", dest="opt_level", type=int, choices=(0, 1, 2, 3), default=3, metavar="N", help="optimization level (default: -O3)")
    p.add_argument("--input", "-i", action="append", default=None, metavar="X.npy",
                   help="an input array, in order (repeatable; default: the example inputs, or random ones from the signature)")
    p.add_argument("--build-only", metavar="OUT.cuvilpkg", help="compile with the dispatches recorded, write the package and "
                   "stop (to profile it on another machine: `cuvil profile OUT.cuvilpkg` there)")
    p.add_argument("--function", metavar="NAME", help="a causal LM's package: the step to profile, prefill_first, prefill "
                   "or decode (default: decode), with a zero-filled cache")
    p.add_argument("--position", type=int, metavar="N", help="a causal LM's package: the position the step runs at "
                   "(default: its last, the longest cache read)")
    p.add_argument("--runtime-flag", action="append", default=[], metavar="FLAG",
                   help="an IREE runtime flag for the timed runs, e.g. --runtime-flag=--cuda_use_streams=false (repeatable)")
    p.add_argument("--repetitions", type=int, default=10, metavar="N", help="repetitions of the wall-time benchmark (default: 10)")
    p.add_argument("--iterations", type=int, default=20, metavar="N", help="calls in the profiled run (default: 20)")
    p.add_argument("--limit", type=int, default=25, metavar="N", help="rows shown in the table and the chart (default: 25)")
    p.add_argument("--json", metavar="OUT.json", help="write the profile as JSON")
    p.add_argument("--plot", metavar="OUT.png", help="write a bar chart of the slowest dispatches")
    parameters_argument(p)
    p.set_defaults(command=run)


def run(args, parser) -> int:
    from cuvil_mlir.eval import profiler as profile
    for out in (args.json, args.plot, args.build_only):
        if out and not Path(out).parent.exists():
            raise CuvilError(f"cannot write {out}: folder {Path(out).parent} does not exist")
    if (args.function or args.position is not None) and not args.model.endswith(".cuvilpkg"):
        raise InputError("--function and --position profile one step of a causal LM's package (.cuvilpkg)")
    if args.parameters and not args.model.endswith(".cuvilpkg"):
        raise InputError("--parameters supplies the weights of a package (.cuvilpkg) saved without them")
    if args.model.endswith(".json"):
        prof = profile.load_profile(args.model)
    elif args.model.endswith(".cuvilpkg"):
        prof = _profile_package(args)
    else:
        prof = _profile_model(args)
        if prof is None:
            return 0
    profile.print_profile(prof, limit=args.limit)
    if args.json:
        profile.write_json(prof, args.json)
        print(f"wrote {args.json}")
    if args.plot:
        profile.plot(prof, args.plot, limit=args.limit)
        print(f"wrote {args.plot}")
    return 0


def _inputs(args):
    if not args.input:
        return None
    import numpy as np

    out = []
    for path in args.input:
        try:
            out.append(np.load(path, allow_pickle=False))
        except (OSError, ValueError) as e:
            raise InputError(f"cannot read input {path}: {e}") from e
    return out


def _profile_package(args) -> dict:
    from cuvil_mlir import load
    from cuvil_mlir.eval import profiler as profile
    if not Path(args.model).exists():
        raise CuvilError(f"package not found: {args.model}")
    compiled = load(args.model, prefer=args.target, parameters=args.parameters)
    return profile.profile_compiled(compiled, _inputs(args), repetitions=args.repetitions, iterations=args.iterations,
                                    runtime_flags=tuple(args.runtime_flag), model=Path(args.model).name,
                                    function=args.function, position=args.position)


def _profile_model(args) -> dict | None:
    import torch

    from cuvil_mlir.eval import profiler as profile
    from cuvil_mlir.eval.harness import load_model_spec
    from cuvil_mlir.compiler.importers.fx import load_exported_program
    from cuvil_mlir.compiler.pipeline import Options, compile_program

    spec = args.model if not args.model.endswith(".pt2") and ":" in args.model else None
    if not spec and not Path(args.model).exists():
        raise ImportError_(f"model file not found: {args.model}")
    model, inputs = load_model_spec(spec) if spec else (load_exported_program(args.model), None)
    if inputs is None and isinstance(model, torch.export.ExportedProgram) and model.example_inputs:
        inputs = model.example_inputs[0]
    given = _inputs(args)
    if given is not None:
        inputs = given
    args_for_export = tuple(inputs) if isinstance(inputs, (tuple, list)) else ((inputs,) if inputs is not None else ())
    if not args_for_export and not isinstance(model, torch.export.ExportedProgram):
        raise InputError(f"{args.model} gives no example inputs: pass them with --input X.npy")
    export_args = tuple(torch.from_numpy(a) if not isinstance(a, torch.Tensor) else a for a in args_for_export)
    compiled = compile_program(model, export_args, Options(target=args.target or "cpu", opt_level=args.opt_level,
                                                           precision=args.precision, record_dispatches=True))
    if args.build_only:
        compiled.save(args.build_only)
        sites = compiled.metadata["dispatches"]
        print(f"wrote {args.build_only}: " + ", ".join(f"{t}: {len(s)} dispatches" for t, s in sites.items())
              + f"; profile it with `cuvil profile {args.build_only}` where its device is")
        return None
    return profile.profile_compiled(compiled, export_args or None, repetitions=args.repetitions, iterations=args.iterations,
                                    runtime_flags=tuple(args.runtime_flag), model=Path(args.model.split(":")[0]).name)

"""``cuvil compile``, ``cuvil run``, ``cuvil inspect``: build a package, call it, show what it holds."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cuvil_mlir.cli.common import (
    calibration_arguments, check_writable, load_patterns, needs_calibration, parameters_argument, quiet_torch_logs,
    read_calibration, read_npy, with_pattern_files, write_text,
)
from cuvil_mlir.core.diagnostics import CuvilError, InputError, require_file


def add_parsers(sub, common) -> None:
    """Add this group's commands to ``sub`` (the subparsers of ``cuvil``); ``common``: the parent parser of every command."""
    p = sub.add_parser("compile", parents=[common], help="compile a .pt2 or .onnx model into a .cuvilpkg",
                       description="Compile a model saved with torch.export.save (or an ONNX model) into a .cuvilpkg, "
                       "or print the IR of one stage with --emit.")
    p.add_argument("model", metavar="MODEL", help="a .pt2 file written by torch.export.save, or a .onnx file "
                   "(external data next to it; docs/onnx.md)")
    p.add_argument("-o", "--output", metavar="OUT", help="the .cuvilpkg to write (with --emit: the IR file; default stdout)")
    p.add_argument("--target", default="cpu",
                   help="target(s), comma-separated in preference order: cpu, cpu:znver4, vmvx, cpu,vmvx (default: cpu)")
    p.add_argument("-O", dest="opt_level", type=int, choices=(0, 1, 2, 3), default=3, metavar="N",
                   help="optimization level -O0..-O3 (default: -O3)")
    p.add_argument("--precision", default="fp32", metavar="POLICY",
                   help="fp32 (default), fp16, bf16, int8-weight, int4-weight[{group=N}], int8, or a 16-bit policy + a "
                   "quantized one (fp16+int8-weight); see docs/precision.md")
    calibration_arguments(p)
    p.add_argument("--params", choices=("auto", "inline", "external"), default="auto",
                   help="weights inline in each module, or external: one parameter archive all targets share, mapped at load "
                   "(auto: external from 64 MiB of weights; docs/package-format.md)")
    p.add_argument("--save-parameters", metavar="FILE.irpa",
                   help="write the external parameters to FILE.irpa and the package without them (a big model's "
                   "modules travel alone; load with --parameters FILE.irpa); --params auto becomes external")
    p.add_argument("--emit", metavar="STAGE", help="print the IR after STAGE (torch, cuvil, fused, precision, lowered) instead of compiling")
    p.add_argument("--elide-weights", action=argparse.BooleanOptionalAction, default=None,
                   help="with --emit: hide large constants (default: on for stdout, off for -o)")
    p.add_argument("--patterns", action="append", default=[], metavar="FILE.py",
                   help="a Python file of PatternSets to run after raising (repeatable)")
    p.add_argument("--disable-pass", action="append", default=[], metavar="PASS",
                   help="skip a built-in pass (repeatable; for A/B comparisons)")
    p.add_argument("--dynamic", action="append", default=[], metavar="SPEC",
                   help="make input dims dynamic: [NAME=]I:D[,I:D...][@MIN..MAX], e.g. batch=0:0@1..64 (repeatable; cuvil_mlir/compiler/dynamic.py)")
    p.add_argument("--cache", action="store_true", help="reuse or fill the compile cache (cuvil cache info; docs/jit-and-cache.md)")
    p.set_defaults(command=_compile)

    p = sub.add_parser("run", parents=[common], help="run a .cuvilpkg on .npy inputs",
                       description="Load a .cuvilpkg, call it with .npy inputs and write or print the outputs.")
    p.add_argument("package", metavar="PKG", help="a .cuvilpkg file")
    p.add_argument("--input", "-i", action="append", default=[], metavar="X.npy", help="an input array, in order (repeatable)")
    p.add_argument("--target", metavar="TARGETS", help="which of the package's targets to run on, in preference order "
                   "(specs or kinds, comma-separated; default: the package's order)")
    p.add_argument("--output", "-o", action="append", default=[], metavar="Y.npy",
                   help="where to write an output, in order (one per output; default: print a summary)")
    parameters_argument(p)
    p.set_defaults(command=_run)

    p = sub.add_parser("inspect", parents=[common], help="show what a .cuvilpkg holds",
                       description="Print a .cuvilpkg's metadata: format, targets, signature, versions, patterns.")
    p.add_argument("package", metavar="PKG", help="a .cuvilpkg file")
    p.add_argument("--json", action="store_true", help="print metadata.json as it is stored")
    p.set_defaults(command=_inspect)


def _compile(args, parser) -> int:
    if args.emit is None and not args.output:
        parser.error("compile needs -o OUT.cuvilpkg (or --emit STAGE to print IR)")
    params = args.params
    if args.save_parameters:
        if args.emit is not None:
            parser.error("--save-parameters writes a compiled package's parameters: not with --emit")
        if params == "inline":
            parser.error("--save-parameters needs external parameters: not with --params inline")
        if Path(args.save_parameters).resolve() == Path(args.output).resolve():
            parser.error("--save-parameters and -o name the same file")
        params = "external"
    require_file(args.model, "model file")  # before importing torch: a typo should not take seconds
    check_writable(args.output, args.save_parameters)
    quiet_torch_logs(args)
    model = args.model
    if not model.lower().endswith(".onnx"):  # importers/onnx.py is_onnx_model's rule for a path, without its imports
        # loaded before the compiler's libraries (torch-mlir, IREE), its weights then mapped from
        # the file: the peak of loading is torch's copy alone, and it is gone before compiling
        from cuvil_mlir.compiler.importers import pt2

        model = pt2.load(args.model)
    from cuvil_mlir.compiler.pipeline import Options, compile_program

    pattern_files, patterns = load_patterns(args.patterns)
    options = Options(target=args.target, opt_level=args.opt_level, patterns=tuple(patterns),
                      disabled_passes=tuple(args.disable_pass), precision=args.precision, params=params)
    try:
        if args.dynamic:  # the program exported again with these dims dynamic
            from cuvil_mlir.compiler.dynamic import with_dynamic_dims

            model = with_dynamic_dims(model, args.dynamic)
        if needs_calibration(args):  # the program is loaded once, for the calibration and the compile
            options.calibration = read_calibration(args, model, model.example_inputs[0] if model.example_inputs else None,
                                               patterns=tuple(patterns), disabled_passes=tuple(args.disable_pass))
        if args.emit is not None:
            elide = args.elide_weights if args.elide_weights is not None else not args.output
            emitted = compile_program(model, (), options, emit=args.emit, elide_weights=elide)
            write_text(emitted.text, args.output)
            return 0
        if args.cache:
            from cuvil_mlir.compiler.cache import cached_compile

            compiled = cached_compile(model, (), options, True)
        else:
            compiled = compile_program(model, (), options)
    except CuvilError as e:
        if "warnings above" in e.message and not getattr(args, "verbose", False):
            e.message += " (rerun with --verbose to see them)"
        raise with_pattern_files(e, pattern_files) from e
    if args.save_parameters:
        if compiled.parameters is None or not len(compiled.parameters.arrays):  # an ONNX model; or only small constants
            raise CuvilError(f"{args.model}: no weight became an external parameter (ONNX weights stay inline, and "
                             "tensors under 4 KiB stay in the modules): --save-parameters has nothing to write")
        compiled.save(args.output, parameters="none")
        compiled.save_parameters(args.save_parameters)
    else:
        compiled.save(args.output)
    _print_compile_summary(args.model, args.output, compiled.metadata, args.save_parameters)
    return 0


def _print_compile_summary(model: str, output: str, meta: dict, parameters: str | None = None) -> None:
    from cuvil_mlir.runtime.signature import Signature

    seconds = meta.get("compile_seconds", {})
    stages = ", ".join(f"{k} {v:.2f}" for k, v in seconds.items())
    print(f"compiled {model} -> {output} ({_size(Path(output).stat().st_size)})")
    targets = meta.get("targets", [meta["target"]])
    first = f" (for {meta['target']})" if len(targets) > 1 else ""
    print(f"  targets:    {', '.join(targets)} (O{meta['opt_level']})")
    print(f"  signature:  {_describe_signature(Signature.from_json(meta['signature']))}")
    print(f"  patterns:   {_describe_fired(meta.get('patterns_fired', {}))}{first}")
    print(f"  seconds:    {sum(seconds.values()):.2f} ({stages})")
    if parameters:
        p = meta["parameters"]
        print(f"  parameters: {parameters} ({p['count']} tensors, {_size(Path(parameters).stat().st_size)}); "
              f"load with --parameters {parameters}")


def _run(args, parser) -> int:
    import numpy as np

    from cuvil_mlir import load
    from cuvil_mlir.core.diagnostics import PackageError

    try:
        compiled = load(args.package, prefer=args.target, parameters=args.parameters)
    except (KeyError, TypeError, ValueError) as e:  # metadata.json parses but its signature does not
        raise PackageError(f"{args.package} is corrupt: malformed signature in metadata.json ({type(e).__name__}: {e})") from e
    n_out = len(compiled.boundary.outputs)  # the model's output leaves (not state updates or write-backs)
    if args.output and len(args.output) != n_out:
        raise InputError(f"the model has {n_out} output(s) but {len(args.output)} --output path(s) were given")
    arrays = [read_npy(p) for p in args.input]
    from cuvil_mlir.runtime.boundary import output_leaves

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


def _describe_array(a) -> str:
    return f"{a.dtype}[{', '.join(str(d) for d in a.shape)}]"


def _preview(a, count: int = 6) -> str:
    import numpy as np

    flat = np.asarray(a).ravel()
    values = np.array2string(flat[:count], precision=5, separator=", ", max_line_width=10_000)
    return values[:-1] + ", ...]" if flat.size > count else values


def _inspect(args, parser) -> int:
    from cuvil_mlir.runtime import package

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
    if "causal_lm" in meta:
        print(f"causal lm:   {_describe_causal_lm(meta['causal_lm'])}")
    if "opt_level" in meta:
        print(f"opt level:   O{meta['opt_level']}")
    print("modules:")
    for entry, m in zip(meta["modules"], modules):
        print(f"  {m.target}: {entry['file']}, {_size(len(m.vmfb))}, driver {m.driver}, sha256 {entry['sha256'][:16]}")
        print(f"    iree flags: {' '.join(m.iree_flags) or '(none)'}")
    if "parameters" in meta:  # external weights: one archive every module reads
        p = meta["parameters"]
        print(f"parameters:  {p.get('file')}, {p.get('count', '?')} tensors, {_size(int(p.get('bytes', 0)))}, "
              f"shared by all modules, sha256 {str(p.get('sha256', ''))[:16]}")
    first = f" (for {modules[0].target})" if len(modules) > 1 else ""
    print(f"patterns:    {_describe_fired(meta.get('patterns_fired', {}))}{first}")
    for line in _describe_sites(meta.get("pattern_sites", {})):
        print(f"  {line}")
    for line in _describe_kernels(meta.get("kernels", [])):
        print(line)
    seconds = meta.get("compile_seconds", {})
    if seconds:
        print(f"seconds:     {sum(seconds.values()):.2f} ({', '.join(f'{k} {v:.2f}' for k, v in seconds.items())})")
    versions = meta.get("versions", {})
    if versions:
        print(f"versions:    {', '.join(f'{k} {v}' for k, v in sorted(versions.items()))}")
    return 0


def _signature_text(meta: dict, path: str) -> str:
    from cuvil_mlir.core.diagnostics import PackageError
    from cuvil_mlir.runtime.signature import Signature

    try:
        return _describe_signature(Signature.from_json(meta["signature"]))
    except (KeyError, TypeError, ValueError) as e:
        raise PackageError(f"{path} is corrupt: malformed signature in metadata.json ({type(e).__name__}: {e})") from e


def _describe_signature(sig) -> str:
    ins = ", ".join(s.describe() for s in sig.inputs)
    outs = ", ".join(s.describe() for s in sig.outputs)
    return f"({ins}) -> ({outs})"


def _describe_causal_lm(lm: dict) -> str:
    """compile_causal_lm's functions, sizes and step results; a package written before
    prefill_first lists no functions (it has prefill and decode), one written before the steps
    returned their greedy tokens no step_outputs (logits alone)."""
    from cuvil_mlir.runtime.generation import OLD_FUNCTIONS

    functions = lm.get("functions")
    names = ", ".join(functions) if functions else ", ".join(OLD_FUNCTIONS) + " (no prefill_first: every chunk runs prefill)"
    outputs = ", ".join(lm.get("step_outputs", ["logits"]))
    greedy = "on the device" if "next_token" in outputs else "through the host"
    return (f"functions {names}; batch {lm.get('batch')}, max_seq_len {lm.get('max_seq_len')}, "
            f"prefill chunks {', '.join(map(str, lm.get('prefill_lens', [lm.get('prefill_len')])))}; steps return {outputs} (greedy tokens {greedy})")


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


def _describe_kernels(kernels: list[dict]) -> list[str]:
    """The target's own kernels (lower-cuvil-to-kernels): which function got which kernel, where from."""
    if not kernels:
        return []
    lines = [f"kernels:     {sum(1 for k in kernels if k.get('kernel'))} of {len(kernels)} kernel functions on the target's kernels"]
    for k in kernels:
        sites = ", ".join(s or "(top level)" for s in k.get("sites", []))
        config = f" ({k['config']})" if k.get("config") else ""
        what = f"{k['kernel']}{config}" if k.get("kernel") else f"IREE codegen ({k.get('why')})"
        lines.append(f"  {k['function']}: {what}" + (f" <- {sites}" if sites else ""))
    return lines

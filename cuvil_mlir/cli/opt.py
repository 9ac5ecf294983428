"""``cuvil-opt``: parse an MLIR file (text or bytecode), run named passes, print the result, like mlir-opt.

    cuvil-opt file.mlir -p raise-torch-to-cuvil,lower-cuvil-to-torch [--split-input-file] [-o out.mlir]

Errors are reported as ``cuvil``'s are (cuvil_mlir/cli/common.py); a parse failure prints one
``error: FILE:LINE:COL: message`` line per MLIR diagnostic.
"""

from __future__ import annotations

import argparse
import re
import sys

from cuvil_mlir.cli.common import (
    ParseFailure, error_lines, guarded, load_patterns, parse_args, pattern_registry, report_error, with_pattern_files,
    write_text,
)
from cuvil_mlir.core.diagnostics import CuvilError, location_text, one_line, require_file
from cuvil_mlir.core.versions import __version__

SPLIT_MARKER = "// -----"
_BYTECODE_MAGIC = b"ML\xefR"


def main(argv: list[str] | None = None) -> int:
    """``cuvil-opt``: parse an MLIR file, run named passes, print the result (like mlir-opt)."""
    parser = _opt_parser()
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    return guarded("cuvil-opt", args, lambda: _opt(args))


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


def _opt(args) -> int:
    from cuvil_mlir.core.passes import parse_pipeline

    pattern_files, pattern_sets = load_patterns(args.load_patterns)
    registry = pattern_registry(pattern_sets)
    passes = [registry.get(name) for name in parse_pipeline(args.passes)]
    name = "<stdin>" if args.input == "-" else args.input
    data = _read_input(args.input)

    chunks = _split(data) if args.split_input_file and not data.startswith(_BYTECODE_MAGIC) else [data]
    results, failed = [], False
    for chunk in chunks:
        try:
            results.append(_opt_chunk(chunk, name, passes))
        except CuvilError as e:
            if not args.split_input_file:
                raise with_pattern_files(e, pattern_files)
            failed = True
            e = with_pattern_files(e, pattern_files)
            report_error("cuvil-opt", e)
            results.append("\n".join(f"// {line}" for line in error_lines(e)))
    write_text(f"\n{SPLIT_MARKER}\n".join(r.rstrip("\n") for r in results) + "\n", args.output)
    return 1 if failed else 0


def _read_input(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    return require_file(path, "input file").read_bytes()


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
    from cuvil_mlir.compiler.context import make_context
    from cuvil_mlir.core.ir import module_to_text
    from cuvil_mlir.core.passes import run_pipeline

    if isinstance(chunk, bytes) and not chunk.startswith(_BYTECODE_MAGIC):
        chunk = _decode(chunk)
    ctx = make_context()
    module = _parse(chunk, ctx, name)
    with ctx:
        run_pipeline(module, passes)
        return module_to_text(module)


def _parse(source: str | bytes, ctx, name: str):
    """Parse into ``ctx``; a failure becomes a ParseFailure of ``error: FILE:LINE:COL: message`` lines."""
    from cuvil_mlir.core.ir import ir, parse_module

    try:
        module = parse_module(source, ctx)
    except ir.MLIRError as e:
        raise ParseFailure(_diagnostic_lines(e, name)) from e
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
    return lines or [f"error: {one_line(str(e))}"]


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
    from cuvil_mlir.core.ir import ir

    def visit(op):
        loc = op.location
        if getattr(loc, "filename", None) == "-":
            op.location = ir.Location.file(name, loc.start_line, loc.start_col)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)

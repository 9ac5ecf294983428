"""Passes by name: the registry, pipeline strings, and running passes with repro dumps.

A pass is a ``PatternSet`` (applied greedily) or, where it is not a rewrite, a
``FunctionPass`` (a function of the module). Both have a ``name`` (the pass name, the module
file name with dashes, and the lit test's name), return a Counter of what fired, and may have
``options``: an instance of a frozen dataclass whose fields are the pass's command-line
options (cuvil_mlir.core.options), its defaults where the pass is registered. The registry
parses ``name{option=value ...}`` into those options once; code configures a pass with a
typed options object, ``p.with_options(Options(...))``; ``p.spec`` writes it back as text.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Union

from cuvil_mlir.core.diagnostics import CuvilError, PassError, require_file
from cuvil_mlir.core.ir import ir, module_to_bytecode, parse_module
from cuvil_mlir.core.options import Configurable
from cuvil_mlir.core.patterns import PatternFailure, PatternSet


@dataclass(frozen=True)
class FunctionPass(Configurable):
    """A pass that is a function of the module: ``run(module)``, or ``run(module, options)``
    for a pass with options."""

    name: str
    run: Callable[..., Counter]
    description: str = ""
    options: object | None = None

    def apply(self, module: ir.Module) -> Counter:
        return self.run(module) if self.options is None else self.run(module, self.options)


Pass = Union[PatternSet, FunctionPass]


def run_pass(p: Pass, module: ir.Module) -> Counter:
    return p.apply(module)


_SPEC = re.compile(r"^([a-z0-9][a-z0-9+-]*)(?:\{([^{}]*)\})?$")


def parse_pass_spec(spec: str) -> tuple[str, dict[str, str]]:
    """``"lower-cuvil-to-torch{attention=decomposed}"`` -> (name, {"attention": "decomposed"})."""
    m = _SPEC.match(spec.strip())
    if not m:
        raise CuvilError(f"malformed pass '{spec}' (expected name or name{{option=value ...}})")
    options = {}
    for item in (m.group(2) or "").replace(",", " ").split():
        key, eq, value = item.partition("=")
        if not eq or not key or not value:
            raise CuvilError(f"malformed option '{item}' in pass '{spec}' (expected option=value)")
        if key in options:
            raise CuvilError(f"option '{key}' is given twice in pass '{spec}'")
        options[key] = value
    return m.group(1), options


class Registry:
    """Passes by name, in the order they were registered (the built-ins: pipeline order)."""

    def __init__(self, passes: Iterable[Pass] = ()):
        self._passes: dict[str, Pass] = {}
        for p in passes:
            self.register(p)

    def register(self, p: Pass, *, replace: bool = False) -> None:
        if p.name in self._passes and not replace:
            raise CuvilError(f"a pass named '{p.name}' is already registered")
        self._passes[p.name] = p

    def get(self, spec: str) -> Pass:
        """The pass for ``name`` or ``name{option=value ...}`` (options parsed and checked)."""
        name, options = parse_pass_spec(spec)
        if name not in self._passes:
            raise CuvilError(f"unknown pass '{name}'; known passes: {', '.join(self.names())}")
        return self._passes[name].configure(options)

    def entry(self, name: str) -> Pass:
        """The registered pass (its default options)."""
        return self._passes[name]

    def names(self) -> list[str]:
        return list(self._passes)


def parse_pipeline(text: str) -> list[str]:
    """``"a, b{x=1 y=2}"`` -> ``["a", "b{x=1 y=2}"]``: pass specs split at top-level commas."""
    specs, depth, current = [], 0, ""
    for ch in text:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            specs.append(current)
            current = ""
        else:
            current += ch
    specs.append(current)
    specs = [s.strip() for s in specs if s.strip()]
    for s in specs:
        parse_pass_spec(s)  # validates
    return specs


def load_pattern_file(path: str | os.PathLike) -> list[PatternSet]:
    """Import a user's Python file and return the PatternSets it defines at top level (with their
    default options)."""
    path = require_file(path, "pattern file")
    name = f"cuvil_user_patterns_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # what @dataclass and pickling look a module up by
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise CuvilError(f"failed to import pattern file {path}: {type(e).__name__}: {e}") from e
    sets: dict[str, PatternSet] = {}  # one per pass name (``patterns`` and ``PASS`` are often the same set)
    for value in vars(module).values():
        if isinstance(value, PatternSet) and value.patterns:
            sets.setdefault(value.name, value)
    if not sets:
        raise CuvilError(f"pattern file {path} defines no PatternSet with patterns at top level")
    return list(sets.values())


def run_pipeline(module: ir.Module, passes: list[Pass], *, repro_dir: str | None = None) -> dict[str, Counter]:
    """Run passes in order, verifying after each. On failure the pass's input is written
    to a file and the error carries the ``cuvil-opt`` command that reproduces it."""
    fired: dict[str, Counter] = {}
    for p in passes:
        before = module_to_bytecode(module)
        try:
            fired[p.name] = run_pass(p, module)
            _verify(module, p.name)
        except CuvilError as e:
            if e.repro is None:  # a pass's own error (e.g. verify-no-cuvil): add the repro
                e.repro, note = _save_repro(p, before, repro_dir, module.context)
                e.message += f" ({note})" if note else ""
            raise
        except (PatternFailure, ir.MLIRError) as e:
            cmd, note = _save_repro(p, before, repro_dir, module.context)
            raise PassError(f"pass '{p.name}' failed: {e}" + (f" ({note})" if note else ""), repro=cmd) from e
    return fired


def _verify(module: ir.Module, pass_name: str) -> None:
    try:
        module.operation.verify()
    except ir.MLIRError as e:
        raise PassError(f"pass '{pass_name}' produced invalid IR: {_diagnostics_text(e)}") from e


def _diagnostics_text(e: ir.MLIRError) -> str:
    notes = [f"{d.location}: {d.message}" for d in getattr(e, "error_diagnostics", [])]
    return "; ".join(notes) if notes else str(e)


def _save_repro(p: Pass, before: bytes, repro_dir: str | None, ctx=None) -> tuple[str | None, str]:
    """Write the pass's input to a file (small: cuvil_mlir/core/repro.py); return the cuvil-opt
    command that reruns the pass (None when nothing was written) and a note on the file."""
    from cuvil_mlir.core import repro
    def still_fails(small: bytes) -> bool:
        try:
            m = parse_module(small, ctx)
            run_pass(p, m)
            m.operation.verify()
        except Exception:
            return True
        return False

    path, note = repro.write(before, f"cuvil-repro-{p.name}-", still_fails if ctx is not None else None, repro_dir)
    return (f"cuvil-opt {path} -p {p.name}" if path else None), note

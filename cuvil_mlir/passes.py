"""Passes by name: the registry, pipeline strings, and running passes with repro dumps.

A pass is either a ``PatternSet`` (applied greedily) or a ``FunctionPass`` (a function of
the module). Both have a ``name`` (the pass name, the module file name with dashes, and
the lit test's name) and return a Counter of what fired.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Union

from cuvil_mlir.diagnostics import CuvilError, PassError
from cuvil_mlir.ir import ir, module_to_bytecode, parse_module
from cuvil_mlir.patterns import PatternFailure, PatternSet


@dataclass(frozen=True)
class FunctionPass:
    name: str
    run: Callable[[ir.Module], Counter]
    description: str = ""


@dataclass(frozen=True)
class ConfigurablePass:
    """A pass with options: ``name{option=value}`` calls ``make(option=value)``.

    ``options`` maps each option to its allowed values; the first is the default."""

    name: str
    make: Callable[..., "Pass"]
    options: dict[str, tuple[str, ...]]
    description: str = ""

    def check_known(self, given: dict[str, str]) -> None:
        """Fail on an option the pass does not have (for ``configure`` overrides whose options
        take free-form values)."""
        for key in given:
            if key not in self.options:
                raise CuvilError(f"pass '{self.name}' has no option '{key}'; options: {', '.join(self.options)}")

    def configure(self, given: dict[str, str]) -> "Pass":
        self.check_known(given)
        for key, value in given.items():
            if value not in self.options[key]:
                raise CuvilError(f"pass '{self.name}': option {key}={value} is not one of {', '.join(self.options[key])}")
        return self.make(**{k: given.get(k, allowed[0]) for k, allowed in self.options.items()})


Pass = Union[PatternSet, FunctionPass]


def run_pass(p: Pass, module: ir.Module) -> Counter:
    return p.apply(module) if isinstance(p, PatternSet) else p.run(module)


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
        options[key] = value
    return m.group(1), options


class Registry:
    def __init__(self, passes: Iterable[Pass | ConfigurablePass] = ()):
        self._passes: dict[str, Pass | ConfigurablePass] = {}
        for p in passes:
            self.register(p)

    def register(self, p: Pass | ConfigurablePass, *, replace: bool = False) -> None:
        if p.name in self._passes and not replace:
            raise CuvilError(f"a pass named '{p.name}' is already registered")
        self._passes[p.name] = p

    def get(self, spec: str) -> Pass:
        """The pass for ``name`` or ``name{option=value ...}``."""
        name, options = parse_pass_spec(spec)
        if name not in self._passes:
            raise CuvilError(f"unknown pass '{name}'; known passes: {', '.join(sorted(self._passes))}")
        entry = self._passes[name]
        if isinstance(entry, ConfigurablePass):
            return entry.configure(options)
        if options:
            raise CuvilError(f"pass '{name}' takes no options, got {options}")
        return entry

    def entry(self, name: str) -> Pass | ConfigurablePass:
        """The registered object (for listing), without configuring it."""
        return self._passes[name]

    def names(self) -> list[str]:
        return sorted(self._passes)


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
    """Import a user's Python file and return the PatternSets it defines at top level."""
    path = Path(path)
    if not path.is_file():
        raise CuvilError(f"pattern file not found: {path}")
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
        if isinstance(value, ConfigurablePass):  # a configurable pass: its default configuration
            value = value.configure({})
        if isinstance(value, PatternSet) and value.patterns:  # an empty set only holds examples
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
    """Write the pass's input to a file (small: cuvil_mlir/repro.py); return the cuvil-opt
    command that reruns the pass (None when nothing was written) and a note on the file."""
    from cuvil_mlir import repro

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

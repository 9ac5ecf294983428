"""The layering of docs/architecture.md (design card), checked on the source with ``ast``.

    cuvil_mlir.ir (+ diagnostics, tensor_types, patterns, passes)  <-  dialects  <-  lowering
        <-  targets  <-  everything else (API, CLI, pipeline, runtime, package, importers, ...)

Nothing imports upward. Each external dependency has one seam:
  - torch-mlir's MLIR bindings (torch_mlir.ir, .rewrite, .passmanager, .dialects.*): cuvil_mlir/ir.py;
  - torch-mlir's importers (torch_mlir.fx, torch_mlir.extras.*): cuvil_mlir/importers/;
  - iree.compiler: targets/iree.py;
  - iree.runtime: cuvil_mlir/runtime.py.

Every import counts: module level, inside functions, under ``if TYPE_CHECKING:``, and
``importlib.import_module("literal")``. Each rule is also run on small made-up modules, once
where it must fire and once where it must not, so a broken checker cannot pass silently.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import pytest
from conftest import package_dirs

ROOT = Path(__file__).resolve().parents[2]

# source folder -> the package it is installed as (read from pyproject.toml's package-dir)
TREES = package_dirs()

# The bottom layer: the MLIR seam and the leaf helpers that sit beside it.
BOTTOM = {
    "cuvil_mlir.ir",
    "cuvil_mlir.diagnostics",
    "cuvil_mlir.tensor_types",
    "cuvil_mlir.patterns",
    "cuvil_mlir.passes",
    "cuvil_mlir.repro",
}
LAYER_NAMES = ["ir", "dialects", "lowering", "targets", "api"]


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    path: str  # its source file, relative to the repo root
    line: int
    statement: str  # the import as written
    target: str  # the dotted name it reaches (module, or module.attribute)

    def __str__(self) -> str:
        return f"{self.path}:{self.line} ({self.module}): `{self.statement}` -> {self.target}"


# --- reading the tree ----------------------------------------------------------------------


def source_modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted name -> source file, for every .py of the four package trees."""
    modules = {}
    for folder, package in TREES.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package, *parts))] = path
    return modules


def _import_module_call(node: ast.AST) -> str | None:
    """The literal name in ``importlib.import_module("x")`` / ``import_module("x")`` / ``__import__("x")``."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in ("import_module", "__import__"):
        return None
    arg = node.args[0]
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    base = module if is_package else module.rpartition(".")[0]
    for _ in range(level - 1):
        base = base.rpartition(".")[0]
    return f"{base}.{name}" if name else base


def imports_of(source: str, module: str, path: str, *, is_package: bool = False, top_level_only: bool = False) -> list[Import]:
    """Every import in ``source``; ``from a import b`` reaches ``a.b`` (a submodule or a name in ``a``)."""
    tree = ast.parse(source, filename=path)
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_relative(module, is_package, node.level, node.module) if node.level else node.module
            targets = [base if alias.name == "*" else f"{base}.{alias.name}" for alias in node.names]
        elif (name := _import_module_call(node)) is not None:
            targets = [name]
        else:
            continue
        statement = " ".join((ast.get_source_segment(source, node) or "").split())
        found += [Import(module, path, node.lineno, statement, t) for t in targets]
    return found


@functools.cache
def tree_imports(top_level_only: bool = False) -> tuple[Import, ...]:
    found = []
    for module, path in source_modules().items():
        found += imports_of(
            path.read_text(),
            module,
            str(path.relative_to(ROOT)),
            is_package=path.name == "__init__.py",
            top_level_only=top_level_only,
        )
    return tuple(found)


# --- the rules: each returns the imports that break it ------------------------------------------


def layer(module: str) -> int:
    if module in BOTTOM:
        return 0
    for index, package in ((1, "cuvil_mlir.dialects"), (2, "cuvil_mlir.lowering"), (3, "cuvil_mlir.targets")):
        if module == package or module.startswith(package + "."):
            return index
    return 4


def internal_module(target: str, known: set[str]) -> str | None:
    """The cuvil_mlir module an import reaches (longest known prefix), or None if external."""
    if target != "cuvil_mlir" and not target.startswith("cuvil_mlir."):
        return None
    parts = target.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in known:
            return ".".join(parts[:end])
    return "cuvil_mlir"


def upward_imports(imports: Iterable[Import], known: set[str]) -> list[str]:
    bad = []
    for imp in imports:
        reached = internal_module(imp.target, known)
        if reached is None or layer(reached) <= layer(imp.module):
            continue
        bad.append(f"{imp}: layer '{LAYER_NAMES[layer(imp.module)]}' imports '{reached}' of higher layer '{LAYER_NAMES[layer(reached)]}'")
    return bad


def _within(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def seam_violations(imports: Iterable[Import]) -> list[str]:
    """External imports made outside their seam."""
    bad = []
    for imp in imports:
        t, m = imp.target, imp.module
        if _within(t, "torch_mlir.fx", "torch_mlir.extras"):
            if not _within(m, "cuvil_mlir.importers"):
                bad.append(f"{imp}: torch-mlir's importers may only be imported in cuvil_mlir/importers/")
        elif _within(t, "torch_mlir"):
            if m != "cuvil_mlir.ir":
                bad.append(f"{imp}: torch-mlir's MLIR bindings may only be imported in cuvil_mlir/ir.py (use cuvil_mlir.ir)")
        elif _within(t, "iree.compiler"):
            if m != "cuvil_mlir.targets.iree":
                bad.append(f"{imp}: iree.compiler may only be imported in targets/iree.py")
        elif _within(t, "iree.runtime"):
            if m != "cuvil_mlir.runtime":
                bad.append(f"{imp}: iree.runtime may only be imported in cuvil_mlir/runtime.py")
        elif _within(t, "iree"):
            bad.append(f"{imp}: IREE is reached only through iree.compiler (targets/iree.py) or iree.runtime (cuvil_mlir/runtime.py)")
    return bad


def eager_package_imports(top_level: Iterable[Import], known: set[str]) -> list[str]:
    """Importing any cuvil_mlir module first runs cuvil_mlir/__init__.py: at module level it may only
    import the bottom layer, or every layer would pull in the ones above it."""
    bad = []
    for imp in top_level:
        reached = internal_module(imp.target, known)
        if imp.module != "cuvil_mlir" or reached is None or reached in BOTTOM:
            continue
        bad.append(f"{imp}: cuvil_mlir/__init__.py runs on every import of the package; import '{reached}' inside the function that needs it")
    return bad


def _fail(bad: list[str], rule: str) -> None:
    assert not bad, f"{rule} ({len(bad)}):\n  " + "\n  ".join(bad)


# --- the tree obeys the rules -------------------------------------------------------------------


def test_the_tree_has_the_modules_the_rules_name():
    known = set(source_modules())
    for module in [*BOTTOM, "cuvil_mlir", "cuvil_mlir.runtime", "cuvil_mlir.targets.iree", "cuvil_mlir.dialects", "cuvil_mlir.lowering", "cuvil_mlir.targets"]:
        assert module in known, f"{module} is named by a layering rule but has no source file; update tests/python/test_layering.py"


def test_nothing_imports_upward():
    _fail(upward_imports(tree_imports(), set(source_modules())), "upward imports (ir <- dialects <- lowering <- targets <- api)")


def test_torch_mlir_bindings_only_in_ir_py():
    _fail([b for b in seam_violations(tree_imports()) if "torch-mlir's MLIR bindings" in b], "torch-mlir binding imports outside cuvil_mlir/ir.py")


def test_torch_mlir_importers_only_in_importers_package():
    _fail([b for b in seam_violations(tree_imports()) if "torch-mlir's importers" in b], "torch-mlir importer imports outside cuvil_mlir/importers/")


def test_iree_compiler_only_in_targets_iree():
    _fail([b for b in seam_violations(tree_imports()) if "iree.compiler may" in b or "IREE is reached" in b], "iree.compiler imports outside targets/iree.py")


def test_iree_runtime_only_in_runtime_py():
    _fail([b for b in seam_violations(tree_imports()) if "iree.runtime may" in b], "iree.runtime imports outside cuvil_mlir/runtime.py")


def test_package_init_imports_only_the_bottom_layer_eagerly():
    _fail(eager_package_imports(tree_imports(top_level_only=True), set(source_modules())), "eager imports in cuvil_mlir/__init__.py")


def test_importing_a_layer_loads_no_higher_layer():
    """The same rule at run time: import the layers bottom-up in a fresh interpreter and check that
    no module of a higher layer has been loaded yet (catches what ast cannot see)."""
    by_layer = [sorted(m for m in source_modules() if m != "cuvil_mlir" and layer(m) == i) for i in range(5)]
    script = f"""
import importlib, sys
import cuvil_mlir
print(cuvil_mlir.__file__)
by_layer = {by_layer!r}
def layer(m):
    return next((i for i, mods in enumerate(by_layer) if m in mods), None)
for i, mods in enumerate(by_layer):
    for m in mods:
        importlib.import_module(m)
        above = sorted(n for n in sys.modules if layer(n) is not None and layer(n) > i)
        if above:
            sys.exit(f"importing {{m}} (layer {{i}}) loaded higher-layer modules: {{above}}")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT / "tests")
    assert result.stdout, f"`import cuvil_mlir` failed:\n{result.stderr[-3000:]}"
    installed = Path(result.stdout.splitlines()[0]).parent.parent
    if installed != ROOT:
        pytest.skip(f"the cuvil_mlir this interpreter imports is not this tree ({installed}); pip install -e .")
    assert result.returncode == 0, result.stderr[-3000:]


# --- the checker itself: each rule fires where it must and not where it must not --------------

KNOWN = set(TREES.values()) | BOTTOM | {"cuvil_mlir", "cuvil_mlir.dialects.cuvil", "cuvil_mlir.lowering.fuse", "cuvil_mlir.targets.iree", "cuvil_mlir.runtime", "cuvil_mlir.pipeline"}


def _imports(source: str, module: str, *, is_package: bool = False, top_level_only: bool = False) -> list[Import]:
    return imports_of(source, module, f"<{module}>", is_package=is_package, top_level_only=top_level_only)


def test_checker_flags_an_upward_import_in_a_function_and_names_it():
    source = "from cuvil_mlir.ir import ir\n\ndef f():\n    from cuvil_mlir.lowering import fuse\n"
    bad = upward_imports(_imports(source, "cuvil_mlir.dialects.cuvil"), KNOWN)
    assert len(bad) == 1
    assert "cuvil_mlir.dialects.cuvil" in bad[0] and "from cuvil_mlir.lowering import fuse" in bad[0] and ":4" in bad[0]


def test_checker_resolves_relative_and_package_imports():
    # targets/__init__.py: `from . import cpu` is its own layer; `from .. import pipeline` is upward
    imps = _imports("from . import iree\nfrom .. import pipeline\n", "cuvil_mlir.targets", is_package=True)
    assert [i.target for i in imps] == ["cuvil_mlir.targets.iree", "cuvil_mlir.pipeline"]
    assert len(upward_imports(imps, KNOWN)) == 1
    # `from cuvil_mlir import __version__` reaches the package itself, the top layer
    assert upward_imports(_imports("from cuvil_mlir import __version__\n", "cuvil_mlir.passes"), KNOWN)


def test_checker_allows_downward_and_same_layer_imports():
    assert not upward_imports(_imports("from cuvil_mlir.dialects import cuvil\nfrom cuvil_mlir.patterns import PatternSet\n", "cuvil_mlir.lowering.fuse"), KNOWN)
    assert not upward_imports(_imports("from cuvil_mlir.ir import ir\n", "cuvil_mlir.patterns"), KNOWN)
    assert not upward_imports(_imports("from cuvil_mlir.targets import iree\nimport cuvil_mlir.lowering\n", "cuvil_mlir.pipeline"), KNOWN)


def test_checker_sees_import_module_calls():
    imps = _imports("import importlib\nm = importlib.import_module('iree.runtime')\n", "cuvil_mlir.pipeline")
    assert any("iree.runtime may" in b for b in seam_violations(imps))


def test_checker_flags_each_seam_outside_its_module():
    cases = {
        "from torch_mlir import ir": "torch-mlir's MLIR bindings",
        "from torch_mlir.dialects import torch as t": "torch-mlir's MLIR bindings",
        "import torch_mlir.passmanager": "torch-mlir's MLIR bindings",
        "from torch_mlir import fx": "torch-mlir's importers",
        "from torch_mlir.extras.fx_importer import FxImporter": "torch-mlir's importers",
        "from iree.compiler import compile_str": "iree.compiler may",
        "import iree.compiler.ir": "iree.compiler may",
        "import iree.runtime as rt": "iree.runtime may",
        "import iree": "IREE is reached",
    }
    for statement, rule in cases.items():
        bad = seam_violations(_imports(f"def f():\n    {statement}\n", "cuvil_mlir.lowering.fuse"))
        assert len(bad) == 1 and rule in bad[0] and "cuvil_mlir.lowering.fuse" in bad[0], (statement, bad)


def test_checker_allows_each_seam_in_its_own_module():
    allowed = {
        "cuvil_mlir.ir": "from torch_mlir import ir, passmanager, rewrite\nfrom torch_mlir.dialects import ext, irdl",
        "cuvil_mlir.importers.fx": "from torch_mlir import fx\nfrom torch_mlir.extras.fx_importer import FxImporter",
        "cuvil_mlir.targets.iree": "from iree.compiler import compile_str",
        "cuvil_mlir.runtime": "import iree.runtime as rt",
    }
    for module, source in allowed.items():
        assert not seam_violations(_imports(source, module)), module
    # the seams are not interchangeable
    assert seam_violations(_imports("from torch_mlir import fx", "cuvil_mlir.ir"))
    assert seam_violations(_imports("import iree.runtime", "cuvil_mlir.targets.iree"))


def test_checker_flags_eager_imports_in_the_package_init_only():
    source = "from cuvil_mlir.diagnostics import CuvilError\nfrom cuvil_mlir.pipeline import compile_program\n\ndef f():\n    from cuvil_mlir.pipeline import Options\n"
    bad = eager_package_imports(_imports(source, "cuvil_mlir", is_package=True, top_level_only=True), KNOWN)
    assert len(bad) == 1 and "cuvil_mlir.pipeline" in bad[0] and ":2" in bad[0]
    assert not eager_package_imports(_imports(source, "cuvil_mlir.pipeline", top_level_only=True), KNOWN)

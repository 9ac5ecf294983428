"""The built wheel against the tree: pyproject.toml maps dialects/, lowering/ and targets/ into
cuvil_mlir.*, and lists the packages by hand, so a new module or sub-package can be left out of the
wheel without any other test noticing (an editable install still finds it).

The wheel is built once, offline (``pip wheel --no-build-isolation --no-index``, a few seconds),
from a copy of the tree, so stale ``build/`` or ``*.egg-info`` folders cannot hide or add files.
"""

from __future__ import annotations

import ast
import configparser
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path, PurePosixPath

import pytest
from conftest import package_dirs
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]

# source folder -> where its modules live in the wheel (read from pyproject.toml's package-dir)
MAPPED = {folder: package.replace(".", "/") for folder, package in package_dirs().items()}
FLAT = ("dialects", "targets")  # one module per dialect / target
STAGE_FOLDERS = ("raising", "fusion", "precision", "kernels", "workarounds", "to_torch")  # lowering/: one folder per stage, each flat
SCRIPTS = {"cuvil": "cuvil_mlir.cli:main", "cuvil-opt": "cuvil_mlir.cli.opt:main"}

# what a copy of the tree leaves out (.gitignore's build outputs and artifacts)
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "Output",
    ".gpu", "*.vmfb", "*.cuvilpkg", "*.pt2", "*.onnx", "cuvil-repro-*",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=NOT_COPIED)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(tmp / "out"), str(src)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"wheel build failed: {' '.join(cmd)}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    (path,) = (tmp / "out").glob("cuvil_mlir-*.whl")
    with zipfile.ZipFile(path) as zf:
        yield zf


def tree_modules() -> set[str]:
    """Every .py of the four package trees, at the path it must have in the wheel."""
    expected = set()
    for folder, dest in MAPPED.items():
        for path in (ROOT / folder).rglob("*.py"):
            expected.add(str(PurePosixPath(dest, *path.relative_to(ROOT / folder).parts)))
    return expected


def dist_info(wheel: zipfile.ZipFile, name: str) -> str:
    (member,) = [n for n in wheel.namelist() if n.endswith(f".dist-info/{name}") and n.count("/") == 1]
    return wheel.read(member).decode()


def test_wheel_holds_every_module_of_the_tree(wheel):
    missing = sorted(tree_modules() - set(wheel.namelist()))
    assert not missing, (
        "modules of the tree missing from the wheel (add their package to [tool.setuptools] packages "
        f"in pyproject.toml): {missing}"
    )


def test_wheel_holds_no_module_the_tree_lacks(wheel):
    extra = sorted(n for n in wheel.namelist() if n.endswith(".py") and n not in tree_modules())
    assert not extra, f"python files in the wheel that are not modules of the four package trees: {extra}"


def test_no_tests_benchmarks_or_examples_leak_into_the_wheel(wheel):
    leaked = []
    for name in wheel.namelist():
        parts = PurePosixPath(name).parts
        if parts[0] != "cuvil_mlir" and not (len(parts) == 2 and parts[0].endswith(".dist-info")):
            leaked.append(name)  # anything outside the package and its metadata
        elif {"tests", "benchmarks", "examples", "docs"} & set(parts) or parts[-1].startswith("test_") or parts[-1] == "conftest.py":
            leaked.append(name)
    assert not leaked, f"files in the wheel that do not belong to the package: {leaked}"


def console_scripts(wheel: zipfile.ZipFile) -> dict[str, str]:
    entry_points = configparser.ConfigParser()
    entry_points.read_string(dist_info(wheel, "entry_points.txt"))
    return dict(entry_points["console_scripts"]) if entry_points.has_section("console_scripts") else {}


def test_wheel_entry_points_are_cuvil_and_cuvil_opt(wheel):
    assert console_scripts(wheel) == SCRIPTS


def test_entry_points_name_functions_the_wheel_defines(wheel):
    problems = []
    for script, target in console_scripts(wheel).items():
        module, _, function = target.partition(":")
        path = module.replace(".", "/")
        member = next((m for m in (f"{path}.py", f"{path}/__init__.py") if m in wheel.namelist()), None)
        if member is None:
            problems.append(f"console script '{script}' = {target}, but the wheel has no {path}.py or {path}/__init__.py")
            continue
        tree = ast.parse(wheel.read(member).decode())
        if function not in {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}:
            problems.append(f"console script '{script}' = {target}, but {member} defines no top-level {function}()")
    assert not problems, "; ".join(problems)


def test_constraints_pin_every_requirement_of_the_wheel(wheel):
    """.ci/constraints.txt must pin each dependency (dev extra included) to a version it accepts."""
    pins = {}
    for line in (ROOT / ".ci" / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f".ci/constraints.txt: '{line}' is not an exact pin"
            pins[_normal(req.name)] = Version(spec.version)
    metadata = Parser().parsestr(dist_info(wheel, "METADATA"))
    problems = []
    for text in metadata.get_all("Requires-Dist") or []:
        req = Requirement(text)
        pin = pins.get(_normal(req.name))
        if pin is None:
            problems.append(f"{text}: not pinned")
        elif not req.specifier.contains(pin, prereleases=True):
            problems.append(f"{text}: pinned to {pin}, which it does not accept")
    assert not problems, "update .ci/constraints.txt: " + "; ".join(problems)


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


@pytest.mark.parametrize("folder", FLAT)
def test_mapped_folders_are_flat(folder):
    nested = sorted(str(p.relative_to(ROOT)) for p in (ROOT / folder).rglob("*.py") if p.parent != ROOT / folder)
    assert not nested, f"{folder}/ must stay flat (one module per dialect/target, docs/architecture.md); nested modules: {nested}"


def test_lowering_has_one_flat_folder_per_stage():
    """lowering/<stage>/<pass>.py, and tests/lowering/<stage>/<pass>.mlir beside it: one name, three places."""
    lowering = ROOT / "lowering"
    misplaced = sorted(str(p.relative_to(ROOT)) for p in lowering.rglob("*.py")
                       if p.parent != lowering and (p.parent.parent != lowering or p.parent.name not in STAGE_FOLDERS))
    assert not misplaced, f"pass modules live in lowering/<stage>/ ({', '.join(STAGE_FOLDERS)}), one level deep: {misplaced}"
    top = sorted(p.name for p in lowering.glob("*.py"))
    assert top == ["__init__.py", "common.py"], f"lowering/ holds only the registry and the shared matchers, got {top}"
    for path in lowering.glob("*/*.py"):
        if path.name == "__init__.py":
            continue
        test = ROOT / "tests" / "lowering" / path.parent.name / (path.stem.replace("_", "-") + ".mlir")
        assert test.is_file(), f"{path.relative_to(ROOT)} has no lit test at {test.relative_to(ROOT)}"

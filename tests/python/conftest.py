"""Shared pytest setup: examples/ on the path (the e2e models live in examples/models.py)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))


def package_dirs() -> dict[str, str]:
    """pyproject.toml's package-dir as source folder -> installed package (dotted)."""
    import tomllib

    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {folder: package for package, folder in mapping.items()}


def pytest_configure(config):
    """Repro files of the compiles the tests make fail on purpose go to one folder of this run
    (the temp root pytest cleans up), not loose into the system temp folder; a test that sets
    CUVIL_REPRO_DIR itself still wins. CLI tests in subprocesses inherit it."""
    import os
    import tempfile

    if "CUVIL_REPRO_DIR" not in os.environ:
        os.environ["CUVIL_REPRO_DIR"] = tempfile.mkdtemp(prefix="cuvil-test-repros-")
        config.add_cleanup(lambda: __import__("shutil").rmtree(os.environ.pop("CUVIL_REPRO_DIR"), ignore_errors=True))

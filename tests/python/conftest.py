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

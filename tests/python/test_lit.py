"""Run the lit + FileCheck suites (tests/dialects, tests/lowering) so that plain `pytest` runs them too."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str | None:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


def test_lit_suites_pass():
    lit = _tool("lit")
    if lit is None or _tool("filecheck") is None:
        pytest.skip("lit and filecheck are not installed (pip install -e .[dev])")
    # one worker: the machines have few cores and each test starts a few Python processes
    result = subprocess.run([lit, "-v", "-j", "1", str(TESTS)], capture_output=True, text=True, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"lit failed:\n{output}"
    assert "Passed" in output and "Failed" not in output, output

"""Shared pytest setup: examples/ on the path (the e2e models live in examples/models.py)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

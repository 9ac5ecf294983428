"""lit configuration: IR in -> IR out tests (``.mlir``) and MLIR-style Python tests (``.py``).

Run with ``lit -v tests/`` from the repository root (or through pytest: tests/python/test_lit.py).
``FileCheck`` is the Python ``filecheck`` clone; ``cuvil-opt`` and ``%PYTHON`` are the tools of
the Python environment lit runs in (next to its interpreter, else on PATH).
"""

import os
import shutil
import sys

import lit.formats

config.name = "cuvil-mlir"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".py"]
config.test_source_root = os.path.dirname(__file__)
# tests/python holds pytest files, not lit tests.
config.excludes = ["python", "lit.cfg.py", "Output", "__pycache__"]

bin_dir = os.path.dirname(sys.executable)


def tool(name):
    path = os.path.join(bin_dir, name)
    if os.path.exists(path):
        return path
    found = shutil.which(name)
    if found is None:
        lit_config.fatal(f"'{name}' is neither next to {sys.executable} nor on PATH; install cuvil-mlir with its dev extras")
    return found


# Whole words only, so paths and pass names that contain these strings stay intact.
config.substitutions.append((r"(?<![\w./-])FileCheck(?![\w-])", tool("filecheck")))
config.substitutions.append((r"(?<![\w./-])cuvil-opt(?![\w.-])", tool("cuvil-opt")))
config.substitutions.append(("%PYTHON", sys.executable))

config.environment["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])
for name in ("HOME", "TMPDIR"):  # torch and the MLIR bindings want a home and a temp dir
    if name in os.environ:
        config.environment[name] = os.environ[name]

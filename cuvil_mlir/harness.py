"""The public name of ``cuvil_mlir.eval.harness`` (the code lives in cuvil_mlir/eval/harness.py): importing
``cuvil_mlir.harness`` gives that very module, so code written against either name works."""

import sys

from cuvil_mlir.eval import harness as _module

sys.modules[__name__] = _module

"""The public name of ``cuvil_mlir.eval.testing`` (the code lives in cuvil_mlir/eval/testing.py): importing
``cuvil_mlir.testing`` gives that very module, so code written against either name works."""

import sys

from cuvil_mlir.eval import testing as _module

sys.modules[__name__] = _module

"""External parameters: weights that live outside the IR, referenced by name.

A big model's weights do not go into the module. The importer emits, for each weight, a
reference op (generic form)::

    %w = "torch.operator"() <{name = "cuvil.parameter"}> {cuvil.key = "layers.0.q_proj.weight"}
             : () -> !torch.vtensor<[2048,2048],f32>

and puts the tensor (not a copy: a numpy view of the exported program's own storage) into a
``ParameterStore`` under that key. ``torch.operator`` is a torch op no folder or pattern
touches, so the reference survives every stage unchanged; at the hand-off to IREE
(targets/iree.py) it becomes a ``util.global`` initialized from ``#stream.parameter.named``.

Passes read and write weights through ``literal_array`` / ``literal`` (core/patterns.py),
which consult the active store: a weight a pass computes (a BN-folded conv, an fp16 or int4
copy) is stored under a key derived from its bytes, so two targets that compute the same
weight share one entry, and the archive holds each weight once.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

PARAMETER_OP = "cuvil.parameter"  # the ``name`` of the torch.operator that references a parameter
KEY_ATTR = "cuvil.key"
SCOPE = "model"  # the scope of every parameter: #stream.parameter.named<"model"::key>

# Where the inline/external rule draws its lines (params="auto"): a program whose weights total
# at least EXTERNAL_FROM_BYTES gets them external; then every tensor constant of at least
# MIN_PARAMETER_BYTES is a parameter (smaller ones, scalars, masks, rotary tables stay literals
# that patterns fold).
EXTERNAL_FROM_BYTES = 64 << 20
MIN_PARAMETER_BYTES = 4096
MODES = ("auto", "inline", "external")

# vtensor element types a parameter may have (an i1 tensor stays a literal: IREE stores it
# one byte per element, numpy's bool too, but torch-mlir imports bool constants as ui8 casts)
PARAMETER_DTYPES = ("f64", "f32", "f16", "bf16", "si64", "si32", "si16", "si8", "ui8")


def resolve_mode(params: str, weight_bytes: int) -> str:
    """``"inline"`` or ``"external"`` for a program with ``weight_bytes`` of tensor constants."""
    if params not in MODES:
        from cuvil_mlir.core.diagnostics import CuvilError

        raise CuvilError(f"params='{params}': expected one of {', '.join(MODES)}")
    if params != "auto":
        return params
    return "external" if weight_bytes >= EXTERNAL_FROM_BYTES else "inline"


@dataclass
class ParameterStore:
    """key -> numpy array (C-contiguous, the weight's own dtype; bfloat16 as ml_dtypes)."""

    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    def add(self, key: str, array: np.ndarray) -> str:
        self.arrays[key] = np.ascontiguousarray(array)
        return key

    def add_derived(self, array: np.ndarray) -> str:
        """Store a weight a pass computed, under a key made from its bytes, dtype and shape."""
        array = np.ascontiguousarray(array)
        digest = hashlib.blake2b(memoryview(array.reshape(-1).view(np.uint8)), digest_size=12)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        return self.add(f"derived.{digest.hexdigest()}", array)

    def get(self, key: str) -> np.ndarray | None:
        return self.arrays.get(key)

    def subset(self, keys) -> "ParameterStore":
        return ParameterStore({k: self.arrays[k] for k in sorted(keys)})

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())


_active: contextvars.ContextVar[ParameterStore | None] = contextvars.ContextVar("cuvil_parameter_store", default=None)


@contextlib.contextmanager
def active(store: ParameterStore | None) -> Iterator[ParameterStore | None]:
    """Make ``store`` the one passes read and write weights through (None: inline weights)."""
    token = _active.set(store)
    try:
        yield store
    finally:
        _active.reset(token)


def current() -> ParameterStore | None:
    return _active.get()


def parameter_key(op) -> str | None:
    """The key of a parameter reference op, else None."""
    if op is None or op.operation.name != "torch.operator":
        return None
    attrs = op.operation.attributes
    if "name" not in attrs or KEY_ATTR not in attrs:
        return None
    from cuvil_mlir.core.ir import ir

    if ir.StringAttr(attrs["name"]).value != PARAMETER_OP:
        return None
    return ir.StringAttr(attrs[KEY_ATTR]).value


def reference(key: str, result_type):
    """A parameter reference op for ``key`` at the current insertion point; its value."""
    from cuvil_mlir.core.ir import ir

    op = ir.Operation.create("torch.operator", results=[result_type],
                             attributes={"name": ir.StringAttr.get(PARAMETER_OP), KEY_ATTR: ir.StringAttr.get(key)})
    return op.result


def torch_array(tensor) -> np.ndarray:
    """A numpy view of a CPU torch tensor's storage (bfloat16 as ml_dtypes.bfloat16): no copy
    when the tensor is contiguous."""
    import torch

    data = tensor.detach()
    if data.device.type != "cpu":
        data = data.cpu()
    data = data.contiguous()
    if data.dtype == torch.bfloat16:
        import ml_dtypes

        return data.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return data.numpy()

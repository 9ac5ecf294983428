"""Reading ``!torch.vtensor`` types: shape (-1 for a dynamic dim) and dtype.

The torch dialect has no Python type classes in the bindings, so the printed form is
parsed. This is a pure leaf module (no MLIR objects are created; numpy only when asked).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VTENSOR = re.compile(r"^!torch\.vtensor<\[([^\]]*)\],([a-z0-9]+)>$")

# torch dtype names <-> MLIR element type names used in !torch.vtensor.
TORCH_TO_MLIR = {
    "float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64",
    "int64": "si64", "int32": "si32", "int16": "si16", "int8": "si8", "uint8": "ui8", "bool": "i1",
}
MLIR_TO_NUMPY = {
    "f32": "float32", "f16": "float16", "f64": "float64", "bf16": "bfloat16",
    "si64": "int64", "si32": "int32", "si16": "int16", "si8": "int8", "ui8": "uint8", "i1": "bool",
    "ui16": "uint16", "ui32": "uint32", "ui64": "uint64",  # ONNX models have them
}
NUMPY_TO_MLIR = {v: k for k, v in MLIR_TO_NUMPY.items()}
# torch's ScalarType numbers: the dtype operand of prims.convert_element_type / aten.to.dtype
TORCH_DTYPE_CODE = {"ui8": 0, "si8": 1, "si16": 2, "si32": 3, "si64": 4, "f16": 5, "f32": 6, "f64": 7, "i1": 11, "bf16": 15}
FLOAT_WIDTH = {"bf16": 16, "f16": 16, "f32": 32, "f64": 64}  # the float element types, by bits


def numpy_dtype(dtype: str):
    """The numpy dtype of an MLIR element type name (bf16: ml_dtypes', numpy has none)."""
    import numpy as np

    if dtype == "bf16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(MLIR_TO_NUMPY[dtype])


def dtype_of_numpy(dtype) -> str | None:
    """The MLIR element type name of a numpy dtype (None when there is none)."""
    return NUMPY_TO_MLIR.get(str(dtype))


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]
    dtype: str

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(d >= 0 for d in self.shape)


def parse_vtensor(type_text: str) -> TensorInfo | None:
    """``"!torch.vtensor<[4,?],f32>"`` -> TensorInfo((4, -1), "f32"); None if not a ranked vtensor."""
    m = _VTENSOR.match(type_text.strip())
    if not m:
        return None
    dims = m.group(1)
    shape = tuple(-1 if d.strip() == "?" else int(d) for d in dims.split(",")) if dims.strip() else ()
    return TensorInfo(shape, m.group(2))


def tensor_info(mlir_type) -> TensorInfo | None:
    return parse_vtensor(str(mlir_type))


def vtensor_type_text(shape, dtype: str) -> str:
    dims = ",".join("?" if d < 0 else str(d) for d in shape)
    return f"!torch.vtensor<[{dims}],{dtype}>"

"""The call signature of a compiled model: input and output tensor specs."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cuvil_mlir.core.diagnostics import InputError
from cuvil_mlir.core.tensor_types import MLIR_TO_NUMPY, parse_vtensor


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]  # -1 = dynamic
    dtype: str  # numpy dtype name

    def describe(self) -> str:
        dims = ", ".join("?" if d < 0 else str(d) for d in self.shape)
        return f"{self.dtype}[{dims}]"

    def to_json(self) -> dict:
        return {"shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_json(cls, d: dict) -> "TensorSpec":
        return cls(tuple(int(x) for x in d["shape"]), str(d["dtype"]))


@dataclass(frozen=True)
class Signature:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def to_json(self) -> dict:
        return {"inputs": [s.to_json() for s in self.inputs], "outputs": [s.to_json() for s in self.outputs]}

    @classmethod
    def from_json(cls, d: dict) -> "Signature":
        return cls(tuple(TensorSpec.from_json(s) for s in d["inputs"]), tuple(TensorSpec.from_json(s) for s in d["outputs"]))

    def check(self, arrays) -> None:
        """Raise InputError naming the first input that does not fit."""
        if len(arrays) != len(self.inputs):
            expected = ", ".join(s.describe() for s in self.inputs)
            raise InputError(f"expected {len(self.inputs)} input(s) ({expected}), got {len(arrays)}")
        for i, (a, spec) in enumerate(zip(arrays, self.inputs)):
            got_dtype = str(a.dtype)
            if got_dtype != spec.dtype:
                raise InputError(f"input {i}: expected dtype {spec.dtype}, got {got_dtype}")
            if len(a.shape) != len(spec.shape) or any(e >= 0 and e != g for e, g in zip(spec.shape, a.shape)):
                raise InputError(f"input {i}: expected shape {spec.describe()}, got {got_dtype}{list(a.shape)}")


def numpy_dtype(name: str):
    """The numpy dtype of a signature's dtype name (bfloat16, float8_*, int4, ...: ml_dtypes',
    IREE's dependency)."""
    import numpy as np

    if name == "bfloat16" or name.startswith(("float8_", "float4_", "int4", "uint4", "int2", "uint2")):
        import ml_dtypes

        if not hasattr(ml_dtypes, name):
            raise InputError(f"unknown dtype {name} (ml_dtypes {ml_dtypes.__version__} has no such type)")
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def as_signature(arrays, signature: Signature) -> list:
    """Float numpy ``arrays`` cast to the float dtypes ``signature`` takes (a policy with
    ``io=fp16`` takes float16 where the model took float32); others unchanged."""
    out = []
    for a, spec in zip(arrays, signature.inputs):
        if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
            a = a.astype(numpy_dtype(spec.dtype)) if a.dtype.name != spec.dtype else a
        out.append(a)
    return out


_COMPLEX = re.compile(r"^!torch\.vtensor<\[([^\]]*)\],complex<(f32|f64)>>$")


def spec_from_type(type_text: str) -> TensorSpec:
    # a mutable argument (!torch.tensor: the function updates it in place) is a tensor at IREE's ABI too
    info = parse_vtensor(re.sub(r"^!torch\.tensor<", "!torch.vtensor<", type_text.strip()))
    complex_match = _COMPLEX.match(type_text.strip()) if info is None else None
    if complex_match:  # complex64/complex128: numpy and IREE's runtime hold them
        dims = complex_match.group(1)
        shape = tuple(-1 if d.strip() == "?" else int(d) for d in dims.split(",")) if dims.strip() else ()
        return TensorSpec(shape, {"f32": "complex64", "f64": "complex128"}[complex_match.group(2)])
    if info is None:
        raise InputError(f"unsupported argument or result type {type_text} (only tensors are supported)")
    return TensorSpec(info.shape, MLIR_TO_NUMPY.get(info.dtype, info.dtype))


def signature_of(module, func_name: str = "main") -> Signature:
    """Read the signature of ``func_name`` from a torch-dialect module."""
    from cuvil_mlir.core.ir import ir  # here only: loading a package (the runtime side) needs no MLIR bindings

    for op in module.body.operations:
        if op.operation.name == "func.func" and str(op.attributes["sym_name"]).strip('"') == func_name:
            ftype = op.attributes["function_type"]
            ft = ir.FunctionType(ir.TypeAttr(ftype).value)
            return Signature(tuple(spec_from_type(str(t)) for t in ft.inputs), tuple(spec_from_type(str(t)) for t in ft.results))
    raise InputError(f"the module has no function '{func_name}'")

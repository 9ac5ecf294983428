"""Calibration data for static int8 (``precision="int8"``): activation ranges at the input of
every quantizable op, as measured by cuvil_mlir/compiler/calibrate.py on sample inputs.

    cal = cuvil_mlir.calibrate(model, [x1, x2, x3], method="percentile", percentile=99.99)
    compiled = cuvil_mlir.compile(model, (x1,), precision="int8", calibration=cal)

The ranges are measured on the ops the compile will quantize: the model is imported and run
through the target's stages up to "fused" (the same passes a compile runs before the
"precision" stage), the inputs of the quantizable ops (lowering/precision/quantize_static.py:
``quantizable_ops``) are added as extra results, and that module runs on IREE CPU over the
samples. Each range is keyed by the op's index among the quantizable ops, its kind and its
shapes; a compile whose module does not match fails with an error naming the first op that
differs. A Calibration is plain data (``to_json`` / ``from_json``, ``save`` / ``load``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from cuvil_mlir.core.diagnostics import CuvilError

METHODS = ("minmax", "percentile")


@dataclass(frozen=True)
class OpRange:
    """The measured input range of one quantizable op (see lowering/precision/quantize_static.py: OpKey)."""

    index: int
    kind: str
    input_shape: tuple[int, ...]
    weight_shape: tuple[int, ...]
    min: float
    max: float


@dataclass(frozen=True)
class Calibration:
    method: str
    percentile: float | None
    samples: int
    target: str
    ops: tuple[OpRange, ...] = field(default=())

    @property
    def ranges(self) -> list:
        """``(OpKey, min, max)`` per op, as ``quantize_static.with_calibration`` takes them."""
        from cuvil_mlir.lowering.precision.quantize_static import OpKey

        return [(OpKey(r.index, r.kind, tuple(r.input_shape), tuple(r.weight_shape)), r.min, r.max) for r in self.ops]

    def to_json(self) -> dict:
        return {"format": "cuvil-calibration", "version": 1, "method": self.method, "percentile": self.percentile,
                "samples": self.samples, "target": self.target,
                "ops": [{**r.__dict__, "input_shape": list(r.input_shape), "weight_shape": list(r.weight_shape)} for r in self.ops]}

    @classmethod
    def from_json(cls, data: dict) -> "Calibration":
        if data.get("format") != "cuvil-calibration" or data.get("version") != 1:
            raise CuvilError("not a cuvil calibration (expected format 'cuvil-calibration', version 1)")
        ops = tuple(OpRange(o["index"], o["kind"], tuple(o["input_shape"]), tuple(o["weight_shape"]), float(o["min"]), float(o["max"]))
                    for o in data["ops"])
        return cls(data["method"], data["percentile"], data["samples"], data["target"], ops)

    def save(self, path: str | os.PathLike) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f, indent=1)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Calibration":
        with open(path) as f:
            return cls.from_json(json.load(f))

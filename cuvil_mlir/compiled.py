"""``CompiledModel``: a compiled program you call with torch tensors or numpy arrays."""

from __future__ import annotations

import os

import numpy as np

from cuvil_mlir import package
from cuvil_mlir.diagnostics import InputError
from cuvil_mlir.runtime import Session
from cuvil_mlir.signature import Signature


class CompiledModel:
    """Call it like the original model: torch tensors in -> torch tensors out, numpy in -> numpy out.

    Inputs are checked against the compiled signature (count, shape, dtype) first.
    """

    def __init__(self, modules: list[package.PackagedModule], metadata: dict):
        self.modules = list(modules)
        self.metadata = metadata
        self.signature = Signature.from_json(metadata["signature"])
        self._session: Session | None = None

    @property
    def targets(self) -> list[str]:
        return [m.target for m in self.modules]

    @property
    def target(self) -> str:
        return self.modules[0].target

    @property
    def patterns_fired(self) -> dict[str, dict[str, int]]:
        return self.metadata.get("patterns_fired", {})

    def _get_session(self) -> Session:
        if self._session is None:
            m = self.modules[0]
            self._session = Session(m.vmfb, m.driver)
        return self._session

    def __call__(self, *inputs):
        arrays, as_torch = _to_numpy(inputs)
        self.signature.check(arrays)
        outputs = self._get_session().invoke(self.metadata.get("function", "main"), arrays)
        if as_torch:
            import torch

            outputs = [torch.from_numpy(np.ascontiguousarray(o)) for o in outputs]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def save(self, path: str | os.PathLike) -> None:
        package.write(path, self.modules, {k: v for k, v in self.metadata.items() if k != "modules"})

    def __repr__(self) -> str:
        ins = ", ".join(s.describe() for s in self.signature.inputs)
        outs = ", ".join(s.describe() for s in self.signature.outputs)
        return f"CompiledModel(targets={self.targets}, ({ins}) -> ({outs}))"


def _to_numpy(inputs) -> tuple[list[np.ndarray], bool]:
    arrays, as_torch = [], False
    for i, x in enumerate(inputs):
        if isinstance(x, np.ndarray):
            arrays.append(np.ascontiguousarray(x))
        elif type(x).__module__.startswith("torch") and hasattr(x, "detach"):
            as_torch = True
            arrays.append(np.ascontiguousarray(x.detach().cpu().numpy()))
        else:
            raise InputError(f"input {i}: expected a torch.Tensor or numpy.ndarray, got {type(x).__name__}")
    return arrays, as_torch


def load(path: str | os.PathLike) -> CompiledModel:
    metadata, modules = package.read(path)
    return CompiledModel(modules, metadata)

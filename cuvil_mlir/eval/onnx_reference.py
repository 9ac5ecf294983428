"""Running an ONNX model outside cuvil, as the reference an ONNX model's results are judged by.

``OnnxReference(model)`` runs with onnxruntime (CPU) when it is installed (a test extra, not a
dependency) and with ``onnx.reference`` (the onnx package's numpy evaluator) otherwise. It is
called like an eager PyTorch module (torch tensors or numpy arrays in, a tuple of torch
tensors out), so the comparison harness and the pattern checker use it where they would
use the eager model; ``.double()`` makes the numpy evaluator return float64 outputs (its float
inputs stay in the model's dtypes: an ONNX model has no float64 twin).
"""

from __future__ import annotations

import numpy as np


def onnxruntime_available() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


class OnnxReference:
    def __init__(self, model, *, runtime: str | None = None):
        """``model``: a ModelProto, an importers.onnx.OnnxModel or a path. ``runtime``:
        "onnxruntime", "onnx.reference" or None (onnxruntime when installed)."""
        from cuvil_mlir.compiler.importers.onnx import OnnxModel, load_model

        loaded = model if isinstance(model, OnnxModel) else load_model(model, infer_shapes=False)
        self.proto = loaded.proto
        self.path = loaded.path  # onnxruntime reads a file itself (and its external data)
        self.runtime = runtime or ("onnxruntime" if onnxruntime_available() else "onnx.reference")
        self.fp64 = False
        initializers = {t.name for t in self.proto.graph.initializer}
        self.inputs = [i for i in self.proto.graph.input if i.name not in initializers]
        self._session = None

    @property
    def name(self) -> str:
        from cuvil_mlir.core.versions import versions

        dist = "onnxruntime" if self.runtime == "onnxruntime" else "onnx"
        return f"{self.runtime} {versions((dist,))[dist]} (cpu)"

    def double(self) -> "OnnxReference":
        if self.runtime == "onnxruntime":
            from cuvil_mlir.core.diagnostics import CuvilError

            raise CuvilError("an ONNX model has no float64 reference on onnxruntime; use reference 'torch' "
                             "(the ONNX model's own dtypes)")
        self.fp64 = True
        return self

    def __deepcopy__(self, memo) -> "OnnxReference":
        """A model has no state to protect (the harness and checker copy eager modules)."""
        clone = OnnxReference.__new__(OnnxReference)
        clone.__dict__.update(self.__dict__)
        return clone

    def eval(self) -> "OnnxReference":
        return self

    def __call__(self, *xs):
        import torch
        from onnx.helper import tensor_dtype_to_np_dtype

        feeds = {}
        for spec, x in zip(self.inputs, xs):
            array = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
            feeds[spec.name] = array.astype(tensor_dtype_to_np_dtype(spec.type.tensor_type.elem_type), copy=False)
        outs = self._run(feeds)
        return tuple(torch.from_numpy(np.ascontiguousarray(o.astype(np.float64) if self.fp64 and o.dtype.kind == "f" else o))
                     for o in (np.asarray(o) for o in outs))

    def _run(self, feeds):
        if self.runtime == "onnxruntime":
            if self._session is None:
                import onnxruntime

                options = onnxruntime.SessionOptions()
                options.log_severity_level = 3
                source = str(self.path) if self.path is not None else self.proto.SerializeToString()
                self._session = onnxruntime.InferenceSession(source, options, providers=["CPUExecutionProvider"])
            return self._session.run(None, feeds)
        from onnx.reference import ReferenceEvaluator

        if self._session is None:
            self._session = ReferenceEvaluator(self.proto)
        return self._session.run(None, feeds)

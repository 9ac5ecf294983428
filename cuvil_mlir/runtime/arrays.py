"""Inputs and outputs of a call: numpy arrays (bfloat16 through ml_dtypes, IREE's dependency:
numpy has none) <-> torch tensors. torch is imported only when a tensor is handed in."""

from __future__ import annotations

import numpy as np

from cuvil_mlir.core.diagnostics import InputError



def contiguous(a) -> np.ndarray:
    """``a`` as a C-contiguous array, 0-d arrays staying 0-d (``np.ascontiguousarray`` makes
    them 1-d, and a scalar input would no longer fit its signature)."""
    a = np.asarray(a)
    return a if a.flags.c_contiguous else a.copy(order="C")


def to_numpy(x) -> np.ndarray:
    """A torch tensor (any device; bfloat16 too) or array -> a contiguous numpy array."""
    if isinstance(x, np.ndarray):
        return contiguous(x)
    import torch

    t = x.detach().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return contiguous(t.view(torch.int16).numpy().view(ml_dtypes.bfloat16))
    return contiguous(t.numpy())


def to_torch(a: np.ndarray):
    import torch

    if str(a.dtype) == "bfloat16":
        return torch.from_numpy(contiguous(a).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(contiguous(a))


def input_arrays(inputs) -> tuple[list[np.ndarray], bool]:
    """A call's inputs as contiguous numpy arrays, and whether any was a torch tensor."""
    arrays, as_torch = [], False
    for i, x in enumerate(inputs):
        if isinstance(x, np.ndarray):
            arrays.append(contiguous(x))
        elif type(x).__module__.startswith("torch") and hasattr(x, "detach"):
            as_torch = True
            arrays.append(to_numpy(x))  # bfloat16 as ml_dtypes' (IREE's dependency): numpy has none
        else:
            raise InputError(f"input {i}: expected a torch.Tensor or numpy.ndarray, got {type(x).__name__}")
    return arrays, as_torch

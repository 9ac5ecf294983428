"""Device-resident I/O for ``CompiledModel``: torch tensors on the GPU in, torch tensors on the
GPU out, with no host round trip (DLPack both ways: cuvil_mlir/runtime/session.py ``invoke_dlpack``).

When it applies: every input is a torch tensor, at least one is on a CUDA device, and the
module running calls is on IREE's ``cuda`` driver, on the same device (IREE's default device,
ordinal 0; torch's ``cuda:0``). Otherwise the call takes the host path (numpy in, numpy out,
torch tensors made from the results on the CPU), as before.

Synchronization: IREE's CUDA driver and torch share the device's primary context (checked on
the H200, benchmarks/results/gpu-profile-2026-12-03.md). IREE runs the call on its own CUDA
stream, so before it starts, the work torch has queued on its current stream (which may still
be writing the inputs) is waited for (``torch.cuda.current_stream().synchronize()``, 7-9 us on
the H200). The call is synchronous (IREE's ``main`` waits for its results), so the returned
tensors are complete and any torch stream may read them.

Inputs: a tensor that is not contiguous or not 64-byte aligned (a view into a larger tensor) is
copied into a fresh one first; every other input is used in place. Outputs: IREE's own result
buffers handed to torch (runtime.RUNTIME_FLAGS makes IREE allocate them from its caching
allocator, which it can export), freed when torch frees them; where IREE cannot export them
(results from its stream-ordered pool), each is copied on the device into an exportable buffer.
There is no ``out=``: IREE's functions return new buffers, and with the caching allocator a
result's allocation is pooled already.
"""

from __future__ import annotations

import warnings

from cuvil_mlir.core.diagnostics import RuntimeFailure

ALIGNMENT = 64  # IREE's import of external buffers checks the data pointer against this


def wanted(inputs) -> bool:
    """All inputs are torch tensors and at least one is on a CUDA device."""
    if not inputs or not all(type(x).__module__.startswith("torch") and hasattr(x, "__dlpack__") for x in inputs):
        return False
    return any(x.device.type == "cuda" for x in inputs)


def call(compiled, inputs) -> list | None:
    """The outputs as torch CUDA tensors, or None when the host path must take the call (the
    running module is not on this CUDA device, or the device call failed: warned)."""
    import torch

    _check(compiled.signature, inputs)
    if compiled._session is None and not compiled._failures:
        compiled.select()
    session = compiled._session
    if session is None or session.driver != "cuda" or any(x.device != torch.device("cuda", session.device_ordinal) for x in inputs):
        return None
    tensors = [_importable(x, torch) for x in inputs]
    torch.cuda.current_stream(tensors[0].device).synchronize()
    function = compiled.metadata.get("function", "main")
    try:
        if session.exports_results is not False:
            try:
                capsules = session.invoke_dlpack(function, tensors)
                session.exports_results = True
                return [torch.from_dlpack(c) for c in capsules]
            except RuntimeFailure as e:
                if session.exports_results or "export" not in e.message:
                    raise
                session.exports_results = False  # results from IREE's stream-ordered pool: copy out from now on
        capsules = session.invoke_dlpack(function, tensors, copy_out=True)
    except RuntimeFailure as e:
        warnings.warn(f"device-resident call failed, taking the host path: {e.message}", RuntimeWarning, stacklevel=3)
        return None
    return [torch.from_dlpack(c) for c in capsules]


def _importable(x, torch):
    x = x.detach()
    if not x.is_contiguous() or x.data_ptr() % ALIGNMENT:
        return x.clone(memory_format=torch.contiguous_format)  # a fresh, aligned allocation
    return x


class _Meta:
    """What Signature.check reads of an input: its numpy dtype name and its shape."""

    def __init__(self, x):
        self.dtype = str(x.dtype).removeprefix("torch.")
        self.shape = tuple(x.shape)


def _check(signature, inputs) -> None:
    signature.check([_Meta(x) for x in inputs])

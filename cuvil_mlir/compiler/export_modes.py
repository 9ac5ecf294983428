"""torch.export of an ``nn.Module``, trying the export modes in turn.

Non-strict export (tracing Python with fake tensors) is the default: it handles the most
models. It cannot decide data-dependent Python (``int(t)``, ``if t.sum() > 0``, sizes read
from values) and raises GuardOnDataDependentSymNode; strict export (TorchDynamo) handles
some of those (``float(t[0])``, ``x[: n.item()]``). Draft export handles the rest by
assuming what the example inputs do, and records those assumptions as runtime asserts in
the program: a warning names them, because inputs that take another branch are wrong for
that program (the assert, where torch-mlir keeps it, fails the call instead).
"""

from __future__ import annotations

import warnings

from cuvil_mlir.core.diagnostics import ImportError_


class DataDependentExportWarning(UserWarning):
    """The program was exported by assuming what the example inputs' values decide."""


def _is_data_dependent(e: BaseException) -> bool:
    text = f"{type(e).__name__}: {e}"
    return any(k in text for k in ("GuardOnDataDependentSymNode", "data-dependent", "Data-dependent", "DataDependent"))


def export_module(model, args: tuple, kwargs: dict, dynamic_shapes=None):
    """An ExportedProgram of ``model``: non-strict, then (for data-dependent Python) strict,
    then draft export with a DataDependentExportWarning. Other failures raise at once."""
    import torch

    errors = []
    for mode in ("non-strict", "strict"):
        try:
            with _no_hf_cache(model, kwargs), static_experts(model):
                return torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes, strict=mode == "strict")
        except Exception as e:
            errors.append((mode, e))
            if not _is_data_dependent(e):
                break
    first_mode, first = errors[0]
    if not _is_data_dependent(first):
        raise ImportError_(f"torch.export failed for {type(model).__name__}: {type(first).__name__}: {_short(first)}") from first
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with _no_hf_cache(model, kwargs), static_experts(model):
                program = torch.export.draft_export(model, args, kwargs, dynamic_shapes=dynamic_shapes)
    except Exception as e:
        tried = "; ".join(f"{mode}: {type(err).__name__}: {_short(err, 200)}" for mode, err in errors)
        raise ImportError_(f"torch.export failed for {type(model).__name__} in every mode ({tried}; draft: "
                           f"{type(e).__name__}: {_short(e, 200)})") from e
    if any(node.target is getattr(torch, "sym_ite", None) for node in program.graph.nodes):
        # a branch on a value draft export could only keep as a symbolic if-then-else,
        # which torch-mlir cannot import: the first error says what to change
        raise ImportError_(f"torch.export failed for {type(model).__name__}: {type(first).__name__}: {_short(first)} "
                           "(strict and draft export cannot capture this branch either: write it with torch.where or torch.cond)") from first
    warnings.warn(f"{type(model).__name__} reads tensor values in Python ({_short(first, 160)}); it was exported with "
                  "torch.export.draft_export, which assumes what the example inputs decide: inputs that take another "
                  "branch or size need another compile", DataDependentExportWarning, stacklevel=3)
    return program


class _no_hf_cache:
    """A transformers model with ``config.use_cache`` returns its key/value cache object
    (DynamicCache) next to the logits, which torch.export cannot flatten (and a static forward
    has no use for): export it with ``use_cache`` off, as ``model(x, use_cache=False)`` would,
    unless the call passes ``use_cache`` itself. The config is restored afterwards.
    (compile_causal_lm compiles the cache as arguments instead.)"""

    def __init__(self, model, kwargs):
        config = getattr(model, "config", None)
        self.config = config if getattr(config, "use_cache", False) is True and "use_cache" not in (kwargs or {}) \
            and type(model).__module__.startswith("transformers.") else None

    def __enter__(self):
        if self.config is not None:
            self.config.use_cache = False

    def __exit__(self, *exc):
        if self.config is not None:
            self.config.use_cache = True


class static_experts:
    """A transformers mixture-of-experts model's experts run as transformers' ``batched_mm``
    while exporting: each token's chosen experts' weights gathered and applied in batched
    matmuls, static shapes. Its default ``grouped_mm`` counts tokens per expert with
    ``aten.histc`` and groups them by data-dependent offsets (torch-mlir lowers neither), and
    ``eager`` loops over the experts a batch hit. The gather is sized tokens x top-k x an
    expert's weights: right for decode and short inputs. The config is restored afterwards."""

    def __init__(self, model):
        config = getattr(model, "config", None)
        self.saved = getattr(config, "_experts_implementation", None)
        self.config = config if self.saved not in (None, "batched_mm") else None

    def __enter__(self):
        if self.config is not None:
            self.config._experts_implementation = "batched_mm"

    def __exit__(self, *exc):
        if self.config is not None:
            self.config._experts_implementation = self.saved


def _short(e: BaseException, limit: int = 600) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[:limit] + " ..."

"""cuvil-mlir: compile exported PyTorch models through the Cuvil dialect to IREE modules.

    import cuvil_mlir
    compiled = cuvil_mlir.compile(model, (x,), target="cpu")
    y = compiled(x)
    compiled.save("model.cuvilpkg")
"""

from __future__ import annotations

from cuvil_mlir.core.diagnostics import CuvilError
from cuvil_mlir.core.versions import __version__


def compile(model, args=(), *, target: str = "cpu", opt_level: int = 3, patterns=(), disabled_passes=(), disabled_patterns=(),
            precision: str = "fp32", calibration=None, kwargs=None, dynamic_shapes=None, cache=False, params: str = "auto"):
    """Compile an ``nn.Module`` (with example ``args`` and ``kwargs``), an ``ExportedProgram``, a ``.pt2``
    path, or an ONNX model (a ``.onnx`` path or an ``onnx.ModelProto``: docs/onnx.md).

    ``dynamic_shapes`` (an nn.Module only) is torch.export's: e.g. ``({0: Dim("batch", max=64)},)``;
    the dims and their ranges are recorded and every call is checked against them. The result
    is called like the model: same inputs (kwargs too), same output structure; inputs the
    model mutates in place are updated, mutated buffers persist across calls.

    Returns a ``CompiledModel``. ``patterns`` are extra ``PatternSet``s run after raising;
    ``disabled_passes`` names passes to skip; ``disabled_patterns`` names single patterns to
    drop (``"fuse-linear-epilogue/gelu_epilogue"``, or the bare pattern name when only one pass has it).
    ``precision`` is a policy (cuvil_mlir/compiler/precision.py: fp32, fp16, bf16, int8-weight,
    int4-weight, int8); ``int8`` needs ``calibration``. ``cache``: False (the default: an
    explicit compile builds), True (the on-disk cache, docs/jit-and-cache.md), a folder or a
    ``cuvil_mlir.compiler.cache.Cache``. ``params``: the weights ``"inline"`` in each module or
    ``"external"``, one parameter archive all targets share (mapped at load); ``"auto"`` (the
    default) makes them external from 64 MiB of weights (docs/package-format.md).
    """
    from cuvil_mlir.compiler.pipeline import Options, compile_program

    options = Options(target=target, opt_level=opt_level, patterns=tuple(patterns), disabled_passes=tuple(disabled_passes),
                      disabled_patterns=tuple(disabled_patterns), precision=precision, calibration=calibration, params=params)
    if cache is not False and cache is not None:
        from cuvil_mlir.compiler.cache import cached_compile

        return cached_compile(model, args, options, cache, kwargs=kwargs, dynamic_shapes=dynamic_shapes)
    return compile_program(model, args, options, kwargs=kwargs, dynamic_shapes=dynamic_shapes)


def compile_causal_lm(hf_model, *, max_seq_len: int, batch: int = 1, prefill_len=None, target: str = "cpu",
                      precision: str = "fp32", opt_level: int = 3, params: str = "auto", record_dispatches: bool = False):
    """Compile a transformers causal LM (GPT-2, Llama, Mistral, Qwen2, ...) for generation: one
    package with ``prefill_first``, ``prefill`` and ``decode`` functions over a KV cache for
    ``batch`` sequences of up to ``max_seq_len`` tokens, kept on the device and updated in place
    (docs/generation.md).
    ``prefill_len``: the prompt chunk (default min(max_seq_len, 128)), or several sizes, e.g.
    ``(128, 1024)``: each prompt is prefilled in the largest chunks that fit it.
    ``params``: weights "inline" in the modules or "external" (one archive), "auto" as ``compile``.
    ``record_dispatches``: keep the functions' IREE dispatches for ``cuvil profile PKG --function decode``.
    Returns a ``CausalLM``: ``.generate(input_ids, max_new_tokens=...)`` as transformers'."""
    from cuvil_mlir.compiler.causal_lm import compile_causal_lm as _compile

    return _compile(hf_model, max_seq_len=max_seq_len, batch=batch, prefill_len=prefill_len, target=target,
                    precision=precision, opt_level=opt_level, params=params, record_dispatches=record_dispatches)


def lower(model, args=(), *, stage: str = "cuvil", target: str = "cpu", patterns=(), elide_weights: bool = True) -> str:
    """The MLIR text of ``model`` after ``stage`` ("torch", "cuvil", "lowered")."""
    from cuvil_mlir.compiler.pipeline import Options, compile_program

    return compile_program(model, args, Options(target=target, patterns=tuple(patterns)), emit=stage, elide_weights=elide_weights).text


def calibrate(model, sample_inputs, *, method: str = "minmax", percentile: float = 99.99, **options):
    """Activation ranges for ``compile(..., precision="int8", calibration=...)``: see
    cuvil_mlir/compiler/calibrate.py (``method`` is minmax or percentile)."""
    from cuvil_mlir.compiler.calibrate import calibrate as _calibrate

    return _calibrate(model, sample_inputs, method=method, percentile=percentile, **options)


def profile(model, args=(), *, target: str = "cpu", inputs=None, **options) -> dict:
    """Where ``model``'s time goes on this machine's device: each IREE dispatch's time per call,
    its share, TFLOP/s and GB/s against the device's peak, the nn.Module path and Cuvil op it came
    from, and the gap between the wall time and the dispatches (docs/profiling.md). ``model``: an
    nn.Module with ``args``, an ExportedProgram, a ``.pt2`` path (compiled for ``target``), a
    CompiledModel or a ``.cuvilpkg`` path. Returns the profile (JSON-able); show it with
    ``cuvil_mlir.eval.profiler.print_profile`` / ``plot``."""
    from cuvil_mlir.eval.profiler import profile as _profile

    return _profile(model, args, target=target, inputs=inputs, **options)


def load(path, prefer=None, *, verify: bool = True, parameters=None):
    """Load a ``.cuvilpkg`` written by ``CompiledModel.save`` / ``cuvil compile`` on the first
    of its targets (in ``prefer`` order: target specs or kinds; default the package's) that
    this machine has a device for; later targets take over if it fails. A parameter archive is
    mapped, not read; ``verify=False`` skips its sha256 check (its size and place are still checked).
    ``parameters``: the weights of a package saved without them (``CompiledModel.save(path,
    parameters="none")``), an ``.irpa`` file (``CompiledModel.save_parameters``) or a dict key ->
    array; a missing key or a wrong shape or dtype is a ``PackageError`` naming it.
    A causal LM's package (``compile_causal_lm``) loads as a ``CausalLM``."""
    from cuvil_mlir.runtime.generation import load as _load

    return _load(path, prefer, verify=verify, parameters=parameters)


def jit(fn=None, **options):
    """``@jit`` / ``@jit(target=..., precision=..., fallback="eager")`` on an nn.Module class,
    an instance or a function of tensors (also ``jit(model, target=...)``): compiled on the
    first call per input signature, cached on disk, eager PyTorch when compiling fails. See
    cuvil_mlir/compiler/jitted.py and docs/jit-and-cache.md."""
    from cuvil_mlir.compiler.jitted import jit as _jit

    return _jit(fn, **options)


__all__ = ["compile", "compile_causal_lm", "lower", "load", "calibrate", "jit", "profile", "CuvilError", "__version__"]

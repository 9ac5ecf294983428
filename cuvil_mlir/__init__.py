"""cuvil-mlir: compile exported PyTorch models through the Cuvil dialect to IREE modules.

    import cuvil_mlir
    compiled = cuvil_mlir.compile(model, (x,), target="cpu")
    y = compiled(x)
    compiled.save("model.cuvilpkg")
"""

from __future__ import annotations

__version__ = "0.1.0"

from cuvil_mlir.diagnostics import CuvilError  # noqa: E402


def compile(model, args=(), *, target: str = "cpu", opt_level: int = 3, patterns=(), disabled_passes=(), disabled_patterns=(),
            precision: str = "fp32", calibration=None, kwargs=None, dynamic_shapes=None):
    """Compile an ``nn.Module`` (with example ``args`` and ``kwargs``), an ``ExportedProgram`` or a ``.pt2`` path.

    ``dynamic_shapes`` (an nn.Module only) is torch.export's: e.g. ``({0: Dim("batch", max=64)},)``;
    the dims and their ranges are recorded and every call is checked against them. The result
    is called like the model: same inputs (kwargs too), same output structure; inputs the
    model mutates in place are updated, mutated buffers persist across calls.

    Returns a ``CompiledModel``. ``patterns`` are extra ``PatternSet``s run after raising;
    ``disabled_passes`` names passes to skip; ``disabled_patterns`` names single patterns to
    drop (``"fuse-linear-epilogue/gelu_epilogue"``, or the bare pattern name when only one pass has it).
    ``precision`` is a policy (cuvil_mlir/precision.py: fp32, fp16, bf16, int8-weight,
    int4-weight, int8); ``int8`` needs ``calibration``.
    """
    from cuvil_mlir.pipeline import Options, compile_program

    options = Options(target=target, opt_level=opt_level, patterns=tuple(patterns), disabled_passes=tuple(disabled_passes),
                      disabled_patterns=tuple(disabled_patterns), precision=precision, calibration=calibration)
    return compile_program(model, args, options, kwargs=kwargs, dynamic_shapes=dynamic_shapes)


def lower(model, args=(), *, stage: str = "cuvil", target: str = "cpu", patterns=(), elide_weights: bool = True) -> str:
    """The MLIR text of ``model`` after ``stage`` ("torch", "cuvil", "lowered")."""
    from cuvil_mlir.pipeline import Options, compile_program

    return compile_program(model, args, Options(target=target, patterns=tuple(patterns)), emit=stage, elide_weights=elide_weights).text


def calibrate(model, sample_inputs, *, method: str = "minmax", percentile: float = 99.99, **options):
    """Activation ranges for ``compile(..., precision="int8", calibration=...)``: see
    cuvil_mlir/calibration.py (``method`` is minmax or percentile)."""
    from cuvil_mlir.calibration import calibrate as _calibrate

    return _calibrate(model, sample_inputs, method=method, percentile=percentile, **options)


def load(path, prefer=None):
    """Load a ``.cuvilpkg`` written by ``CompiledModel.save`` / ``cuvil compile`` on the first
    of its targets (in ``prefer`` order: target specs or kinds; default the package's) that
    this machine has a device for; later targets take over if it fails."""
    from cuvil_mlir.compiled import load as _load

    return _load(path, prefer)


__all__ = ["compile", "lower", "load", "calibrate", "CuvilError", "__version__"]

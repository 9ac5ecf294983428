"""Measuring a Calibration (cuvil_mlir/compiler/calibration.py): import the model, run it through
the target's stages up to "fused", add the inputs of the quantizable ops as extra results, and
run that module on IREE CPU over the samples."""

from __future__ import annotations

import numpy as np

from cuvil_mlir.compiler.calibration import METHODS, Calibration, OpRange
from cuvil_mlir.core.diagnostics import CuvilError
from cuvil_mlir.core.stages import Stage


def calibrate(model, sample_inputs, *, method: str = "minmax", percentile: float = 99.99, target: str = "cpu",
              patterns=(), disabled_passes=(), disabled_patterns=()) -> Calibration:
    """Measure the input ranges of the quantizable ops of ``model`` over ``sample_inputs``.

    ``sample_inputs`` is a list of samples, each a tensor or a tuple of tensors (the model's
    arguments), all of the shapes the model will be compiled for; the first is the example
    for the export. ``method``: ``minmax`` (the extremes seen) or ``percentile`` (the
    ``100 - percentile`` and ``percentile`` percentiles of all values seen, which ignores
    rare outliers). ``target``, ``patterns`` and the disabled lists must be those of the
    compile (they decide which ops the precision stage sees)."""
    if method not in METHODS:
        raise CuvilError(f"unknown calibration method '{method}'; methods: {', '.join(METHODS)}")
    if method == "percentile" and not 50.0 < float(percentile) <= 100.0:
        raise CuvilError(f"percentile must be in (50, 100], got {percentile}")
    samples = _samples(sample_inputs)
    module, keys, ctx = _instrumented(model, samples[0], target, patterns, disabled_passes, disabled_patterns)
    seen = _run(module, keys, samples)
    ops = []
    for key, values in zip(keys, seen):
        lo, hi = _range(values, method, float(percentile))
        ops.append(OpRange(key.index, key.kind, key.input_shape, key.weight_shape, lo, hi))
    return Calibration(method, float(percentile) if method == "percentile" else None, len(samples), target, tuple(ops))


def _samples(sample_inputs) -> list[tuple]:
    import torch

    if isinstance(sample_inputs, torch.Tensor):
        sample_inputs = [sample_inputs]
    samples = [tuple(s) if isinstance(s, (tuple, list)) else (s,) for s in sample_inputs]
    if not samples:
        raise CuvilError("calibrate needs at least one sample input")
    shapes = [tuple(tuple(t.shape) for t in s) for s in samples]
    for i, s in enumerate(shapes[1:], 1):
        if s != shapes[0]:
            raise CuvilError(f"calibration sample {i} has input shapes {list(s)}, sample 0 has {list(shapes[0])}: "
                             "all samples must have the shapes the model is compiled for")
    return samples


def _instrumented(model, example: tuple, target_spec: str, patterns, disabled_passes, disabled_patterns):
    """The module after the target's stages up to "fused", with the inputs of its quantizable
    ops as extra results, lowered; and the ops' keys."""
    from cuvil_mlir.compiler.context import make_context
    from cuvil_mlir.compiler.importers import fx
    from cuvil_mlir.lowering.precision.quantize_static import op_key, quantizable_ops
    from cuvil_mlir.core.passes import run_pipeline
    from cuvil_mlir.compiler.pipeline import Options, _stage_passes, check_disabled
    from cuvil_mlir.targets import parse_targets

    options = Options(target=target_spec, patterns=tuple(patterns), disabled_passes=tuple(disabled_passes),
                      disabled_patterns=tuple(disabled_patterns))
    check_disabled(options)
    target = parse_targets(target_spec)[0]
    ctx = make_context()
    module = fx.import_program(fx.to_exported_program(model, example), ctx)
    stages = list(target.stages)
    names = [name for name, _ in stages]
    if Stage.FUSED not in names or Stage.LOWERED not in names:
        raise CuvilError(f"target '{target_spec}' has no 'fused' and 'lowered' stages to calibrate between; stages: {', '.join(names)}")
    for stage, specs in stages[: names.index(Stage.FUSED) + 1]:
        run_pipeline(module, _stage_passes(stage, specs, options))
    ops = quantizable_ops(module)
    if not ops:
        raise CuvilError("the model has no linear or conv op with a constant float weight: nothing to calibrate for int8")
    keys = [op_key(i, op) for i, op in enumerate(ops)]
    _add_results(module, [op.operands[0] for op in ops])
    for stage, specs in stages[names.index(Stage.FUSED) + 1:]:
        if stage != Stage.PRECISION:
            run_pipeline(module, _stage_passes(stage, specs, options))
    return module, keys, ctx


def _add_results(module, values) -> None:
    """Append ``values`` to the results of the module's (single) function."""
    from cuvil_mlir.core.ir import func, ir

    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    if len(funcs) != 1:
        raise CuvilError(f"expected one function in the imported module, got {len(funcs)}")
    fn = funcs[0]
    block = fn.regions[0].blocks[0]
    ret = list(block.operations)[-1]
    with module.context, ret.location, ir.InsertionPoint(ret):
        new = func.ReturnOp([*ret.operands, *values])
    ret.operation.erase()
    inputs = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value).inputs
    with module.context:
        fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, [v.type for v in new.operands]))


def _run(module, keys, samples) -> list[list[np.ndarray]]:
    """Compile for IREE CPU, run every sample; per op, the input it saw in each sample."""
    from cuvil_mlir.runtime.arrays import input_arrays
    from cuvil_mlir.runtime.session import Session
    from cuvil_mlir.targets import iree, parse_targets

    cpu = parse_targets("cpu")[0]
    session = Session(iree.compile_to_vmfb(module, cpu.iree_flags()), cpu.driver)
    seen: list[list[np.ndarray]] = [[] for _ in keys]
    for sample in samples:
        arrays, _ = input_arrays(sample)
        results = session.invoke("main", arrays)
        for i, value in enumerate(results[len(results) - len(keys):]):
            seen[i].append(np.asarray(value, dtype=np.float32))
    return seen


def _range(values: list[np.ndarray], method: str, percentile: float) -> tuple[float, float]:
    if method == "minmax":
        return float(min(v.min() for v in values)), float(max(v.max() for v in values))
    flat = np.concatenate([v.ravel() for v in values])
    return float(np.percentile(flat, 100.0 - percentile)), float(np.percentile(flat, percentile))

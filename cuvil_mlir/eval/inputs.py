"""What a comparison runs on: the model (an nn.Module, an ExportedProgram, a .pt2 or a
``FILE.py:FACTORY`` spec), its input sets (given, permuted or generated from a signature),
and the reference's outputs on them."""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import numpy as np

from cuvil_mlir.core.diagnostics import CuvilError, MissingFileError
from cuvil_mlir.eval.configs import Config, compile_config
from cuvil_mlir.eval.measure import permuted, random_array
from cuvil_mlir.runtime.arrays import to_numpy, to_torch

REFERENCES = ("torch", "torch-fp64")  # or a target spec


def normalize_model(model, inputs):
    """(ExportedProgram, the eager callable, a name for the report)."""
    import torch

    from cuvil_mlir.compiler.importers import fx, onnx

    if onnx.is_onnx_model(model):  # the reference is onnxruntime (or onnx.reference), not torch
        from cuvil_mlir.eval.onnx_reference import OnnxReference

        loaded = onnx.load_model(model)
        name = Path(model).name if isinstance(model, (str, os.PathLike)) else "ONNX model"
        return loaded, OnnxReference(loaded), name
    if isinstance(model, torch.nn.Module):
        if inputs is None:
            raise CuvilError(f"compare: an nn.Module ({type(model).__name__}) needs example inputs, e.g. compare(model, (x,))")
        args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
        return fx.to_exported_program(model, tuple(to_torch(to_numpy(a)) for a in args)), model.eval(), type(model).__name__
    program = fx.to_exported_program(model)
    name = Path(model).name if isinstance(model, (str, os.PathLike)) else "ExportedProgram"
    return program, program.module(), name


def load_model_spec(spec: str):
    """``FILE.py:NAME`` or ``package.module:NAME`` -> (nn.Module in eval mode, example inputs).
    NAME is a factory called without arguments that returns ``(model, inputs)`` (as
    examples/models.py's builders do) or a module alone (inputs are then None)."""
    import importlib
    import importlib.util

    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise CuvilError(f"model spec '{spec}': expected FILE.py:FACTORY or package.module:FACTORY")
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise MissingFileError(f"model spec '{spec}': no file {where}")
        sys.path.insert(0, str(path.resolve().parent))  # the file may import its neighbours
        mod_spec = importlib.util.spec_from_file_location(f"_cuvil_model_{path.stem}", path)
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise CuvilError(f"model spec '{spec}': {where} has no callable '{name}'")
    made = factory()
    model, inputs = made if isinstance(made, tuple) and len(made) == 2 else (made, None)
    if hasattr(model, "eval"):
        model = model.eval()
    return model, inputs


def program_input_specs(program) -> list[tuple[tuple[int, ...], str, int | None]]:
    """(shape, numpy dtype, integer high) of each user input of an ExportedProgram. Shapes come
    from its example inputs when it carries them (torch.export.save keeps them), else from its
    signature; ``high`` is 1 + the example's largest value for integer inputs (token ids and
    indices stay in range), else None. An ONNX model's come from its graph inputs."""
    from cuvil_mlir.compiler.importers.onnx import OnnxModel, input_specs

    if isinstance(program, OnnxModel):
        return input_specs(program)
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    examples = list(program.example_inputs[0]) if getattr(program, "example_inputs", None) else []
    specs = []
    for i, name in enumerate(program.graph_signature.user_inputs):
        example = examples[i] if i < len(examples) and hasattr(examples[i], "shape") else None
        val = example if example is not None else placeholders[name].meta.get("val")
        if val is None or not hasattr(val, "shape"):
            raise CuvilError(f"input {i} ('{name}') of the program is not a tensor; only tensor inputs are supported")
        shape = tuple(_dim(d) for d in val.shape)
        dtype = str(val.dtype).removeprefix("torch.")
        high = None
        if example is not None and not example.is_floating_point() and example.dtype.is_signed is not None and example.numel():
            high = int(example.max()) + 1 if dtype != "bool" else None
        specs.append((shape, dtype, high))
    return specs


def _dim(d) -> int:
    try:
        return int(d)
    except (TypeError, ValueError):
        return -1  # a symbolic dimension


def make_input_sets(program, given, count: int, seed: int):
    """``count`` input sets (tuples of numpy arrays) with their description and notes. Set 0
    is ``given`` (else random from the program's signature); the others permute the given
    inputs' elements (else are random too), so rotating them defeats caches."""
    rng = np.random.default_rng(seed)
    if given is not None:
        given = tuple(given) if isinstance(given, (tuple, list)) else (given,)
        first = tuple(to_numpy(x) for x in given)
        sets = [first] + [tuple(permuted(a, rng) for a in first) for _ in range(count - 1)]
        info = [{"shape": list(a.shape), "dtype": str(a.dtype), "source": "given"} for a in first]
        note = ("inputs: as given" + (f"; {count - 1} more input set(s) permute their elements" if count > 1 else ""))
        return sets, info, [note]
    return _generated(program_input_specs(program), count, rng, f"the program's signature (seed {seed})")


def package_input_sets(signature, given, count: int, seed: int):
    """``make_input_sets`` for a package: ``given``, else random from its ``Signature``."""
    if given is not None:
        return make_input_sets(None, given, count, seed)
    specs = [(tuple(s.shape), s.dtype, None) for s in signature.inputs]
    return _generated(specs, count, np.random.default_rng(seed), f"the package's signature (seed {seed})")


def _generated(specs, count: int, rng, source: str):
    """``count`` random input sets for (shape, dtype, integer high) specs, their description and notes."""
    try:
        sets = [tuple(random_array(shape, dtype, rng, high=high) for shape, dtype, high in specs) for _ in range(count)]
    except ValueError as e:
        raise CuvilError(f"cannot generate inputs: {e}") from e
    info = [{"shape": list(shape), "dtype": dtype, "source": "generated",
             "values": "N(0, 1)" if np.dtype(_np_name(dtype)).kind == "f" else
             "true/false" if dtype == "bool" else f"integers in [0, {high or 2})"} for shape, dtype, high in specs]
    described = ", ".join(f"{i['dtype']}[{', '.join(map(str, i['shape']))}] {i['values']}" for i in info)
    return sets, info, [f"inputs: generated at random from {source}: {described}"]


def _np_name(dtype: str) -> str:
    return "float32" if dtype == "bfloat16" else dtype


def reference_outputs(reference, eager, program, sets, *, opt_level: int = 3):
    """The reference's outputs on every input set, and a description of it. ``reference``:
    "torch", "torch-fp64", a target spec, a callable (called with torch tensors) or, for a
    single input set, the expected outputs themselves (arrays or tensors)."""
    import torch

    if isinstance(reference, str) and reference in REFERENCES:
        fp64 = reference == "torch-fp64"
        module = copy.deepcopy(eager).double() if fp64 else eager
        outs = [_call_torch(module, s, fp64=fp64) for s in sets]
        if _is_onnx_reference(eager):
            return outs, {"kind": reference, "name": eager.name + (" float64" if fp64 else ""), "device": "cpu"}
        return outs, {"kind": reference, "name": "torch eager (cpu, float64)" if fp64 else "torch eager (cpu)",
                      "device": "cpu", "torch": torch.__version__}
    if isinstance(reference, str):
        if program is None:
            raise CuvilError(f"reference target '{reference}' needs the model to compile it")
        try:
            compiled = compile_config(reference, Config("default"), program, opt_level=opt_level)
            compiled.select()
        except CuvilError as e:
            raise CuvilError(f"the reference target '{reference}' cannot be used here: {e.message}", repro=e.repro) from e
        return [as_list(compiled(*s)) for s in sets], {"kind": "target", "name": reference, "device": compiled.active_target}
    if callable(reference):
        return [_call_torch(reference, s) for s in sets], {"kind": "callable", "name": getattr(reference, "__name__", type(reference).__name__), "device": "cpu"}
    if len(sets) != 1:
        raise CuvilError("expected outputs as the reference need exactly one input set")
    return [[to_numpy(o) for o in leaves(reference)]], {"kind": "outputs", "name": "given outputs", "device": None}


def _call_torch(fn, arrays, *, fp64: bool = False) -> list[np.ndarray]:
    import torch

    xs = [to_torch(a) for a in arrays]
    if fp64:
        xs = [x.double() if x.is_floating_point() else x for x in xs]
    with torch.no_grad():
        return [to_numpy(o) for o in leaves(fn(*xs))]


def leaves(out) -> list:
    from torch.utils._pytree import tree_leaves

    return tree_leaves(out)


def as_list(out) -> list:
    """A call's result as a list of outputs (IREE returns a tuple for several, the value for one)."""
    return list(out) if isinstance(out, tuple) else [out]


def without_torch_competitors(eager, baseline):
    """An ONNX model has no PyTorch program to time: its baseline without competitors, and the
    note that says so (else the baseline as it is, no note)."""
    import dataclasses

    if not _is_onnx_reference(eager) or not baseline.competitors:
        return baseline, []
    note = (f"competitors {', '.join(baseline.competitors)} skipped: the model is an ONNX model "
            f"(its reference runs on {eager.name})")
    return dataclasses.replace(baseline, competitors=()), [note]


def _is_onnx_reference(eager) -> bool:
    """Whether normalize_model gave an ONNX model's reference (onnxruntime / onnx.reference)."""
    from cuvil_mlir.eval.onnx_reference import OnnxReference

    return isinstance(eager, OnnxReference)

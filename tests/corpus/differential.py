"""Run one corpus program eagerly, through cuvil and through plain torch-mlir + IREE; compare.

cuvil is judged as a user calls it: ``cuvil_mlir.compile(model, args, kwargs=...,
dynamic_shapes=...)`` then ``compiled(*args, **kwargs)``; the result must have eager's
pytree structure, shapes, dtypes and values, inputs mutated in place must hold eager's
values afterwards, and module state (buffers) must persist from call to call.

The plain path is judged leniently, as a harness around torch-mlir + IREE would: its IREE
function is called with the tensor leaves of the inputs, its last results are compared
with the tensor leaves of eager's outputs (by value; shape only by element count), and
mutations and state are not checked (only the first call). So "plain passes" means
"torch-mlir + IREE computes the right numbers", the floor cuvil must never fall below.
"""

from __future__ import annotations

import copy
import time
import traceback
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils import _pytree as pytree


@dataclass
class Outcome:
    ok: bool
    stage: str  # "pass" | "export" | "compile" | "call" | "mismatch"
    detail: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {"ok": self.ok, "stage": self.stage, "detail": self.detail[:400], "seconds": round(self.seconds, 3)}


def _inputs(program, seed: int, call: bool):
    g = torch.Generator().manual_seed(seed)
    make = program.call_inputs if (call and program.call_inputs is not None) else program.inputs
    return make(g)


def _clone(tree):
    return pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, tree)


@dataclass
class Reference:
    example: tuple  # (args, kwargs) for export
    calls: list  # per call: ((args, kwargs) given, outputs, (args, kwargs) after the call)


def reference(program, seed: int = 0) -> Reference:
    torch.manual_seed(seed)
    model = program.make()
    example = _inputs(program, seed, call=False)
    calls = []
    for i in range(program.calls):
        given = _inputs(program, seed + 1 + i, call=True)
        args, kwargs = _clone(given)
        with torch.no_grad():
            out = model(*args, **kwargs)
        calls.append((given, _clone(out), (args, kwargs)))
    return Reference(example, calls)


def run_cuvil(program, ref: Reference, *, compile_fn=None) -> Outcome:
    import cuvil_mlir

    compile_fn = compile_fn or cuvil_mlir.compile
    start = time.perf_counter()
    torch.manual_seed(0)
    model = program.make()
    args, kwargs = _clone(ref.example)
    extra = {}
    if kwargs:
        extra["kwargs"] = kwargs
    if program.dynamic_shapes is not None:
        extra["dynamic_shapes"] = program.dynamic_shapes
    try:
        compiled = compile_fn(model, args, **extra)
    except Exception as e:
        return Outcome(False, "compile", _why(e), time.perf_counter() - start)
    for i, (given, expected, expected_after) in enumerate(ref.calls):
        args, kwargs = _clone(given)
        try:
            out = compiled(*args, **kwargs)
        except Exception as e:
            return Outcome(False, "call", f"call {i}: {_why(e)}", time.perf_counter() - start)
        problem = compare_tree(expected, out, program) or compare_tree(expected_after, (args, kwargs), program, what="inputs after the call", values=True)
        if problem:
            return Outcome(False, "mismatch", f"call {i}: {problem}", time.perf_counter() - start)
    return Outcome(True, "pass", "", time.perf_counter() - start)


def run_plain(program, ref: Reference) -> Outcome:
    """torch-mlir's own import (default decompositions) straight into IREE for the CPU."""
    from cuvil_mlir.compiler.context import make_context
    from cuvil_mlir.compiler.importers import fx
    from cuvil_mlir.runtime.session import Session
    from cuvil_mlir.targets import iree, parse_targets

    start = time.perf_counter()
    torch.manual_seed(0)
    model = program.make()
    args, kwargs = _clone(ref.example)
    try:
        ep = torch.export.export(model, tuple(args), kwargs, dynamic_shapes=program.dynamic_shapes, strict=False)
    except Exception as e:
        return Outcome(False, "export", _why(e), time.perf_counter() - start)
    try:
        module = fx.import_program(ep, make_context(), kept_ops=())
        # IREE out of the box: its own default opt level (O0) and f64 handling (demoted to
        # f32); cuvil's O3 and keeping f64 are cuvil's choices, not plain IREE's
        flags = [f for f in parse_targets("cpu")[0].iree_flags() if not f.startswith(("--iree-input-demote-f64-to-f32", "--iree-opt-level"))]
        vmfb = iree.compile_to_vmfb(module, flags)
        session = Session(vmfb, "local-task")
    except Exception as e:
        return Outcome(False, "compile", _why(e), time.perf_counter() - start)
    given, expected, _ = ref.calls[0]
    leaves = [t for t in pytree.tree_leaves(_clone(given)) if isinstance(t, torch.Tensor)]
    try:
        raw = session.invoke("main", [np.array(t.numpy(), order="C") for t in leaves])  # not ascontiguousarray: it makes 0-d 1-d
    except Exception as e:
        return Outcome(False, "call", _why(e), time.perf_counter() - start)
    wanted = [t for t in pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)]
    if len(raw) < len(wanted):
        return Outcome(False, "mismatch", f"{len(raw)} results for {len(wanted)} outputs", time.perf_counter() - start)
    for j, (e, got) in enumerate(zip(wanted, raw[len(raw) - len(wanted):])):
        if got.size != e.numel():
            return Outcome(False, "mismatch", f"output {j}: {got.size} elements, expected {e.numel()}", time.perf_counter() - start)
        problem = compare_values(e, torch.from_numpy(np.array(got)).reshape(e.shape), program, f"output {j}", check_dtype=False)
        if problem:
            return Outcome(False, "mismatch", problem, time.perf_counter() - start)
    return Outcome(True, "pass", "", time.perf_counter() - start)


def compare_tree(expected, got, program, what: str = "outputs", values: bool = False) -> str | None:
    """The first difference between two pytrees (structure, leaf types, values), or None."""
    e_leaves, e_spec = pytree.tree_flatten(expected)
    g_leaves, g_spec = pytree.tree_flatten(got)
    if e_spec != g_spec:
        return f"{what}: structure {_spec_text(g_spec)}, expected {_spec_text(e_spec)}"
    for j, (e, g) in enumerate(zip(e_leaves, g_leaves)):
        where = f"{what}[{j}]"
        if isinstance(e, torch.Tensor):
            if not isinstance(g, torch.Tensor):
                return f"{where}: a {type(g).__name__}, expected a tensor"
            problem = compare_values(e, g, program, where, by_value=values)
            if problem:
                return problem
        elif type(e) is not type(g) or (isinstance(e, float) and not np.isclose(e, g, rtol=program.rtol)) or (not isinstance(e, float) and e != g):
            return f"{where}: {g!r}, expected {e!r}"
    return None


def compare_values(e: torch.Tensor, g: torch.Tensor, program, where: str, check_dtype: bool = True, by_value: bool = False) -> str | None:
    if tuple(g.shape) != tuple(e.shape):
        return f"{where}: shape {tuple(g.shape)}, expected {tuple(e.shape)}"
    if check_dtype and g.dtype != e.dtype:
        return f"{where}: dtype {g.dtype}, expected {e.dtype}"
    if program.check.startswith("random:") and not by_value:
        lo, hi = (float(v) for v in program.check.split(":")[1].split(","))
        values = g.double()
        if values.numel() and (values.min() < lo or values.max() > hi or torch.isnan(values).any()):
            return f"{where}: random values outside [{lo}, {hi}]: min {values.min().item()}, max {values.max().item()}"
        return None
    if e.dtype.is_complex:
        e_, g_ = torch.view_as_real(e.resolve_conj()).double(), torch.view_as_real(g.to(e.dtype).resolve_conj()).double()
    elif e.dtype.is_floating_point:
        e_, g_ = e.double(), g.double()
    else:
        if not torch.equal(e.long() if e.dtype != torch.bool else e, g.long() if e.dtype != torch.bool else g.bool()):
            return f"{where}: integer values differ ({int((e.long() != g.long()).sum())} of {e.numel()})"
        return None
    if not torch.allclose(g_, e_, rtol=program.rtol, atol=program.atol, equal_nan=True):
        err = (g_ - e_).abs().max().item() if g_.numel() else 0.0
        return f"{where}: max abs error {err:.3g} (rtol {program.rtol}, atol {program.atol})"
    return None


def _spec_text(spec) -> str:
    text = str(spec)
    return text if len(text) < 160 else text[:160] + "..."


def _why(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}"

"""``torch.compile(model, backend="cuvil", options={"target": "cpu", "precision": "fp16"})``.

Registered through torch's ``torch_dynamo_backends`` entry point (pyproject.toml). Dynamo
hands the backend one FX graph per captured region (graph breaks give several; the Python
between them stays in PyTorch) with example inputs. Each graph becomes a jitted callable
(cuvil_mlir/compiler/jitted.py): compiled per input signature through the on-disk cache, and the
graph's own eager code when compiling or the device fails (a one-line ``JitWarning``).

The graph's parameters (and buffers) arrive as inputs (Dynamo inlines nn.Modules); they are
bound into the compiled program as constants, so Cuvil's weight passes (BN folding, fused
QKV, quantization) see them, and each call checks that Dynamo still passes the same tensors
at the same version: a replaced or updated weight compiles again. The exported ops keep the
module paths Dynamo recorded (``layers.0.attn``), so per-module precision options apply. Symbolic sizes (Dynamo's
automatic dynamic shapes) are specialized per call to their values, unless
``options={"dynamic": True}`` exports them symbolic. A call with grad mode on and inputs or
weights that require grad runs the graph eagerly (cuvil compiles inference).

Options: target, opt_level, precision, calibration, patterns, disabled_passes,
disabled_patterns, fallback ("eager" | "error"), dynamic, cache, max_compiles (see
cuvil_mlir.jit); "-" in a name may be written for "_".
"""

from __future__ import annotations

import functools
import itertools
import weakref
from dataclasses import fields

from cuvil_mlir.core.diagnostics import CuvilError
from cuvil_mlir.compiler.jitted import JitOptions, JitState


def cuvil_backend(gm, example_inputs, *, options: dict | None = None, **unused):
    """The Dynamo backend: returns a callable that runs ``gm``'s computation."""
    import torch

    if unused.get("mode") not in (None, "default"):
        raise CuvilError(f"backend 'cuvil' has no mode {unused['mode']!r}; give its settings in options={{...}}")
    jit_options = _options(options or {})
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    weights = {i: x for i, (n, x) in enumerate(zip(placeholders, example_inputs)) if _is_weight(n, x, torch)}
    baked = _bound_graph_class()(gm, weights, len(placeholders))
    # no call records: a Dynamo graph is made in this process, its key is its export's
    state = JitState(baked, jit_options, name=f"graph {next(_SERIAL)}", check_training=False, weights_need_grad=True,
                     call_records=False)

    def run(*args):
        baked.rebind(args)
        return state(*[a for i, a in enumerate(args) if i not in weights])

    run.cuvil_jit = state
    _GRAPHS.add(state)
    return run


# Every graph's JitState while Dynamo keeps its compiled code: what compiled, what fell back, why.
_GRAPHS: "weakref.WeakSet[JitState]" = weakref.WeakSet()


def compiled_graphs() -> list[JitState]:
    """The JitStates of the graphs this backend was handed (that are still alive), oldest first."""
    return sorted(_GRAPHS, key=lambda s: s.serial)


def _options(given: dict) -> JitOptions:
    names = {f.name for f in fields(JitOptions)}
    out = {}
    for key, value in given.items():
        name = key.replace("-", "_")
        if name not in names:
            raise CuvilError(f"backend 'cuvil' has no option {key!r}; options: {', '.join(sorted(names))}")
        out[name] = value
    return JitOptions(**out)


def _is_weight(node, example, torch) -> bool:
    """A parameter, or a buffer of the module Dynamo traced (its source names ``_buffers``)."""
    if isinstance(example, torch.nn.Parameter):
        return True
    source = getattr(node.meta.get("grapharg"), "source", None)
    name = source.name if source is not None and isinstance(getattr(source, "name", None), str) else ""
    return isinstance(example, torch.Tensor) and "._buffers[" in name


_SERIAL = itertools.count()


@functools.lru_cache(maxsize=1)
def _bound_graph_class():
    import torch

    class BoundGraph(torch.nn.Module):
        """``gm`` with its weight inputs bound: called with the other inputs only."""

        def __init__(self, gm, weights: dict[int, object], n_inputs: int):
            super().__init__()
            self.gm = gm
            self._slots = {}  # input position -> attribute name
            for i, w in weights.items():
                self._bind(i, w)
            self._n = n_inputs

        def _bind(self, i: int, w) -> None:
            name = f"w{i}"
            if isinstance(w, torch.nn.Parameter):
                self.register_parameter(name, w)
            else:
                self.register_buffer(name, w)
            self._slots[i] = name

        def rebind(self, args) -> None:
            """Dynamo passes the weights on every call; a different tensor is bound in its slot
            (the jit's state stamp then sees the change)."""
            for i, name in self._slots.items():
                if args[i] is not getattr(self, name):
                    delattr(self, name)
                    self._bind(i, args[i])

        def forward(self, *rest):
            given = iter(rest)
            args = [getattr(self, self._slots[i]) if i in self._slots else next(given) for i in range(self._n)]
            if not torch.compiler.is_exporting():
                return self.gm(*args)
            # exporting: interpret node by node, so each exported op keeps the nn.Module path
            # Dynamo recorded (locations, provenance and keep_paths / skip read it), not "gm"
            with torch.fx.traceback.preserve_node_meta():
                return torch.fx.Interpreter(self.gm).run(*args)

    return BoundGraph

"""Import PyTorch programs with torch-mlir's FX importer into a Cuvil context.

Accepts an ``nn.Module`` with example args, a ``torch.export.ExportedProgram``, or the path
of a ``.pt2`` file written by ``torch.export.save``. The ops Cuvil raises whole (linear,
layer_norm, SDPA, activations) are kept out of the decomposition table and marked
backend-legal so they arrive as single ops instead of primitive soups.
"""

from __future__ import annotations

import os
import re
import warnings

from cuvil_mlir.core import params
from cuvil_mlir.core.diagnostics import ImportError_, module_path
from cuvil_mlir.compiler.importers import parameters
from cuvil_mlir.core.ir import elements_attr, ir
from cuvil_mlir.core.tensor_types import TORCH_TO_MLIR

# aten ops kept whole through import (raise patterns and IREE's torch input know them).
KEPT_OPS = (
    "linear", "layer_norm", "rms_norm", "scaled_dot_product_attention", "gelu", "silu",
)


def load_exported_program(path: str | os.PathLike):
    """The program of a ``.pt2``, its weights memory-mapped from the file (importers/pt2.py)."""
    from cuvil_mlir.compiler.importers import pt2

    return pt2.load(path)


def _decomposition_table(kept_ops=KEPT_OPS, complex_ops: bool = False):
    import torch
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    kept = {getattr(torch.ops.aten, name) for name in kept_ops if hasattr(torch.ops.aten, name)}
    table = {op: fn for op, fn in get_decomposition_table().items() if getattr(op, "overloadpacket", None) not in kept}
    if complex_ops:  # complex ops IREE cannot compile (on real views), float randint (cuvil_mlir/compiler/decompositions.py)
        from cuvil_mlir.compiler.decompositions import table as cuvil_table

        for op, fn in cuvil_table().items():  # where torch-mlir decomposes the op too, its rule takes what ours leaves
            table[op] = _chained(fn, table[op]) if op in table else fn
    return table


def _chained(first, fallback):
    def decompose(*args, **kwargs):
        out = first(*args, **kwargs)
        return fallback(*args, **kwargs) if out is NotImplemented else out

    return decompose


def to_exported_program(model, args=(), kwargs=None, dynamic_shapes=None):
    """Normalize the accepted model forms to an ExportedProgram."""
    import torch

    if isinstance(model, (str, os.PathLike)):
        return load_exported_program(model)
    if isinstance(model, torch.export.ExportedProgram):
        return model
    if isinstance(model, torch.nn.Module):
        from cuvil_mlir.compiler.export_modes import export_module

        args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
        return export_module(model, args, kwargs or {}, dynamic_shapes)
    raise ImportError_(
        f"cannot compile a {type(model).__name__}: expected an nn.Module with example args, "
        "a torch.export.ExportedProgram, or the path of a .pt2 file"
    )


def import_program(program, ctx: ir.Context, *, func_name: str = "main", kept_ops=KEPT_OPS, prepare=None,
                   complex_ops: bool = False, store=None) -> ir.Module:
    """ExportedProgram -> torch-dialect module (value semantics, weights as literals) in ``ctx``.

    ``kept_ops=()`` is torch-mlir's own import: its default decompositions and backend-legal
    ops, nothing kept whole (the plain-IREE baseline of the comparison harness).
    ``prepare``: a function of the decomposed program (our copy) that returns the program
    to import (cuvil_mlir/runtime/boundary.py shapes the function's arguments and results).
    ``complex_ops``: decompose the ops IREE gets wrong or cannot compile (decompositions.py).
    ``store``: a ``ParameterStore`` (core/params.py): weights become references to it,
    named by their state-dict names, instead of literals."""
    from torch_mlir import fx
    from torch_mlir.extras.fx_importer import FxImporter

    errors = []
    try:
        with warnings.catch_warnings(), _errors_of(ctx, errors):
            warnings.simplefilter("ignore", FutureWarning)  # torch-internal deprecation noise
            program = _importable(_with_non_persistent_buffers(
                program.run_decompositions(_decomposition_table(kept_ops, complex_ops))))
            if prepare is not None:
                program = prepare(program)
            hooks = _readable_weights_hooks() if store is None else _external_weights_hooks(store, _state_names(program))
            module = fx.export_and_import(
                program,
                output_type="torch",
                fx_importer=_with_module_paths(FxImporter(context=ctx, hooks=hooks)),
                decomposition_table={},  # already decomposed above
                backend_legal_ops=[f"aten.{name}" for name in kept_ops] or None,  # None: torch-mlir's defaults
                func_name=func_name,
            )
            return module if store is None else parameters.calls_to_references(module)
    except ImportError_:
        raise
    except Exception as e:
        raise ImportError_(f"torch-mlir could not import the program: {_failure(e, errors)}") from e


def import_functions(programs: dict, ctx: ir.Context, *, kept_ops=KEPT_OPS, store=None) -> ir.Module:
    """Several ExportedPrograms -> one torch-dialect module, one function per program (by name).

    Unlike ``import_program``, inputs a program mutates in place are kept mutable: such an
    argument is a ``!torch.tensor`` read with ``torch.copy.to_vtensor`` and written back with
    ``torch.overwrite.tensor.contents``, which IREE's torch input turns into a buffer the
    function updates in place (no copy of the argument per call: a generation's KV cache).
    Mutated buffers are not supported here (pass them as arguments). ``store``: a
    ``ParameterStore``: weights become references to it by their state-dict names (programs
    of one model share them: each weight is stored and referenced once)."""
    from torch_mlir import fx
    from torch_mlir.extras.fx_importer import FxImporter

    names = list(programs)
    decomposed, errors = {}, []
    try:
        with warnings.catch_warnings(), _errors_of(ctx, errors):
            warnings.simplefilter("ignore", FutureWarning)
            for name in names:
                decomposed[name] = _importable(_with_non_persistent_buffers(
                    programs[name].run_decompositions(_decomposition_table(kept_ops))))
                if decomposed[name].graph_signature.buffers_to_mutate:
                    raise ImportError_(f"function '{name}' mutates buffers "
                                       f"{sorted(decomposed[name].graph_signature.buffers_to_mutate.values())}; "
                                       "pass state as arguments the program updates in place")
            state_names = {k: v for program in decomposed.values() for k, v in _state_names(program).items()}
            hooks = _readable_weights_hooks() if store is None else _external_weights_hooks(store, state_names)
            importer = _with_module_paths(FxImporter(context=ctx, hooks=hooks))
            for i, name in enumerate(names):
                module = fx.export_and_import(
                    decomposed[name],
                    output_type="torch" if i == len(names) - 1 else "raw",  # lower once, every function
                    fx_importer=importer,
                    decomposition_table={},
                    backend_legal_ops=[f"aten.{op}" for op in kept_ops] or None,
                    func_name=name,
                    experimental_support_mutation=True,
                )
            return module if store is None else parameters.calls_to_references(module)
    except ImportError_:
        raise
    except Exception as e:
        raise ImportError_(f"torch-mlir could not import the programs {names}: {_failure(e, errors)}") from e


def _with_module_paths(importer):
    """Name every op's location after the nn.Module it came from (``layers.0.attn.q_proj``):
    torch-mlir's locations are only the Python stack's files and lines. The name is what the
    package's provenance, error messages and per-module precision options (``keep_paths``)
    read (cuvil_mlir.core.diagnostics.module_path). torch-mlir keeps its per-context cache in
    ``_cc``; without it the import goes on with torch-mlir's own locations."""
    from torch_mlir.extras.fx_importer import ContextCache

    cache = getattr(importer, "_cc", None)
    if not isinstance(cache, ContextCache):
        return importer

    class NamedLocations(ContextCache):
        def get_node_location(self, node):
            loc = super().get_node_location(node)
            if node.op in ("placeholder", "output", "get_attr"):
                return loc
            path = _module_path(node)
            # torch-mlir keeps the previous op's location for a node without one (most
            # nodes outside nn.Linear-like leaf modules): give each node its own
            if loc is None:
                loc = ir.Location.unknown(context=self._c)
            return ir.Location.name(path, childLoc=loc, context=self._c) if path else loc

    importer._cc = NamedLocations(importer._c, py_attr_tracker=cache._py_attr_tracker)
    return importer


def _module_path(node) -> str:
    """The innermost module of ``node``'s nn_module_stack, as a dotted attribute path."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    # torch.export writes L['self'].layers[0].attn or layers.0.attn depending on the version
    path = re.sub(r"^L\['self'\]\.?", "", path)
    return re.sub(r"\[(\d+)\]", r".\1", re.sub(r"\['([^']+)'\]", r".\1", path)).strip(".")


def _readable_weights_hooks():
    """Importer hooks that store every tensor literal as a DenseElementsAttr. torch-mlir's
    default is a dense_resource blob, whose data the Python bindings cannot read back;
    passes need to read weights (to fold BN into a conv, concatenate Q/K/V, convert to fp16,
    quantize). Same bytes in the bytecode, same IR for IREE."""
    import numpy as np
    import torch
    from torch_mlir.extras.fx_importer import FxImporterHooks

    class ReadableWeights(FxImporterHooks):
        def resolve_literal(self, gni, literal, info):
            if not isinstance(literal, torch.Tensor) or literal.numel() <= 1 or literal.is_sparse:
                return None  # scalars: torch-mlir makes splats already
            dtype = TORCH_TO_MLIR.get(str(literal.dtype).removeprefix("torch."))
            if dtype is None:
                return None  # complex, fp8, ...: torch-mlir's default path
            data = literal.detach().cpu()
            array = data.float().numpy() if data.dtype == torch.bfloat16 else data.numpy()
            vtype = gni._cc.tensor_to_vtensor_type(literal)
            with gni._cc._c:
                op = ir.Operation.create("torch.vtensor.literal", results=[vtype],
                                         attributes={"value": elements_attr(np.ascontiguousarray(array), dtype)})
            return op.result

    return ReadableWeights()


def _external_weights_hooks(store, names: dict[int, str]):
    """Importer hooks that put every tensor literal of at least MIN_PARAMETER_BYTES into
    ``store`` (a view of its storage, no copy) and emit a reference to it (core/params.py);
    smaller ones become readable literals. ``names``: id(tensor) -> its state-dict name, the
    parameter's key (a tensor torch-mlir made on the way, a bool constant widened to ui8,
    gets a key from its bytes)."""
    import torch

    readable = _readable_weights_hooks()

    class ExternalWeights(type(readable)):
        def resolve_literal(self, gni, literal, info):
            if not isinstance(literal, torch.Tensor) or literal.is_sparse:
                return None
            dtype = TORCH_TO_MLIR.get(str(literal.dtype).removeprefix("torch."))
            name = names.get(id(literal))
            if dtype in params.PARAMETER_DTYPES and params.is_stub(literal) and name is not None:
                # a weight without data (params.stub_weights), whatever its size: a parameter
                key = store.add_abstract(name, literal.shape, params.torch_array(literal.new_zeros(())).dtype)
                return _parameter_call(gni, key, gni._cc.tensor_to_vtensor_type(literal), self.symbols)
            if dtype not in params.PARAMETER_DTYPES or literal.numel() * literal.element_size() < params.MIN_PARAMETER_BYTES:
                return super().resolve_literal(gni, literal, info)
            array = params.torch_array(literal)
            key = store.add(name, array) if name is not None else store.add_derived(array)
            return _parameter_call(gni, key, gni._cc.tensor_to_vtensor_type(literal), self.symbols)

    hooks = ExternalWeights()
    hooks.symbols = {}  # key -> its declaration's symbol
    return hooks


def _parameter_call(gni, key: str, vtensor_type, symbols: dict):
    with gni._cc._c:
        return parameters.call(gni.fx_importer._m, key, vtensor_type, symbols)


def _state_names(program) -> dict[int, str]:
    tensors = {**program.constants, **program.state_dict}
    return {id(t): name for name, t in tensors.items() if hasattr(t, "data_ptr")}


def weight_bytes(program) -> int:
    """Bytes of the program's parameters, buffers and tensor constants (the params rule's measure)."""
    tensors = {**program.constants, **program.state_dict}
    return sum(t.numel() * t.element_size() for t in tensors.values() if hasattr(t, "element_size"))


def shared_weight_bytes(programs) -> int:
    """``weight_bytes`` of programs that share their tensors (one model's): each tensor counted once."""
    tensors = {}
    for program in programs:
        tensors.update({id(t): t for t in {**program.constants, **program.state_dict}.values() if hasattr(t, "element_size")})
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _importable(program):
    """Graph forms torch-mlir's FX importer does not take, rewritten into ones it does.
    ``program`` is our decomposed copy: changed in place.

    - ``max``/``min`` of symbolic sizes (``torch.sym_max``: MPT's ``max(0, size - length)``)
      become ``prim.max.int``/``prim.min.int``, which torch-mlir imports and lowers.
    - A weight, buffer or constant used inside a list argument (Swin's ``table[index]`` with a
      buffer index: ``aten.index.Tensor(table, [index])``) is read through an ``aten.clone``
      there: torch-mlir's import puts the tensor itself in place of the placeholder, and a
      list holding a tensor is "Heterogeneous lists are not supported"."""
    import torch

    ops = {torch.sym_max: torch.ops.prim.max.int, torch.sym_min: torch.ops.prim.min.int}
    sig = program.graph_signature
    state = set(sig.inputs_to_parameters) | set(sig.inputs_to_buffers) | set(sig.inputs_to_lifted_tensor_constants)

    def integer(arg) -> bool:
        return isinstance(arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg, (int, torch.SymInt))

    graph, clones = program.graph, {}

    def through_clone(x):
        if not (isinstance(x, torch.fx.Node) and x.op == "placeholder" and x.name in state):
            return x
        if x not in clones:
            with graph.inserting_after(x):
                clones[x] = graph.call_function(torch.ops.aten.clone.default, (x,))
            clones[x].meta["val"] = x.meta.get("val")
        return clones[x]

    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in ops and len(node.args) == 2 and not node.kwargs and all(integer(a) for a in node.args):
            node.target = ops[node.target]
        if any(isinstance(a, (list, tuple)) for a in node.args):
            node.args = tuple(type(a)(through_clone(x) for x in a) if isinstance(a, (list, tuple)) else a for a in node.args)
    program.graph_module.recompile()
    return program


def _with_non_persistent_buffers(program):
    """torch.export keeps non-persistent buffers (BERT's position ids, Llama's rotary
    frequencies) in ``program.constants``, but torch-mlir's frozen import looks for every
    buffer in ``state_dict`` ("Could not find state mapping for buffer"). Give the
    importer a state dict that has them. ``program`` is our own decomposed copy, so the
    user's program is not modified."""
    buffers = program.graph_signature.inputs_to_buffers.values()
    missing = {name: program.constants[name] for name in buffers
               if name not in program.state_dict and name in program.constants}
    if missing:
        program._state_dict = {**program.state_dict, **missing}
    return program


class _errors_of:
    """Collects the error diagnostics MLIR emits in ``ctx`` while the block runs, as
    (message, module path) into ``out``: torch-mlir's exception says only that its pipeline
    failed, the op that did not lower is in a diagnostic it prints to the process's stderr."""

    def __init__(self, ctx, out: list):
        self.ctx, self.out, self.handler = ctx, out, None

    def _handle(self, d) -> bool:
        if d.severity != ir.DiagnosticSeverity.ERROR:
            return False  # the default handling
        self.out.append((" ".join(str(d.message).split()), module_path(d.location)))
        return True

    def __enter__(self):
        self.handler = self.ctx.attach_diagnostic_handler(self._handle)
        return self

    def __exit__(self, *exc):
        self.handler.detach()


_ILLEGAL_OP = re.compile(r"failed to legalize operation '([\w.]+)'(?:.*?name = \"([\w.]+)\")?")


def _failure(e: Exception, errors: list) -> str:
    """What an import failure says: the first MLIR error (the op torch-mlir could not lower and
    the nn.Module it came from) when there is one, else the exception."""
    if not errors:
        return f"{type(e).__name__}: {_short(e)}"
    message, path = errors[0]
    illegal = _ILLEGAL_OP.search(message)
    if illegal:
        op = illegal.group(2) or illegal.group(1)
        return f"torch-mlir has no lowering for {op.removeprefix('torch.')}" + (f" (at {path})" if path else "")
    return f"{_short(Exception(message), 400)}" + (f" (at {path})" if path else "")


def _short(e: Exception, limit: int = 600) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[:limit] + " ..."

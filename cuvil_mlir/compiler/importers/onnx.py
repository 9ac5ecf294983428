"""Import ONNX models with torch-mlir's ONNX importer into a Cuvil context.

Accepts the path of a ``.onnx`` file (its external data, if any, is read from the file's
folder or from ``data_dir``) or an ``onnx.ModelProto``. The steps:

1. load (``onnx.load`` without external data, then the data from the base folder, so a
   missing data file is named), check (``onnx.checker``) and infer shapes (in memory below
   2 GB, through a temporary file above, as protobuf cannot hold more);
2. ``torch_mlir.extras.onnx_importer``: every node becomes ``torch.operator "onnx.<Op>"``,
   every initializer a constant. Cuvil's context cache stores initializers as
   ``DenseElementsAttr`` (torch-mlir's default is a ``dense_resource`` blob, which the Python
   bindings cannot read; passes read weights), and each op's location names the PyTorch
   module it was exported from when the exporter recorded one (``l.0.attn.q_proj``), else
   its ONNX node name;
3. ``convert-torch-onnx-to-torch``; an ``onnx.*`` operator it leaves is an op torch-mlir
   cannot lower: ``UnsupportedOnnxOp`` names the op, its node and the opset;
4. ``torch-onnx-to-torch-backend-pipeline`` with the ops Cuvil raises whole kept
   backend-legal (as the FX importer keeps them), giving the same value-semantics torch IR
   the FX path gives.

Where step 3 fails, or IREE fails on the result, the model is rewritten at the ONNX level
(onnx_rewrites.py: function expansion, constant folding, static reduction axes) and imported
again; a model that imports and compiles is never rewritten.

``dim_param`` dims become dynamic (``?``) dims of the function's signature; the names are
kept (``symbolic_dims``) so errors can name them.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cuvil_mlir.core import params
from cuvil_mlir.core.diagnostics import ImportError_, require_file
from cuvil_mlir.compiler.importers import onnx_rewrites as rewrites
from cuvil_mlir.compiler.importers import parameters
from cuvil_mlir.core.ir import elements_attr, ir, passmanager

# aten ops kept whole through the ONNX lowering (raise patterns and IREE's torch input know
# them): the FX importer's list. ONNX's LayerNormalization arrives as native_layer_norm, which
# the import rewrites to layer_norm where its mean and rstd results are unused.
KEPT_OPS = ("linear", "layer_norm", "rms_norm", "scaled_dot_product_attention", "gelu", "silu")

# protobuf's hard limit: above it the checker and shape inference work on files
_PROTOBUF_LIMIT = 2**31 - 1

_DTYPES = {  # onnx.TensorProto data types -> the vtensor dtype names of elements_attr
    1: "f32", 10: "f16", 11: "f64", 16: "bf16", 2: "ui8", 3: "si8", 5: "si16", 6: "si32", 7: "si64", 9: "i1",
}


class UnsupportedOnnxOp(ImportError_):
    """An ONNX op that torch-mlir's ONNX lowering does not handle (at the model's opset)."""

    def __init__(self, message: str, *, ops: list[tuple[str, str]]):
        super().__init__(message)
        self.ops = ops  # (op type, node name) of every op left


class RewriteNotPossible(ImportError_):
    """No ONNX-level rewrite applies to what IREE failed on (``import_model(failed=...)``)."""


class SymbolicDimError(ImportError_):
    """A symbolic (``dim_param``) dim that a later stage cannot handle."""


@dataclass
class OnnxModel:
    """A loaded, shape-inferred ONNX model and where it came from."""

    proto: object  # onnx.ModelProto, external data loaded (but see data_dir)
    path: Path | None = None
    symbolic_dims: dict[str, list[str]] = field(default_factory=dict)  # input name -> dim names ("" for a fixed dim)
    # load_model(lazy_weights=True): the big initializers' data is still in the files of this
    # folder (the import maps them: _external_array); None: every tensor's data is in the proto
    data_dir: Path | None = None

    @property
    def input_names(self) -> list[str]:
        initializers = {t.name for t in self.proto.graph.initializer}
        return [i.name for i in self.proto.graph.input if i.name not in initializers]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.proto.graph.output]


def input_specs(loaded: OnnxModel) -> list[tuple[tuple[int, ...], str, int | None]]:
    """(shape, numpy dtype, None) of each graph input, for generating inputs; a symbolic or
    unknown dim is an error naming the input and the dim (the caller must give inputs)."""
    from onnx.helper import tensor_dtype_to_np_dtype

    initializers = {t.name for t in loaded.proto.graph.initializer}
    specs = []
    for value in loaded.proto.graph.input:
        if value.name in initializers:
            continue
        if not value.type.HasField("tensor_type"):
            raise ImportError_(f"input '{value.name}' of the ONNX model is not a tensor; only tensor inputs are supported")
        tensor = value.type.tensor_type
        shape = []
        for i, d in enumerate(tensor.shape.dim):
            if not d.HasField("dim_value"):
                raise ImportError_(f"input '{value.name}' of the ONNX model has the symbolic dim "
                                   f"'{d.dim_param or '?'}' (dim {i}): give the inputs (--input X.npy) to fix its size")
            shape.append(int(d.dim_value))
        specs.append((tuple(shape), str(np.dtype(tensor_dtype_to_np_dtype(tensor.elem_type))), None))
    return specs


def is_onnx_model(model) -> bool:
    """A ``.onnx`` path, an OnnxModel or an onnx.ModelProto (checked without importing onnx)."""
    if isinstance(model, OnnxModel):
        return True
    if isinstance(model, (str, os.PathLike)):
        return str(model).lower().endswith(".onnx")
    return type(model).__name__ == "ModelProto" and type(model).__module__.startswith("onnx")


def _onnx():
    try:
        import onnx
    except ModuleNotFoundError as e:
        raise ImportError_("ONNX models need the onnx package: pip install 'cuvil-mlir[onnx]'") from e
    return onnx


def load_model(model, *, data_dir: str | os.PathLike | None = None, infer_shapes: bool = True,
               lazy_weights: bool = False) -> OnnxModel:
    """Read, check and shape-infer an ONNX model (a path, a ModelProto or an OnnxModel).
    ``lazy_weights``: a file's external initializers above ``rewrites.FOLD_LIMIT`` elements stay
    in their data files (``OnnxModel.data_dir``; their files are checked), for an import that
    maps them instead of copying them into the proto (``load_weights`` reads them in)."""
    if isinstance(model, OnnxModel):
        return model
    onnx = _onnx()
    path = None
    if isinstance(model, (str, os.PathLike)):
        path = require_file(model, "model file")
        try:
            proto = onnx.load(str(path), load_external_data=False)
        except Exception as e:
            raise ImportError_(f"{path} is not an ONNX model: {type(e).__name__}: {_short(e)}") from e
        if not proto.graph.node and not proto.graph.output:
            raise ImportError_(f"{path} is not an ONNX model: it holds no graph")
        base = Path(data_dir) if data_dir is not None else path.parent
        left = _load_external_data(proto, base, path, small_only=lazy_weights)
    else:
        proto, left = model, False
    if infer_shapes:
        proto = _checked_and_inferred(onnx, proto, path)
    return OnnxModel(proto, path, _symbolic_dims(proto), base if left else None)


def load_weights(loaded: OnnxModel) -> OnnxModel:
    """``loaded`` with every tensor's data in its proto (what the ONNX-level rewrites read)."""
    if loaded.data_dir is not None:
        _load_external_data(loaded.proto, loaded.data_dir, loaded.path)
        loaded.data_dir = None
    return loaded


def _load_external_data(proto, base: Path, path: Path, *, small_only: bool = False) -> bool:
    """Load every external tensor from ``base`` (``small_only``: those of up to
    ``rewrites.FOLD_LIMIT`` elements, the others' files checked), naming the tensor and file
    that are missing; whether tensors were left in their files."""
    from onnx.external_data_helper import _get_all_tensors, load_external_data_for_tensor, uses_external_data

    left = False
    for tensor in _get_all_tensors(proto):
        if not uses_external_data(tensor):
            continue
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        if not (base / location).is_file():
            raise ImportError_(f"{path}: the external data of tensor '{tensor.name}' is not there: {base / location} "
                               "(load_model(path, data_dir=...) reads it from another folder)")
        if small_only and int(np.prod(tensor.dims, dtype=np.int64)) > rewrites.FOLD_LIMIT:
            left = True
            continue
        try:
            load_external_data_for_tensor(tensor, str(base))
        except Exception as e:
            raise ImportError_(f"{path}: cannot read the external data of tensor '{tensor.name}' from "
                               f"{base / location}: {type(e).__name__}: {_short(e)}") from e
        tensor.data_location = 0  # the data is in raw_data now
        del tensor.external_data[:]
    return left


def _checked_and_inferred(onnx, proto, path):
    """``onnx.checker`` and shape inference (``data_prop``) on a weightless copy of the model
    (``_weightless``: its big initializers stubbed), whose inferred shapes go back into the
    model itself: both serialize the model they are given, several times over, which for a
    model of N bytes of weights took ~5N of memory. Above protobuf's 2 GB even the weightless
    copy may not serialize: then through files (``_checked_and_inferred_by_files``)."""
    where = str(path) if path else "the ONNX model"
    light = _weightless(onnx, proto)
    if light.ByteSize() > _PROTOBUF_LIMIT:
        return _checked_and_inferred_by_files(onnx, proto, where)
    with tempfile.TemporaryDirectory(prefix="cuvil-onnx-") as tmp:
        (Path(tmp) / _WEIGHTLESS).touch()  # the stubs' "external data": the checker wants the file to exist
        light_path = Path(tmp) / "weightless.onnx"
        light_path.write_bytes(light.SerializeToString())
        try:
            onnx.checker.check_model(str(light_path))
        except onnx.checker.ValidationError as e:
            raise ImportError_(f"{where} is not a valid ONNX model: {_short(e)}") from e
    try:
        inferred = onnx.shape_inference.infer_shapes(light, data_prop=True)
    except Exception as e:
        raise ImportError_(f"ONNX shape inference failed on {where}: {_short(e)}") from e
    if path is None:  # the caller's ModelProto stays as it was: a copy with the inferred shapes
        result = onnx.ModelProto()
        result.CopyFrom(proto)
    else:  # ours (read from the file): the shapes go into it, no copy of the weights
        result = proto
    _take_shapes(result, inferred)
    return result


_WEIGHTLESS = "cuvil-weightless.data"  # where _weightless's stubs say their data is
_STUB_BYTES = 1 << 16  # initializers from this size are stubbed (smaller ones can matter to data_prop)


def _weightless(onnx, proto):
    """A copy of ``proto`` whose initializers of at least _STUB_BYTES are stubs: name, type and
    dims, their data "external" in a file of no bytes (the checker and shape inference read
    neither; ``data_prop`` needs the small constants, which are kept)."""
    light = onnx.ModelProto()
    for name in ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string"):
        if proto.HasField(name):
            setattr(light, name, getattr(proto, name))
    light.opset_import.extend(proto.opset_import)
    light.metadata_props.extend(proto.metadata_props)
    light.functions.extend(proto.functions)
    graph, source = light.graph, proto.graph
    graph.name, graph.doc_string = source.name, source.doc_string
    for field in ("node", "input", "output", "value_info", "sparse_initializer", "quantization_annotation"):
        getattr(graph, field).extend(getattr(source, field))
    for tensor in source.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL or len(tensor.raw_data) >= _STUB_BYTES:
            stub = graph.initializer.add()
            stub.name, stub.data_type = tensor.name, tensor.data_type
            stub.dims.extend(tensor.dims)
            stub.data_location = onnx.TensorProto.EXTERNAL
            entry = stub.external_data.add()
            entry.key, entry.value = "location", _WEIGHTLESS
        else:
            graph.initializer.add().CopyFrom(tensor)
    return light


def _take_shapes(proto, inferred) -> None:
    """What shape inference adds to a model (value_info, refined outputs, the nodes with their
    subgraphs' value_info), from ``inferred`` into ``proto``; ``proto``'s initializers stay."""
    for field in ("value_info", "output", "node"):
        del getattr(proto.graph, field)[:]
        getattr(proto.graph, field).extend(getattr(inferred.graph, field))


def _checked_and_inferred_by_files(onnx, proto, where: str):
    """Above 2 GB protobuf cannot serialize the model: check and infer through files, weights outside."""
    with tempfile.TemporaryDirectory(prefix="cuvil-onnx-") as tmp:
        raw, inferred = Path(tmp) / "raw.onnx", Path(tmp) / "inferred.onnx"
        onnx.save(proto, str(raw), save_as_external_data=True, all_tensors_to_one_file=True, location="raw.data")
        try:
            onnx.checker.check_model(str(raw))
            onnx.shape_inference.infer_shapes_path(str(raw), str(inferred), data_prop=True)
        except Exception as e:
            raise ImportError_(f"ONNX check / shape inference failed on {where}: {_short(e)}") from e
        result = onnx.load(str(inferred), load_external_data=False)
        _load_external_data(result, Path(tmp), inferred)
        _load_external_data(proto, Path(tmp), raw)  # onnx.save moved the caller's weights out: back in
        return result


def _symbolic_dims(proto) -> dict[str, list[str]]:
    initializers = {t.name for t in proto.graph.initializer}
    out = {}
    for value in proto.graph.input:
        if value.name in initializers or not value.type.HasField("tensor_type"):
            continue
        dims = ["" if d.HasField("dim_value") else (d.dim_param or "?") for d in value.type.tensor_type.shape.dim]
        if any(dims):
            out[value.name] = dims
    return out


def import_model(model, ctx: ir.Context, *, func_name: str = "main", kept_ops=KEPT_OPS,
                 data_dir: str | os.PathLike | None = None, rewrites_allowed: bool = True,
                 failed: tuple[str, ...] = (), carried: dict | None = None, example_inputs=(),
                 params_mode: str = "inline") -> ir.Module:
    """ONNX model -> torch-dialect module (value semantics, weights as literals) in ``ctx``.

    ``params_mode`` (core/params.py ``resolve_mode``: "inline", "external", or "auto" by the
    initializers' bytes): with external weights, every initializer of at least
    ``params.MIN_PARAMETER_BYTES`` becomes a reference to a parameter named after it, its data a
    view of the model's tensor in a ``ParameterStore``, which ``carried["store"]`` receives (None
    when the weights are inline).

    Where torch-mlir's lowering fails, the model is rewritten at the ONNX level and imported
    again (onnx_rewrites.py): an op ONNX defines as a function (Attention, RMSNormalization,
    ...) is expanded into its body; then constants are folded and reductions given the axes
    their static shapes imply. ``failed``, the errors of the modules IREE could not compile
    (of this model, then of each rewrite), asks for all of that from the start, expanding
    the function ops among the nodes they name (``RewriteNotPossible`` when nothing would
    change). ``kept_ops=()`` and ``rewrites_allowed=False`` is torch-mlir's own import (the
    plain-IREE baseline).

    float8 / float4 / int4 / uint4 / int2 / uint2 values (which the importer, the lowering or
    IREE cannot take) are carried as float32 / int8 / uint8 from the start
    (``rewrites.carry_narrow_types``); ``carried``, when given, receives the caller's dtype per
    function argument and result, and how the model's inputs and outputs map to the function's.

    ``example_inputs`` (one per graph input, in order): the inputs used only as shape operands
    (reduction axes, ``Slice`` bounds, ``Pad`` pads, ``Reshape`` shapes, ``Range`` bounds, ...:
    ``rewrites.SHAPE_OPERANDS``) are bound to their example values, as torch.export
    specializes Python ints; ``carried["bound"]`` maps each to its value (calls must pass it)."""
    loaded = load_model(model, data_dir=data_dir, lazy_weights=True)
    store = params.ParameterStore() if params.resolve_mode(params_mode, initializer_bytes(loaded.proto)) == "external" else None
    if carried is not None:
        carried["store"] = store
    names, bound = loaded.input_names, {}
    if example_inputs and rewrites_allowed:
        if len(example_inputs) != len(names):
            raise ImportError_(f"the ONNX model takes {len(names)} input(s) ({', '.join(names)}); "
                               f"{len(example_inputs)} example input(s) were given")
        given = dict(zip(names, example_inputs))
        bound = {name: _host_array(given[name]) for name in rewrites.shape_operand_inputs(loaded.proto)}
        if bound:
            loaded = _rewritten(loaded, rewrites.bind_inputs(loaded.proto, bound))
    out_names, groups_in, groups_out = loaded.output_names, {}, {}
    sequences = [v for v in loaded.proto.graph.input if v.name in names and rewrites.is_sequence_input(v)]
    if rewrites_allowed and (sequences or any(rewrites.is_sequence_input(v) for v in loaded.proto.graph.output)):
        # sequences of the lengths the example inputs have: held as their tensors
        given = dict(zip(names, example_inputs))
        missing = [v.name for v in sequences if not isinstance(given.get(v.name), (list, tuple))]
        if missing:
            raise ImportError_(f"input '{missing[0]}' of the ONNX model is a sequence: compile with example inputs "
                               "(cuvil_mlir.compile(model, args), a list of arrays for it) to fix its length")
        elements = {v.name: [(np.shape(a), _sequence_elem_type(v)) for a in given[v.name]] for v in sequences}
        proto, groups_in, groups_out = rewrites.scalarize_sequences(loaded.proto, elements)
        loaded = _rewritten(loaded, proto)
    if rewrites_allowed and any(n.op_type == "Scan" for n in loaded.proto.graph.node):
        # torch-mlir lowers these Scans as if their axes were 0 and their directions forward
        unrolled = rewrites.unroll_scans(load_weights(loaded).proto, oriented_only=True)
        loaded = _rewritten(loaded, unrolled) if unrolled is not None else loaded
    done, folded, upgraded_once, before_upgrade = set(), False, False, None
    for rewrite in (rewrites.with_default_opset, rewrites.optional_inputs_as_tensors) if rewrites_allowed else ():
        # a default-domain opset (torch-mlir's lowering needs one); optional tensor inputs as tensors
        changed = rewrite(loaded.proto)
        loaded = _rewritten(loaded, changed) if changed is not None else loaded
    if rewrites_allowed:  # forms whose lowering crashes the process
        expand, fold = rewrites.crashing_forms(loaded.proto)
        expand = {op for op in expand if rewrites.has_function_body(loaded.proto, op)}
        if expand:
            loaded = _rewritten(loaded, rewrites.expand_function_ops(loaded.proto, expand))
            done |= expand
            fold = rewrites.crashing_forms(loaded.proto)[1]
        changed = rewrites.fold_constants(loaded.proto) if fold else None
        loaded = _rewritten(loaded, changed) if changed is not None else loaded
    narrow_inputs, narrow_outputs = {}, {}
    if rewrites_allowed and rewrites.has_narrow_types(loaded.proto):
        proto, narrow_inputs, narrow_outputs = rewrites.carry_narrow_types(load_weights(loaded).proto)
        loaded = _rewritten(loaded, proto)
    if carried is not None:  # what the boundary needs: the model's inputs and outputs, and what became of them
        carried.update(names=names, outputs=out_names, bound=bound, groups_in=groups_in, groups_out=groups_out,
                       args=loaded.input_names, results=loaded.output_names, dtypes={**narrow_inputs, **narrow_outputs})
    for message in failed:
        loaded, expanded = _rewritten_for(load_weights(loaded), message)
        done |= expanded
        folded = True
    while True:
        module = import_onnx_dialect(loaded, ctx, func_name=func_name, store=store)
        try:
            lower_to_torch(module, loaded, kept_ops=kept_ops, bitcasts=rewrites_allowed)
            return module if store is None else parameters.calls_to_references(module)
        except UnsupportedOnnxOp as e:
            if not rewrites_allowed:
                raise
            loaded = load_weights(loaded)  # the rewrites below read tensors
            wanted = {op for op, _ in e.ops if rewrites.has_function_body(loaded.proto, op)} - done
            if wanted:
                loaded = _rewritten(loaded, rewrites.expand_function_ops(loaded.proto, wanted))
                done |= wanted
                continue
            # torch-mlir has no Scan (and what reads a Scan's results has no shape): one body per step
            unrolled = rewrites.unroll_scans(loaded.proto)
            if unrolled is not None:
                loaded = _rewritten(loaded, unrolled)
                continue
            written = rewrites.write_out_ops(loaded.proto, {op for op, _ in e.ops})
            if written is not None:  # optimizer and ML ops: their formulas in default-domain ops
                loaded = _rewritten(loaded, written)
                continue
            resizes = rewrites.resize_as_linear_maps(loaded.proto) if any(op == "Resize" for op, _ in e.ops) else None
            if resizes is not None:  # small Resize forms torch-mlir lacks: their linear maps
                loaded = _rewritten(loaded, resizes)
                continue
            dfts = rewrites.dft_as_matmuls(loaded.proto) if any(op == "DFT" for op, _ in e.ops) else None
            if dfts is not None:  # DFT as matrix products
                loaded = _rewritten(loaded, dfts)
                continue
            cumprods = rewrites.expand_cumprods(loaded.proto) if any(op == "CumProd" for op, _ in e.ops) else None
            if cumprods is not None:  # torch-mlir has no CumProd: a chain of products
                loaded = _rewritten(loaded, cumprods)
                continue
            upgraded = None if upgraded_once else rewrites.upgrade_opset(loaded.proto)
            upgraded_once = True
            if upgraded is not None:  # an old opset: the newer forms torch-mlir lowers
                before_upgrade = e
                loaded = _rewritten(loaded, upgraded)
                continue
            # a lowering that needs constant operands (axes, sizes, If conditions) computed by nodes
            changed = None
            if not folded:
                changed = rewrites.fold_constants(loaded.proto)
                changed = rewrites.static_reduction_axes(changed or loaded.proto) or changed
                folded = True
            if changed is None:
                if before_upgrade is not None and {op for op, _ in e.ops} <= {op for op, _ in before_upgrade.ops}:
                    raise before_upgrade from None  # the upgrade did not help: named at the model's own opset
                raise
            loaded = _rewritten(loaded, changed)


def shape_operand_inputs(model) -> list[str]:
    """The names of the inputs of an ONNX model (path, ModelProto or OnnxModel) that are used
    only as shape operands: compiling with example inputs binds them (``import_model``)."""
    loaded = load_model(model, infer_shapes=False) if not isinstance(model, OnnxModel) else model
    return rewrites.shape_operand_inputs(loaded.proto)


def sequence_inputs(model) -> list[str]:
    """The names of the sequence inputs of an ONNX model: compiling needs example inputs (their lengths)."""
    loaded = load_model(model, infer_shapes=False) if not isinstance(model, OnnxModel) else model
    return [v.name for v in loaded.proto.graph.input if v.name in loaded.input_names and rewrites.is_sequence_input(v)]


def shape_operand_values(model, inputs) -> dict[str, np.ndarray]:
    """The values ``inputs`` (one per input of the model) give its shape-operand inputs."""
    loaded = load_model(model, infer_shapes=False) if not isinstance(model, OnnxModel) else model
    given = dict(zip(loaded.input_names, inputs))
    return {name: _host_array(given[name]) for name in rewrites.shape_operand_inputs(loaded.proto) if name in given}


def _sequence_elem_type(value) -> int:
    t = value.type.optional_type.elem_type if value.type.HasField("optional_type") else value.type
    return t.sequence_type.elem_type.tensor_type.elem_type


def _host_array(value) -> np.ndarray:
    """An example input (numpy array or torch tensor) as a numpy array."""
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _rewritten_for(loaded: OnnxModel, failed: str) -> tuple[OnnxModel, set[str]]:
    """``loaded`` rewritten where IREE failed on its module: reductions given static axes
    (before an expansion turns them into reductions of unknown shape), the function ops
    among the nodes the error names expanded, constants folded, static axes again."""
    _name_nodes(loaded.proto)
    named = set(re.findall(r'loc\("([^"]+)"', failed))
    ops = {n.op_type for n in loaded.proto.graph.node
           if n.name in named and rewrites.has_function_body(loaded.proto, n.op_type)}
    changed = rewrites.static_reduction_axes(loaded.proto)
    if any(n.op_type == "DFT" for n in loaded.proto.graph.node):  # IREE compiles no FFT
        changed = rewrites.dft_as_matmuls(changed or loaded.proto) or changed
    if ops:
        changed = rewrites.expand_function_ops(changed or loaded.proto, ops)
        changed = _rewritten(loaded, changed).proto  # shapes of the expansion, for folding and axes
    changed = rewrites.fold_constants(changed or loaded.proto) or changed
    changed = rewrites.static_reduction_axes(changed or loaded.proto) or changed
    if changed is None:
        raise RewriteNotPossible(f"no ONNX-level rewrite applies to the nodes IREE failed on: {_short(failed, 200)}")
    return _rewritten(loaded, changed), ops


def _rewritten(loaded: OnnxModel, proto) -> OnnxModel:
    """``loaded`` with a rewritten proto, checked and shape-inferred again."""
    return OnnxModel(_checked_and_inferred(_onnx(), proto, loaded.path), loaded.path, loaded.symbolic_dims, loaded.data_dir)


def initializer_bytes(proto) -> int:
    """The bytes of the model's weights: its initializers (raw data, or the typed fields)."""
    from onnx import helper

    total = 0
    for t in proto.graph.initializer:
        size = int(np.prod(t.dims, dtype=np.int64))
        try:
            itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
        except (KeyError, TypeError, ValueError):
            itemsize = 1
        total += size * itemsize
    return total


def import_onnx_dialect(loaded: OnnxModel, ctx: ir.Context, *, func_name: str = "main", store=None) -> ir.Module:
    """Step 2: the module of ``torch.operator "onnx.*"`` ops, as torch-mlir's importer makes it.
    With ``store`` (external weights) the big initializers are calls of parameter declarations
    (parameters.py) instead: their data goes into the store, not into the IR."""
    from torch_mlir.extras import onnx_importer

    proto = loaded.proto
    saved_name = proto.graph.name
    proto.graph.name = func_name  # the importer names the function after the graph
    _name_nodes(proto)
    try:
        info = onnx_importer.ModelInfo(proto)
        module = info.create_module(context=ctx)
        cache = _readable_cache(onnx_importer)(module.context)
        cache.external = {} if store is not None else None
        cache.data_dir, cache.mapped = loaded.data_dir, {}
        importer = onnx_importer.NodeImporter.define_function(info.main_graph, module.operation, context_cache=cache)
        importer.import_all()
        if store is not None:
            _initializers_to_parameters(module, cache.external, store)
    except onnx_importer.OnnxImportError as e:
        raise ImportError_(f"torch-mlir's ONNX importer failed: {_short(e)}") from e
    except ImportError_:
        raise
    except Exception as e:
        raise ImportError_(f"torch-mlir's ONNX importer failed: {type(e).__name__}: {_short(e)}") from e
    finally:
        proto.graph.name = saved_name
    _name_locations(module, proto)
    return module


def _name_nodes(proto) -> None:
    """Errors and locations name nodes: a nameless node is called ``<op type>_<index>``."""
    for i, node in enumerate(proto.graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{i}"


def lower_to_torch(module: ir.Module, loaded: OnnxModel, *, kept_ops=KEPT_OPS, bitcasts: bool = False) -> None:
    """Steps 3 and 4: onnx.* operators -> aten ops -> the torch backend contract.
    ``bitcasts``: ``BitCast`` (which torch-mlir's lowering lacks) becomes ``aten.view.dtype``."""
    try:
        _run(module, "builtin.module(func.func(convert-torch-onnx-to-torch))", loaded)
    except ImportError_ as e:
        # an op whose lowering exists but does not take this form (attributes, types, regions)
        failed = re.findall(r'name = "onnx\.(\w+)"', e.message)
        if "failed to legalize operation 'torch.operator'" not in e.message or not failed:
            raise
        node = getattr(e, "node", "") or "?"
        raise UnsupportedOnnxOp(
            f"torch-mlir's ONNX lowering cannot convert ONNX op {failed[0]} (node '{node}') in this form at opset "
            f"{_opset(loaded.proto)}: {e.message.split(': ', 1)[-1]}", ops=[(failed[0], node)]) from e.__cause__
    if bitcasts:
        _bitcasts_as_view_dtype(module)
    left = unconverted_ops(module)
    if left:
        opset = _opset(loaded.proto)
        shown = ", ".join(f"{op} (node '{node}')" for op, node in left[:8]) + (" ..." if len(left) > 8 else "")
        kinds = sorted({op for op, _ in left})
        raise UnsupportedOnnxOp(
            f"torch-mlir's ONNX lowering does not support ONNX op{'s' if len(kinds) > 1 else ''} "
            f"{', '.join(kinds)} at opset {opset}: {shown}", ops=left)
    if "layer_norm" in kept_ops:
        _layer_norms_whole(module)
    legal = ",".join(f"aten.{name}" for name in kept_ops)
    option = f"{{backend-legal-ops={legal}}}" if legal else ""
    _run(module, f"builtin.module(torch-onnx-to-torch-backend-pipeline{option})", loaded)


def _nested_ops(op) -> list:
    """Every operation inside ``op`` (all regions, depth first), collected before any rewrite."""
    found = []
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                found.append(inner.operation)
                found += _nested_ops(inner.operation)
    return found


def _layer_norms_whole(module: ir.Module) -> int:
    """``native_layer_norm(x, shape, w, b, eps)`` whose mean and rstd results are unused ->
    ``layer_norm(x, shape, w, b, eps, false)``: the op torch.export gives and raise knows
    (torch-mlir's ONNX lowering makes every LayerNormalization a native_layer_norm, which the
    backend pipeline would decompose). Returns how many were rewritten."""
    found = [o for o in _nested_ops(module.operation)
             if o.name == "torch.aten.native_layer_norm" and all(not list(r.uses) for r in list(o.results)[1:])]
    with module.context:
        for o in found:
            with ir.InsertionPoint(o), o.location:
                false = ir.Operation.create("torch.constant.bool", results=[ir.Type.parse("!torch.bool")],
                                            attributes={"value": ir.BoolAttr.get(False)}).result
                norm = ir.Operation.create("torch.aten.layer_norm", results=[o.results[0].type],
                                           operands=[*o.operands[:5], false])
            o.results[0].replace_all_uses_with(norm.result)
            o.erase()
    return len(found)


def _bitcasts_as_view_dtype(module: ir.Module) -> int:
    """``torch.operator "onnx.BitCast"`` between element types of one width ->
    ``aten.view.dtype`` (a reinterpretation of the bits, which IREE compiles). Returns how
    many were rewritten."""
    from cuvil_mlir.core.tensor_types import TORCH_DTYPE_CODE, parse_vtensor

    widths = {"f64": 64, "si64": 64, "f32": 32, "si32": 32, "f16": 16, "bf16": 16, "si16": 16, "si8": 8, "ui8": 8, "i1": 8}
    found = []
    for o in _nested_ops(module.operation):
        if o.name == "torch.operator" and ir.StringAttr(o.attributes["name"]).value == "onnx.BitCast":
            source, result = parse_vtensor(str(o.operands[0].type)), parse_vtensor(str(o.results[0].type))
            if source and result and result.dtype in TORCH_DTYPE_CODE and widths.get(source.dtype) == widths.get(result.dtype) is not None:
                found.append((o, TORCH_DTYPE_CODE[result.dtype]))
    with module.context:
        for o, code in found:
            with ir.InsertionPoint(o), o.location:
                dtype = ir.Operation.create("torch.constant.int", results=[ir.Type.parse("!torch.int")],
                                            attributes={"value": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), code)}).result
                view = ir.Operation.create("torch.aten.view.dtype", results=[o.results[0].type], operands=[o.operands[0], dtype])
            o.results[0].replace_all_uses_with(view.result)
            o.erase()
    return len(found)


def unconverted_ops(module: ir.Module) -> list[tuple[str, str]]:
    """(ONNX op type, node name) of every ``torch.operator "onnx.*"`` left in ``module``."""
    left = []
    for o in _nested_ops(module.operation):
        if o.name == "torch.operator":
            name = ir.StringAttr(o.attributes["name"]).value
            if name.startswith("onnx."):
                left.append((name.removeprefix("onnx."), _node_name(o.location)))
    return left


def _run(module: ir.Module, pipeline: str, loaded: OnnxModel) -> None:
    where = str(loaded.path) if loaded.path else "the ONNX model"
    with module.context:
        try:
            passmanager.PassManager.parse(pipeline).run(module.operation)
        except ir.MLIRError as e:
            text = " ".join(str(d.message) for d in getattr(e, "error_diagnostics", [])) or str(e)
            message = f"torch-mlir could not lower {where} to the torch dialect: {_short(text)}"
            dims = sorted({d for dims in loaded.symbolic_dims.values() for d in dims if d != "?"})
            if loaded.symbolic_dims and re.search(r"dynamic|\?|shape|dim", text):
                named = f"symbolic dims {', '.join(dims)}" if dims else "unknown dims"
                raise SymbolicDimError(f"{message} (the model's inputs have {named}; fix them with "
                                       "onnx.tools.update_model_dims.update_inputs_outputs_dims, or export with static "
                                       "shapes)") from e
            error = ImportError_(message)
            locations = [d.location for d in getattr(e, "error_diagnostics", [])]
            error.node = _node_name(locations[0]) if locations else ""
            raise error from e


def _opset(proto) -> int:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)


def _node_name(loc) -> str:
    """The ONNX node name a location carries (the importer's Location.name, possibly wrapped)."""
    text = str(loc)
    names = re.findall(r'loc\("([^"]*)"', text)
    return names[-1] if names else text


def _readable_cache(onnx_importer):
    """torch-mlir's ContextCache, less its dense_resource blobs for initializers. With
    ``external`` set (a dict: external weights), a tensor of at least MIN_PARAMETER_BYTES that an
    initializer op is made for goes there, by the name of that op's location (the initializer's
    name), and the op gets a zero splat of its type (no copy of the data in the IR), which
    ``_initializers_to_parameters`` replaces."""
    import numpy as np

    class ReadableWeights(onnx_importer.ContextCache):
        external = None
        data_dir = None  # where the tensors left in their files are (OnnxModel.data_dir)
        mapped = None  # their files, mapped: path -> mmap (set per import)

        def tensor_proto_to_attr(self, tp):
            dtype = _DTYPES.get(tp.data_type)
            lazy = self.data_dir is not None and tp.data_location == 1
            if not (tp.HasField("raw_data") or lazy) or dtype is None:
                return super().tensor_proto_to_attr(tp)
            numpy_dtype = onnx_importer.ELEM_TYPE_TO_NUMPY_DTYPE[tp.data_type]
            if lazy:  # a view of its file, mapped (no copy; the archive writer copies from the file)
                array = _external_array(tp, self.data_dir, self.mapped, np.uint16 if dtype == "bf16" else numpy_dtype)
            elif dtype == "bf16":
                array = np.frombuffer(tp.raw_data, dtype=np.uint16)
            else:
                array = np.frombuffer(tp.raw_data, dtype=numpy_dtype)
            if dtype == "bf16":
                import ml_dtypes

                array = array.view(ml_dtypes.bfloat16)
            array = array.reshape(tuple(tp.dims))
            name = _node_name(ir.Location.current) if self.external is not None else ""
            if name and name not in self.external and dtype in params.PARAMETER_DTYPES and array.nbytes >= params.MIN_PARAMETER_BYTES:
                self.external[name] = array
                with self._c:
                    tensor_type = self.tensor_proto_to_builtin_type(tp)
                    element = ir.RankedTensorType(tensor_type).element_type
                    zero = ir.FloatAttr.get(element, 0.0) if array.dtype.kind == "f" or dtype == "bf16" else ir.IntegerAttr.get(element, 0)
                    return ir.DenseElementsAttr.get_splat(tensor_type, zero)
            with self._c:
                return elements_attr(array, dtype)

    return ReadableWeights


def _external_array(tp, base: Path, mapped: dict, dtype):
    """The data of external tensor ``tp`` as a read-only view of its file under ``base``, mapped
    once per file (``mapped``: path -> mmap) and registered with core/params.py."""
    import mmap

    entries = {e.key: e.value for e in tp.external_data}
    path = base / entries.get("location", "")
    if path not in mapped:
        with open(path, "rb") as f:
            mapped[path] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        params.register_mapped_file(mapped[path], str(path))
    count = int(np.prod(tp.dims, dtype=np.int64))
    offset = int(entries.get("offset", 0))
    if offset + count * np.dtype(dtype).itemsize > len(mapped[path]):
        raise ImportError_(f"the external data of tensor '{tp.name}' runs past the end of {path} "
                           f"(offset {offset}, {count} elements of {np.dtype(dtype).name}, file {len(mapped[path])} bytes)")
    return np.frombuffer(mapped[path], dtype=dtype, count=count, offset=offset)


def _initializers_to_parameters(module: ir.Module, external: dict, store) -> None:
    """Each ``onnx.Constant`` op whose tensor went to ``external`` -> a call of its parameter's
    declaration (the key: the initializer's name), the tensor into ``store`` (a view, no copy)."""
    constants = []

    def visit(op):
        if op.name == "torch.operator" and ir.StringAttr(op.attributes["name"]).value == "onnx.Constant" \
                and _node_name(op.location) in external:
            constants.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    symbols: dict = {}
    with module.context:
        for op in constants:
            name = _node_name(op.location)
            key = store.add(name, external[name])
            with ir.InsertionPoint(op), op.location:
                value = parameters.call(module, key, op.results[0].type, symbols)
            op.results[0].replace_all_uses_with(value)
            op.erase()
        # torch-mlir's ONNX lowering runs on every function and wants each one's opset
        opset = next((f.attributes["torch.onnx_meta.opset_version"] for f in module.body.operations
                      if "torch.onnx_meta.opset_version" in f.attributes), None)
        for f in module.body.operations:
            if opset is not None and params.KEY_ATTR in f.attributes:
                f.attributes["torch.onnx_meta.opset_version"] = opset


def _name_locations(module: ir.Module, proto) -> None:
    """Locations name the PyTorch module a node was exported from (torch.onnx records it in
    the node's metadata as ``pkg.torch.onnx.name_scopes``), wrapping the node-name location."""
    scopes = {}
    for node in proto.graph.node:
        path = _module_path(node)
        if path and node.name:
            scopes[node.name] = path
    if not scopes:
        return
    ctx = module.context
    for o in _nested_ops(module.operation):
        node = _node_name(o.location)
        if node in scopes:
            o.location = ir.Location.name(scopes[node], childLoc=o.location, context=ctx)


def _module_path(node) -> str:
    """The dotted path of the innermost nn.Module a node came from. torch.onnx records two
    parallel lists per node, ``name_scopes`` (``['', 'layers.0', 'layers.0.attn', 'linear']``)
    and ``class_hierarchy`` (``['M', 'Block', 'Attention', 'aten.linear.default']``): the
    last scope that is a module's (not the aten op's at the end)."""
    props = {p.key: p.value for p in node.metadata_props}
    scopes = re.findall(r"'([^']*)'", props.get("pkg.torch.onnx.name_scopes", ""))
    classes = re.findall(r"'([^']*)'", props.get("pkg.torch.onnx.class_hierarchy", ""))
    if len(classes) == len(scopes):
        scopes = [s for s, c in zip(scopes, classes) if not c.startswith(("aten.", "prims."))]
    elif scopes:
        scopes = scopes[:-1]
    return next((s for s in reversed(scopes) if s), "")


def _short(e, limit: int = 600) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[:limit] + " ..."

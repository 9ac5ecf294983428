"""ONNX-level rewrites before torch-mlir's ONNX import, for what its lowering cannot take as
it is. Each takes and returns an ``onnx.ModelProto`` (the caller checks and shape-infers the
result); cuvil_mlir/compiler/importers/onnx.py applies them only where the lowering failed,
so a model it converts is imported unchanged.

- ``expand_function_ops``: ops ONNX defines as functions (Attention, RMSNormalization,
  RotaryEmbedding, Swish, ...) replaced by their function bodies;
- ``fold_constants``: nodes whose inputs are all known at compile time (constants, the
  ``Shape``/``Size`` of statically shaped values) evaluated with ``onnx.reference``, and an
  ``If`` whose condition is known replaced by its branch: a lowering that needs constant
  operands (reduction axes, sizes, slice bounds) gets them.
"""

from __future__ import annotations

import itertools

import numpy as np

from cuvil_mlir.core.diagnostics import ImportError_

_EXPAND_DOMAIN = "cuvil.expand"

# a folded value larger than this stays computed (folding is for shapes, axes and small
# tables, not for copying weights)
FOLD_LIMIT = 1 << 16

# ops whose value is not a function of their inputs
_NOT_FOLDABLE = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial",
                 "Dropout", "If", "Loop", "Scan", "SequenceMap", "Optional", "ImageDecoder"}


def _opset(proto, domain: str = "") -> int:
    return next((o.version for o in proto.opset_import if o.domain == domain or (not domain and o.domain == "ai.onnx")), 0)


def _short(e, limit: int = 400) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[:limit] + " ..."


def has_function_body(proto, op_type: str, domain: str = "") -> bool:
    """Whether ONNX defines ``op_type`` as a function (plain or context-dependent) at the
    opset ``proto`` imports for its domain."""
    from onnx import defs

    opset = _opset(proto, domain)
    try:
        schema = defs.get_schema(op_type, opset, domain)
    except Exception:  # noqa: BLE001  (no such op in that domain and opset)
        return False
    versions = [*schema.function_opset_versions, *schema.context_dependent_function_opset_versions]
    return any(v <= opset for v in versions)


def expand_function_ops(proto, op_types: set[str]):
    """Every node of ``op_types`` (default domain, top-level graph) replaced by its ONNX
    function body. Each node gets its own instance of the body (a context-dependent body
    depends on the node's attributes and input types; an absent optional input has an empty
    type), as a model-local function that ``onnx.inliner`` inlines. Attributes the node
    leaves out get the schema's defaults first, as a body refers to them by name. The
    inliner works on a copy without initializers (a model may pass protobuf's 2 GB)."""
    from onnx import FunctionProto, TypeProto, defs, helper, inliner

    opset = _opset(proto)
    types = {v.name: v.type for v in [*proto.graph.input, *proto.graph.value_info, *proto.graph.output]}
    for t in proto.graph.initializer:
        types.setdefault(t.name, helper.make_tensor_type_proto(t.data_type, list(t.dims)))
    light = type(proto)()
    light.CopyFrom(proto)
    del light.graph.initializer[:]
    for i, node in enumerate(light.graph.node):
        if node.domain not in ("", "ai.onnx") or node.op_type not in op_types:
            continue
        schema = defs.get_schema(node.op_type, opset, "")
        given = {a.name for a in node.attribute}
        for name, attr in schema.attributes.items():
            if name not in given and attr.default_value.type:
                node.attribute.append(attr.default_value)
        body = FunctionProto()
        try:
            if any(v <= opset for v in schema.context_dependent_function_opset_versions):
                input_types = [(types.get(x) if x else None) or TypeProto() for x in node.input]
                body.ParseFromString(schema.get_context_dependent_function_with_opset_version(
                    opset, node.SerializeToString(), [t.SerializeToString() for t in input_types]))
            else:
                body.ParseFromString(schema.get_function_with_opset_version(opset))
        except Exception as e:
            raise ImportError_(f"ONNX op {node.op_type} (node '{node.name}') has no usable function body at opset "
                               f"{opset}: {type(e).__name__}: {_short(e)}") from e
        body.domain, body.name = _EXPAND_DOMAIN, f"{node.op_type}_{i}"
        for o in body.opset_import:  # a body written for an older opset (Swish's 24 at 28): the inliner
            if o.domain in ("", "ai.onnx"):  # skips a function whose opsets differ from the model's
                o.version = opset
        node.domain, node.op_type = _EXPAND_DOMAIN, body.name
        light.functions.append(body)
    light.opset_import.append(helper.make_opsetid(_EXPAND_DOMAIN, 1))
    try:
        expanded = inliner.inline_local_functions(light)
    except Exception as e:
        raise ImportError_(f"expanding ONNX ops {', '.join(sorted(op_types))} into their function bodies failed: "
                           f"{type(e).__name__}: {_short(e)}") from e
    left = sorted({n.op_type for n in expanded.graph.node if n.domain == _EXPAND_DOMAIN})
    if left:
        raise ImportError_(f"expanding ONNX ops into their function bodies failed: onnx's inliner left {', '.join(left)}")
    keep = [o for o in expanded.opset_import if o.domain != _EXPAND_DOMAIN]
    del expanded.opset_import[:]
    expanded.opset_import.extend(keep)
    del expanded.functions[:]
    expanded.graph.initializer.extend(proto.graph.initializer)
    return expanded


def fold_constants(proto):
    """The model with every node whose inputs are known at compile time replaced by
    ``Constant`` nodes of its results (up to ``FOLD_LIMIT`` elements each), and every ``If``
    with a known condition replaced by its branch; None when nothing folds. Known: small
    initializers, ``Constant`` nodes, and the ``Shape`` / ``Size`` of values whose inferred
    shape is static."""
    from onnx import helper, numpy_helper

    graph = proto.graph
    known: dict[str, np.ndarray] = {}
    for t in graph.initializer:
        if int(np.prod(t.dims)) <= FOLD_LIMIT:
            known[t.name] = numpy_helper.to_array(t)
    shapes = {}
    for v in [*graph.input, *graph.value_info, *graph.output]:
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
            dims = v.type.tensor_type.shape.dim
            if all(d.HasField("dim_value") for d in dims):
                shapes[v.name] = tuple(int(d.dim_value) for d in dims)
    opset = _opset(proto)
    fresh = (f"cuvil_folded_{i}" for i in itertools.count())
    out, changed = [], False
    pending = list(reversed(graph.node))
    while pending:
        node = pending.pop()
        if node.domain not in ("", "ai.onnx"):
            out.append(node)
            continue
        if node.op_type == "If" and node.input[0] in known:
            branch = _branch(node, bool(np.asarray(known[node.input[0]]).reshape(-1)[0]), fresh)
            if branch is not None:
                pending.extend(reversed(branch))
                changed = True
                continue
        values = _fold(node, known, shapes, opset)
        if values is None:
            out.append(node)
            if node.op_type == "Constant":
                value = _constant_value(node)
                if value is not None:
                    known[node.output[0]] = value
            continue
        for name, value in zip(node.output, values):
            known[name] = value
            out.append(helper.make_node("Constant", [], [name], name=f"{node.name or node.op_type}_folded_{name}",
                                        value=numpy_helper.from_array(np.asarray(value), name)))
        changed = True
    if not changed:
        return None
    result = type(proto)()
    result.CopyFrom(proto)
    del result.graph.node[:]
    result.graph.node.extend(out)
    del result.graph.value_info[:]  # inferred again by the caller
    return result


def _fold(node, known, shapes, opset):
    """The node's results as arrays where all its inputs are known, else None."""
    if node.op_type in _NOT_FOLDABLE or node.op_type == "Constant" or not node.output:
        return None
    if any(a.type in (5, 10) for a in node.attribute):  # GRAPH, GRAPHS: a subgraph
        return None
    if node.op_type in ("Shape", "Size") and node.input[0] in shapes:
        shape = shapes[node.input[0]]
        if node.op_type == "Size":
            return [np.array(int(np.prod(shape)), dtype=np.int64)]
        attrs = {a.name: a.i for a in node.attribute}
        start, end = attrs.get("start", 0), attrs.get("end", len(shape))
        return [np.array(shape[slice(start, end)], dtype=np.int64)]
    inputs = [x for x in node.input if x]
    if not inputs or any(x not in known for x in inputs):
        return None
    from onnx.reference import ReferenceEvaluator

    try:
        results = ReferenceEvaluator(node, opsets={"": opset}).run(None, {x: known[x] for x in inputs})
    except Exception:  # noqa: BLE001  (left for torch-mlir's lowering, which names the problem)
        return None
    results = [np.asarray(r) for r in results]
    if len(results) != len(node.output) or any(r.dtype == object or r.size > FOLD_LIMIT for r in results):
        return None
    return results


def _constant_value(node):
    from onnx import numpy_helper

    for a in node.attribute:
        if a.name == "value" and a.type == 4:  # TENSOR
            return numpy_helper.to_array(a.t) if int(np.prod(a.t.dims)) <= FOLD_LIMIT else None
    return None


def _branch(node, condition: bool, fresh):
    """The nodes of the ``If`` branch ``condition`` selects, its values renamed apart, then
    an ``Identity`` per result; None where the branch holds subgraphs of its own."""
    from onnx import helper

    graph = next((a.g for a in node.attribute if a.name == ("then_branch" if condition else "else_branch")), None)
    if graph is None or any(a.type in (5, 10) for n in graph.node for a in n.attribute):
        return None
    prefix = next(fresh)
    local = {o for n in graph.node for o in n.output} | {t.name for t in graph.initializer}
    rename = {name: f"{prefix}_{name}" for name in local}
    nodes = [helper.make_node("Constant", [], [rename[t.name]], value=t) for t in graph.initializer]
    for n in graph.node:
        copy = type(n)()
        copy.CopyFrom(n)
        copy.input[:] = [rename.get(x, x) for x in n.input]
        copy.output[:] = [rename.get(x, x) for x in n.output]
        copy.name = f"{prefix}_{n.name}" if n.name else ""
        nodes.append(copy)
    for result, value in zip(node.output, graph.output):
        nodes.append(helper.make_node("Identity", [rename.get(value.name, value.name)], [result]))
    return nodes


_REDUCTIONS = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
               "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}


def static_reduction_axes(proto):
    """The model with each reduction whose ``axes`` is a runtime value, but whose input and
    result shapes are static, given the axes those shapes imply as a constant (torch-mlir
    lowers runtime axes to a reduction IREE cannot compile); None when there is none. The
    shapes decide: a dim that shrank to 1 (keepdims) or the one set of dims whose removal
    gives the result's shape (keepdims=0); reducing a dim of size 1 changes no value, so only
    a reduction that shrinks no dim (a no-op or one over size-1 dims) is left as it is."""
    from onnx import helper

    graph = proto.graph
    shapes = {}
    for v in [*graph.input, *graph.value_info, *graph.output]:
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
            dims = v.type.tensor_type.shape.dim
            if all(d.HasField("dim_value") for d in dims):
                shapes[v.name] = tuple(int(d.dim_value) for d in dims)
    constants = {t.name for t in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    out, changed = [], False
    for node in graph.node:
        if (node.op_type in _REDUCTIONS and node.domain in ("", "ai.onnx") and len(node.input) > 1 and node.input[1]
                and node.input[1] not in constants and node.input[0] in shapes and node.output[0] in shapes):
            keepdims = next((a.i for a in node.attribute if a.name == "keepdims"), 1)
            axes = _implied_axes(shapes[node.input[0]], shapes[node.output[0]], bool(keepdims))
            if axes:
                name = f"{node.output[0]}_cuvil_axes"
                out.append(helper.make_node("Constant", [], [name], value=helper.make_tensor(name, 7, [len(axes)], axes)))
                copy = type(node)()
                copy.CopyFrom(node)
                copy.input[1] = name
                out.append(copy)
                changed = True
                continue
        out.append(node)
    if not changed:
        return None
    result = type(proto)()
    result.CopyFrom(proto)
    del result.graph.node[:]
    result.graph.node.extend(out)
    return result


def _implied_axes(source: tuple, result: tuple, keepdims: bool) -> list[int] | None:
    if keepdims:
        if len(source) != len(result) or any(r not in (s, 1) for s, r in zip(source, result)):
            return None
        shrunk = [i for i, (s, r) in enumerate(zip(source, result)) if r == 1 and s != 1]
        return sorted(shrunk + [i for i, s in enumerate(source) if s == 1]) if shrunk else None
    k = len(source) - len(result)
    if k <= 0:
        return None
    fits = [c for c in itertools.combinations(range(len(source)), k)
            if tuple(s for i, s in enumerate(source) if i not in c) == tuple(result)]
    # fits that differ only in which size-1 dims they remove reduce the same elements
    if len({tuple(i for i in c if source[i] != 1) for c in fits}) != 1:
        return None
    return list(fits[0])

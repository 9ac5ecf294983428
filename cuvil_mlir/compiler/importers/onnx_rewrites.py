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
                 "Dropout", "Optional", "ImageDecoder"}


def _opset(proto, domain: str = "") -> int:
    return next((o.version for o in proto.opset_import if o.domain == domain or (not domain and o.domain == "ai.onnx")), 0)


def _short(e, limit: int = 400) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[:limit] + " ..."


def _value_facts(graph, known_limit: int):
    """(shapes, element types, known values) of a graph's values: shapes from its inputs,
    value_info and outputs (None for a dim without a value), known values from initializers of
    up to ``known_limit`` elements and ``Constant`` nodes."""
    from onnx import numpy_helper

    shapes, types = {}, {}
    for v in [*graph.input, *graph.value_info, *graph.output]:
        if v.type.HasField("tensor_type"):
            types[v.name] = v.type.tensor_type.elem_type
            if v.type.tensor_type.HasField("shape"):
                shapes[v.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim)
    known = {t.name: numpy_helper.to_array(t) for t in graph.initializer if int(np.prod(t.dims)) <= known_limit}
    for node in graph.node:
        if node.op_type == "Constant":
            value = _constant_value(node)
            if value is not None:
                known[node.output[0]] = value
    return shapes, types, known


def _expand_each(proto, op_type: str, expand, *, known_limit: int, prefix: str):
    """The model with each ``op_type`` node replaced by ``expand(node, shapes, types, known,
    opset, fresh name prefix)``'s nodes where that gives some (None: the node stays); None when
    no node was replaced."""
    shapes, types, known = _value_facts(proto.graph, known_limit=known_limit)
    opset = _opset(proto)
    fresh = (f"{prefix}{i}" for i in itertools.count())
    out, changed = [], False
    for node in proto.graph.node:
        nodes = expand(node, shapes, types, known, opset, next(fresh)) if node.op_type == op_type else None
        if nodes is None:
            out.append(node)
            continue
        out += nodes
        changed = True
    return _with_nodes(proto, out) if changed else None


def _with_nodes(proto, nodes):
    """A copy of ``proto`` whose graph runs ``nodes``; its value_info is dropped (the caller
    infers shapes again)."""
    result = type(proto)()
    result.CopyFrom(proto)
    del result.graph.node[:]
    result.graph.node.extend(nodes)
    del result.graph.value_info[:]
    return result


def has_function_body(proto, op_type: str, domain: str | None = None) -> bool:
    """Whether ONNX defines ``op_type`` as a function (plain or context-dependent) at the
    opset ``proto`` imports for its domain (None: the domain of the model's nodes of that
    type, e.g. ``ai.onnx.preview`` for FlexAttention; else the default one)."""
    from onnx import defs

    if domain is None:
        domain = next((n.domain for n in proto.graph.node if n.op_type == op_type), "")
    domain = "" if domain == "ai.onnx" else domain
    opset = _opset(proto, domain)
    try:
        schema = defs.get_schema(op_type, opset, domain)
    except Exception:  # noqa: BLE001  (no such op in that domain and opset)
        return False
    versions = [*schema.function_opset_versions, *schema.context_dependent_function_opset_versions]
    return any(v <= opset for v in versions)


def expand_function_ops(proto, op_types: set[str]):
    """Every node of ``op_types`` (of the top-level graph, in a domain where ONNX defines it
    as a function) replaced by its ONNX function body. Each node gets its own instance of the body (a context-dependent body
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
        domain = "" if node.domain == "ai.onnx" else node.domain
        if node.op_type not in op_types or not has_function_body(proto, node.op_type, domain):
            continue
        schema = defs.get_schema(node.op_type, _opset(proto, domain), domain)
        domain_opset = _opset(proto, domain)
        given = {a.name for a in node.attribute}
        for name, attr in schema.attributes.items():
            if name not in given and attr.default_value.type:
                node.attribute.append(attr.default_value)
        body = FunctionProto()
        try:
            if any(v <= domain_opset for v in schema.context_dependent_function_opset_versions):
                input_types = [(types.get(x) if x else None) or TypeProto() for x in node.input]
                body.ParseFromString(schema.get_context_dependent_function_with_opset_version(
                    domain_opset, node.SerializeToString(), [t.SerializeToString() for t in input_types]))
            else:
                body.ParseFromString(schema.get_function_with_opset_version(domain_opset))
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
    shapes, types = {}, {}
    for v in [*graph.input, *graph.value_info, *graph.output]:
        if v.type.HasField("tensor_type"):
            types[v.name] = v.type.tensor_type.elem_type
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
        if node.op_type == "Compress" and node.input[1] in known and node.input[0] not in known:
            # a known condition: a Gather of the indices it selects (the result's shape is static)
            pending.extend(reversed(_compress_as_gather(node, np.asarray(known[node.input[1]]), next(fresh))))
            changed = True
            continue
        if node.op_type == "CastLike" and node.input[0] in known and types.get(node.input[1]):
            node = helper.make_node("Cast", [node.input[0]], list(node.output), name=node.name, to=types[node.input[1]],
                                    **{a.name: a.i for a in node.attribute if a.name in ("saturate", "round_mode")})
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
    return _with_nodes(proto, out)


def _fold(node, known, shapes, opset):
    """The node's results as arrays where all its inputs are known, else None."""
    if node.op_type in _NOT_FOLDABLE or node.op_type == "Constant" or not node.output:
        return None
    outer = _outer_references(node)  # a subgraph (Loop, Scan, If) may read values of this graph
    if outer is None:
        return None
    if node.op_type in ("Shape", "Size") and node.input[0] in shapes:
        shape = shapes[node.input[0]]
        if node.op_type == "Size":
            return [np.array(int(np.prod(shape)), dtype=np.int64)]
        attrs = {a.name: a.i for a in node.attribute}
        start, end = attrs.get("start", 0), attrs.get("end", len(shape))
        return [np.array(shape[slice(start, end)], dtype=np.int64)]
    inputs = [x for x in node.input if x]
    if not (inputs or outer) or any(x not in known for x in [*inputs, *outer]):
        return None
    from onnx.reference import ReferenceEvaluator

    try:
        if outer:  # the subgraph's outer values as inputs of a one-node graph
            from onnx import helper

            names = list(dict.fromkeys([*inputs, *outer]))
            graph = helper.make_graph([node], "fold", [helper.make_value_info(x, helper.TypeProto()) for x in names],
                                      [helper.make_value_info(x, helper.TypeProto()) for x in node.output])
            evaluator = ReferenceEvaluator(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))
            results = evaluator.run(None, {x: known[x] for x in names})
        else:
            results = ReferenceEvaluator(node, opsets={"": opset}).run(None, {x: known[x] for x in inputs})
    except Exception:  # noqa: BLE001  (left for torch-mlir's lowering, which names the problem)
        return None
    results = [np.asarray(r) for r in results]
    if len(results) != len(node.output) or any(r.dtype == object or r.size > FOLD_LIMIT for r in results):
        return None
    return results


def _outer_references(node) -> list[str] | None:
    """The values of the enclosing graph that ``node``'s subgraphs read (none without
    subgraphs); None where a subgraph holds an op whose value is not a function of its inputs."""
    outer: list[str] = []

    def visit(graph, defined: set):
        defined = defined | {v.name for v in graph.input} | {t.name for t in graph.initializer}
        for inner in graph.node:
            if inner.op_type in _NOT_FOLDABLE:
                return False
            outer.extend(x for x in inner.input if x and x not in defined)
            for a in inner.attribute:
                for g in ([a.g] if a.type == 5 else list(a.graphs) if a.type == 10 else []):
                    if not visit(g, defined):
                        return False
            defined |= set(inner.output)
        return True

    for a in node.attribute:
        for g in ([a.g] if a.type == 5 else list(a.graphs) if a.type == 10 else []):
            if not visit(g, set()):
                return None
    return list(dict.fromkeys(outer))


def _compress_as_gather(node, condition: np.ndarray, prefix: str) -> list:
    from onnx import helper, numpy_helper

    axis = next((a.i for a in node.attribute if a.name == "axis"), None)
    indices = np.nonzero(condition.reshape(-1))[0].astype(np.int64)
    index_name = f"{prefix}_indices"
    nodes = [helper.make_node("Constant", [], [index_name], value=numpy_helper.from_array(indices, index_name))]
    data = node.input[0]
    if axis is None:  # over the flattened input
        flat, shape = f"{prefix}_flat", f"{prefix}_shape"
        nodes += [helper.make_node("Constant", [], [shape], value=numpy_helper.from_array(np.array([-1], np.int64), shape)),
                  helper.make_node("Reshape", [data, shape], [flat])]
        data, axis = flat, 0
    nodes.append(helper.make_node("Gather", [data, index_name], [node.output[0]], axis=axis))
    return nodes


def _constant_value(node):
    from onnx import numpy_helper

    for a in node.attribute:
        if a.name == "value" and a.type == 4:  # TENSOR
            return numpy_helper.to_array(a.t) if int(np.prod(a.t.dims)) <= FOLD_LIMIT else None
        if a.name == "value_int":
            return np.array(a.i, np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), np.int64)
        if a.name == "value_float":
            return np.array(a.f, np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), np.float32)
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


# --- narrow element types: float8 / float4 / int4 / uint4 / int2 / uint2 --------------------------------

# ONNX element types torch-mlir's importer or IREE cannot take (float4 and the 2-bit ints are
# unknown to the importer; its Cast lowering has no float8 or int4 target; IREE cannot size i4
# buffers; the runtime has no float8 arrays). Their values are carried exactly in a wider type.
# float formats: (mantissa bits, exponent of the smallest normal, of the largest binade, largest
# finite value, what an overflow becomes without saturation, ml_dtypes' name)
_NARROW_FLOATS = {
    17: (3, -6, 8, 448.0, float("nan"), "float8_e4m3fn"),
    18: (3, -7, 7, 240.0, float("nan"), "float8_e4m3fnuz"),
    19: (2, -14, 15, 57344.0, float("inf"), "float8_e5m2"),
    20: (2, -15, 15, 57344.0, float("nan"), "float8_e5m2fnuz"),
    23: (1, 0, 2, 6.0, None, "float4_e2m1fn"),  # no inf or NaN: always saturates
}
# integer formats: (smallest, largest, carrier type, ml_dtypes' name)
_NARROW_INTS = {22: (-8, 7, 3, "int4"), 21: (0, 15, 2, "uint4"), 26: (-2, 1, 3, "int2"), 25: (0, 3, 2, "uint2")}
_FLOAT = 1
# ops that move or select values without computing on them: a carried value passes unchanged
_DATA_MOVEMENT = {"Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Concat", "Split", "Slice",
                  "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Shape", "Size", "Constant", "Where",
                  "Pad", "DepthToSpace", "SpaceToDepth"}


def narrow_type_name(elem_type: int) -> str | None:
    """ml_dtypes' name of an ONNX element type carried in a wider one (None: not narrow)."""
    if elem_type in _NARROW_FLOATS:
        return _NARROW_FLOATS[elem_type][-1]
    if elem_type in _NARROW_INTS:
        return _NARROW_INTS[elem_type][-1]
    return None


def _carrier(elem_type: int) -> int:
    return _FLOAT if elem_type in _NARROW_FLOATS else _NARROW_INTS[elem_type][2] if elem_type in _NARROW_INTS else elem_type


def has_narrow_types(proto) -> bool:
    graph = proto.graph
    values = [*graph.input, *graph.output, *graph.value_info]
    if any(v.type.HasField("tensor_type") and narrow_type_name(v.type.tensor_type.elem_type) for v in values):
        return True
    if any(narrow_type_name(t.data_type) for t in graph.initializer):
        return True
    for node in graph.node:
        for a in node.attribute:
            if (a.name == "to" and a.type == 2 and narrow_type_name(a.i)) or (a.type == 4 and narrow_type_name(a.t.data_type)):
                return True
    return False


def carry_narrow_types(proto):
    """The model with every float8 / float4 / int4 / uint4 / int2 / uint2 value carried in a
    type the importer, the lowering and IREE take: float32 for the float formats, int8 /
    uint8 for the integer ones. Carried values are exact (every value of these formats is one
    of the carrier), so only what produces them changes: a ``Cast`` (or ``CastLike``) to a
    narrow type becomes the rounding it stands for, written in ONNX ops on float32 (round to
    nearest even at the format's precision, subnormals included, then saturation or the
    format's overflow value), ``QuantizeLinear`` quantizes in the carrier and clips to the
    format's range, ``DequantizeLinear`` of a float format multiplies by the scale. Data
    movement ops pass carried values through; any other op on a narrow value is an error
    naming it. Returns (model, {graph input: ml_dtypes name}, {graph output: name}); the
    caller's arrays of those dtypes are converted at the boundary both ways."""
    from onnx import helper, numpy_helper

    graph = proto.graph
    types = {}
    for v in [*graph.input, *graph.value_info, *graph.output]:
        if v.type.HasField("tensor_type"):
            types[v.name] = v.type.tensor_type.elem_type
    for t in graph.initializer:
        types[t.name] = t.data_type
    for node in graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.type == 4:
                    types[node.output[0]] = a.t.data_type
    shapes = {t.name: tuple(t.dims) for t in graph.initializer}  # dims (None: unknown)
    for v in [*graph.input, *graph.value_info, *graph.output]:
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
            shapes[v.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim)
    fresh = (f"cuvil_narrow_{i}" for i in itertools.count())
    out = []
    for node in graph.node:
        attrs = {a.name: a for a in node.attribute}
        if node.domain not in ("", "ai.onnx"):
            out.append(node)
            continue
        if node.op_type == "CastLike" and narrow_type_name(types.get(node.input[1], 0)):
            saturate = attrs["saturate"].i if "saturate" in attrs else 1
            out += _cast_to_narrow(node.input[0], node.output[0], types[node.input[1]], types.get(node.input[0], _FLOAT),
                                   bool(saturate), fresh)
            continue
        if node.op_type == "Cast" and narrow_type_name(attrs["to"].i):
            saturate = attrs["saturate"].i if "saturate" in attrs else 1
            out += _cast_to_narrow(node.input[0], node.output[0], attrs["to"].i, types.get(node.input[0], _FLOAT),
                                   bool(saturate), fresh)
            continue
        if node.op_type == "QuantizeLinear":
            target = attrs["output_dtype"].i if "output_dtype" in attrs and attrs["output_dtype"].i else \
                types.get(node.input[2], 0) if len(node.input) > 2 and node.input[2] else 0
            if narrow_type_name(target):
                out += _quantize_narrow(node, target, attrs, shapes, fresh)
                continue
        if node.op_type == "DequantizeLinear" and narrow_type_name(types.get(node.input[0], 0)):
            out += _dequantize_narrow(node, types[node.input[0]], types, attrs, shapes, fresh)
            continue
        if node.op_type == "Constant" and "value" in attrs and narrow_type_name(attrs["value"].t.data_type):
            value = numpy_helper.to_array(attrs["value"].t)
            out.append(helper.make_node("Constant", [], [node.output[0]], name=node.name,
                                        value=numpy_helper.from_array(_carried(value, attrs["value"].t.data_type))))
            continue
        narrow = [x for x in [*node.input, *node.output] if x and narrow_type_name(types.get(x, 0))]
        if narrow and node.op_type not in _DATA_MOVEMENT and node.op_type not in ("Cast", "CastLike"):
            raise ImportError_(f"ONNX op {node.op_type} (node '{node.name}') on {narrow_type_name(types[narrow[0]])} values "
                               "is not supported: float8 / float4 / int4 / int2 values are carried as float32 / int8 "
                               "through Cast, CastLike, QuantizeLinear, DequantizeLinear and data movement ops only")
        out.append(node)
    result = _with_nodes(proto, out)
    for t in result.graph.initializer:
        if narrow_type_name(t.data_type):
            t.CopyFrom(numpy_helper.from_array(_carried(numpy_helper.to_array(t), t.data_type), t.name))
    inputs, outputs = {}, {}
    for values, record in ((result.graph.input, inputs), (result.graph.output, outputs)):
        for v in values:
            if v.type.HasField("tensor_type") and narrow_type_name(v.type.tensor_type.elem_type):
                record[v.name] = narrow_type_name(v.type.tensor_type.elem_type)
                v.type.tensor_type.elem_type = _carrier(v.type.tensor_type.elem_type)
    return result, inputs, outputs


def _carried(value: np.ndarray, elem_type: int) -> np.ndarray:
    return value.astype(np.float32 if elem_type in _NARROW_FLOATS else np.int8 if _carrier(elem_type) == 3 else np.uint8)


def _const(name: str, value) -> object:
    from onnx import helper, numpy_helper

    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def _cast_to_narrow(x: str, y: str, target: int, source: int, saturate: bool, fresh) -> list:
    """Nodes computing ``y``, the carrier of ``Cast(x, to=target)``."""
    from onnx import helper

    n = lambda: next(fresh)  # noqa: E731
    nodes = []
    xf = x
    if source != _FLOAT:
        xf = n()
        nodes.append(helper.make_node("Cast", [x], [xf], to=_FLOAT))
    if target in _NARROW_INTS:
        # numpy / ml_dtypes' conversion (onnx's reference): truncation toward zero, and a value
        # whose truncation is outside the format (or NaN) becomes 0
        lo, hi, carrier, _ = _NARROW_INTS[target]
        c_lo, c_hi, c_zero, above, below, inside, safe = (n() for _ in range(7))
        nodes += [_const(c_lo, np.float32(lo - 1)), _const(c_hi, np.float32(hi + 1)), _const(c_zero, np.float32(0)),
                  helper.make_node("Greater", [xf, c_lo], [above]), helper.make_node("Less", [xf, c_hi], [below]),
                  helper.make_node("And", [above, below], [inside]),
                  helper.make_node("Where", [inside, xf, c_zero], [safe]),
                  helper.make_node("Cast", [safe], [y], to=carrier)]
        return nodes
    nodes += _round_to_float_format(xf, y, target, saturate, fresh)
    return nodes


def _round_to_float_format(x: str, y: str, target: int, saturate: bool, fresh) -> list:
    """float32 ``x`` rounded to the nearest value of the float format ``target`` (ties to
    even), as float32. The binade comes from comparisons with the powers of two (exact, unlike
    a logarithm); a value below the smallest normal rounds at the subnormal quantum."""
    from onnx import helper

    mant, emin, emax, largest, overflow, _ = _NARROW_FLOATS[target]
    n = lambda: next(fresh)  # noqa: E731
    names = {k: n() for k in ("a", "axis", "au", "thr", "ge", "gei", "cnt", "quanta", "q", "s", "r0", "r", "lim",
                              "sat", "neg", "zero", "isneg")}
    thresholds = np.array([2.0 ** e for e in range(emin + 1, emax + 1)], np.float32)
    quanta = np.array([2.0 ** (e - mant) for e in range(emin, emax + 1)], np.float32)
    nodes = [helper.make_node("Abs", [x], [names["a"]]),
             _const(names["axis"], np.array([-1], np.int64)),
             helper.make_node("Unsqueeze", [names["a"], names["axis"]], [names["au"]]),
             _const(names["thr"], thresholds),
             helper.make_node("GreaterOrEqual", [names["au"], names["thr"]], [names["ge"]]),
             helper.make_node("Cast", [names["ge"]], [names["gei"]], to=7),
             helper.make_node("ReduceSum", [names["gei"], names["axis"]], [names["cnt"]], keepdims=0),
             _const(names["quanta"], quanta),
             helper.make_node("Gather", [names["quanta"], names["cnt"]], [names["q"]]),
             helper.make_node("Div", [names["a"], names["q"]], [names["s"]]),
             helper.make_node("Round", [names["s"]], [names["r0"]]),
             helper.make_node("Mul", [names["r0"], names["q"]], [names["r"]]),
             _const(names["lim"], np.float32(largest))]
    if saturate or overflow is None:
        nodes.append(helper.make_node("Min", [names["r"], names["lim"]], [names["sat"]]))
    else:
        over, value = n(), n()
        nodes += [helper.make_node("Greater", [names["r"], names["lim"]], [over]), _const(value, np.float32(overflow)),
                  helper.make_node("Where", [over, value, names["r"]], [names["sat"]])]
    signed, nan = n(), n()
    nodes += [helper.make_node("Neg", [names["sat"]], [names["neg"]]),
              _const(names["zero"], np.float32(0)),
              helper.make_node("Less", [x, names["zero"]], [names["isneg"]]),
              helper.make_node("Where", [names["isneg"], names["neg"], names["sat"]], [signed]),
              helper.make_node("IsNaN", [x], [nan]),  # Min and Where drop a NaN: kept (to the format's NaN)
              helper.make_node("Where", [nan, x, signed], [y])]
    return nodes


def _per_axis(scale: str, axis: int, shape: tuple | None, fresh) -> tuple[list, str]:
    """A 1-D per-axis scale (or zero point) reshaped to broadcast along ``axis`` of a rank-``rank`` input."""
    if shape is None:
        raise ImportError_("a per-axis QuantizeLinear / DequantizeLinear on narrow types needs its input's rank")
    from onnx import helper

    rank = len(shape)
    axis = axis % rank
    shape, out = next(fresh), next(fresh)
    dims = [1] * rank
    dims[axis] = -1
    return [_const(shape, np.array(dims, np.int64)), helper.make_node("Reshape", [scale, shape], [out])], out


def _scale_operand(node, index: int, attrs, shapes, fresh) -> tuple[list, str]:
    """The scale (or zero point) operand ``index`` of a (de)quantization, shaped to broadcast
    against its input: as it is when it has one element, else reshaped along ``axis``."""
    if shapes.get(node.input[1]) in ((), (1,)):
        return [], node.input[index]
    if "block_size" in attrs and attrs["block_size"].i:
        raise ImportError_(f"blocked {node.op_type} (node '{node.name}') on narrow types is not supported")
    axis = attrs["axis"].i if "axis" in attrs else 1
    return _per_axis(node.input[index], axis, shapes.get(node.input[0]), fresh)


def _quantize_narrow(node, target: int, attrs, shapes, fresh) -> list:
    """``QuantizeLinear`` to a narrow type, written out in float32: ``x / scale`` (rounded
    half to even for the integer formats), plus the zero point, saturated to the format."""
    from onnx import helper

    n = lambda: next(fresh)  # noqa: E731
    has_zero = len(node.input) > 2 and bool(node.input[2])
    nodes, scale = _scale_operand(node, 1, attrs, shapes, fresh)
    x, ratio = node.input[0], n()
    xf, sf = n(), n()
    nodes += [helper.make_node("Cast", [x], [xf], to=_FLOAT), helper.make_node("Cast", [scale], [sf], to=_FLOAT),
              helper.make_node("Div", [xf, sf], [ratio])]
    if target in _NARROW_INTS:
        lo, hi, carrier, _ = _NARROW_INTS[target]
        rounded = n()
        nodes.append(helper.make_node("Round", [ratio], [rounded]))
        ratio = rounded
    if has_zero:
        zero_nodes, zero = _scale_operand(node, 2, attrs, shapes, fresh)
        zf, shifted = n(), n()
        nodes += zero_nodes + [helper.make_node("Cast", [zero], [zf], to=_FLOAT), helper.make_node("Add", [ratio, zf], [shifted])]
        ratio = shifted
    if target in _NARROW_INTS:
        c_lo, c_hi, clipped = n(), n(), n()
        return nodes + [_const(c_lo, np.float32(lo)), _const(c_hi, np.float32(hi)),
                        helper.make_node("Clip", [ratio, c_lo, c_hi], [clipped]),
                        helper.make_node("Cast", [clipped], [node.output[0]], to=carrier)]
    saturate = attrs["saturate"].i if "saturate" in attrs else 1
    return nodes + _round_to_float_format(ratio, node.output[0], target, bool(saturate), fresh)


def _dequantize_narrow(node, source: int, types, attrs, shapes, fresh) -> list:
    """``DequantizeLinear`` of a narrow type: of the carrier (ints), or ``(x - zero) * scale``
    in the scale's type (floats)."""
    from onnx import helper

    if source in _NARROW_INTS:
        return [node]  # the carrier's DequantizeLinear gives the same values
    n = lambda: next(fresh)  # noqa: E731
    nodes, scale = _scale_operand(node, 1, attrs, shapes, fresh)
    out_type = attrs["output_dtype"].i if "output_dtype" in attrs and attrs["output_dtype"].i else types.get(node.input[1], _FLOAT)
    x = node.input[0]
    if len(node.input) > 2 and node.input[2]:
        zero_nodes, zero = _scale_operand(node, 2, attrs, shapes, fresh)
        shifted = n()
        nodes += zero_nodes + [helper.make_node("Sub", [x, zero], [shifted])]
        x = shifted
    if out_type == _FLOAT:
        return nodes + [helper.make_node("Mul", [x, scale], [node.output[0]])]
    xs = n()
    return nodes + [helper.make_node("Cast", [x], [xs], to=out_type), helper.make_node("Mul", [xs, scale], [node.output[0]])]


# --- shape operands: inputs bound to their example values --------------------------------------------

# operands ONNX ops read as shapes, axes, sizes, counts or bounds (by input index): the
# lowering and IREE need them as constants (a runtime ``axes`` is a reduction IREE cannot
# compile, runtime ``Slice`` bounds a dim it cannot size, runtime ``pads`` a list it cannot build)
SHAPE_OPERANDS = {
    "Reshape": {1}, "Expand": {1}, "Tile": {1}, "Slice": {1, 2, 3, 4}, "Pad": {1, 3}, "Squeeze": {1},
    "Unsqueeze": {1}, "Split": {1}, "ConstantOfShape": {0}, "Range": {0, 1, 2}, "TopK": {1}, "OneHot": {1},
    "Resize": {1, 2, 3}, "Upsample": {1}, "CumSum": {1}, "CumProd": {1}, "Col2Im": {1, 2}, "AffineGrid": {1},
    "CenterCropPad": {1}, "Trilu": {1}, "NonMaxSuppression": {2, 3, 4}, "DFT": {1, 2}, "STFT": {1, 3},
    "BlackmanWindow": {0}, "HannWindow": {0}, "HammingWindow": {0}, "MelWeightMatrix": {0, 1, 2, 3, 4},
    "Compress": {1},  # the condition decides the result's shape
    "SequenceAt": {1}, "SequenceInsert": {2}, "SequenceErase": {1}, "SplitToSequence": {1},
    "Dropout": {1, 2},  # ratio and training mode: whether it is an identity
    **{op: {1} for op in _REDUCTIONS},
}
# a shape operand holds a handful of numbers
_SHAPE_OPERAND_LIMIT = 64


def shape_operand_inputs(proto) -> list[str]:
    """The graph inputs used only as shape operands (``SHAPE_OPERANDS``) of top-level nodes
    and not returned: binding one to a value (``bind_inputs``) makes what it decides static."""
    graph = proto.graph
    initializers = {t.name for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    uses: dict[str, list[bool]] = {}
    for node in graph.node:
        positions = SHAPE_OPERANDS.get(node.op_type, set()) if node.domain in ("", "ai.onnx") else set()
        for i, x in enumerate(node.input):
            if x:
                uses.setdefault(x, []).append(i in positions)
        for a in node.attribute:  # a subgraph that reads an outer value uses it as data
            for g in ([a.g] if a.type == 5 else list(a.graphs) if a.type == 10 else []):
                for inner in g.node:
                    for x in inner.input:
                        uses.setdefault(x, []).append(False)
    return [v.name for v in graph.input
            if v.name not in initializers and v.name not in outputs and uses.get(v.name) and all(uses[v.name])]


def bind_inputs(proto, values: dict):
    """The model with the graph inputs named in ``values`` (name -> array) replaced by
    initializers holding those values (checked against the inputs' types and ranks)."""
    from onnx import helper, numpy_helper

    result = type(proto)()
    result.CopyFrom(proto)
    kept = []
    for v in result.graph.input:
        if v.name not in values:
            kept.append(v)
            continue
        array = np.asarray(values[v.name])
        tensor = v.type.tensor_type
        want = helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        if array.dtype != want:
            raise ImportError_(f"input '{v.name}' of the ONNX model is {np.dtype(want)}; the example value is {array.dtype}")
        if tensor.HasField("shape") and len(tensor.shape.dim) != array.ndim:
            raise ImportError_(f"input '{v.name}' of the ONNX model has rank {len(tensor.shape.dim)}; "
                               f"the example value has shape {list(array.shape)}")
        if array.size > _SHAPE_OPERAND_LIMIT:
            raise ImportError_(f"input '{v.name}' holds {array.size} values: too many for a shape operand")
        result.graph.initializer.append(numpy_helper.from_array(array, v.name))
    del result.graph.input[:]
    result.graph.input.extend(kept)
    return result


# --- forms that crash torch-mlir's lowering (a crash cannot be caught: rewritten before the import) ---

def crashing_forms(proto) -> tuple[set[str], bool]:
    """(function ops to expand, whether to fold constants) before the first import, for node
    forms whose lowering crashes the process: ``RotaryEmbedding`` without ``position_ids``,
    and ``Split`` with computed (non-constant) split sizes."""
    constants = {t.name for t in proto.graph.initializer} | {o for n in proto.graph.node if n.op_type == "Constant" for o in n.output}
    expand, fold = set(), False
    for node in proto.graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "RotaryEmbedding" and (len(node.input) < 4 or not node.input[3]):
            expand.add("RotaryEmbedding")
        if node.op_type == "Split" and len(node.input) > 1 and node.input[1] and node.input[1] not in constants:
            fold = True
    return expand, fold


# --- old opsets: converted to a newer one ------------------------------------------------------------

# the opset an old model is converted to where torch-mlir's lowering fails on it (many of its
# lowerings exist only for the newer forms: Unsqueeze-13, Concat-11, ReduceMin-18, Dropout-12, ...)
UPGRADE_OPSET = 21


def upgrade_opset(proto):
    """The model converted to ``UPGRADE_OPSET`` by onnx's version converter (which rewrites
    each node to its newer form with the same meaning); None when its opset is not older or
    the converter cannot convert it."""
    from onnx import version_converter

    if not 0 < _opset(proto) < UPGRADE_OPSET:
        return None
    try:
        return version_converter.convert_version(proto, UPGRADE_OPSET)
    except Exception:  # noqa: BLE001  (an op the converter has no adapter for: left as it is)
        return None


# --- Scan with a static length: unrolled ---------------------------------------------------------------

# a longer Scan stays a Scan (unrolling copies its body once per step)
UNROLL_LIMIT = 64


def unroll_scans(proto, *, oriented_only: bool = False):
    """The model with each top-level ``Scan`` (opset 9+) whose scan length is static (up to
    ``UNROLL_LIMIT`` steps) replaced by its body once per step: scan inputs sliced along
    their axes (backward where their direction says so), state values threaded through the
    copies, scan outputs stacked along their axes. torch-mlir's lowering takes only some
    Scans, and ignores their axes and directions. ``oriented_only``: only the Scans with a
    non-default axis or direction. None when there is none to unroll (a body with subgraphs of
    its own is left as it is)."""
    from onnx import helper

    if _opset(proto) < 9:
        return None
    graph = proto.graph
    shapes = {}
    for v in [*graph.input, *graph.value_info, *graph.output]:
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
            shapes[v.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim)
    for t in graph.initializer:
        shapes[t.name] = tuple(t.dims)
    fresh = (f"cuvil_scan{i}" for i in itertools.count())
    out, changed = [], False
    opset = _opset(proto)
    for node in graph.node:
        nodes = None
        if node.op_type == "Scan" and node.domain in ("", "ai.onnx") and (not oriented_only or _oriented(node)):
            nodes = _unrolled(node, shapes, fresh, helper, opset)
        if nodes is None:
            out.append(node)
            continue
        out += nodes
        changed = True
    if not changed:
        return None
    return _with_nodes(proto, out)


def _oriented(node) -> bool:
    """A Scan with a scan axis other than 0 or a backward direction."""
    return any(a.name in ("scan_input_axes", "scan_input_directions", "scan_output_axes", "scan_output_directions")
               and any(a.ints) for a in node.attribute)


def _unrolled(node, shapes, fresh, helper, opset: int):
    attrs = {a.name: a for a in node.attribute}
    body = attrs["body"].g
    m = attrs["num_scan_inputs"].i
    n = len(node.input) - m  # state values
    k = len(body.output) - n  # scan outputs
    if any(a.type in (5, 10) for b in body.node for a in b.attribute):
        return None
    in_axes = list(attrs["scan_input_axes"].ints) if "scan_input_axes" in attrs else [0] * m
    in_dirs = list(attrs["scan_input_directions"].ints) if "scan_input_directions" in attrs else [0] * m
    out_axes = list(attrs["scan_output_axes"].ints) if "scan_output_axes" in attrs else [0] * k
    out_dirs = list(attrs["scan_output_directions"].ints) if "scan_output_directions" in attrs else [0] * k
    scans = list(node.input[n:])
    lengths = set()
    for x, axis in zip(scans, in_axes):
        shape = shapes.get(x)
        if shape is None or shape[axis % len(shape)] is None:
            return None
        lengths.add(shape[axis % len(shape)])
    if len(lengths) != 1 or not 0 < next(iter(lengths)) <= UNROLL_LIMIT:
        return None
    steps = next(iter(lengths))
    prefix = next(fresh)
    const = lambda name, value: helper.make_node("Constant", [], [name], value=helper.make_tensor(  # noqa: E731
        name, 7, [len(value)], value))
    nodes = []
    states = list(node.input[:n])
    elements: list[list[str]] = [[] for _ in range(k)]
    local = {o for b in body.node for o in b.output} | {v.name for v in body.input} | {t.name for t in body.initializer}
    for step in range(steps):
        rename = {name: f"{prefix}_{step}_{name}" for name in local}
        for (value, state) in zip(body.input[:n], states):
            nodes.append(helper.make_node("Identity", [state], [rename[value.name]]))
        for j, (value, x) in enumerate(zip(body.input[n:], scans)):
            axis = in_axes[j]
            at = f"{prefix}_{step}_{j}_at"
            nodes += [helper.make_node("Constant", [], [at], value=helper.make_tensor(at, 7, [],
                                                                                      [steps - 1 - step if in_dirs[j] else step])),
                      helper.make_node("Gather", [x, at], [rename[value.name]], axis=axis)]
        for t in body.initializer:
            nodes.append(helper.make_node("Constant", [], [rename[t.name]], value=t))
        for b in body.node:
            copy = type(b)()
            copy.CopyFrom(b)
            copy.input[:] = [rename.get(x, x) for x in b.input]
            copy.output[:] = [rename.get(x, x) for x in b.output]
            copy.name = f"{prefix}_{step}_{b.name}" if b.name else ""
            nodes.append(copy)
        states = [rename.get(o.name, o.name) for o in body.output[:n]]
        for i, o in enumerate(body.output[n:]):
            elements[i].append(rename.get(o.name, o.name))
    for state, result in zip(states, node.output[:n]):
        if result:
            nodes.append(helper.make_node("Identity", [state], [result]))
    for i, result in enumerate(node.output[n:]):
        if not result:
            continue
        axis = out_axes[i]
        order = elements[i][::-1] if out_dirs[i] else elements[i]
        a = f"{prefix}_out{i}_axis"
        # a negative output axis counts from the stacked result's rank: unsqueezed there
        if opset >= 13:
            nodes.append(const(a, [axis]))
        else:  # torch-mlir lowers only Unsqueeze-13: a Reshape to the element's static shape with the axis
            dims = [d.dim_value if d.HasField("dim_value") else None for d in body.output[n + i].type.tensor_type.shape.dim]
            if None in dims or not body.output[n + i].type.tensor_type.HasField("shape"):
                return None
            dims.insert(axis % (len(dims) + 1), 1)
            nodes.append(const(a, dims))
        stacked = []
        for j, e in enumerate(order):
            u = f"{prefix}_out{i}_{j}"
            nodes.append(helper.make_node("Unsqueeze" if opset >= 13 else "Reshape", [e, a], [u]))
            stacked.append(u)
        nodes.append(helper.make_node("Concat", stacked, [result], axis=axis))
    return nodes


# --- CumProd along a static axis: a chain of products ----------------------------------------------------

def expand_cumprods(proto):
    """The model with each ``CumProd`` (torch-mlir has no lowering) whose axis is a constant
    and whose length along it is static (up to ``UNROLL_LIMIT``) written as the running product
    of its slices along that axis (``exclusive``: shifted by one, starting at 1; ``reverse``:
    from the end), concatenated back; None when there is none."""
    from onnx import helper

    graph = proto.graph
    shapes, types, known = _value_facts(graph, known_limit=16)
    fresh = (f"cuvil_cumprod{i}" for i in itertools.count())
    out, changed = [], False
    for node in graph.node:
        shape = shapes.get(node.input[0]) if node.op_type == "CumProd" else None
        if shape is None or node.domain not in ("", "ai.onnx") or node.input[1] not in known or node.input[0] not in types:
            out.append(node)
            continue
        axis = int(np.asarray(known[node.input[1]]).reshape(-1)[0]) % len(shape)
        length = shape[axis]
        if length is None or not 0 < length <= UNROLL_LIMIT:
            out.append(node)
            continue
        attrs = {a.name: a.i for a in node.attribute}
        prefix = next(fresh)
        a = f"{prefix}_axis"
        nodes = [helper.make_node("Constant", [], [a], value=helper.make_tensor(a, 7, [1], [axis]))]
        slices = []
        for i in range(length):
            s, e, piece = f"{prefix}_s{i}", f"{prefix}_e{i}", f"{prefix}_x{i}"
            nodes += [helper.make_node("Constant", [], [s], value=helper.make_tensor(s, 7, [1], [i])),
                      helper.make_node("Constant", [], [e], value=helper.make_tensor(e, 7, [1], [i + 1])),
                      helper.make_node("Slice", [node.input[0], s, e, a], [piece])]
            slices.append(piece)
        order = list(range(length))[::-1] if attrs.get("reverse") else list(range(length))
        running, results = None, {}
        if attrs.get("exclusive"):
            one, ones = f"{prefix}_one", f"{prefix}_ones"
            zero = f"{prefix}_zero"
            nodes += [helper.make_node("Sub", [slices[order[0]], slices[order[0]]], [zero]),
                      helper.make_node("Constant", [], [one], value=helper.make_tensor(one, types[node.input[0]], [], [1])),
                      helper.make_node("Add", [zero, one], [ones])]
            running = ones
        for i in order:
            if attrs.get("exclusive"):
                results[i] = running
            product = f"{prefix}_p{i}"
            nodes.append(helper.make_node("Identity", [slices[i]], [product]) if running is None else
                         helper.make_node("Mul", [running, slices[i]], [product]))
            running = product
            if not attrs.get("exclusive"):
                results[i] = product
        nodes.append(helper.make_node("Concat", [results[i] for i in range(length)], [node.output[0]], axis=axis))
        out += nodes
        changed = True
    if not changed:
        return None
    return _with_nodes(proto, out)


# --- DFT along a static axis: matrix products ---------------------------------------------------------------

# a longer DFT stays a DFT (its matrices grow with the square of the length)
DFT_LIMIT = 1024


def dft_as_matmuls(proto):
    """The model with each ``DFT`` whose signal length, ``dft_length`` and axis are known
    written as matrix products: the transform is real-linear in the real and imaginary parts
    of the signal, so each (input part, output part) pair is one constant matrix, computed
    here by numpy's FFT of the basis signals exactly as ONNX defines the op (zero padding or
    truncation to ``dft_length``, ``onesided``, ``inverse`` with its 1/n, the one-sided inverse
    giving a real signal). torch-mlir lowers DFT to ``aten.fft_*``, which IREE cannot compile,
    or not at all (opset 19). None when there is none."""
    return _expand_each(proto, "DFT", _dft_nodes, known_limit=16, prefix="cuvil_dft")


def _dft_nodes(node, shapes, types, known, opset: int, prefix: str):
    from onnx import helper, numpy_helper

    if node.domain not in ("", "ai.onnx"):
        return None
    x = node.input[0]
    shape = shapes.get(x)
    attrs = {a.name: a.i for a in node.attribute}
    inputs = list(node.input) + [""] * (3 - len(node.input))
    if opset >= 20:
        if inputs[2] and inputs[2] not in known:
            return None
        axis = int(np.asarray(known[inputs[2]]).reshape(-1)[0]) if inputs[2] else -2
    else:
        axis = attrs.get("axis", 1)
    if shape is None or None in shape or types.get(x) not in (1, 10, 11) or (inputs[1] and inputs[1] not in known):
        return None
    rank = len(shape)
    axis %= rank
    if axis == rank - 1 or shape[-1] not in (1, 2):
        return None
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    n_in = shape[axis]
    length = int(np.asarray(known[inputs[1]]).reshape(-1)[0]) if inputs[1] else \
        2 * (n_in - 1) if inverse and onesided else n_in
    if not 0 < length <= DFT_LIMIT or n_in > DFT_LIMIT:
        return None

    def transform(signal):
        if inverse:
            return np.fft.irfft(signal, n=length) if onesided else np.fft.ifft(signal, n=length)
        result = np.fft.fft(signal, n=length)
        return result[: length // 2 + 1] if onesided else result

    parts_in, parts_out = shape[-1], 1 if inverse and onesided else 2
    # computed in float64 (as numpy's FFT, onnx's reference, does), rounded to the input's type once
    matrices = {}
    for p in range(parts_in):
        columns = []
        for j in range(n_in):
            basis = np.zeros(n_in, np.complex128)
            basis[j] = 1 if p == 0 else 1j
            columns.append(transform(basis))
        response = np.stack(columns)  # [n_in, n_out]
        matrices[p, 0] = np.real(response)
        if parts_out == 2:
            matrices[p, 1] = np.imag(response)
    perm = [d for d in range(rank - 1) if d != axis] + [axis]
    back = [perm.index(d) for d in range(rank - 1)]
    nodes = []
    parts = []
    for p in range(parts_in):
        index, part, wide, moved = f"{prefix}_i{p}", f"{prefix}_part{p}", f"{prefix}_f64_{p}", f"{prefix}_moved{p}"
        nodes += [helper.make_node("Constant", [], [index], value=numpy_helper.from_array(np.array(p, np.int64), index)),
                  helper.make_node("Gather", [x, index], [part], axis=rank - 1),
                  helper.make_node("Cast", [part], [wide], to=11),
                  helper.make_node("Transpose", [wide], [moved], perm=perm)]
        parts.append(moved)
    outputs = []
    for q in range(parts_out):
        total = None
        for p in range(parts_in):
            w, product = f"{prefix}_w{p}{q}", f"{prefix}_mm{p}{q}"
            nodes += [helper.make_node("Constant", [], [w], value=numpy_helper.from_array(matrices[p, q], w)),
                      helper.make_node("MatMul", [parts[p], w], [product])]
            if total is not None:
                summed = f"{prefix}_sum{p}{q}"
                nodes.append(helper.make_node("Add", [total, product], [summed]))
                product = summed
            total = product
        placed, narrow, axes, unsqueezed = f"{prefix}_back{q}", f"{prefix}_narrow{q}", f"{prefix}_axes{q}", f"{prefix}_out{q}"
        nodes += [helper.make_node("Cast", [total], [narrow], to=types[x]),
                  helper.make_node("Transpose", [narrow], [placed], perm=back),
                  helper.make_node("Constant", [], [axes], value=numpy_helper.from_array(np.array([-1], np.int64), axes)),
                  helper.make_node("Unsqueeze", [placed, axes], [unsqueezed])]
        outputs.append(unsqueezed)
    nodes.append(helper.make_node("Concat", outputs, [node.output[0]], axis=-1) if len(outputs) > 1 else
                 helper.make_node("Identity", outputs, [node.output[0]]))
    return nodes


# --- small Resize forms torch-mlir lacks: their linear map ----------------------------------------------

# the largest input (elements) and map (input x output elements) a Resize is written out for
RESIZE_MAP_INPUT_LIMIT = 4096
RESIZE_MAP_LIMIT = 1 << 22


def resize_as_linear_maps(proto):
    """The model with each ``Resize`` of a small static float input (up to
    ``RESIZE_MAP_INPUT_LIMIT`` elements) whose ``roi`` / ``scales`` / ``sizes`` are known
    written as the map it computes, evaluated here by onnx's reference on the basis inputs
    (so every form ONNX defines is covered: antialias, keep_aspect_ratio_policy, axes,
    tf_crop_and_resize with its extrapolation value, cubic with exclude_outside, every
    coordinate transformation and nearest mode): ``nearest`` as a Gather of the source
    element of each output, the interpolating modes as a MatMul by the weight matrix plus the
    extrapolated constant. torch-mlir's lowering covers only some Resize forms. None when
    there is none."""
    return _expand_each(proto, "Resize", _resize_nodes, known_limit=64, prefix="cuvil_resize")


def _resize_nodes(node, shapes, types, known, opset: int, prefix: str):
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    x = node.input[0]
    shape = shapes.get(x)
    if (node.domain not in ("", "ai.onnx") or shape is None or None in shape or types.get(x) not in (1, 10, 11)
            or any(name and name not in known for name in node.input[1:])):
        return None
    size = int(np.prod(shape))
    if not 0 < size <= RESIZE_MAP_INPUT_LIMIT:
        return None
    dtype = {1: np.float32, 10: np.float16, 11: np.float64}[types[x]]
    params = {name: known[name] for name in node.input[1:] if name}
    one = type(node)()
    one.CopyFrom(node)
    evaluator = ReferenceEvaluator(one, opsets={"": opset})

    def run(data, extrapolation=None):
        if extrapolation is not None:
            for a in one.attribute:
                if a.name == "extrapolation_value":
                    a.f = extrapolation
        try:
            return np.asarray(evaluator.run(None, {x: data.astype(dtype), **params})[0], np.float64)
        except Exception:  # noqa: BLE001  (a form the reference rejects: torch-mlir's error stands)
            return None

    zero = run(np.zeros(shape))
    if zero is None or zero.size * size > RESIZE_MAP_LIMIT:
        return None
    out_shape = zero.shape
    mode = next((a.s.decode() for a in node.attribute if a.name == "mode"), "nearest")
    flat, flat_shape, result = f"{prefix}_flat", f"{prefix}_flat_shape", f"{prefix}_result"
    target = f"{prefix}_shape"
    nodes = [helper.make_node("Constant", [], [flat_shape], value=numpy_helper.from_array(np.array([size], np.int64), flat_shape)),
             helper.make_node("Reshape", [x, flat_shape], [flat])]
    if mode == "nearest":  # each output is one input element (or the extrapolation value)
        ramp = np.arange(1, size + 1, dtype=np.float64).reshape(shape)
        picked = run(ramp, extrapolation=0.0)
        if picked is None or not np.array_equal(picked, np.round(picked)):
            return None
        source = picked.reshape(-1).astype(np.int64) - 1
        outside = source < 0
        indices = f"{prefix}_indices"
        nodes += [helper.make_node("Constant", [], [indices], value=numpy_helper.from_array(np.maximum(source, 0), indices)),
                  helper.make_node("Gather", [flat, indices], [result])]
        if outside.any():
            mask, fill, chosen = f"{prefix}_outside", f"{prefix}_fill", f"{prefix}_chosen"
            nodes[-1].output[0] = chosen
            nodes += [helper.make_node("Constant", [], [mask], value=numpy_helper.from_array(outside, mask)),
                      helper.make_node("Constant", [], [fill], value=numpy_helper.from_array(zero.reshape(-1).astype(dtype), fill)),
                      helper.make_node("Where", [mask, fill, chosen], [result])]
    else:
        weights = np.empty((size, zero.size))
        basis = np.zeros(size)
        for j in range(size):
            basis[j] = 1.0
            response = run(basis.reshape(shape))
            basis[j] = 0.0
            if response is None:
                return None
            weights[j] = (response - zero).reshape(-1)
        row, w, b, product = f"{prefix}_row", f"{prefix}_weights", f"{prefix}_bias", f"{prefix}_product"
        row_shape = f"{prefix}_row_shape"
        nodes += [helper.make_node("Constant", [], [row_shape], value=numpy_helper.from_array(np.array([1, size], np.int64), row_shape)),
                  helper.make_node("Reshape", [flat, row_shape], [row]),
                  helper.make_node("Constant", [], [w], value=numpy_helper.from_array(weights.astype(dtype), w)),
                  helper.make_node("MatMul", [row, w], [product])]
        if np.any(zero):  # extrapolated outputs (tf_crop_and_resize): the constant they take
            nodes += [helper.make_node("Constant", [], [b], value=numpy_helper.from_array(zero.reshape(1, -1).astype(dtype), b)),
                      helper.make_node("Add", [product, b], [result])]
        else:
            nodes[-1].output[0] = result
    nodes += [helper.make_node("Constant", [], [target], value=numpy_helper.from_array(np.array(out_shape, np.int64), target)),
              helper.make_node("Reshape", [result, target], [node.output[0]])]
    return nodes


# --- training and ML ops torch-mlir lacks, written out -------------------------------------------------------

TRAINING_DOMAIN, ML_DOMAIN = "ai.onnx.preview.training", "ai.onnx.ml"
WRITTEN_OUT = {(TRAINING_DOMAIN, "Adagrad"), (TRAINING_DOMAIN, "Adam"), (TRAINING_DOMAIN, "Momentum"),
               (ML_DOMAIN, "Binarizer"), (ML_DOMAIN, "ArrayFeatureExtractor")}


def with_default_opset(proto):
    """A model that imports no default-domain opset (only ai.onnx.ml or the training
    domain: torch-mlir's importer then records no opset and its lowering stops) with one
    (``UPGRADE_OPSET``: it holds no default-domain node, so nothing changes meaning); None
    when it has one."""
    from onnx import helper

    if any(o.domain in ("", "ai.onnx") for o in proto.opset_import):
        return None
    result = type(proto)()
    result.CopyFrom(proto)
    result.opset_import.append(helper.make_opsetid("", UPGRADE_OPSET))
    return result


def write_out_ops(proto, op_types: set[str]):
    """The model with the optimizer ops of ``ai.onnx.preview.training`` (Adagrad, Adam,
    Momentum, single- and multi-tensor) and ``ai.onnx.ml``'s Binarizer and
    ArrayFeatureExtractor among ``op_types`` written as the default-domain ops of their
    definitions (the formulas of onnx's reference); None when there is none."""
    from onnx import defs, helper

    fresh = (f"cuvil_out{i}" for i in itertools.count())
    out, changed = [], False
    for node in proto.graph.node:
        if (node.domain, node.op_type) not in WRITTEN_OUT or node.op_type not in op_types:
            out.append(node)
            continue
        schema = defs.get_schema(node.op_type, _opset(proto, node.domain), node.domain)
        attrs = {name: helper.get_attribute_value(a.default_value) for name, a in schema.attributes.items() if a.default_value.type}
        attrs.update({a.name: helper.get_attribute_value(a) for a in node.attribute})
        out += _written_out(node, attrs, _Emitter(next(fresh)))
        changed = True
    if not changed:
        return None
    return _with_nodes(proto, out)


class _Emitter:
    """Builds default-domain nodes with fresh value names."""

    def __init__(self, prefix: str):
        self.prefix, self.count, self.nodes = prefix, 0, []

    def __call__(self, op: str, *inputs: str, out: str | None = None, **attrs) -> str:
        from onnx import helper

        self.count += 1
        name = out or f"{self.prefix}_{self.count}"
        self.nodes.append(helper.make_node(op, list(inputs), [name], **attrs))
        return name

    def const(self, value: float) -> str:
        from onnx import helper

        self.count += 1
        name = f"{self.prefix}_c{self.count}"
        self.nodes.append(helper.make_node("Constant", [], [name], value=helper.make_tensor(name, 1, [], [float(value)])))
        return name


def _written_out(node, attrs: dict, e: _Emitter) -> list:
    op, ins, outs = node.op_type, list(node.input), list(node.output)
    if op == "Binarizer":
        zero = e("Sub", ins[0], ins[0])
        one = e("Add", zero, e("CastLike", e.const(1.0), ins[0]))
        e("Where", e("Greater", ins[0], e("CastLike", e.const(attrs.get("threshold", 0.0)), ins[0])), one, zero, out=outs[0])
        return e.nodes
    if op == "ArrayFeatureExtractor":
        flat = e("Reshape", ins[1], e("Constant", value=_i64([-1])))
        e("Gather", ins[0], flat, axis=-1, out=outs[0])
        return e.nodes
    r, t = ins[0], e("Cast", ins[1], to=1)
    groups = {"Adagrad": 3, "Adam": 4, "Momentum": 3}[op]
    n = (len(ins) - 2) // groups
    positive = e("Greater", t, e.const(0.0))
    for i in range(n):
        x, g, *state = (ins[2 + k * n + i] for k in range(groups))
        g_reg = e("Add", e("Mul", e.const(attrs["norm_coefficient"]), x), g)
        if op == "Adagrad":
            (h,) = state
            rate = e("Div", r, e("Add", e.const(1.0), e("Mul", t, e.const(attrs["decay_factor"]))))
            h_new = e("Add", h, e("Mul", g_reg, g_reg), out=outs[n + i])
            root = e("Add", e("Sqrt", h_new), e.const(attrs["epsilon"]))
            e("Sub", x, e("Div", e("Mul", rate, g_reg), root), out=outs[i])
        elif op == "Adam":
            v, h = state
            alpha, beta = attrs["alpha"], attrs["beta"]
            v_new = e("Add", e("Mul", e.const(alpha), v), e("Mul", e.const(1 - alpha), g_reg), out=outs[n + i])
            h_new = e("Add", e("Mul", e.const(beta), h), e("Mul", e.const(1 - beta), e("Mul", g_reg, g_reg)), out=outs[2 * n + i])
            root = e("Add", e("Sqrt", h_new), e.const(attrs["epsilon"]))
            corrected = e("Div", e("Mul", r, e("Sqrt", e("Sub", e.const(1.0), e("Pow", e.const(beta), t)))),
                          e("Sub", e.const(1.0), e("Pow", e.const(alpha), t)))
            rate = e("Where", positive, corrected, r)
            moved = e("Sub", x, e("Mul", rate, e("Div", v_new, root)))
            e("Mul", e.const(1 - attrs["norm_coefficient_post"]), moved, out=outs[i])
        else:
            (v,) = state
            alpha = attrs["alpha"]
            beta = e("Where", positive, e.const(attrs["beta"]), e.const(1.0))
            v_new = e("Add", e("Mul", e.const(alpha), v), e("Mul", beta, g_reg), out=outs[n + i])
            mode = attrs["mode"].decode() if isinstance(attrs["mode"], bytes) else attrs["mode"]
            step = v_new if mode == "standard" else e("Add", g_reg, e("Mul", e.const(alpha), v_new))
            e("Sub", x, e("Mul", r, step), out=outs[i])
    return e.nodes


def _i64(values) -> object:
    from onnx import helper

    return helper.make_tensor("value", 7, [len(values)], values)


# --- optional tensor inputs: tensors ------------------------------------------------------------------------

def optional_inputs_as_tensors(proto):
    """The model with each graph input of optional-tensor type taken as a tensor (a call
    passes one: the compiled function's arguments are tensors), its ``OptionalHasElement``
    true and its ``OptionalGetElement`` the tensor; None when there is none."""
    from onnx import helper

    optional = {v.name for v in proto.graph.input
                if v.type.HasField("optional_type") and v.type.optional_type.elem_type.HasField("tensor_type")}
    if not optional:
        return None
    result = type(proto)()
    result.CopyFrom(proto)
    for v in result.graph.input:
        if v.name in optional:
            tensor = type(v.type.optional_type.elem_type)()
            tensor.CopyFrom(v.type.optional_type.elem_type)
            v.type.CopyFrom(tensor)
    nodes = []
    for node in result.graph.node:
        if node.op_type == "OptionalHasElement" and node.input and node.input[0] in optional:
            nodes.append(helper.make_node("Constant", [], [node.output[0]], name=node.name,
                                          value=helper.make_tensor(node.output[0], 9, [], [True])))
        elif node.op_type == "OptionalGetElement" and node.input[0] in optional:
            nodes.append(helper.make_node("Identity", [node.input[0]], [node.output[0]], name=node.name))
        else:
            nodes.append(node)
    del result.graph.node[:]
    result.graph.node.extend(nodes)
    return result


# --- sequences of a known length: their tensors ---------------------------------------------------------------

def is_sequence_input(value) -> bool:
    return value.type.HasField("sequence_type") or (
        value.type.HasField("optional_type") and value.type.optional_type.elem_type.HasField("sequence_type"))


def scalarize_sequences(proto, inputs: dict):
    """The model with its sequences held as their tensors: ``inputs`` gives each sequence
    graph input's elements ((shape, ONNX element type) per element, from an example value),
    each becomes one tensor input; sequence ops on known lengths and positions
    (SequenceConstruct, SequenceEmpty, SequenceInsert, SequenceAt, SequenceErase,
    SequenceLength, SplitToSequence, ConcatFromSequence, SequenceMap, Identity and the
    Optional ops) become the tensor ops they select or compute, and a sequence graph output
    becomes one output per element. Returns (model, {sequence input: its element inputs},
    {sequence output: its element outputs}); any other op on a sequence is an error naming it."""
    from onnx import helper, numpy_helper

    graph = proto.graph
    opset = _opset(proto)
    known = {t.name: numpy_helper.to_array(t) for t in graph.initializer if int(np.prod(t.dims)) <= 64}
    shapes = {}
    for v in [*graph.input, *graph.value_info, *graph.output]:
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
            shapes[v.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim)
    seq: dict[str, list[str]] = {}
    new_inputs, groups_in = [], {}
    for v in graph.input:
        if v.name not in inputs:
            new_inputs.append(v)
            continue
        names = [f"{v.name}__{i}" for i in range(len(inputs[v.name]))]
        for name, (shape, elem_type) in zip(names, inputs[v.name]):
            new_inputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
            shapes[name] = tuple(shape)
        seq[v.name] = groups_in[v.name] = names
    fresh = (f"cuvil_seq{i}" for i in itertools.count())
    out = []

    def value(name):
        if name in known:
            return np.asarray(known[name])
        raise ImportError_(f"a sequence position or split read from '{name}', which is not known at compile time")

    for node in graph.node:
        op, ins, outs = node.op_type, list(node.input), list(node.output)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if op == "Constant":
            v = _constant_value(node)
            if v is not None:
                known[outs[0]] = v
        if op == "SequenceConstruct":
            seq[outs[0]] = ins
        elif op == "SequenceEmpty":
            seq[outs[0]] = []
        elif op in ("Identity", "Optional", "OptionalGetElement") and ins and ins[0] in seq:
            seq[outs[0]] = list(seq[ins[0]])
        elif op == "OptionalHasElement" and ins and ins[0] in seq:
            out.append(helper.make_node("Constant", [], outs, value=helper.make_tensor(outs[0], 9, [], [True])))
        elif op == "SequenceLength":
            out.append(helper.make_node("Constant", [], outs, value=helper.make_tensor(outs[0], 7, [], [len(seq[ins[0]])])))
        elif op == "SequenceInsert":
            items = list(seq[ins[0]])
            at = int(value(ins[2]).reshape(-1)[0]) if len(ins) > 2 and ins[2] else len(items)
            items.insert(at if at >= 0 else at + len(items), ins[1])
            seq[outs[0]] = items
        elif op == "SequenceErase":
            items = list(seq[ins[0]])
            at = int(value(ins[1]).reshape(-1)[0]) if len(ins) > 1 and ins[1] else -1
            del items[at]
            seq[outs[0]] = items
        elif op == "SequenceAt":
            out.append(helper.make_node("Identity", [seq[ins[0]][int(value(ins[1]).reshape(-1)[0])]], outs))
        elif op == "ConcatFromSequence":
            items, axis = seq[ins[0]], attrs["axis"]
            if attrs.get("new_axis", 0):
                axes = next(fresh)
                out.append(helper.make_node("Constant", [], [axes], value=helper.make_tensor(axes, 7, [1], [axis])))
                unsqueezed = []
                for item in items:
                    u = next(fresh)
                    out.append(helper.make_node("Unsqueeze", [item, axes], [u]))
                    unsqueezed.append(u)
                items = unsqueezed
            out.append(helper.make_node("Concat", items, outs, axis=axis))
        elif op == "SplitToSequence":
            out_nodes, names = _split_to_sequence(node, attrs, shapes, value, fresh, opset)
            out += out_nodes
            seq[outs[0]] = names
        elif op == "SequenceMap":
            out_nodes, results = _sequence_map(node, attrs["body"], seq, fresh)
            out += out_nodes
            for name, items in zip(outs, results):
                seq[name] = items
        elif any(x in seq for x in ins):
            raise ImportError_(f"ONNX op {op} (node '{node.name}') on a sequence is not supported (sequences of a known "
                               "length are held as their tensors through the sequence ops, SequenceMap and Identity)")
        else:
            out.append(node)
    groups_out, new_outputs = {}, []
    for v in graph.output:
        if v.name not in seq:
            new_outputs.append(v)
            continue
        elem = v.type.sequence_type.elem_type if v.type.HasField("sequence_type") else \
            v.type.optional_type.elem_type.sequence_type.elem_type
        names = []
        for i, item in enumerate(seq[v.name]):
            name = f"{v.name}__{i}"
            out.append(helper.make_node("Identity", [item], [name]))
            new_outputs.append(helper.make_tensor_value_info(name, elem.tensor_type.elem_type, None))
            names.append(name)
        groups_out[v.name] = names
    result = _with_nodes(proto, out)
    del result.graph.input[:]
    result.graph.input.extend(new_inputs)
    del result.graph.output[:]
    result.graph.output.extend(new_outputs)
    if groups_out:  # the element outputs' shapes, as shape inference gives them (the checker wants one)
        from onnx import shape_inference

        graph_inferred = shape_inference.infer_shapes(result).graph
        inferred = {v.name: v for v in [*graph_inferred.value_info, *graph_inferred.output, *graph_inferred.input]}
        for v in result.graph.output:
            if not v.type.tensor_type.HasField("shape") and inferred.get(v.name, v).type.tensor_type.HasField("shape"):
                v.type.CopyFrom(inferred[v.name].type)
    return result, groups_in, groups_out


def _split_to_sequence(node, attrs, shapes, value, fresh, opset: int):
    from onnx import helper

    shape = shapes.get(node.input[0])
    axis = attrs.get("axis", 0)
    if shape is None or None in shape:
        raise ImportError_(f"SplitToSequence (node '{node.name}') of a value of unknown shape is not supported")
    axis %= len(shape)
    length = shape[axis]
    given = len(node.input) > 1 and node.input[1]
    if given:
        split = value(node.input[1])
        sizes = [int(s) for s in split.reshape(-1)] if split.ndim else \
            [int(split)] * (length // int(split)) + ([length % int(split)] if length % int(split) else [])
    else:
        sizes = [1] * length
    names = [next(fresh) for _ in sizes]
    nodes = []
    if opset >= 13:
        s = next(fresh)
        nodes += [helper.make_node("Constant", [], [s], value=helper.make_tensor(s, 7, [len(sizes)], sizes)),
                  helper.make_node("Split", [node.input[0], s], names, axis=axis)]
    else:
        nodes.append(helper.make_node("Split", [node.input[0]], names, axis=axis, split=sizes))
    if not given and not attrs.get("keepdims", 1):
        axes = next(fresh)
        nodes.append(helper.make_node("Constant", [], [axes], value=helper.make_tensor(axes, 7, [1], [axis])))
        squeezed = []
        for name in names:
            q = next(fresh)
            nodes.append(helper.make_node("Squeeze", [name, axes], [q]))
            squeezed.append(q)
        names = squeezed
    return nodes, names


def _sequence_map(node, body, seq, fresh):
    """SequenceMap: its body once per element (sequence inputs give their i-th element,
    tensor inputs themselves); each body output appended to its result sequence."""
    from onnx import helper

    if any(a.type in (5, 10) for b in body.node for a in b.attribute):
        raise ImportError_(f"SequenceMap (node '{node.name}') whose body holds subgraphs is not supported")
    length = len(seq[node.input[0]])
    local = {o for b in body.node for o in b.output} | {v.name for v in body.input} | {t.name for t in body.initializer}
    nodes, results = [], [[] for _ in body.output]
    for i in range(length):
        prefix = next(fresh)
        rename = {name: f"{prefix}_{name}" for name in local}
        for value, x in zip(body.input, node.input):
            nodes.append(helper.make_node("Identity", [seq[x][i] if x in seq else x], [rename[value.name]]))
        for t in body.initializer:
            nodes.append(helper.make_node("Constant", [], [rename[t.name]], value=t))
        for b in body.node:
            copy = type(b)()
            copy.CopyFrom(b)
            copy.input[:] = [rename.get(x, x) for x in b.input]
            copy.output[:] = [rename.get(x, x) for x in b.output]
            copy.name = f"{prefix}_{b.name}" if b.name else ""
            nodes.append(copy)
        for k, o in enumerate(body.output):
            results[k].append(rename.get(o.name, o.name))
    return nodes, results

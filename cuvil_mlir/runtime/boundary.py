"""The boundary between what a user calls and what the IREE function takes and returns.

torch.export describes a program by its graph signature: user inputs (tensors, and Python
constants it specialized), inputs mutated in place, buffers mutated (module state), user
outputs (tensors, constants, symbolic sizes) and the pytrees of both sides. The IREE
function takes and returns flat tensors. This module reconciles the two, in one place:

compile side (``prepare``, run on the decomposed ExportedProgram before torch-mlir imports it)
    * a mutated buffer becomes a function argument (its value) and a result (its new value):
      the state lives in the ``CompiledModel`` and persists across calls;
    * a user input torch.export specialized to a constant (int, float, bool, str, None) is
      dropped from the function and checked at call time;
    * a user output that is a constant is dropped from the function and put back at call
      time; a symbolic size (``x.shape[0]`` on a dynamic dim) becomes a 0-d tensor result,
      returned as a Python number;
    * dynamic dims and their ranges are recorded from the program's range constraints.

call side (``Boundary.bind`` / ``Boundary.unbind``)
    * the call's ``(args, kwargs)`` are matched against the input pytree (kwargs by name),
      tensor leaves checked (dtype, shape, dynamic-dim ranges) and converted to arrays
      without losing 0-d shapes;
    * the function's results are split into state updates, in-place write-backs into the
      caller's tensors, and user outputs rebuilt into the model's pytree (dict, tuple,
      list, namedtuple, HF ModelOutput and other registered nodes);
    * results come back in the declared dtypes and 0-d shapes (``as_declared``).

float64: targets that compute it get IREE's demotion turned off (targets/base.py
``holds_f64``); the others refuse float64 inputs and outputs at compile time
(``check_dtypes``): IREE's demoted function declares f64 buffers backed by f32 storage.

The boundary is stored in the package metadata as ``"boundary"`` (docs/package-format.md);
a package without it (written before) gets ``Boundary.identity``: every function argument
a user input, results returned as one value or a tuple.
"""

from __future__ import annotations

import collections
import hashlib
import io
import sys
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from cuvil_mlir.core.diagnostics import CompileError, CuvilError, ImportError_, InputError
from cuvil_mlir.runtime.signature import Signature, numpy_dtype

# --- pytree specs as JSON ---------------------------------------------------------------------
# {"type": "leaf"} | {"type": "tuple"|"list", "children": [...]} | {"type": "dict", "keys": [...], "children": [...]}
# | {"type": "namedtuple", "name", "module", "fields", "children"} | {"type": "none"}
# | {"type": "custom", "name", "module", "keys", "children"}  (a registered node, e.g. HF ModelOutput)

LEAF = {"type": "leaf"}


def spec_to_json(spec) -> dict:
    """A torch pytree TreeSpec as JSON (no classes, no pickle)."""
    if spec.is_leaf():
        return dict(LEAF)
    kind = spec.type
    children = [spec_to_json(c) for c in (spec.children() if callable(getattr(spec, "children", None)) else spec.children_specs)]
    if kind is collections.namedtuple:  # torch's pytree: the node type is namedtuple, the class its context
        kind = spec.context
    if kind is tuple:
        return {"type": "tuple", "children": children}
    if kind is list:
        return {"type": "list", "children": children}
    if kind in (dict, collections.OrderedDict, collections.defaultdict):
        keys = list(spec.context[1] if kind is collections.defaultdict else spec.context)
        return {"type": "dict", "keys": [_json_key(k) for k in keys], "children": children}
    if kind is type(None):
        return {"type": "none"}
    if isinstance(kind, type) and issubclass(kind, tuple) and hasattr(kind, "_fields"):
        return {"type": "namedtuple", "name": kind.__qualname__, "module": kind.__module__, "fields": list(kind._fields), "children": children}
    context = spec.context
    keys = [_json_key(k) for k in context] if isinstance(context, (list, tuple)) and all(isinstance(k, (str, int)) for k in context) else None
    return {"type": "custom", "name": kind.__qualname__, "module": kind.__module__, "keys": keys, "children": children}


def _json_key(k):
    if isinstance(k, (str, int, float, bool)) or k is None:
        return k
    raise ImportError_(f"a dict key of type {type(k).__name__} in the model's inputs or outputs cannot be recorded (str or int keys only)")


def count_leaves(spec: dict) -> int:
    if spec["type"] == "leaf":
        return 1
    return sum(count_leaves(c) for c in spec.get("children", ()))


def flatten_call(spec: dict, value, path: str) -> list[tuple[str, Any]]:
    """(path, leaf) pairs of ``value`` in ``spec``'s order; raises InputError naming the
    first place the structure differs. Dict keys are matched by name, not order."""
    kind = spec["type"]
    if kind == "leaf":
        return [(path, value)]
    if kind == "none":
        if value is not None:
            raise InputError(f"{_describe_path(path)}: expected None, got {type(value).__name__}")
        return []
    if kind == "dict" or (kind == "custom" and spec.get("keys") is not None and isinstance(value, dict)):
        if not isinstance(value, dict):
            raise InputError(f"{_describe_path(path)}: expected a dict with keys {spec['keys']}, got {type(value).__name__}")
        if set(value) != set(spec["keys"]):
            missing, extra = [k for k in spec["keys"] if k not in value], [k for k in value if k not in spec["keys"]]
            raise InputError(f"{_describe_path(path)}: keys differ from the compiled program's: missing {missing}, unexpected {extra}")
        return [leaf for k, c in zip(spec["keys"], spec["children"]) for leaf in flatten_call(c, value[k], f"{path}[{k!r}]")]
    if kind in ("tuple", "list", "namedtuple"):
        if not isinstance(value, (tuple, list)):
            raise InputError(f"{_describe_path(path)}: expected a {kind} of {len(spec['children'])}, got {type(value).__name__}")
        if len(value) != len(spec["children"]):
            raise InputError(f"{_describe_path(path)}: expected {len(spec['children'])} item(s), got {len(value)}")
        return [leaf for i, (c, v) in enumerate(zip(spec["children"], value)) for leaf in flatten_call(c, v, f"{path}[{i}]")]
    from torch.utils import _pytree as pytree  # a registered node: flatten it the way torch does

    leaves, _ = pytree.tree_flatten(value)
    if len(leaves) != count_leaves(spec):
        raise InputError(f"{_describe_path(path)}: a {spec['name']} with {len(leaves)} leaves, expected {count_leaves(spec)}")
    return [(f"{path}[{i}]", leaf) for i, leaf in enumerate(leaves)]


def output_leaves(result) -> list:
    """The leaves of a call's result in pytree order (dict values in key order, tuples,
    lists, namedtuples; an object with ``to_tuple``, such as HF ModelOutput)."""
    if isinstance(result, dict):
        return [leaf for v in result.values() for leaf in output_leaves(v)]
    if isinstance(result, (tuple, list)):
        return [leaf for v in result for leaf in output_leaves(v)]
    if hasattr(result, "to_tuple"):
        return output_leaves(result.to_tuple())
    return [result]


def unflatten(spec: dict, leaves: list, treespec=None):
    """Rebuild the model's output structure. ``treespec``: the original TreeSpec when this
    process made the program (exact classes); otherwise the JSON spec is enough for the
    builtin containers, namedtuples (the original class when loaded, else an equivalent)
    and registered nodes whose module is already imported (else a dict of their keys)."""
    if treespec is not None:
        from torch.utils import _pytree as pytree

        return pytree.tree_unflatten(leaves, treespec)
    it = iter(leaves)
    return _build(spec, it)


def _build(spec: dict, it):
    kind = spec["type"]
    if kind == "leaf":
        return next(it)
    if kind == "none":
        return None
    children = [_build(c, it) for c in spec.get("children", ())]
    if kind == "tuple":
        return tuple(children)
    if kind == "list":
        return children
    if kind == "dict":
        return dict(zip(spec["keys"], children))
    cls = _loaded_class(spec["module"], spec["name"])
    if kind == "namedtuple":
        cls = cls or collections.namedtuple(spec["name"].rpartition(".")[2], spec["fields"])
        return cls(*children)
    if cls is not None:
        try:  # a registered class built from its keys (HF ModelOutput), or a structseq (torch.return_types.max)
            return cls(**dict(zip(spec["keys"], children))) if spec.get("keys") is not None else cls(children)
        except Exception:
            pass
    return dict(zip(spec["keys"], children)) if spec.get("keys") is not None else tuple(children)


def _loaded_class(module: str, qualname: str):
    """The class, if its module is already imported (never imports code named by a package)."""
    obj = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None) if obj is not None else None
    return obj if isinstance(obj, type) else None


# --- what the boundary records -----------------------------------------------------------------------

@dataclass(frozen=True)
class Leaf:
    """One leaf of the user's inputs or outputs."""

    kind: str  # "tensor": a function argument/result; "constant": a Python value; "scalar": a 0-d result as a Python number
    index: int = -1  # tensor/scalar: the function argument (inputs) or result (outputs)
    value: Any = None  # constant: its value; scalar: "int" | "float" | "bool"
    # tensor: the caller's dtype where the function takes or returns its values carried in a
    # wider one (an ONNX model's float8 / int4 / ... as float32 / int8: every value is exact);
    # None: the function's own dtype
    dtype: str | None = None

    def to_json(self) -> dict:
        return {"kind": self.kind, "index": self.index, "value": self.value, **({"dtype": self.dtype} if self.dtype else {})}

    @classmethod
    def from_json(cls, d: dict) -> "Leaf":
        return cls(d["kind"], int(d.get("index", -1)), d.get("value"), d.get("dtype"))


@dataclass(frozen=True)
class DynamicDim:
    """A dynamic dim of a function argument: torch.export's symbol and its range."""

    arg: int
    dim: int
    symbol: str
    min: int
    max: int | None  # None: unbounded

    def describe(self) -> str:
        upper = "inf" if self.max is None else str(self.max)
        return f"{self.min} <= {self.symbol} <= {upper}"

    def to_json(self) -> dict:
        return {"arg": self.arg, "dim": self.dim, "symbol": self.symbol, "min": self.min, "max": self.max}

    @classmethod
    def from_json(cls, d: dict) -> "DynamicDim":
        return cls(int(d["arg"]), int(d["dim"]), str(d["symbol"]), int(d["min"]), None if d.get("max") is None else int(d["max"]))


@dataclass(frozen=True)
class StateSlot:
    """A buffer the program mutates: passed as argument ``arg``, its new value is result ``result``."""

    name: str
    arg: int
    result: int

    def to_json(self) -> dict:
        return {"name": self.name, "arg": self.arg, "result": self.result}

    @classmethod
    def from_json(cls, d: dict) -> "StateSlot":
        return cls(str(d["name"]), int(d["arg"]), int(d["result"]))


@dataclass(frozen=True)
class Boundary:
    in_tree: dict  # JSON pytree of (args, kwargs)
    inputs: tuple[Leaf, ...]  # one per leaf of in_tree
    out_tree: dict  # JSON pytree of the user outputs
    outputs: tuple[Leaf, ...]  # one per leaf of out_tree
    mutations: tuple[tuple[int, int], ...] = ()  # (input leaf, function result): write the result into that input
    state: tuple[StateSlot, ...] = ()
    dynamic: tuple[DynamicDim, ...] = ()
    out_treespec: Any = field(default=None, compare=False)  # the TreeSpec object, in the compiling process only

    VERSION = 2  # 2: leaves with a carried dtype (written only where there is one)

    # -- JSON (package metadata) --
    def to_json(self) -> dict:
        carried = any(x.dtype for x in (*self.inputs, *self.outputs))
        return {
            "version": self.VERSION if carried else 1, "in_tree": self.in_tree, "inputs": [x.to_json() for x in self.inputs],
            "out_tree": self.out_tree, "outputs": [x.to_json() for x in self.outputs],
            "mutations": [list(m) for m in self.mutations], "state": [s.to_json() for s in self.state],
            "dynamic": [d.to_json() for d in self.dynamic],
        }

    @classmethod
    def from_json(cls, d: dict) -> "Boundary":
        if d.get("version", 1) > cls.VERSION:
            raise CuvilError(f"the package's boundary has version {d.get('version')}; this cuvil-mlir reads version {cls.VERSION}")
        return cls(d["in_tree"], tuple(Leaf.from_json(x) for x in d["inputs"]), d["out_tree"], tuple(Leaf.from_json(x) for x in d["outputs"]),
                   tuple((int(a), int(b)) for a, b in d.get("mutations", ())), tuple(StateSlot.from_json(s) for s in d.get("state", ())),
                   tuple(DynamicDim.from_json(x) for x in d.get("dynamic", ())))

    @classmethod
    def identity(cls, signature: Signature) -> "Boundary":
        """A package written before the boundary existed: positional tensor inputs, the
        results as one value (one result) or a tuple."""
        return cls.positional([Leaf("tensor", i) for i in range(len(signature.inputs))],
                              [Leaf("tensor", i) for i in range(len(signature.outputs))])

    @classmethod
    def positional(cls, inputs: list[Leaf], outputs: list[Leaf], in_specs=None, out_specs=None) -> "Boundary":
        """Positional inputs, the results as one value or a tuple: ``in_specs`` / ``out_specs``
        the JSON spec of each (default: one leaf each; a list of leaves for a sequence),
        ``inputs`` / ``outputs`` their leaves in order."""
        in_specs = in_specs or [dict(LEAF)] * len(inputs)
        out_specs = out_specs or [dict(LEAF)] * len(outputs)
        in_tree = {"type": "tuple", "children": [{"type": "tuple", "children": list(in_specs)},
                                                 {"type": "dict", "keys": [], "children": []}]}
        out_tree = out_specs[0] if len(out_specs) == 1 else {"type": "tuple", "children": list(out_specs)}
        return cls(in_tree, tuple(inputs), out_tree, tuple(outputs))

    def is_plain(self) -> bool:
        """Positional tensors in, tensors out, nothing written back, kept or converted: a call
        is the function's call (what the device-resident path handles)."""
        return (not self.state and not self.mutations and all(x.kind == "tensor" and not x.dtype for x in (*self.inputs, *self.outputs))
                and [x.index for x in self.inputs] == list(range(len(self.inputs))))

    def structure(self, results: list):
        """A plain boundary's results (the function's, in order) in the model's output structure."""
        return unflatten(self.out_tree, [results[x.index] for x in self.outputs], self.out_treespec)

    def user_arg_names(self) -> list[str]:
        return [path for path, _ in _leaf_paths(self.in_tree, "")]

    # -- call side --
    def bind(self, args: tuple, kwargs: dict, signature: Signature, state: list[np.ndarray]) -> "Call":
        """Match a call against the compiled inputs; the function's argument arrays."""
        self._check_count(args, signature)
        pairs = flatten_call(self.in_tree, (tuple(args), dict(kwargs)), "inputs")
        arrays: list = [None] * len(signature.inputs)
        for slot in self.state:
            arrays[slot.arg] = state[self.state.index(slot)]
        as_torch, originals = False, [None] * len(pairs)
        for i, ((path, value), leaf) in enumerate(zip(pairs, self.inputs)):
            where = _describe_path(path)
            if leaf.kind == "constant":
                if leaf.dtype:  # an array input the program was compiled with as a constant
                    _check_bound(where, leaf, value)
                else:
                    _check_constant(where, leaf.value, value)
                continue
            array, is_torch = _to_array(where, value)
            as_torch |= is_torch
            originals[i] = value
            if leaf.dtype:  # carried: the caller's dtype, converted exactly to the function's
                if str(array.dtype) != leaf.dtype:
                    raise InputError(f"{where}: expected dtype {leaf.dtype}, got {array.dtype}")
                array = array.astype(numpy_dtype(signature.inputs[leaf.index].dtype))
            arrays[leaf.index] = array
        if not any(leaf.kind == "tensor" for leaf in self.inputs):
            as_torch = "torch" in sys.modules
        self._check_tensors(pairs, arrays, signature)
        return Call(arrays, originals, as_torch)

    def _check_count(self, args: tuple, signature: Signature) -> None:
        """The positional inputs' count, with what the program takes."""
        positional = self.in_tree["children"][0] if self.in_tree.get("type") == "tuple" and self.in_tree.get("children") else None
        if positional is None or positional.get("type") not in ("tuple", "list") or len(args) == len(positional["children"]):
            return
        described = []
        if all(c["type"] == "leaf" for c in positional["children"]):
            for leaf in self.inputs[: len(positional["children"])]:
                described.append(signature.inputs[leaf.index].describe() if leaf.kind == "tensor" else repr(leaf.value))
        expected = f" ({', '.join(described)})" if described else ""
        raise InputError(f"expected {len(positional['children'])} input(s){expected}, got {len(args)}")

    def _check_tensors(self, pairs, arrays, signature: Signature) -> None:
        names = {leaf.index: _describe_path(path) for (path, _), leaf in zip(pairs, self.inputs) if leaf.kind == "tensor"}
        names.update({s.arg: f"state '{s.name}'" for s in self.state})
        for i, (a, spec) in enumerate(zip(arrays, signature.inputs)):
            where = names.get(i, f"input {i}")
            if str(a.dtype) != spec.dtype:
                raise InputError(f"{where}: expected dtype {spec.dtype}, got {a.dtype}")
            if len(a.shape) != len(spec.shape) or any(e >= 0 and e != g for e, g in zip(spec.shape, a.shape)):
                raise InputError(f"{where}: expected shape {spec.describe()}, got {a.dtype}{list(a.shape)}")
        seen: dict[str, tuple[int, str]] = {}
        for d in self.dynamic:
            size, where = int(arrays[d.arg].shape[d.dim]), f"{names.get(d.arg, f'input {d.arg}')} dim {d.dim}"
            if size < d.min or (d.max is not None and size > d.max):
                raise InputError(f"{where} is {size}, outside the range the program was compiled for: {d.describe()}")
            if d.symbol in seen and seen[d.symbol][0] != size:
                other_size, other = seen[d.symbol]
                raise InputError(f"{where} is {size} but {other} is {other_size}: both are the dynamic dim {d.symbol}")
            seen.setdefault(d.symbol, (size, where))

    def unbind(self, call: "Call", results: list[np.ndarray], signature: Signature, state: list[np.ndarray]):
        """Results -> new state, write-backs into the caller's mutated inputs, the user's outputs."""
        for k, slot in enumerate(self.state):
            state[k] = results[slot.result]
        for leaf_index, result in self.mutations:
            _write_back(call.originals[leaf_index], results[result])
        leaves = []
        for leaf in self.outputs:
            if leaf.kind == "constant":
                leaves.append(leaf.value)
            elif leaf.kind == "scalar":
                leaves.append({"int": int, "float": float, "bool": bool}[leaf.value](results[leaf.index].reshape(()).item()))
            else:
                r = results[leaf.index]
                if leaf.dtype:  # carried: exact values of the caller's dtype
                    r = r.astype(numpy_dtype(leaf.dtype))
                leaves.append(_as_torch(r) if call.as_torch else r)
        return unflatten(self.out_tree, leaves, self.out_treespec)


@dataclass
class Call:
    arrays: list[np.ndarray]
    originals: list  # the caller's objects per input leaf (for write-backs)
    as_torch: bool


def _leaf_paths(spec, path):
    if spec["type"] == "leaf":
        return [(path, None)]
    out = []
    keys = spec.get("keys") or list(range(len(spec.get("children", ()))))
    for k, c in zip(keys, spec.get("children", ())):
        out += _leaf_paths(c, f"{path}[{k!r}]")
    return out


def _describe_path(path: str) -> str:
    """inputs[0][1] -> "input 1", inputs[0][1]['a'] -> "input 1['a']", inputs[1]['bias'] -> "input 'bias'"."""
    import re

    m = re.match(r"^inputs\[0\]\[(\d+)\](.*)$", path)
    if m:
        return f"input {m.group(1)}{m.group(2)}"
    m = re.match(r"^inputs\[1\]\[('[^']*')\](.*)$", path)
    if m:
        return f"input {m.group(1)}{m.group(2)}"
    return path


def _check_constant(where: str, expected, got) -> None:
    same = type(got) is type(expected) and got == expected
    if isinstance(expected, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        same = float(got) == expected
    if not same:
        raise InputError(f"{where}: the program was compiled with the constant {expected!r} here (torch.export specializes "
                         f"Python scalars); got {got!r}. Recompile with this value, or pass it as a tensor")


def _check_bound(where: str, leaf: Leaf, value) -> None:
    """An input bound at compile time (an ONNX model's shape operand) must be passed as it was."""
    expected = np.array(leaf.value, dtype=numpy_dtype(leaf.dtype))
    got, _ = _to_array(where, value)
    if got.dtype != expected.dtype or got.shape != expected.shape or not np.array_equal(got, expected):
        raise InputError(f"{where}: the model was compiled with this input bound to {expected.tolist()} ({leaf.dtype}), "
                         f"a shape operand (axes, bounds, sizes) the compiled module holds as a constant; got "
                         f"{got.tolist() if got.size <= 16 else f'{got.dtype}{list(got.shape)}'} ({got.dtype}). "
                         "Compile again with these inputs")


def _to_array(where: str, value) -> tuple[np.ndarray, bool]:
    """A tensor leaf as a C-contiguous numpy array that keeps its shape (0-d stays 0-d:
    np.ascontiguousarray would make it 1-d)."""
    if isinstance(value, np.ndarray):
        return (value if value.flags.c_contiguous else np.array(value, order="C")), False
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        from cuvil_mlir.runtime.arrays import to_numpy

        a = to_numpy(value)
        return (a if a.flags.c_contiguous else np.array(a, order="C")).reshape(tuple(value.shape)), True
    if isinstance(value, np.generic):
        return np.array(value), False
    raise InputError(f"{where}: expected a torch.Tensor or numpy.ndarray, got {type(value).__name__}")


def _write_back(original, result: np.ndarray) -> None:
    """Copy a mutated input's new value into the caller's tensor or array (as torch.compile does)."""
    if isinstance(original, np.ndarray):
        original[...] = result.reshape(original.shape)
        return
    import torch

    with torch.no_grad():
        original.copy_(_as_torch(result).reshape(original.shape))


def _as_torch(a: np.ndarray):
    from cuvil_mlir.runtime.arrays import to_torch

    return to_torch(a)


# --- results as the signature declares them ---------------------------------------------------------

def as_declared(results: list[np.ndarray], signature: Signature) -> list[np.ndarray]:
    """Results in the signature's dtypes and with its 0-d shapes (a runtime may hand a 0-d
    result back as shape (1,))."""
    out = []
    for r, spec in zip(results, signature.outputs):
        r = r.astype(numpy_dtype(spec.dtype)) if str(r.dtype) != spec.dtype else r
        out.append(r.reshape(()) if spec.shape == () and r.shape != () else r)
    return out


# --- state as package files ----------------------------------------------------------------------------

def state_to_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array) if array.ndim else np.array(array), allow_pickle=False)
    return buf.getvalue()


def state_from_bytes(data: bytes, name: str) -> np.ndarray:
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as e:
        raise CuvilError(f"the package's state '{name}' is not a readable .npy array: {e}") from e


def state_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- compile side: the exported program -> (program to import, boundary) -------------------------------------

@dataclass
class Prepared:
    """What ``prepare`` learned; turned into a Boundary once the imported function is known."""

    in_tree: dict
    inputs: list[Leaf]
    out_tree: dict
    outputs: list[Leaf]
    mutations: list[tuple[int, int]]
    state: list[StateSlot]
    state_values: list[np.ndarray]
    dynamic: list[DynamicDim]
    n_args: int
    n_results: int
    out_treespec: Any = None

    @classmethod
    def identity(cls, signature: Signature) -> "Prepared":
        """For a program that has no torch.export signature: positional tensors in, its
        results out (one value, or a tuple)."""
        return cls.positional(signature, Boundary.identity(signature))

    @classmethod
    def positional(cls, signature: Signature, b: Boundary) -> "Prepared":
        """A positional boundary (``Boundary.positional``: an ONNX model's inputs, some bound
        or carried) for the function of ``signature``."""
        return cls(b.in_tree, list(b.inputs), b.out_tree, list(b.outputs), [], [], [], [], len(signature.inputs), len(signature.outputs))

    def boundary(self) -> Boundary:
        return Boundary(self.in_tree, tuple(self.inputs), self.out_tree, tuple(self.outputs), tuple(self.mutations),
                        tuple(self.state), tuple(self.dynamic), self.out_treespec)

    def check_against(self, signature: Signature) -> None:
        """The imported function must take and return what the boundary expects."""
        if len(signature.inputs) != self.n_args or len(signature.outputs) != self.n_results:
            raise ImportError_(f"internal: the imported function takes {len(signature.inputs)} argument(s) and returns "
                               f"{len(signature.outputs)} result(s); the program's signature says {self.n_args} and {self.n_results}")


def prepare(program) -> tuple[Any, Prepared]:
    """Rewrite a decomposed ExportedProgram (our own copy) into the form torch-mlir's frozen
    import turns into the function the boundary describes; see the module docstring."""
    import torch
    from torch.export.graph_signature import InputKind, OutputKind

    sig = program.graph_signature
    graph = program.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(sig.input_specs):
        raise ImportError_(f"internal: {len(placeholders)} placeholders for {len(sig.input_specs)} input specs")
    mutated_buffers = [s.target for s in sig.output_specs if s.kind == OutputKind.BUFFER_MUTATION]
    user_input_names = [s.arg.name for s in sig.input_specs if s.kind == InputKind.USER_INPUT]

    # inputs: function arguments are the placeholders left after freezing, in graph order
    args: list = []  # per function argument: the placeholder node
    inputs: list[Leaf] = []
    state: list[StateSlot] = []
    state_values: list[np.ndarray] = []
    for spec, node in zip(sig.input_specs, placeholders):
        if spec.kind == InputKind.BUFFER and spec.target in mutated_buffers:
            spec.kind, spec.persistent = InputKind.USER_INPUT, None  # keep it an argument: it is state
            value = program.state_dict.get(spec.target, program.constants.get(spec.target))
            state.append(StateSlot(spec.target, len(args), -1))
            state_values.append(_host_array(value))
            args.append(node)
        elif spec.kind == InputKind.USER_INPUT and isinstance(spec.arg, torch.export.graph_signature.ConstantArgument):
            if node.users:
                raise ImportError_(f"input '{node.name}' is the constant {spec.arg.value!r} but the graph uses it")
            inputs.append(Leaf("constant", -1, _json_value(spec.arg.value, f"input '{node.name}'")))
            graph.erase_node(node)
        elif spec.kind == InputKind.USER_INPUT:
            val = node.meta.get("val")
            if not isinstance(val, torch.Tensor):
                raise ImportError_(f"input '{node.name}' is a symbolic {type(val).__name__}; compile it with a fixed value "
                                   "or pass it as a 0-d tensor")
            inputs.append(Leaf("tensor", len(args)))
            args.append(node)
    # the frozen import keeps USER_INPUT placeholders only; mutated buffers now count among them
    sig.input_specs[:] = [s for s in sig.input_specs if not (s.kind == InputKind.USER_INPUT and isinstance(s.arg, torch.export.graph_signature.ConstantArgument))]

    # outputs: the function returns tensors only, in output-spec order
    output_node = next(n for n in graph.nodes if n.op == "output")
    values = list(output_node.args[0])
    results: list = []
    outputs: list[Leaf] = []
    mutations: list[tuple[int, int]] = []
    for spec, value in zip(sig.output_specs, values):
        if spec.kind == OutputKind.BUFFER_MUTATION:
            k = next(i for i, s in enumerate(state) if s.name == spec.target)
            state[k] = replace(state[k], result=len(results))
            results.append(value)
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            leaf = _tensor_leaf_of(spec.target, user_input_names, inputs)
            mutations.append((leaf, len(results)))
            results.append(value)
        elif spec.kind == OutputKind.USER_OUTPUT:
            outputs.append(_output_leaf(graph, output_node, value, results))
        else:
            raise ImportError_(f"output '{spec.arg}' is a {spec.kind.name}: only inference programs are compiled "
                               "(export the model in eval mode, without gradients or losses)")
    output_node.args = (tuple(results),)
    graph.lint()
    program.graph_module.recompile()

    in_tree = spec_to_json(program.call_spec.in_spec) if program.call_spec.in_spec is not None else None
    out_spec = program.call_spec.out_spec
    out_tree = spec_to_json(out_spec) if out_spec is not None else {"type": "tuple", "children": [dict(LEAF)] * len(outputs)}
    if in_tree is None:
        in_tree = {"type": "tuple", "children": [{"type": "tuple", "children": [dict(LEAF)] * len(inputs)}, {"type": "dict", "keys": [], "children": []}]}
    if count_leaves(in_tree) != len(inputs) or count_leaves(out_tree) != len(outputs):
        raise ImportError_(f"internal: the program's pytrees have {count_leaves(in_tree)} input and {count_leaves(out_tree)} "
                           f"output leaves; its signature has {len(inputs)} and {len(outputs)}")
    prepared = Prepared(in_tree, inputs, out_tree, outputs, mutations, state, state_values,
                        _dynamic_dims(program, args), len(args), len(results), out_spec)
    return program, prepared


def _tensor_leaf_of(name: str, user_input_names: list[str], inputs: list[Leaf]) -> int:
    """The input leaf (index into ``inputs``) of the user input placeholder ``name``."""
    position = user_input_names.index(name)
    return position  # user inputs and input leaves are in the same order, one to one


def _output_leaf(graph, output_node, value, results: list) -> Leaf:
    import torch

    if not hasattr(value, "op"):  # a Python constant (int, float, bool, str, None)
        return Leaf("constant", -1, _json_value(value, "an output"))
    val = value.meta.get("val")
    if isinstance(val, torch.Tensor):
        results.append(value)
        return Leaf("tensor", len(results) - 1)
    kinds = ((torch.SymBool, "bool", torch.bool), (torch.SymInt, "int", torch.int64), (torch.SymFloat, "float", torch.float64))
    for sym_type, name, dtype in kinds:
        if isinstance(val, (sym_type, {"bool": bool, "int": int, "float": float}[name])):
            from torch.fx.passes.shape_prop import _extract_tensor_metadata

            with graph.inserting_before(output_node):
                node = graph.call_function(torch.ops.aten.scalar_tensor.default, (value,), {"dtype": dtype})
                node.meta["tensor_meta"] = _extract_tensor_metadata(torch.empty((), dtype=dtype))  # what torch-mlir reads
            results.append(node)
            return Leaf("scalar", len(results) - 1, name)
    raise ImportError_(f"output '{value.name}' is a {type(val).__name__}: only tensors and Python scalars can be returned")


def _json_value(value, where: str):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ImportError_(f"{where} is a constant {type(value).__name__} ({value!r}): only int, float, bool, str and None constants are supported")


def _host_array(value) -> np.ndarray:
    from cuvil_mlir.runtime.arrays import to_numpy

    return np.array(to_numpy(value.detach()), order="C").reshape(tuple(value.shape))


def _dynamic_dims(program, args: list) -> list[DynamicDim]:
    """Every dim of a function argument that is a symbol of the program, with its range."""
    import sympy
    import torch

    ranges = {str(sym): r for sym, r in program.range_constraints.items()}
    out = []
    for i, node in enumerate(args):
        val = node.meta.get("val")
        for d, size in enumerate(getattr(val, "shape", ())):
            if not isinstance(size, torch.SymInt):
                continue
            expr = size.node.expr
            if not isinstance(expr, sympy.Symbol):
                continue  # a derived size (2*s0): checked through the symbol it is made of
            r = ranges.get(str(expr))
            lower = _finite_int(r.lower) if r is not None else None
            upper = _finite_int(r.upper) if r is not None else None
            out.append(DynamicDim(i, d, str(expr), lower or 0, upper))
    return out


def _finite_int(bound) -> int | None:
    """A range bound as an int; None for an infinite one (sympy's oo, or torch's own int_oo,
    whose ``is_finite`` does not say so)."""
    try:
        value = int(bound)
    except (TypeError, ValueError, AttributeError, OverflowError):
        return None
    return value if abs(value) < 2**62 else None


def check_dtypes(signature: Signature, target) -> None:
    """Refuse float64 inputs/outputs for a target that does not compute float64."""
    if target.holds_f64:
        return
    where = [f"input {i}" for i, s in enumerate(signature.inputs) if s.dtype in ("float64", "complex128")]
    where += [f"output {i}" for i, s in enumerate(signature.outputs) if s.dtype in ("float64", "complex128")]
    if where:
        raise CompileError(f"target '{target.spec}' does not compute float64 ({', '.join(where)} of the program are float64): "
                           "cast the model and its inputs to float32 (model.float()), or compile for cpu, cuda or rocm")

"""External parameters: weights that live outside the IR, referenced by name.

A big model's weights do not go into the module. The importer emits, for each weight, a
reference op (generic form)::

    %w = "torch.operator"() <{name = "cuvil.parameter"}> {cuvil.key = "layers.0.q_proj.weight"}
             : () -> !torch.vtensor<[2048,2048],f32>

and puts the tensor (not a copy: a numpy view of the exported program's own storage) into a
``ParameterStore`` under that key. ``torch.operator`` is a torch op no folder or pattern
touches, so the reference survives every stage unchanged; at the hand-off to IREE
(targets/iree.py) it becomes a ``util.global`` initialized from ``#stream.parameter.named``.

Passes read and write weights through ``literal_array`` / ``literal`` (core/patterns.py),
which consult the active store: a weight a pass computes (a BN-folded conv, an fp16 or int4
copy) is stored under a key derived from its bytes, so two targets that compute the same
weight share one entry, and the archive holds each weight once.

Where a pass's weight is a rearrangement of others (Q/K/V rows concatenated, a norm weight
widened to f32, a transpose), the pass also gives its *recipe*: a small JSON tree over parameter
keys (``RECIPE_OPS``) that ``evaluate`` replays bit for bit. With a recipe for every derived
key, the parameters a package needs can be produced anywhere from its source weights alone
(e.g. generated from a seed on the machine that runs it: runtime/parameters.py ``generate``).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

PARAMETER_OP = "cuvil.parameter"  # the ``name`` of the torch.operator that references a parameter
KEY_ATTR = "cuvil.key"
SCOPE = "model"  # the scope of every parameter: #stream.parameter.named<"model"::key>

# Where the inline/external rule draws its lines (params="auto"): a program whose weights total
# at least EXTERNAL_FROM_BYTES gets them external; then every tensor constant of at least
# MIN_PARAMETER_BYTES is a parameter (smaller ones, scalars, masks, rotary tables stay literals
# that patterns fold).
EXTERNAL_FROM_BYTES = 64 << 20
MIN_PARAMETER_BYTES = 4096
MODES = ("auto", "inline", "external")

# vtensor element types a parameter may have (an i1 tensor stays a literal: IREE stores it
# one byte per element, numpy's bool too, but torch-mlir imports bool constants as ui8 casts)
PARAMETER_DTYPES = ("f64", "f32", "f16", "bf16", "si64", "si32", "si16", "si8", "ui8")


def resolve_mode(params: str, weight_bytes: int) -> str:
    """``"inline"`` or ``"external"`` for a program with ``weight_bytes`` of tensor constants."""
    if params not in MODES:
        from cuvil_mlir.core.diagnostics import CuvilError

        raise CuvilError(f"params='{params}': expected one of {', '.join(MODES)}")
    if params != "auto":
        return params
    return "external" if weight_bytes >= EXTERNAL_FROM_BYTES else "inline"


@dataclass
class ParameterStore:
    """key -> numpy array (C-contiguous, the weight's own dtype; bfloat16 as ml_dtypes).

    A weight a pass derives with a recipe (a rearrangement of other parameters: Q/K/V rows
    concatenated, a cast to fp16) is not held: ``computed`` keeps its shape and dtype, and
    reading it replays the recipe (``get``), so a compile holds the source weights (views of
    the model's own tensors) and no second copy of them."""

    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    recipes: dict[str, dict] = field(default_factory=dict)  # derived key -> how it is computed from others
    abstract: set[str] = field(default_factory=set)  # keys with a shape and dtype but no data (stub weights)
    computed: dict[str, tuple[tuple[int, ...], np.dtype]] = field(default_factory=dict)  # derived keys not held

    def add(self, key: str, array: np.ndarray) -> str:
        self.arrays[key] = np.ascontiguousarray(array)
        return key

    def add_derived(self, array: np.ndarray, recipe: dict | None = None) -> str:
        """Store a weight a pass computed, under a key made from its bytes, dtype, shape and
        ``recipe`` (how it is computed from other parameters, ``evaluate``; None when it is not
        a rearrangement): two weights with equal bytes but different sources (norm weights
        that are all ones) keep separate keys, so they can be rebuilt from other values.
        With a recipe that replays ``array`` bit for bit, only the recipe is kept (``computed``);
        one that gives other bytes is dropped and the array held (``generate`` then refuses the
        key); one whose sources this store lacks is kept, with the array."""
        array = np.ascontiguousarray(array)
        if recipe is None and self.abstract and array.dtype.kind == "f" and np.isnan(array).any():
            from cuvil_mlir.core.diagnostics import CuvilError

            raise CuvilError("a pass computed a weight from the values of stub weights (no data; core/params.py "
                             "stub_weights): it cannot be rebuilt from them; compile this model with real weights")
        replays = None if recipe is None or recipe_keys(recipe) & self.abstract else self._replays(recipe, array)
        if replays is False:
            recipe = None
        digest = hashlib.blake2b(memoryview(array.reshape(-1).view(np.uint8)), digest_size=12)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        if recipe is not None:
            digest.update(json.dumps(recipe, sort_keys=True).encode())
        key = f"derived.{digest.hexdigest()}"
        if key in self.arrays or key in self.computed:
            return key
        if recipe is not None:
            self.recipes[key] = recipe
        if replays:
            self.computed[key] = (array.shape, array.dtype)
        elif recipe is not None and recipe_keys(recipe) & self.abstract:
            self.abstract.add(key)  # computed from stubs: keep its shape, not its (meaningless) bytes
            self.arrays[key] = _placeholder(array.shape, array.dtype)
        else:
            self.add(key, array)
        return key

    def _replays(self, recipe: dict, array: np.ndarray) -> bool | None:
        """Whether ``recipe`` computes ``array``'s exact bytes here; None when this store
        lacks a parameter it reads."""
        if any(k not in self.arrays and k not in self.computed for k in recipe_keys(recipe)):
            return None
        again = np.ascontiguousarray(evaluate(recipe, self.get))
        return again.shape == array.shape and again.dtype == array.dtype and \
            np.array_equal(again.reshape(-1).view(np.uint8), array.reshape(-1).view(np.uint8))

    def add_abstract(self, key: str, shape, dtype) -> str:
        """A parameter known by its shape and dtype only (a stub weight): passes read it as NaN
        (a float; 0 otherwise), so a weight computed from its values is caught (``add_derived``)
        and a value-based match (a zero bias, a weight of ones) does not fire."""
        self.arrays[key] = _placeholder(shape, dtype)
        self.abstract.add(key)
        return key

    def get(self, key: str) -> np.ndarray | None:
        """The array of ``key`` (a ``computed`` one evaluated now, not kept), or None."""
        if key in self.computed:
            return evaluate(self.recipes[key], self._source)
        return self.arrays.get(key)

    def _source(self, key: str) -> np.ndarray:
        array = self.get(key)
        if array is None:
            raise KeyError(key)
        return array

    def shape_dtype(self, key: str) -> tuple[tuple[int, ...], np.dtype]:
        if key in self.computed:
            return self.computed[key]
        return self.arrays[key].shape, self.arrays[key].dtype

    def arrays_for(self, keys) -> "ParameterArrays":
        """``keys`` as a mapping key -> array (what a compiled program keeps): held arrays as
        they are, computed ones with their recipes and the arrays those read."""
        keys = sorted(keys)
        lazy = {k: (self.recipes[k], *self.computed[k]) for k in keys if k in self.computed}
        sources: dict[str, np.ndarray] = {}
        pending = set().union(*(recipe_keys(r) for r, _, _ in lazy.values()))
        while pending:
            key = pending.pop()
            if key in self.computed:
                lazy.setdefault(key, (self.recipes[key], *self.computed[key]))
                pending |= recipe_keys(self.recipes[key]) - sources.keys()
            elif key not in sources:
                sources[key] = self.arrays[key]
        return ParameterArrays({k: self.arrays[k] for k in keys if k not in lazy}, lazy, sources, keys)

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values()) + \
            sum(int(np.prod(s, dtype=np.int64)) * np.dtype(d).itemsize for s, d in self.computed.values())


class ParameterArrays(Mapping):
    """key -> numpy array of a compiled program's parameters. A derived weight with a recipe
    is computed each time it is read (``lazy``: key -> (recipe, shape, dtype)) from ``sources``
    (views of the model's weights): iterating ``items()`` holds one such array at a time, so
    writing an archive needs no copy of all of them."""

    def __init__(self, held: dict[str, np.ndarray], lazy: dict[str, tuple] | None = None,
                 sources: dict[str, np.ndarray] | None = None, order=None):
        self._held = held
        self._lazy = lazy or {}
        self._sources = sources or {}
        self._keys = list(order) if order is not None else [*held, *self._lazy]
        self._keyset = set(self._keys)

    def __getitem__(self, key: str) -> np.ndarray:
        if key in self._held:
            return self._held[key]
        return evaluate(self._lazy[key][0], self._source)  # KeyError for a key it does not have

    def _source(self, key: str) -> np.ndarray:
        if key in self._sources:
            return self._sources[key]
        if key in self._lazy or key in self._held:
            return self[key]
        raise KeyError(f"a parameter recipe reads '{key}', which the compiled program does not hold")

    def __iter__(self):
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key) -> bool:
        return key in self._keyset

    def is_computed(self, key: str) -> bool:
        """Whether reading ``key`` computes its array (it is not held)."""
        return key not in self._held

    def shape_dtype(self, key: str) -> tuple[tuple[int, ...], np.dtype]:
        if key in self._held:
            return self._held[key].shape, self._held[key].dtype
        _, shape, dtype = self._lazy[key]
        return tuple(shape), np.dtype(dtype)

    @property
    def nbytes(self) -> int:
        return sum(int(np.prod(s, dtype=np.int64)) * d.itemsize for s, d in map(self.shape_dtype, self._keys))


def _placeholder(shape, dtype) -> np.ndarray:
    """A read-only array of ``shape`` that takes no memory: one NaN (0 for integers) broadcast."""
    dtype = np.dtype(dtype)
    fill = np.nan if dtype.kind == "f" or dtype.name == "bfloat16" else 0
    return np.broadcast_to(np.array(fill, dtype), tuple(shape))


def is_stub(tensor) -> bool:
    """A torch tensor of several elements whose strides are all 0: an ``expand``ed scalar, the
    form ``stub_weights`` gives weights, which an external-parameter compile never reads."""
    return tensor.numel() > 1 and all(s == 0 for s in tensor.stride())


def stub_weights(module, min_bytes: int = MIN_PARAMETER_BYTES) -> None:
    """Replace every parameter of ``module`` (an nn.Module, e.g. built on the meta device) of at
    least ``min_bytes`` by a stub of its shape and dtype that holds no memory (a stub of any size
    becomes an external parameter; ``min_bytes=0`` leaves no parameter on the meta device). Compiled with
    ``params="external"``, its weights become parameters without data: the modules of a model
    too big to hold here, whose weights are supplied at load time (``save(parameters="none")``).
    Passes that rearrange weights record recipes as usual; one that computes from weight values
    (BN folding, quantization) cannot run and raises."""
    import torch

    for sub in module.modules():
        for name, p in list(sub.named_parameters(recurse=False)):
            if p.numel() * p.element_size() >= min_bytes:
                stub = torch.zeros((), dtype=p.dtype).expand(p.shape)
                setattr(sub, name, torch.nn.Parameter(stub, requires_grad=False))


def describe(store: ParameterStore, used) -> dict:
    """The package's record of its parameters: ``entries``, key -> ``{"shape", "dtype"[, "recipe"]}``
    for each parameter the modules read (a parameter set supplied at load time is checked
    against it), and ``sources``, key -> ``{"shape", "dtype"}`` for the parameters that recipes
    read and the modules do not (Q, K and V once concatenated): with both, every entry can be
    rebuilt from source weights (runtime/parameters.py ``generate``)."""
    def shape_dtype(key):
        shape, dtype = store.shape_dtype(key)
        return {"shape": list(shape), "dtype": dtype_name(dtype)}

    entries = {}
    for key in sorted(used):
        entries[key] = shape_dtype(key)
        if key in store.recipes:
            entries[key]["recipe"] = store.recipes[key]
    read = set().union(*(recipe_keys(store.recipes[k]) for k in used if k in store.recipes))
    return {"entries": entries, "sources": {k: shape_dtype(k) for k in sorted(read - set(used))}}


# ---------------------------------------------------------------------------------------
# Recipes: how a derived weight is computed from parameters (JSON trees; None = unknown).

RECIPE_OPS = ("param", "value", "concat", "cast", "transpose", "reshape", "rows", "zeros")


def dtype_name(dtype) -> str:
    """numpy's name of a dtype (``float16``, ``bfloat16`` for ml_dtypes' bfloat16)."""
    return np.dtype(dtype).name


def entry_tag(shape, dtype) -> str:
    """What cuvil writes as a parameter archive entry's metadata: ``float16[2048,2048]``."""
    return f"{dtype_name(dtype)}[{','.join(str(int(d)) for d in shape)}]"


def _numpy_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def param(key: str | None) -> dict | None:
    return None if key is None else {"op": "param", "key": key}


def concat(inputs, axis: int = 0) -> dict | None:
    inputs = list(inputs)
    return None if any(r is None for r in inputs) else {"op": "concat", "axis": axis, "inputs": inputs}


def cast(recipe: dict | None, dtype) -> dict | None:
    return None if recipe is None else {"op": "cast", "dtype": dtype_name(dtype), "input": recipe}


def transpose(recipe: dict | None) -> dict | None:
    return None if recipe is None else {"op": "transpose", "input": recipe}


def reshape(recipe: dict | None, shape) -> dict | None:
    return None if recipe is None else {"op": "reshape", "shape": [int(d) for d in shape], "input": recipe}


def rows(recipe: dict | None, start: int, stop: int) -> dict | None:
    return None if recipe is None else {"op": "rows", "start": int(start), "stop": int(stop), "input": recipe}


def value(array: np.ndarray) -> dict:
    """A small constant's own bytes (one that stayed a literal, under MIN_PARAMETER_BYTES)."""
    import base64

    array = np.ascontiguousarray(array)
    return {"op": "value", "shape": list(array.shape), "dtype": dtype_name(array.dtype),
            "data": base64.b64encode(array.tobytes()).decode()}


def zeros(shape, dtype) -> dict:
    return {"op": "zeros", "shape": [int(d) for d in shape], "dtype": dtype_name(dtype)}


def recipe_keys(recipe: dict) -> set[str]:
    """The parameter keys a recipe reads."""
    if recipe["op"] == "param":
        return {recipe["key"]}
    children = recipe.get("inputs") or ([recipe["input"]] if "input" in recipe else [])
    return set().union(*(recipe_keys(r) for r in children)) if children else set()


def evaluate(recipe: dict, source) -> np.ndarray:
    """The array ``recipe`` describes; ``source(key)`` gives a parameter's array. Raises
    ValueError for an op it does not know (a package from a newer cuvil-mlir)."""
    op = recipe.get("op")
    if op == "param":
        return source(recipe["key"])
    if op == "zeros":
        return np.zeros(recipe["shape"], _numpy_dtype(recipe["dtype"]))
    if op == "value":
        import base64

        return np.frombuffer(base64.b64decode(recipe["data"]), _numpy_dtype(recipe["dtype"])).reshape(recipe["shape"])
    if op == "concat":
        return np.concatenate([evaluate(r, source) for r in recipe["inputs"]], axis=recipe["axis"])
    if op not in RECIPE_OPS:
        raise ValueError(f"unknown parameter recipe op '{op}' (known: {', '.join(RECIPE_OPS)})")
    x = evaluate(recipe["input"], source)
    if op == "cast":
        return np.asarray(x).astype(_numpy_dtype(recipe["dtype"]))
    if op == "transpose":
        return np.ascontiguousarray(x.T)
    if op == "reshape":
        return np.ascontiguousarray(x).reshape(recipe["shape"])
    return x[recipe["start"]:recipe["stop"]]  # rows


# Files whose bytes some weights are views of (compiler/importers/pt2.py maps a .pt2's records):
# the address a mapping starts at -> (its length, the file), while the mapping lives. The
# archive writer copies such a weight from the file (runtime/session.py) instead of reading it
# through the mapping, which would bring every page of it into this process.
_MAPPED_FILES: dict[int, tuple[int, str]] = {}


def register_mapped_file(mapping, path) -> None:
    """Record that the read-only mmap ``mapping`` holds the whole file ``path`` (until it is freed)."""
    import os
    import weakref

    start = np.frombuffer(mapping, np.uint8).__array_interface__["data"][0] if len(mapping) else 0
    _MAPPED_FILES[start] = (len(mapping), os.fspath(path))
    weakref.finalize(mapping, _MAPPED_FILES.pop, start, None)


def file_region(array: np.ndarray) -> tuple[str, int] | None:
    """(file, offset) when ``array`` is a C-contiguous view of a mapped file's bytes, else None."""
    if not _MAPPED_FILES or not isinstance(array, np.ndarray) or not array.flags.c_contiguous or array.nbytes == 0:
        return None
    address = array.__array_interface__["data"][0]
    for start, (length, path) in _MAPPED_FILES.items():
        if start <= address and address + array.nbytes <= start + length:
            return path, address - start
    return None


_active: contextvars.ContextVar[ParameterStore | None] = contextvars.ContextVar("cuvil_parameter_store", default=None)


@contextlib.contextmanager
def active(store: ParameterStore | None) -> Iterator[ParameterStore | None]:
    """Make ``store`` the one passes read and write weights through (None: inline weights)."""
    token = _active.set(store)
    try:
        yield store
    finally:
        _active.reset(token)


def current() -> ParameterStore | None:
    return _active.get()


def parameter_key(op) -> str | None:
    """The key of a parameter reference op, else None."""
    if op is None or op.operation.name != "torch.operator":
        return None
    attrs = op.operation.attributes
    if "name" not in attrs or KEY_ATTR not in attrs:
        return None
    from cuvil_mlir.core.ir import ir

    if ir.StringAttr(attrs["name"]).value != PARAMETER_OP:
        return None
    return ir.StringAttr(attrs[KEY_ATTR]).value


def reference(key: str, result_type):
    """A parameter reference op for ``key`` at the current insertion point; its value."""
    from cuvil_mlir.core.ir import ir

    op = ir.Operation.create("torch.operator", results=[result_type],
                             attributes={"name": ir.StringAttr.get(PARAMETER_OP), KEY_ATTR: ir.StringAttr.get(key)})
    return op.result


def torch_array(tensor) -> np.ndarray:
    """A numpy view of a CPU torch tensor's storage (bfloat16 as ml_dtypes.bfloat16): no copy
    when the tensor is contiguous."""
    import torch

    data = tensor.detach()
    if data.device.type != "cpu":
        data = data.cpu()
    data = data.contiguous()
    if data.dtype == torch.bfloat16:
        import ml_dtypes

        return data.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return data.numpy()

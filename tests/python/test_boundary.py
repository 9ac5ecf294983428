"""cuvil_mlir/runtime/boundary.py on its own: pytree specs as JSON, matching a call against the
compiled inputs (errors that name the place), rebuilding outputs, write-backs, state,
dynamic-dim ranges, casts for dtypes a module does not hold, and old packages. No compile."""

import collections

import numpy as np
import pytest
import torch
from torch.utils import _pytree as pytree

from cuvil_mlir.runtime.boundary import (
    Boundary, DynamicDim, Leaf, StateSlot, as_declared, check_dtypes, flatten_call, spec_to_json, unflatten,
)
from cuvil_mlir.core.diagnostics import InputError
from cuvil_mlir.runtime.signature import Signature, TensorSpec

Pair = collections.namedtuple("Pair", ["first", "second"])


@pytest.mark.parametrize("tree", [
    {"sum": 1, "pair": (2, [3])},
    (1, (2, [3]), {"a": {"b": 4}}),
    Pair(1, 2),
    [1],
    (1, None, 2),
    1,
    torch.return_types.max((1, 2)),
])
def test_spec_json_round_trip_rebuilds_the_same_structure(tree):
    leaves, spec = pytree.tree_flatten(tree)
    as_json = spec_to_json(spec)
    rebuilt = unflatten(as_json, leaves)  # without the TreeSpec object: as a loaded package does
    assert pytree.tree_flatten(rebuilt)[1] == spec if not isinstance(tree, Pair) else rebuilt == tree
    assert rebuilt == tree


def test_namedtuple_from_a_package_is_the_original_class_when_it_is_loaded():
    _, spec = pytree.tree_flatten(Pair(1, 2))
    rebuilt = unflatten(spec_to_json(spec), [5, 6])
    assert type(rebuilt) is Pair and rebuilt.second == 6
    # a class that is not importable here: an equivalent namedtuple, same fields
    as_json = {**spec_to_json(spec), "module": "not_a_loaded_module"}
    other = unflatten(as_json, [5, 6])
    assert other._fields == ("first", "second") and other == (5, 6) and type(other) is not Pair


def test_hf_model_output_round_trips():
    mo = pytest.importorskip("transformers.modeling_outputs")
    out = mo.BaseModelOutput(last_hidden_state=torch.ones(2))
    leaves, spec = pytree.tree_flatten(out)
    rebuilt = unflatten(spec_to_json(spec), leaves)
    assert isinstance(rebuilt, mo.BaseModelOutput) and torch.equal(rebuilt.last_hidden_state, out.last_hidden_state)


def _in_tree(args, kwargs):
    return spec_to_json(pytree.tree_flatten((args, kwargs))[1])


def test_flatten_call_matches_kwargs_by_name_and_names_the_place_that_differs():
    spec = _in_tree((1, {"a": 2, "b": 3}), {"bias": 4, "scale": 5})
    pairs = flatten_call(spec, ((10, {"b": 30, "a": 20}), {"scale": 50, "bias": 40}), "inputs")
    assert [v for _, v in pairs] == [10, 20, 30, 40, 50]
    with pytest.raises(InputError, match=r"input 1: keys differ .* missing \['b'\]"):
        flatten_call(spec, ((10, {"a": 20}), {"scale": 50, "bias": 40}), "inputs")
    with pytest.raises(InputError, match=r"inputs\[0\]: expected 2 item\(s\), got 3"):
        flatten_call(spec, ((1, {"a": 2, "b": 3}, 9), {"scale": 50, "bias": 40}), "inputs")


def _boundary(n_in=2, dynamic=(), state=(), mutations=(), constants=()):
    leaves = [Leaf("tensor", i) for i in range(n_in)] + [Leaf("constant", -1, v) for v in constants]
    in_tree = _in_tree(tuple(range(n_in + len(constants))), {})
    return Boundary(in_tree, tuple(leaves), {"type": "leaf"}, (Leaf("tensor", 0),), tuple(mutations), tuple(state), tuple(dynamic))


def test_bind_keeps_0d_arrays_0d():
    sig = Signature((TensorSpec((), "float32"), TensorSpec((3,), "float32")), (TensorSpec((), "float32"),))
    call = _boundary().bind((torch.tensor(2.0), np.ones(3, np.float32)), {}, sig, [])
    assert call.arrays[0].shape == () and call.arrays[1].shape == (3,) and call.as_torch


def test_bind_checks_dtype_and_shape_naming_the_input():
    sig = Signature((TensorSpec((2, 3), "float32"), TensorSpec((3,), "float32")), (TensorSpec((3,), "float32"),))
    b = _boundary()
    with pytest.raises(InputError, match=r"input 1: expected dtype float32, got float64"):
        b.bind((np.ones((2, 3), np.float32), np.ones(3)), {}, sig, [])
    with pytest.raises(InputError, match=r"input 0: expected shape float32\[2, 3\], got float32\[3, 2\]"):
        b.bind((np.ones((3, 2), np.float32), np.ones(3, np.float32)), {}, sig, [])


def test_dynamic_dims_are_checked_against_their_range_and_each_other():
    sig = Signature((TensorSpec((-1, 4), "float32"), TensorSpec((-1, 4), "float32")), (TensorSpec((-1, 4), "float32"),))
    b = _boundary(dynamic=(DynamicDim(0, 0, "s0", 2, 16), DynamicDim(1, 0, "s0", 2, 16)))
    ok = b.bind((np.ones((5, 4), np.float32), np.ones((5, 4), np.float32)), {}, sig, [])  # in range: no error
    assert ok.arrays[0].shape == (5, 4)
    with pytest.raises(InputError, match=r"input 0 dim 0 is 17, outside the range .*: 2 <= s0 <= 16"):
        b.bind((np.ones((17, 4), np.float32), np.ones((17, 4), np.float32)), {}, sig, [])
    with pytest.raises(InputError, match=r"input 0 dim 0 is 1, outside the range"):
        b.bind((np.ones((1, 4), np.float32), np.ones((1, 4), np.float32)), {}, sig, [])
    with pytest.raises(InputError, match=r"input 1 dim 0 is 6 but input 0 dim 0 is 5: both are the dynamic dim s0"):
        b.bind((np.ones((5, 4), np.float32), np.ones((6, 4), np.float32)), {}, sig, [])


def test_a_specialized_constant_must_be_given_the_value_it_was_compiled_with():
    sig = Signature((TensorSpec((3,), "float32"),), (TensorSpec((3,), "float32"),))
    b = _boundary(n_in=1, constants=(2.5,))
    b.bind((np.ones(3, np.float32), 2.5), {}, sig, [])  # same value: fine
    with pytest.raises(InputError, match=r"input 1: the program was compiled with the constant 2.5 .* got 3.0"):
        b.bind((np.ones(3, np.float32), 3.0), {}, sig, [])


def test_unbind_writes_mutated_inputs_back_and_keeps_state():
    sig = Signature((TensorSpec((2,), "float32"), TensorSpec((2,), "float32")),
                    (TensorSpec((2,), "float32"), TensorSpec((2,), "float32"), TensorSpec((2,), "float32")))
    # arg 0: state "count" (new value: result 0); arg 1: the user's x, mutated (result 1); result 2: the output
    b = Boundary(_in_tree((0,), {}), (Leaf("tensor", 1),), {"type": "leaf"}, (Leaf("tensor", 2),), ((0, 1),),
                 (StateSlot("count", 0, 0),))
    x, state = torch.zeros(2), [np.zeros(2, np.float32)]
    call = b.bind((x,), {}, sig, state)
    assert call.arrays[0] is state[0]
    out = b.unbind(call, [np.full(2, 1.0, np.float32), np.full(2, 7.0, np.float32), np.full(2, 3.0, np.float32)], sig, state)
    assert torch.equal(out, torch.full((2,), 3.0))  # only the user output comes back
    assert torch.equal(x, torch.full((2,), 7.0))  # the caller's tensor holds the mutation
    assert np.array_equal(state[0], np.ones(2, np.float32))  # and the state moved on


def test_scalar_and_constant_outputs():
    sig = Signature((TensorSpec((2,), "float32"),), (TensorSpec((2,), "float32"), TensorSpec((), "int64")))
    out_tree = spec_to_json(pytree.tree_flatten((0, 0, 0, None))[1])  # None is a leaf (a constant output)
    b = Boundary(_in_tree((0,), {}), (Leaf("tensor", 0),), out_tree,
                 (Leaf("tensor", 0), Leaf("scalar", 1, "int"), Leaf("constant", -1, 0.5), Leaf("constant", -1, None)))
    out = b.unbind(b.bind((np.ones(2, np.float32),), {}, sig, []), [np.ones(2, np.float32), np.array(4)], sig, [])
    assert isinstance(out[0], np.ndarray) and out[1] == 4 and type(out[1]) is int and out[2] == 0.5 and out[3] is None


def test_identity_boundary_of_an_old_package_keeps_the_old_call_convention():
    sig = Signature((TensorSpec((2,), "float32"),), (TensorSpec((2,), "float32"), TensorSpec((2,), "float32")))
    b = Boundary.identity(sig)
    out = b.unbind(b.bind((np.ones(2, np.float32),), {}, sig, []), [np.ones(2, np.float32), np.zeros(2, np.float32)], sig, [])
    assert isinstance(out, tuple) and len(out) == 2
    one = Boundary.identity(Signature(sig.inputs, sig.outputs[:1]))
    assert isinstance(one.unbind(one.bind((np.ones(2, np.float32),), {}, sig, []), [np.ones(2, np.float32)], sig, []), np.ndarray)
    assert Boundary.from_json(b.to_json()) == b


def test_results_come_back_as_declared_and_float64_is_refused_where_a_target_cannot_compute_it():
    from cuvil_mlir.core.diagnostics import CompileError
    from cuvil_mlir.targets import parse_targets

    sig = Signature((TensorSpec((2,), "float64"),), (TensorSpec((2,), "float64"), TensorSpec((), "float32")))
    back = as_declared([np.ones(2, np.float64), np.ones(1, np.float32)], sig)
    assert str(back[0].dtype) == "float64" and back[1].shape == ()
    check_dtypes(sig, parse_targets("cpu")[0])  # cpu computes float64: no error
    with pytest.raises(CompileError, match=r"target 'vulkan' does not compute float64 \(input 0, output 0"):
        check_dtypes(sig, parse_targets("vulkan")[0])
    check_dtypes(Signature((TensorSpec((2,), "float32"),), ()), parse_targets("vulkan")[0])

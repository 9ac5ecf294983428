"""The ONNX frontend (cuvil_mlir/compiler/importers/onnx.py): compile .onnx files and ModelProtos,
the patterns firing on what torch-mlir's ONNX lowering makes of Gemm, MatMul+Add, Conv +
BatchNormalization, LayerNormalization and torch.onnx's attention, external data, symbolic
dims, and the errors for bad input. Models are built with onnx.helper (tiny, milliseconds);
the references are onnxruntime where installed and onnx's own evaluator otherwise. The HF
models exported with torch.onnx.export are @slow."""

from __future__ import annotations

import math
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import cuvil_mlir  # noqa: E402
from cuvil_mlir.compiler.importers.onnx import SymbolicDimError, UnsupportedOnnxOp  # noqa: E402,F401
from cuvil_mlir.core.diagnostics import CuvilError, ImportError_  # noqa: E402
from cuvil_mlir.eval.onnx_reference import OnnxReference  # noqa: E402

RNG = np.random.default_rng(0)


def _value(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _model(nodes, inputs, outputs, initializers=None, opset=17):
    graph = helper.make_graph(nodes, "g", [_value(*i) for i in inputs], [_value(*o) for o in outputs],
                              [numpy_helper.from_array(np.asarray(a), k) for k, a in (initializers or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _fired(compiled) -> dict:
    return {p: dict(c) for p, c in compiled.metadata["patterns_fired"].items() if p != "lower-cuvil-to-torch"}


def _check(model, *inputs, rtol=1e-5):
    """Compile for the CPU, run, compare with the reference; returns the compiled model."""
    compiled = cuvil_mlir.compile(model)
    got = compiled(*inputs)
    got = got if isinstance(got, (tuple, list)) else (got,)
    ref = OnnxReference(model)(*inputs)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        r = r.numpy()
        np.testing.assert_allclose(np.asarray(g), r, rtol=rtol, atol=rtol * max(1.0, float(np.abs(r).max())))
    return compiled


# ---------------------------------------------------------------------------------------
# Linear layers, norms, convs, attention


def test_gemm_relu_is_one_linear_with_epilogue():
    w, b = _rand(16, 8), _rand(16)
    model = _model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1, name="fc"),
                    helper.make_node("Relu", ["y"], ["z"], name="act")],
                   [("x", [4, 8])], [("z", [4, 16])], {"w": w, "b": b})
    fired = _fired(_check(model, _rand(4, 8)))
    assert fired["raise-torch-to-cuvil"] == {"mm": 1}
    assert fired["fuse-linear-epilogue"] == {"bias_add": 1, "relu_epilogue": 1}


def test_gemm_with_alpha_keeps_its_add():
    """alpha scales the product, not the bias: the bias must not be folded into the linear."""
    model = _model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], alpha=0.5, name="fc")],
                   [("x", [4, 8])], [("y", [4, 16])], {"w": _rand(8, 16), "b": _rand(16)})
    fired = _fired(_check(model, _rand(4, 8)))
    assert "bias_add" not in fired.get("fuse-linear-epilogue", {})


def test_matmul_add_layernorm_gelu_3d():
    """torch.onnx's nn.Linear on a 3-D input (MatMul by [K, N] + Add), LayerNormalization, Gelu."""
    model = _model([helper.make_node("MatMul", ["x", "w"], ["mm"], name="fc/MatMul"),
                    helper.make_node("Add", ["mm", "b"], ["y"], name="fc/Add"),
                    helper.make_node("Gelu", ["y"], ["g"], name="act"),
                    helper.make_node("LayerNormalization", ["g", "s", "t"], ["z"], axis=-1, epsilon=1e-5, name="ln")],
                   [("x", [2, 3, 8])], [("z", [2, 3, 16])],
                   {"w": _rand(8, 16), "b": _rand(16), "s": _rand(16), "t": _rand(16)}, opset=20)
    fired = _fired(_check(model, _rand(2, 3, 8)))
    assert fired["raise-torch-to-cuvil"] == {"matmul": 1, "layer_norm": 1}
    assert fired["fuse-linear-epilogue"] == {"bias_add": 1, "gelu_epilogue": 1}


def test_matmul_of_two_inputs_is_not_a_linear():
    model = _model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
                   [("a", [2, 3, 8]), ("b", [8, 5])], [("y", [2, 3, 5])])
    fired = _fired(_check(model, _rand(2, 3, 8), _rand(8, 5)))
    assert "matmul" not in fired.get("raise-torch-to-cuvil", {})


def test_layernorm_whose_statistics_are_used_stays_native():
    """Mean and InvStdDev outputs used: not rewritten to aten.layer_norm (nothing raised), still right."""
    model = _model([helper.make_node("LayerNormalization", ["x", "s", "t"], ["y", "mean", "rstd"], axis=-1, name="ln")],
                   [("x", [2, 6])], [("y", [2, 6]), ("mean", [2, 1]), ("rstd", [2, 1])], {"s": _rand(6), "t": _rand(6)})
    compiled = _check(model, _rand(2, 6), rtol=1e-4)
    assert "layer_norm" not in _fired(compiled).get("raise-torch-to-cuvil", {})


def test_conv_batchnorm_relu_folds():
    c = 4
    model = _model([helper.make_node("Conv", ["x", "w", "cb"], ["c"], pads=[1, 1, 1, 1], name="conv"),
                    helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["y"], epsilon=1e-5, name="bn"),
                    helper.make_node("Relu", ["y"], ["z"], name="relu")],
                   [("x", [1, 3, 8, 8])], [("z", [1, c, 8, 8])],
                   {"w": _rand(c, 3, 3, 3), "cb": _rand(c), "s": _rand(c), "bb": _rand(c), "m": _rand(c),
                    "v": RNG.uniform(0.5, 2, c).astype(np.float32)})
    fired = _fired(_check(model, _rand(1, 3, 8, 8), rtol=1e-4))
    assert fired["fuse-conv-bn"] == {"conv_bn": 1}
    assert fired["fuse-linear-epilogue"] == {"relu_epilogue": 1}


def _torch_onnx_attention(b, h, length, d, *, mask: str):
    """Attention as torch.onnx writes scaled_dot_product_attention (opset 18+): q and kᵀ each
    scaled by sqrt(scale), kᵀ as Reshape/Transpose/Reshape, an additive mask, Softmax, a NaN
    guard (IsNaN -> Where 0), MatMul by v. ``mask``: "causal" (a constant -inf triangle) or
    "input" (an additive float mask input)."""
    s = np.array(1.0 / math.sqrt(math.sqrt(d)), np.float32)
    init = {"s": s, "flat": np.array([b * h, length, d], np.int64), "back": np.array([b, h, d, length], np.int64),
            "zero": np.array(0.0, np.float32)}
    inputs = [("q", [b, h, length, d]), ("k", [b, h, length, d]), ("v", [b, h, length, d])]
    if mask == "causal":
        init["mask"] = np.triu(np.full((length, length), -np.inf, np.float32), 1)
    else:
        inputs.append(("mask", [b, 1, length, length]))
    nodes = [helper.make_node("Mul", ["q", "s"], ["qs"]),
             helper.make_node("Reshape", ["k", "flat"], ["kf"]),
             helper.make_node("Transpose", ["kf"], ["kft"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["kft", "back"], ["kt"]),
             helper.make_node("Mul", ["kt", "s"], ["kts"]),
             helper.make_node("MatMul", ["qs", "kts"], ["scores"]),
             helper.make_node("Add", ["scores", "mask"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
             helper.make_node("IsNaN", ["p"], ["nan"]),
             helper.make_node("Where", ["nan", "zero", "p"], ["pg"]),
             helper.make_node("MatMul", ["pg", "v"], ["out"])]
    return _model(nodes, inputs, [("out", [b, h, length, d])], init, opset=18)


def test_torch_onnx_attention_is_fused_causal():
    b, h, length, d = 2, 3, 5, 8
    model = _torch_onnx_attention(b, h, length, d, mask="causal")
    compiled = _check(model, _rand(b, h, length, d), _rand(b, h, length, d), _rand(b, h, length, d), rtol=1e-4)
    assert _fired(compiled)["fuse-attention"] == {"attention": 1}
    fused = cuvil_mlir.lower(model, stage="fused")
    assert "is_causal = true" in fused and "cuvil.attention" in fused


def test_nan_guarded_attention_with_an_input_mask_is_left_alone():
    """An input mask may remove a whole row; there softmax is NaN and the guard gives 0, which
    cuvil.attention would not: nothing fuses, and a fully masked row still comes out 0."""
    b, h, length, d = 1, 2, 4, 8
    model = _torch_onnx_attention(b, h, length, d, mask="input")
    mask = np.zeros((b, 1, length, length), np.float32)
    mask[..., 2, :] = -np.inf  # query 2 sees no key
    compiled = cuvil_mlir.compile(model)
    assert "fuse-attention" not in _fired(compiled)
    q, k, v = (_rand(b, h, length, d) for _ in range(3))
    out = np.asarray(compiled(q, k, v, mask))
    assert np.all(out[:, :, 2] == 0) and np.isfinite(out).all()


# ---------------------------------------------------------------------------------------
# Files: external data, symbolic dims


def _linear_model(k=8, n=4, batch=2):
    return _model([helper.make_node("MatMul", ["x", "w"], ["mm"], name="fc"),
                   helper.make_node("Add", ["mm", "b"], ["y"], name="bias")],
                  [("x", [batch, 3, k])], [("y", [batch, 3, n])], {"w": _rand(k, n), "b": _rand(n)})


def test_external_data_is_read_from_the_model_folder(tmp_path):
    model = _linear_model()
    w, b = (numpy_helper.to_array(t) for t in model.graph.initializer)  # onnx.save moves the data out of `model`
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="m.data",
              size_threshold=0)
    assert (tmp_path / "m.data").stat().st_size >= (8 * 4 + 4) * 4
    x = _rand(2, 3, 8)
    compiled = cuvil_mlir.compile(str(path))
    np.testing.assert_allclose(np.asarray(compiled(x)), x @ w + b, rtol=1e-5, atol=1e-5)
    assert _fired(compiled)["raise-torch-to-cuvil"] == {"matmul": 1}  # the weight was read: a constant

    (tmp_path / "m.data").rename(tmp_path / "elsewhere.data")
    with pytest.raises(ImportError_, match=r"external data of tensor '(w|b)' is not there: .*m\.data"):
        cuvil_mlir.compile(str(path))


def test_external_parameters_hold_the_initializers_outside_the_module(tmp_path, monkeypatch):
    """params="external" (or "auto" above its threshold): the initializers of at least
    MIN_PARAMETER_BYTES are parameters named after them, their data out of the IR (a view of
    the model's tensor), in the package's archive; the results are the inline ones, small
    initializers (the bias) stay literals, and the weight is still read (the linear fires)."""
    from cuvil_mlir.core import params

    k, n = 64, 32  # W: 8 KiB, a parameter; b: 128 B, a literal
    model = _linear_model(k=k, n=n)
    x = _rand(2, 3, k)
    inline = cuvil_mlir.compile(model, params="inline")
    external = cuvil_mlir.compile(model, params="external")
    assert inline.parameters is None and external.parameters is not None
    np.testing.assert_array_equal(np.asarray(external(x)), np.asarray(inline(x)))
    assert _fired(external)["raise-torch-to-cuvil"] == {"matmul": 1}
    entries = external.metadata["parameters"]["entries"]
    (key,) = entries  # the linear's weight: W transposed, derived from the initializer 'w' by its recipe
    assert params.recipe_keys(entries[key]["recipe"]) == {"w"}
    assert len(external.modules[0].vmfb) < len(inline.modules[0].vmfb) - k * n * 4 // 2
    external.save(tmp_path / "m.cuvilpkg")
    np.testing.assert_array_equal(np.asarray(cuvil_mlir.load(tmp_path / "m.cuvilpkg")(x)), np.asarray(inline(x)))
    monkeypatch.setattr(params, "EXTERNAL_FROM_BYTES", 1024)  # "auto": external from that many bytes of initializers
    assert cuvil_mlir.compile(model).parameters is not None


def test_checking_and_shape_inference_hold_no_copy_of_the_weights(tmp_path):
    """load_model checks and infers on a weightless copy (its big initializers stubbed): reading a
    model with 256 MiB of weights (external data) peaks near 2x them (the data file read into the
    model), not ~5x (the checker and shape inference serialize what they are given); the shapes
    and the weights arrive whole."""
    import subprocess
    import sys

    k = 8192
    w = np.ones((k, k), np.float32)  # 256 MiB
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")], [("x", [2, k])], [("y", [2, k])], {"w": w})
    del w
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.data")
    del model
    code = """
import sys
from cuvil_mlir.compiler.importers.onnx import load_model
def peak_mib():  # VmHWM: the resident peak since the last reset
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM")) / 1024
open("/proc/self/clear_refs", "w").write("5")  # reset it: what the imports above touched does not count
base = peak_mib()
m = load_model(sys.argv[1])
t = m.proto.graph.initializer[0]
assert len(t.raw_data) == 8192 * 8192 * 4 and t.data_location == 0
assert [d.dim_value for d in m.proto.graph.output[0].type.tensor_type.shape.dim] == [2, 8192]
print(peak_mib() - base)
"""
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m.onnx")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert float(r.stdout.split()[-1]) < 2.5 * 256, r.stdout  # MiB: ~2x (reading the data file copies once), was ~5x


def test_big_external_tensors_are_mapped_from_their_file(tmp_path):
    """A model with external data compiled with external parameters: its big initializer never
    enters the proto; the parameter is a view of the mapped data file (the archive writer copies
    from the file); inline, the same numbers. A data file cut short is named with its tensor."""
    from cuvil_mlir.compiler.importers.onnx import load_model
    from cuvil_mlir.core import params

    k, n = 512, 256  # W: 131072 elements, above the rewrites' FOLD_LIMIT: left in its file
    model = _linear_model(k=k, n=n)
    w, b = (numpy_helper.to_array(t) for t in model.graph.initializer)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="m.data", size_threshold=0)
    lazy = load_model(str(path), lazy_weights=True)
    (stays,) = [t for t in lazy.proto.graph.initializer if t.name == "w"]
    assert stays.data_location == TensorProto.EXTERNAL and not stays.raw_data and lazy.data_dir == tmp_path
    x = _rand(2, 3, k)
    external = cuvil_mlir.compile(str(path), params="external")
    np.testing.assert_allclose(np.asarray(external(x)), x @ w + b, rtol=1e-4, atol=1e-4)
    # the linear's weight is W transposed, computed when read from the source 'w': a view of the file
    assert params.file_region(external.parameters.arrays._sources["w"]) == (str(tmp_path / "m.data"), 0)
    inline = cuvil_mlir.compile(str(path), params="inline")
    np.testing.assert_array_equal(np.asarray(inline(x)), np.asarray(external(x)))
    proto = onnx.load(str(path), load_external_data=False)  # w's data said to start near the file's end
    (entry,) = [e for t in proto.graph.initializer if t.name == "w" for e in t.external_data if e.key == "offset"] or [None]
    if entry is None:
        entry = next(t for t in proto.graph.initializer if t.name == "w").external_data.add()
        entry.key = "offset"
    entry.value = str((tmp_path / "m.data").stat().st_size - 64)
    onnx.save(proto, str(path))
    with pytest.raises(CuvilError, match=r"tensor 'w' runs past the end of .*m\.data"):
        cuvil_mlir.compile(str(path), params="external")


def test_models_above_protobufs_limit_take_file_based_shape_inference(monkeypatch):
    """Above 2 GB, checking and shape inference go through files (the limit lowered here)."""
    from cuvil_mlir.compiler.importers import onnx as onnx_importer

    monkeypatch.setattr(onnx_importer, "_PROTOBUF_LIMIT", 64)
    model = _linear_model()
    w, b = (numpy_helper.to_array(t) for t in model.graph.initializer)
    loaded = onnx_importer.load_model(model)
    assert {v.name for v in loaded.proto.graph.value_info} == {"mm"}  # inferred
    np.testing.assert_array_equal(numpy_helper.to_array(model.graph.initializer[0]), w)  # the caller's model intact
    assert all(t.data_location == 0 for t in loaded.proto.graph.initializer)
    x = _rand(2, 3, 8)
    np.testing.assert_allclose(np.asarray(cuvil_mlir.compile(loaded)(x)), x @ w + b, rtol=1e-5, atol=1e-5)


def test_symbolic_batch_dim_is_dynamic():
    model = _linear_model(batch="batch")
    compiled = cuvil_mlir.compile(model)
    assert compiled.metadata["signature"]["inputs"][0]["shape"] == [-1, 3, 8]
    ref = OnnxReference(model)
    for batch in (1, 5):
        x = _rand(batch, 3, 8)
        np.testing.assert_allclose(np.asarray(compiled(x)), ref(x)[0].numpy(), rtol=1e-5, atol=1e-5)


def test_symbolic_dims_without_inputs_are_named_by_compare():
    from cuvil_mlir.eval.harness import compare

    with pytest.raises(CuvilError, match=r"input 'x' of the ONNX model has the symbolic dim 'batch' \(dim 0\)"):
        compare(_linear_model(batch="batch"), repetitions=0)


def test_scalar_inputs_stay_scalars():
    """0-d inputs (Clip's min and max) reach the module as 0-d arrays."""
    model = _model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"], name="clip")],
                   [("x", [3, 4]), ("lo", []), ("hi", [])], [("y", [3, 4])])
    compiled = cuvil_mlir.compile(model)
    assert [s["shape"] for s in compiled.metadata["signature"]["inputs"]] == [[3, 4], [], []]
    x = _rand(3, 4)
    np.testing.assert_array_equal(np.asarray(compiled(x, np.array(-0.5, np.float32), np.array(0.5, np.float32))), np.clip(x, -0.5, 0.5))


# ---------------------------------------------------------------------------------------
# Bad input


def test_corrupt_file_is_named(tmp_path):
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\x08\x07\x12\x04junk" + bytes(range(256)))
    with pytest.raises(ImportError_, match=r"broken\.onnx is not an ONNX model"):
        cuvil_mlir.compile(str(path))


def test_missing_file_is_named(tmp_path):
    with pytest.raises(CuvilError, match="model file not found: .*nothere.onnx"):
        cuvil_mlir.compile(str(tmp_path / "nothere.onnx"))


def test_invalid_graph_is_named():
    model = _model([helper.make_node("Relu", ["x", "x"], ["y"], name="bad_relu")], [("x", [2])], [("y", [2])])
    with pytest.raises(ImportError_, match="not a valid ONNX model"):
        cuvil_mlir.compile(model)


def test_unsupported_op_names_op_node_and_opset():
    """An op torch-mlir's ONNX lowering does not have: the error names it, its node and the opset."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="ok"),
             helper.make_node("Frobnicate", ["r"], ["y"], domain="com.example", name="the_node")]
    graph = helper.make_graph(nodes, "g", [_value("x", [2, 3])], [_value("y", [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with pytest.raises(UnsupportedOnnxOp, match=r"does not support ONNX op Frobnicate at opset 17: Frobnicate \(node 'the_node'\)") as e:
        cuvil_mlir.compile(model)
    assert e.value.ops == [("Frobnicate", "the_node")]


def test_op_in_an_unsupported_form_names_op_and_node():
    """An op torch-mlir lowers only in some forms (a bicubic GridSample here): named with its node."""
    model = _model([helper.make_node("GridSample", ["x", "grid"], ["y"], mode="cubic", name="the_grid_sample")],
                   [("x", [1, 1, 4, 4]), ("grid", [1, 3, 3, 2])], [("y", [1, 1, 3, 3])], opset=22)
    with pytest.raises(UnsupportedOnnxOp, match=r"cannot convert ONNX op GridSample \(node 'the_grid_sample'\) in this form "
                                                r"at opset 22"):
        cuvil_mlir.compile(model)


# ---------------------------------------------------------------------------------------
# ONNX-level rewrites where torch-mlir or IREE fail (cuvil_mlir/compiler/importers/onnx_rewrites.py)


def _check_with_onnx_reference(model, *inputs, rtol=1e-5):
    """As _check, against onnx's own evaluator (onnxruntime may lack the newest opsets)."""
    compiled = cuvil_mlir.compile(model)
    got = compiled(*inputs)
    got = got if isinstance(got, (tuple, list)) else (got,)
    ref = OnnxReference(model, runtime="onnx.reference")(*inputs)
    for g, r in zip(got, ref):
        r = r.numpy()
        np.testing.assert_allclose(np.asarray(g), r, rtol=rtol, atol=rtol * max(1.0, float(np.abs(r).max())))
    return compiled


def test_function_op_torch_mlir_lacks_is_expanded_into_its_body():
    """RMSNormalization (opset 23) has no torch-mlir lowering; ONNX defines it as a function:
    expanded, its axes (computed by Range over the input's rank) folded, it compiles and
    matches. The plain baseline (torch-mlir alone) still names the op."""
    from cuvil_mlir.compiler.pipeline import Options, compile_plain_iree

    model = _model([helper.make_node("RMSNormalization", ["x", "w"], ["y"], axis=-1, epsilon=1e-5)],
                   [("x", [2, 3, 8])], [("y", [2, 3, 8])], {"w": _rand(8)}, opset=23)
    _check_with_onnx_reference(model, _rand(2, 3, 8))
    with pytest.raises(UnsupportedOnnxOp, match="RMSNormalization"):
        compile_plain_iree(model, (), Options(target="cpu"))


def test_context_dependent_function_with_an_absent_optional_input():
    """Attention (opset 23) is a context-dependent function; an absent optional input (the
    mask here, before past key/value) gets an empty type when its body is instantiated."""
    b, h, q, kv, d = 1, 2, 3, 4, 8
    model = _model([helper.make_node("Attention", ["q", "k", "v", ""], ["y"], is_causal=1)],
                   [("q", [b, h, q, d]), ("k", [b, h, kv, d]), ("v", [b, h, kv, d])], [("y", [b, h, q, d])], opset=23)
    _check_with_onnx_reference(model, _rand(b, h, q, d), _rand(b, h, kv, d), _rand(b, h, kv, d))


def test_function_op_of_a_preview_domain_is_expanded():
    """FlexAttention is a function of the ai.onnx.preview domain (torch-mlir has no lowering):
    its body is found in the node's own domain."""
    from onnx.reference import ReferenceEvaluator

    graph = helper.make_graph([helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview")], "g",
                              [_value("q", [1, 2, 3, 8]), _value("k", [1, 2, 4, 8]), _value("v", [1, 2, 4, 8])],
                              [_value("y", [1, 2, 3, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)])
    q, k, v = _rand(1, 2, 3, 8), _rand(1, 2, 4, 8), _rand(1, 2, 4, 8)
    got = np.asarray(cuvil_mlir.compile(model)(q, k, v))
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"q": q, "k": k, "v": v})[0], rtol=1e-5, atol=1e-5)


def test_bitcast_reinterprets_the_bits():
    """BitCast (opset 26; torch-mlir has no lowering) becomes aten.view.dtype: float32 bits as
    int32 and back, as numpy's view."""
    model = _model([helper.make_node("BitCast", ["x"], ["i"], to=TensorProto.INT32),
                    helper.make_node("Add", ["i", "one"], ["j"]),
                    helper.make_node("BitCast", ["j"], ["y"], to=TensorProto.FLOAT)],
                   [("x", [2, 3])], [("i", [2, 3], TensorProto.INT32), ("y", [2, 3])], {"one": np.array(1, np.int32)}, opset=26)
    x = _rand(2, 3)
    i, y = cuvil_mlir.compile(model)(x)
    np.testing.assert_array_equal(np.asarray(i), x.view(np.int32))
    np.testing.assert_array_equal(np.asarray(y), (x.view(np.int32) + 1).view(np.float32))


@pytest.mark.parametrize("op, attrs, groups", [
    ("Adam", {"alpha": 0.95, "beta": 0.85, "epsilon": 0.01, "norm_coefficient": 0.001}, 4),
    ("Adagrad", {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.001}, 3),
    ("Momentum", {"alpha": 0.95, "beta": 0.1, "mode": "nesterov", "norm_coefficient": 0.001}, 3),
])
def test_optimizer_ops_are_written_out(op, attrs, groups):
    """The training domain's optimizers (a model without a default-domain opset; torch-mlir
    has no lowering): their formulas in default-domain ops, two tensors at once, as onnx's
    reference computes them."""
    from onnx.reference import ReferenceEvaluator

    names = [f"{k}{i}" for k in "XGVH"[:groups] for i in (1, 2)]
    outs = [f"{k}{i}_new" for k in ("X", "V", "H")[:groups - 1] for i in (1, 2)]
    graph = helper.make_graph([helper.make_node(op, ["R", "T", *names], outs, domain="ai.onnx.preview.training", **attrs)], "g",
                              [_value("R", []), _value("T", [], TensorProto.INT64)] + [_value(n, [3]) for n in names],
                              [_value(n, [3]) for n in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.preview.training", 1)])
    feeds = {"R": np.array(0.1, np.float32), "T": np.array(3, np.int64), **{n: np.abs(_rand(3)) for n in names}}
    got = cuvil_mlir.compile(model)(*feeds.values())
    for g, r in zip(got, ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(np.asarray(g), r, rtol=1e-5, atol=1e-6)


def test_ml_binarizer_and_array_feature_extractor_are_written_out():
    graph = helper.make_graph([helper.make_node("Binarizer", ["x"], ["b"], domain="ai.onnx.ml", threshold=0.5),
                               helper.make_node("ArrayFeatureExtractor", ["b", "i"], ["y"], domain="ai.onnx.ml")], "g",
                              [_value("x", [3, 4]), _value("i", [2], TensorProto.INT64)], [_value("y", [3, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 3)])
    x, i = _rand(3, 4), np.array([3, 1], np.int64)
    np.testing.assert_array_equal(np.asarray(cuvil_mlir.compile(model)(x, i)), (x > 0.5).astype(np.float32)[:, [3, 1]])


def test_loss_iree_cannot_compile_is_expanded_where_iree_failed():
    """NegativeLogLikelihoodLoss: torch-mlir lowers it to an op IREE cannot legalize; the
    model is imported again with the node IREE named expanded into its function body."""
    model = _model([helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"], reduction="mean")],
                   [("x", [3, 5]), ("t", [3], TensorProto.INT64)], [("y", [])], opset=22)
    _check_with_onnx_reference(model, _rand(3, 5), np.array([0, 4, 2], np.int64))


def test_reduction_with_runtime_axes_takes_the_axes_its_shapes_imply():
    """ReduceSum whose axes are an input (IREE cannot compile a runtime axes list): the
    static shapes [3, 4, 5] -> [3, 1, 5] say axis 1."""
    model = _model([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)],
                   [("x", [3, 4, 5]), ("axes", [1], TensorProto.INT64)], [("y", [3, 1, 5])], opset=18)
    x = _rand(3, 4, 5)
    got = cuvil_mlir.compile(model)(x, np.array([1], np.int64))
    np.testing.assert_allclose(np.asarray(got), x.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("source, result, keepdims, axes", [
    ((3, 4, 5), (3, 1, 5), True, [1]),
    ((3, 1, 5), (1, 1, 1), True, [0, 1, 2]),
    ((3, 4), (3, 4), True, None),            # a no-op or a reduction over nothing: undecided
    ((3, 4, 5), (3, 5), False, [1]),
    ((3, 2, 2), (3, 2), False, None),        # dim 1 or dim 2: different values
    ((3, 1, 5), (3, 5), False, [1]),
    ((2, 1, 1), (2, 1), False, [1]),         # either size-1 dim: the same values
    ((3, 4), (6,), False, None),
])
def test_implied_reduction_axes(source, result, keepdims, axes):
    from cuvil_mlir.compiler.importers.onnx_rewrites import _implied_axes

    assert _implied_axes(source, result, keepdims) == axes


def test_fold_constants_replaces_an_if_with_a_known_condition_by_its_branch():
    from cuvil_mlir.compiler.importers.onnx_rewrites import fold_constants

    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [_value("t", [2])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [_value("e", [2])])
    nodes = [helper.make_node("Size", ["x"], ["n"]),
             helper.make_node("Equal", ["n", "two"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    model = _model(nodes, [("x", [2])], [("y", [2])], {"two": np.array(2, np.int64)})
    folded = fold_constants(onnx.shape_inference.infer_shapes(model))
    assert [n.op_type for n in folded.graph.node] == ["Constant", "Constant", "Relu", "Identity"]
    x = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(np.asarray(cuvil_mlir.compile(model)(x)), [0.0, 2.0])


# ---------------------------------------------------------------------------------------
# Narrow element types (float8, float4, int4, int2) carried in float32 / int8


_F8_PROBES = np.array([0.0, -0.0, 0.4789, 0.4803, 1.0625, 3.1416, -17.3, 0.0019, 2.0 ** -8, 2.0 ** -10, 0.75 * 2.0 ** -9,
                       240.0, 250.0, 448.0, 460.0, 464.0, 470.0, 57344.0, 61440.0, 1e6, -1e6, np.inf, -np.inf, np.nan],
                      np.float32)


@pytest.mark.parametrize("to, name", [(TensorProto.FLOAT8E4M3FN, "float8_e4m3fn"), (TensorProto.FLOAT8E4M3FNUZ, "float8_e4m3fnuz"),
                                      (TensorProto.FLOAT8E5M2, "float8_e5m2"), (TensorProto.FLOAT8E5M2FNUZ, "float8_e5m2fnuz"),
                                      (TensorProto.FLOAT4E2M1, "float4_e2m1fn")])
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_a_float8_or_float4_format_rounds_as_the_reference(to, name, saturate):
    """Cast to float8 / float4: torch-mlir's importer or its Cast lowering has no such type; the
    cast becomes its rounding in float32 ops (nearest even at the format's precision,
    subnormals, saturation or the format's overflow value, NaN kept), the result is carried
    as float32 and returned in the ml_dtypes type: bit for bit onnx's reference."""
    import ml_dtypes

    if to == TensorProto.FLOAT4E2M1 and not saturate:
        pytest.skip("float4 has no saturate attribute (it always saturates)")
    attrs = {"saturate": saturate} if to != TensorProto.FLOAT4E2M1 else {}
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=to, **attrs)], [("x", [len(_F8_PROBES)])],
                   [("y", [len(_F8_PROBES)], to)], opset=23)
    compiled = cuvil_mlir.compile(model)
    got = compiled(_F8_PROBES)
    assert got.dtype == np.dtype(getattr(ml_dtypes, name))
    from onnx.reference import ReferenceEvaluator

    ref = ReferenceEvaluator(model).run(None, {"x": _F8_PROBES})[0]
    np.testing.assert_array_equal(got.astype(np.float32), ref.astype(np.float32))
    assert compiled.user_signature.outputs[0].dtype == name


def test_float8_input_dequantized():
    """A float8 input: the caller passes ml_dtypes' float8 array, the function takes it as float32."""
    import ml_dtypes

    model = _model([helper.make_node("DequantizeLinear", ["x", "s"], ["y"])],
                   [("x", [5], TensorProto.FLOAT8E4M3FN), ("s", [])], [("y", [5])], opset=21)
    x = np.array([0, 0.5, 1, 448, -104], np.float32).astype(ml_dtypes.float8_e4m3fn)
    compiled = cuvil_mlir.compile(model)
    np.testing.assert_array_equal(compiled(x, np.array(2.0, np.float32)), [0, 1, 2, 896, -208])
    with pytest.raises(CuvilError, match="expected dtype float8_e4m3fn, got float32"):
        compiled(x.astype(np.float32), np.array(2.0, np.float32))


def test_int4_quantize_per_axis_and_cast_back(tmp_path):
    """QuantizeLinear to int4 along an axis (rounding half to even, the zero point, the int4
    range), then a Cast of the int4 values to float: int4 is carried as int8 (IREE cannot size
    i4 buffers). The carried dtypes survive a package's save and load."""
    import ml_dtypes

    model = _model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=0),
                    helper.make_node("Cast", ["q"], ["f"], to=TensorProto.FLOAT)],
                   [("x", [3, 4]), ("s", [3]), ("z", [3], TensorProto.INT4)], [("q", [3, 4], TensorProto.INT4), ("f", [3, 4])],
                   opset=21)
    x = np.array([[0, 2.5, 4.8, 8.6], [-30, -20, 6, 9], [12, 15, 16, 40]], np.float32)
    s, z = np.array([2, 3, 4], np.float32), np.array([1, 1, 1], ml_dtypes.int4)
    expected = np.clip(np.round(x / s[:, None]) + 1, -8, 7)
    compiled = cuvil_mlir.compile(model)
    q, f = compiled(x, s, z)
    assert q.dtype == np.dtype(ml_dtypes.int4)
    np.testing.assert_array_equal(q.astype(np.float32), expected)
    np.testing.assert_array_equal(f, expected)
    compiled.save(tmp_path / "q.cuvilpkg")
    q2, _ = cuvil_mlir.load(tmp_path / "q.cuvilpkg")(x, s, z)
    assert q2.dtype == np.dtype(ml_dtypes.int4)


def test_cast_to_int4_truncates_and_zeroes_what_does_not_fit():
    """Cast float -> int4 / uint4 as onnx's reference (numpy / ml_dtypes) converts: truncation
    toward zero, 0 for a value outside the format."""
    import ml_dtypes

    x = np.array([-9, -8, -7.5, -0.5, 0, 2.7, 7, 7.9, 8, 15, 16], np.float32)
    for to, dtype, lo, hi in ((TensorProto.INT4, ml_dtypes.int4, -8, 7), (TensorProto.UINT4, ml_dtypes.uint4, 0, 15)):
        model = _model([helper.make_node("Cast", ["x"], ["y"], to=to)], [("x", [len(x)])], [("y", [len(x)], to)], opset=21)
        got = cuvil_mlir.compile(model)(x)
        t = np.trunc(x)
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got.astype(np.float32), np.where((t >= lo) & (t <= hi), t, 0))


# ---------------------------------------------------------------------------------------
# Shape operands given at run time, bound to their example values


def test_runtime_reduction_axes_are_bound_to_the_example_value():
    """ReduceSum over [3, 2, 2] -> [3, 2] with runtime axes: the shapes cannot say which dim
    (1 or 2), and IREE cannot compile runtime axes. Compiled with example inputs, the axes
    input is bound to its value; a call with other axes is an error saying so."""
    model = _model([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
                   [("x", [3, 2, 2]), ("axes", [1], TensorProto.INT64)], [("y", [3, 2])], opset=18)
    x = _rand(3, 2, 2)
    for axis in (1, 2):
        axes = np.array([axis], np.int64)
        compiled = cuvil_mlir.compile(model, (x, axes))
        np.testing.assert_allclose(np.asarray(compiled(x, axes)), x.sum(axis=axis), rtol=1e-5, atol=1e-6)
    with pytest.raises(CuvilError, match=r"bound to \[2\] \(int64\).*got \[1\]"):
        compiled(x, np.array([1], np.int64))


def test_runtime_slice_bounds_and_pads_are_bound():
    """Slice with runtime starts / ends / axes / steps, then Pad with runtime pads (edge mode):
    both become static with their example values; the data input stays an input."""
    nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["s"]),
             helper.make_node("Pad", ["s", "pads"], ["y"], mode="edge")]
    model = _model(nodes, [("x", [6, 5]), ("starts", [2], TensorProto.INT64), ("ends", [2], TensorProto.INT64),
                           ("axes", [2], TensorProto.INT64), ("steps", [2], TensorProto.INT64), ("pads", [4], TensorProto.INT64)],
                   [("y", [None, None])], opset=18)
    x = _rand(6, 5)
    args = (x, np.array([1, 0], np.int64), np.array([5, 5], np.int64), np.array([0, 1], np.int64), np.array([2, 2], np.int64),
            np.array([1, 0, 0, 2], np.int64))
    got = cuvil_mlir.compile(model, args)(*args)
    np.testing.assert_allclose(np.asarray(got), np.pad(x[1:5:2, 0:5:2], ((1, 0), (0, 2)), mode="edge"), rtol=1e-6)


def test_compress_condition_is_bound_and_becomes_a_gather():
    """Compress: its condition decides the result's shape (IREE cannot compile the dynamic
    form); bound to its example value it is a Gather of the indices it selects."""
    model = _model([helper.make_node("Compress", ["x", "c"], ["y"], axis=1)],
                   [("x", [3, 4]), ("c", [4], TensorProto.BOOL)], [("y", [3, None])], opset=11)
    x, c = _rand(3, 4), np.array([True, False, True, True])
    compiled = cuvil_mlir.compile(model, (x, c))
    np.testing.assert_array_equal(np.asarray(compiled(x, c)), x[:, c])
    with pytest.raises(CuvilError, match="bound to"):
        compiled(x, ~c)


def test_training_dropout_with_ratio_zero_is_an_identity():
    """Dropout in training mode with ratio 0 (both inputs bound): the input and an all-true mask."""
    model = _model([helper.make_node("Dropout", ["x", "r", "t"], ["y", "m"])],
                   [("x", [2, 3]), ("r", []), ("t", [], TensorProto.BOOL)], [("y", [2, 3]), ("m", [2, 3], TensorProto.BOOL)],
                   opset=13)
    args = (_rand(2, 3), np.array(0.0, np.float32), np.array(True))
    y, m = cuvil_mlir.compile(model, args)(*args)
    np.testing.assert_array_equal(np.asarray(y), args[0])
    assert np.asarray(m).all()


@pytest.mark.parametrize("inverse, onesided", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_dft_is_matrix_products(inverse, onesided):
    """DFT (torch-mlir: aten.fft_* IREE cannot compile, or nothing at opset 19) as constant
    matrices of its real-linear map, computed in float64: numpy's FFT, real or complex input,
    one-sided, inverse (the one-sided inverse a real signal of length 2 (n - 1))."""
    n, parts = (6, 2) if inverse else (8, 1)
    out_n = 2 * (n - 1) if inverse and onesided else n // 2 + 1 if onesided else n
    model = _model([helper.make_node("DFT", ["x"], ["y"], axis=1, inverse=inverse, onesided=onesided)],
                   [("x", [2, n, 3, parts])], [("y", [2, out_n, 3, 1 if inverse and onesided else 2])], opset=19)
    x = _rand(2, n, 3, parts)
    got = np.asarray(cuvil_mlir.compile(model)(x))
    z = x[..., 0].astype(np.float64) + (1j * x[..., 1] if parts == 2 else 0)
    if inverse:
        ref = np.fft.irfft(z, axis=1)[..., None] if onesided else np.fft.ifft(z, axis=1)
    else:
        ref = np.fft.fft(z, axis=1)[:, : n // 2 + 1 if onesided else n]
    if ref.dtype.kind == "c":
        ref = np.stack([ref.real, ref.imag], axis=-1)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attrs, inputs", [
    ({"mode": "linear", "antialias": 1}, {"scales": np.array([1, 1, 0.6, 0.6], np.float32)}),
    ({"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}, {"scales": np.array([1, 1, 2, 2], np.float32)}),
    ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 10.0},
     {"roi": np.array([0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7], np.float32), "sizes": np.array([1, 1, 3, 3], np.int64)}),
    ({"mode": "nearest", "axes": [3, 2], "keep_aspect_ratio_policy": "not_larger"}, {"sizes": np.array([8, 7], np.int64)}),
])
def test_resize_forms_torch_mlir_lacks_are_their_linear_map(attrs, inputs):
    """Resize forms torch-mlir's lowering rejects (antialias, cubic exclude_outside,
    tf_crop_and_resize with extrapolation, axes with keep_aspect_ratio_policy): with their
    parameters bound, a small one is the map onnx's reference computes (a MatMul plus the
    extrapolated constant, or a Gather for nearest)."""
    from onnx.reference import ReferenceEvaluator

    names = ["x", "roi" if "roi" in inputs else "", "scales" if "scales" in inputs else "", "sizes" if "sizes" in inputs else ""]
    while not names[-1]:
        names.pop()
    types = {"roi": TensorProto.FLOAT, "scales": TensorProto.FLOAT, "sizes": TensorProto.INT64}
    model = _model([helper.make_node("Resize", names, ["y"], **attrs)],
                   [("x", [1, 2, 4, 4])] + [(k, list(v.shape), types[k]) for k, v in inputs.items()], [("y", [None] * 4)], opset=19)
    x = _rand(1, 2, 4, 4)
    args = (x, *inputs.values())
    got = np.asarray(cuvil_mlir.compile(model, args)(*args))
    ref = ReferenceEvaluator(model).run(None, {"x": x, **inputs})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_optional_tensor_input_is_taken_as_a_tensor():
    """An optional-tensor input (the signature takes tensors): a call passes the tensor;
    OptionalHasElement is true, OptionalGetElement the tensor."""
    optional = helper.make_value_info("o", helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [4])))
    graph = helper.make_graph([helper.make_node("OptionalHasElement", ["o"], ["has"]),
                               helper.make_node("OptionalGetElement", ["o"], ["t"]), helper.make_node("Neg", ["t"], ["y"])],
                              "g", [optional], [_value("has", [], TensorProto.BOOL), _value("y", [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    x = _rand(4)
    has, y = cuvil_mlir.compile(model)(x)
    assert bool(np.asarray(has)) is True
    np.testing.assert_array_equal(np.asarray(y), -x)


def test_sequences_of_a_known_length_are_their_tensors():
    """A sequence input (a list of arrays; its length fixed by the example inputs), a
    SequenceInsert at a bound position, SequenceMap and SplitToSequence: held as tensors,
    the sequence outputs come back as lists. Compiling without example inputs names the input."""
    body = helper.make_graph([helper.make_node("Add", ["e", "t"], ["o"])], "body", [_value("e", [2]), _value("t", [2])],
                             [_value("o", [2])])
    seq = lambda name: helper.make_tensor_sequence_value_info(name, TensorProto.FLOAT, [2])  # noqa: E731
    nodes = [helper.make_node("SequenceInsert", ["s", "t", "pos"], ["s2"]),
             helper.make_node("SequenceMap", ["s2", "t"], ["mapped"], body=body),
             helper.make_node("SplitToSequence", ["t"], ["pieces"], axis=0, keepdims=0)]
    graph = helper.make_graph(nodes, "g", [seq("s"), _value("t", [2]), _value("pos", [], TensorProto.INT64)],
                              [seq("mapped"), helper.make_tensor_sequence_value_info("pieces", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    s, t, pos = [_rand(2), _rand(2)], _rand(2), np.array(0, np.int64)
    mapped, pieces = cuvil_mlir.compile(model, (s, t, pos))(s, t, pos)
    assert isinstance(mapped, list) and len(mapped) == 3 and len(pieces) == 2
    for got, ref in zip(mapped, [t + t, s[0] + t, s[1] + t]):
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-6)
    np.testing.assert_array_equal([np.asarray(p) for p in pieces], list(t))
    with pytest.raises(ImportError_, match="input 's' of the ONNX model is a sequence"):
        cuvil_mlir.compile(model)


def test_shape_operand_inputs_are_those_used_only_as_shape_operands():
    from cuvil_mlir.compiler.importers.onnx_rewrites import shape_operand_inputs

    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Add", ["r", "shape_too"], ["a"]),
             helper.make_node("Reshape", ["a", "shape_too"], ["y"])]
    model = _model(nodes, [("x", [6]), ("shape", [2], TensorProto.INT64), ("shape_too", [2], TensorProto.INT64)], [("y", [None, None])])
    assert shape_operand_inputs(model) == ["shape"]  # shape_too is also data (Add)


def test_fold_constants_evaluates_a_loop_whose_inputs_are_known():
    """A Loop whose trip count, condition and initial values are known (and whose body reads
    only known outer values) is evaluated; Constant's value_int(s) count as known."""
    from cuvil_mlir.compiler.importers.onnx_rewrites import fold_constants

    body = helper.make_graph([helper.make_node("Identity", ["cond"], ["cond_out"]),
                              helper.make_node("Add", ["acc", "step"], ["acc_out"])], "body",
                             [_value("i", [], TensorProto.INT64), _value("cond", [], TensorProto.BOOL),
                              _value("acc", [], TensorProto.INT64)],
                             [_value("cond_out", [], TensorProto.BOOL), _value("acc_out", [], TensorProto.INT64)])
    nodes = [helper.make_node("Constant", [], ["n"], value_int=4), helper.make_node("Constant", [], ["step"], value_int=3),
             helper.make_node("Loop", ["n", "true", "zero"], ["total"], body=body),
             helper.make_node("Reshape", ["total", "one"], ["total_1d"]),
             helper.make_node("Expand", ["x", "total_1d"], ["y"])]
    model = _model(nodes, [("x", [1])], [("y", [None])], {"true": np.array(True), "zero": np.array(0, np.int64),
                                                          "one": np.array([1], np.int64)})
    folded = fold_constants(onnx.shape_inference.infer_shapes(model))
    assert "Loop" not in [n.op_type for n in folded.graph.node]
    np.testing.assert_array_equal(np.asarray(cuvil_mlir.compile(model)(np.ones(1, np.float32))), np.ones(12, np.float32))


# ---------------------------------------------------------------------------------------
# Old opsets, Scan


def test_old_opset_forms_torch_mlir_lacks_are_converted_to_a_newer_opset():
    """ReduceMin with axes as an attribute (opset 11; torch-mlir lowers the opset-18 form with
    an axes input) and Unsqueeze-11: onnx's version converter rewrites the model to opset 21."""
    from cuvil_mlir.compiler.pipeline import Options, compile_plain_iree

    model = _model([helper.make_node("ReduceMin", ["x"], ["m"], axes=[1], keepdims=0),
                    helper.make_node("Unsqueeze", ["m"], ["y"], axes=[0])], [("x", [3, 4])], [("y", [1, 3])], opset=11)
    x = _rand(3, 4)
    np.testing.assert_array_equal(np.asarray(cuvil_mlir.compile(model)(x)), x.min(axis=1)[None])
    with pytest.raises(UnsupportedOnnxOp, match="ReduceMin"):
        compile_plain_iree(model, (), Options(target="cpu"))


@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 1)])
def test_cumprod_is_a_chain_of_products(exclusive, reverse):
    """CumProd (torch-mlir has no lowering) with its runtime axis bound: the running product
    of the slices along the axis (exclusive: shifted, starting at 1; reverse: from the end)."""
    model = _model([helper.make_node("CumProd", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)],
                   [("x", [3, 4]), ("axis", [], TensorProto.INT32)], [("y", [3, 4])], opset=26)
    x, axis = _rand(3, 4), np.array(1, np.int32)
    got = np.asarray(cuvil_mlir.compile(model, (x, axis))(x, axis))
    v = x[:, ::-1] if reverse else x
    ref = np.cumprod(v, axis=1)
    if exclusive:
        ref = np.concatenate([np.ones((3, 1), np.float32), ref[:, :-1]], axis=1)
    np.testing.assert_allclose(got, ref[:, ::-1] if reverse else ref, rtol=1e-5, atol=1e-6)


_COMPUTED_SPLIT = """
import numpy as np
from onnx import TensorProto, helper
import cuvil_mlir
nodes = [helper.make_node("Shape", ["x"], ["n"], start=1, end=2), helper.make_node("Sub", ["n", "n"], ["zero"]),
         helper.make_node("Concat", ["n", "zero"], ["sizes"], axis=0),
         helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=1), helper.make_node("Neg", ["a"], ["y"])]
graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
x = np.arange(16, dtype=np.float32).reshape(2, 8)
np.testing.assert_array_equal(np.asarray(cuvil_mlir.compile(model)(x)), -x)
print("ok")
"""


def test_split_with_computed_sizes_is_folded_before_the_import():
    """Split whose sizes are computed ([8, 8 - 8] from Shape, as RotaryEmbedding's body does)
    crashes torch-mlir's lowering (a segfault, in a subprocess here): the sizes are folded
    to constants before the first import."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", _COMPUTED_SPLIT], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


@pytest.mark.parametrize("opset, reverse", [(9, 0), (17, 1)])
def test_scan_with_a_static_length_is_unrolled(opset, reverse):
    """Scan: a running sum over the rows of x (backward when the input direction says so),
    its state and its outputs stacked along axis 1. torch-mlir has no Scan-9 lowering, and
    lowers Scan-16+ as if axes were 0 and directions forward (wrong values): both unrolled."""
    body = helper.make_graph([helper.make_node("Add", ["acc", "row"], ["acc_out"]),
                              helper.make_node("Mul", ["acc_out", "row"], ["elem"])], "body",
                             [_value("acc", [2]), _value("row", [2])], [_value("acc_out", [2]), _value("elem", [2])])
    scan = helper.make_node("Scan", ["init", "x"], ["total", "stacked"], body=body, num_scan_inputs=1,
                            scan_input_directions=[reverse], scan_output_axes=[1])
    model = _model([scan], [("init", [2]), ("x", [4, 2])], [("total", [2]), ("stacked", [2, 4])], opset=opset)
    init, x = _rand(2), _rand(4, 2)
    got = cuvil_mlir.compile(model)(init, x)
    acc, elems = init, []
    for row in (x[::-1] if reverse else x):
        acc = acc + row
        elems.append(acc * row)
    for g, r in zip(got, (acc, np.stack(elems, axis=1))):
        np.testing.assert_allclose(np.asarray(g), r, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------
# The CLI


class _Result:
    def __init__(self, code, out, err):
        self.returncode, self.stdout, self.stderr = code, out, err


def _cuvil(capsys, *args):
    from cuvil_mlir import cli

    capsys.readouterr()
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return _Result(code, captured.out, captured.err)


def test_cli_compile_emit_and_run(tmp_path, capsys):
    path, pkg = tmp_path / "lin.onnx", tmp_path / "lin.cuvilpkg"
    onnx.save(_linear_model(), str(path))
    r = _cuvil(capsys, "compile", str(path), "--emit", "fused")
    assert r.returncode == 0, r.stderr
    assert '"cuvil.linear"' in r.stdout
    r = _cuvil(capsys, "compile", str(path), "-o", str(pkg))
    assert r.returncode == 0, r.stderr
    assert "matmul x1" in r.stdout and pkg.exists()
    y = cuvil_mlir.load(str(pkg))(_rand(2, 3, 8))
    assert np.asarray(y).shape == (2, 3, 4)


def test_cli_compile_corrupt_onnx_is_one_line(tmp_path, capsys):
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"not protobuf at all \xff\xfe")
    r = _cuvil(capsys, "compile", str(path), "-o", str(tmp_path / "x.cuvilpkg"))
    assert r.returncode == 1
    assert r.stderr.startswith("cuvil: error: ") and "junk.onnx is not an ONNX model" in r.stderr
    assert "Traceback" not in r.stderr


def test_cli_compare_checks_against_the_onnx_reference(tmp_path, capsys):
    path, report = tmp_path / "lin.onnx", tmp_path / "r.json"
    onnx.save(_linear_model(), str(path))
    r = _cuvil(capsys, "compare", str(path), "--configs", "default,plain-iree", "--repetitions", "0", "--json", str(report), "-q")
    assert r.returncode == 0, r.stderr + r.stdout
    import json

    data = json.loads(report.read_text())
    assert data["reference"]["name"].startswith(("onnxruntime", "onnx.reference"))
    assert {e["status"] for e in data["entries"]} == {"ok"}
    assert not [e for e in data["entries"] if e["kind"] == "competitor"]


# ---------------------------------------------------------------------------------------
# Exported models: torch.onnx.export and torch.export make the same Cuvil ops


def _fused_ops(model, args=()) -> dict:
    import re
    from collections import Counter

    text = cuvil_mlir.lower(model, args, stage="fused")
    ops = Counter()
    for op, attrs in re.findall(r'"cuvil\.(\w+)"\([^)]*\)\s*(\{[^}]*\})?', text):
        detail = re.search(r'(?:activation|kind) = "(\w+)"', attrs or "")
        ops[f"{op}[{detail.group(1)}]" if detail and detail.group(1) != "none" else op] += 1
    return dict(ops)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["transformer", "gpt2", "bert"])
def test_torch_onnx_export_makes_the_same_cuvil_ops(name, tmp_path):
    """examples/models.py's models exported with torch.onnx.export: the same fused Cuvil ops as
    their torch.export form (linear epilogues, norms, attention), and the same numbers."""
    pytest.importorskip("onnxscript")
    import contextlib
    import io

    import models
    import torch

    model, inputs = models.E2E_MODELS[name]()
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    path = tmp_path / f"{name}.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(model.eval(), inputs, str(path), dynamo=True)
    assert _fused_ops(str(path)) == _fused_ops(model, inputs)
    with torch.no_grad():
        ref = model(*inputs)
    ref = (ref if isinstance(ref, torch.Tensor) else ref[0]).numpy()
    got = np.asarray(cuvil_mlir.compile(str(path))(*[x.numpy() for x in inputs]))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))

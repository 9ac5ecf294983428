"""Packages of modules only: parameters supplied at load time (an .irpa or arrays) and checked
against what the modules need; derived weights rebuilt from their recipes; parameters
generated from a seed (cuvil_mlir/runtime/parameters.py, core/params.py recipes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import cuvil_mlir
import models
from cuvil_mlir.core import params
from cuvil_mlir.core.diagnostics import CuvilError, PackageError
from cuvil_mlir.runtime import session
from cuvil_mlir.runtime.parameters import generate, source_keys


def _llama():
    """A one-layer HF Llama wide enough (d=1024) that its norm weights are parameters too: Q/K/V
    and gate/up get concatenated (fuse-horizontal, fuse-gated-ffn) and norm weights widened."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=1024, num_hidden_layers=1, num_attention_heads=8, num_key_value_heads=2,
                         intermediate_size=512, vocab_size=64, attn_implementation="sdpa", bos_token_id=0, eos_token_id=0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)  # distinct norm weights: distinct derived keys

    return models.LogitsOnly(model).eval(), (torch.randint(0, 64, (1, 8)),)


@pytest.fixture(scope="module")
def llama():
    model, args = _llama()
    compiled = cuvil_mlir.compile(model, args, params="external")
    return model, args, compiled


@pytest.fixture(scope="module")
def saved(llama, tmp_path_factory):
    model, args, compiled = llama
    folder = tmp_path_factory.mktemp("supplied")
    compiled.save(folder / "m.cuvilpkg", parameters="none")
    compiled.save_parameters(folder / "m.irpa")
    return folder


def test_a_package_without_parameters_loads_with_them_supplied(llama, saved):
    model, args, compiled = llama
    expected = compiled(*args)
    with pytest.raises(PackageError, match="saved without its parameters.*parameters="):
        cuvil_mlir.load(saved / "m.cuvilpkg")
    from_file = cuvil_mlir.load(saved / "m.cuvilpkg", parameters=saved / "m.irpa")
    assert torch.equal(from_file(*args), expected)
    from_arrays = cuvil_mlir.load(saved / "m.cuvilpkg", parameters=dict(compiled.parameters.arrays))
    assert torch.equal(from_arrays(*args), expected)
    # the modules-only package is small: no weights inside
    assert (saved / "m.cuvilpkg").stat().st_size < compiled.parameters.nbytes / 4


def test_archive_entries_carry_dtype_and_shape(llama, saved):
    _, _, compiled = llama
    found = session.archive_entries(saved / "m.irpa")
    key, array = next(iter(compiled.parameters.arrays.items()))
    assert found[key] == (array.nbytes, f"{array.dtype.name}[{','.join(map(str, array.shape))}]")


def test_missing_and_wrong_parameters_are_named(llama, saved, tmp_path):
    _, _, compiled = llama
    arrays = dict(compiled.parameters.arrays)
    key = "model.model.embed_tokens.weight"
    missing = {k: v for k, v in arrays.items() if k != key}
    with pytest.raises(PackageError, match=f"{key}: missing"):
        cuvil_mlir.load(saved / "m.cuvilpkg", parameters=missing)
    wrong_shape = {**arrays, key: arrays[key][:32]}
    with pytest.raises(PackageError, match=rf"{key}: float32\[32,1024\] given, the module needs float32\[64,1024\]"):
        cuvil_mlir.load(saved / "m.cuvilpkg", parameters=wrong_shape)
    # the same bytes under another dtype: only the archive's entry metadata can tell
    wrong_dtype = {**arrays, key: arrays[key].view(np.float16)}
    session.write_parameter_archive(wrong_dtype, tmp_path / "bad.irpa")
    with pytest.raises(PackageError, match=rf"{key}: the archive holds float16\[64,2048\], the module needs float32\[64,1024\]"):
        cuvil_mlir.load(saved / "m.cuvilpkg", parameters=tmp_path / "bad.irpa")
    session.write_parameter_archive(missing, tmp_path / "short.irpa")
    with pytest.raises(PackageError, match=f"(?s)1 problem.*{key}: missing"):
        cuvil_mlir.load(saved / "m.cuvilpkg", parameters=tmp_path / "short.irpa")
    with pytest.raises(PackageError, match="no such file"):
        cuvil_mlir.load(saved / "m.cuvilpkg", parameters=tmp_path / "nothing.irpa")


def test_recipes_rebuild_every_derived_weight_bit_for_bit(llama):
    model, args, compiled = llama
    description = compiled.metadata["parameters"]
    derived = {k: e for k, e in description["entries"].items() if k.startswith("derived.")}
    ops = {e["recipe"]["input"]["op"] for e in derived.values()}
    assert len(derived) == 2 and ops == {"concat"}  # Q/K/V and gate/up, concatenated
    state = {k: params.torch_array(v) for k, v in model.state_dict().items()}
    for key, entry in derived.items():
        assert np.array_equal(params.evaluate(entry["recipe"], state.__getitem__), compiled.parameters.arrays[key]), key
    assert set(source_keys(description)) <= set(state)


def test_fp16_policy_records_its_casts():
    model, args = _llama()
    compiled = cuvil_mlir.compile(model, args, params="external", precision="fp16")
    state = {k: params.torch_array(v) for k, v in model.state_dict().items()}
    entries = compiled.metadata["parameters"]["entries"]
    assert all("recipe" in e for k, e in entries.items() if k.startswith("derived."))
    for key, entry in entries.items():
        if "recipe" in entry:
            assert np.array_equal(params.evaluate(entry["recipe"], state.__getitem__), compiled.parameters.arrays[key]), key


def test_generated_parameters_run_and_match_torch(llama, saved):
    model, args, compiled = llama
    entries, sources = generate(compiled.metadata["parameters"], seed=7)
    again, _ = generate(compiled.metadata["parameters"], seed=7)
    assert all(np.array_equal(entries[k], again[k]) for k in entries)
    other, _ = generate(compiled.metadata["parameters"], seed=8)
    assert not np.array_equal(entries["model.lm_head.weight"], other["model.lm_head.weight"])
    reference, _ = _llama()
    reference.load_state_dict({k: torch.from_numpy(v) for k, v in sources.items()}, strict=False)
    run = cuvil_mlir.load(saved / "m.cuvilpkg", parameters=entries)
    got, want = run(*args), reference(*args)
    assert not torch.allclose(want, model(*args))  # new weights, new logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_a_derived_weight_without_recipe_cannot_be_generated():
    description = {"entries": {"derived.abc": {"shape": [4, 4], "dtype": "float32"}}, "sources": {}}
    with pytest.raises(PackageError, match="derived.abc.*ship the archive"):
        source_keys(description)
    with pytest.raises(ValueError, match="unknown parameter recipe op 'fold'"):
        params.evaluate({"op": "fold", "input": {"op": "param", "key": "w"}}, {"w": np.ones(2)}.__getitem__)


def test_distinct_sources_keep_distinct_derived_keys():
    """Equal bytes from different sources (all-ones norm weights, widened) get separate keys."""
    store = params.ParameterStore()
    ones = np.ones(2048, np.float16)
    a = store.add_derived(ones.astype(np.float32), params.cast(params.param("n0"), np.float32))
    b = store.add_derived(ones.astype(np.float32), params.cast(params.param("n1"), np.float32))
    c = store.add_derived(ones.astype(np.float32), params.cast(params.param("n0"), np.float32))
    assert a != b and a == c


def test_stub_weights_compile_without_values_and_run_with_generated_ones(tmp_path):
    """The path of a model too big to hold here: weights as stubs (no memory), modules compiled,
    package saved without parameters, parameters generated and supplied at load time."""
    model, args = _llama()
    params.stub_weights(model)
    assert all(p.stride() == (0,) * p.dim() for p in model.parameters())
    compiled = cuvil_mlir.compile(model, args, params="external")
    with pytest.raises(PackageError, match="stub weights"):
        compiled(*args)
    with pytest.raises(PackageError, match="stub weights"):
        compiled.save(tmp_path / "x.cuvilpkg")
    compiled.save(tmp_path / "m.cuvilpkg", parameters="none")
    description = compiled.metadata["parameters"]
    assert sum(k.startswith("derived.") for k in description["entries"]) == 2  # Q/K/V, gate/up: recipes over stubs
    entries, sources = generate(description, seed=3)
    reference, _ = _llama()
    reference.load_state_dict({k: torch.from_numpy(v) for k, v in sources.items()}, strict=False)
    run = cuvil_mlir.load(tmp_path / "m.cuvilpkg", parameters=entries)
    torch.testing.assert_close(run(*args), reference(*args), rtol=1e-4, atol=1e-4)


def test_a_pass_that_reads_stub_values_refuses():
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 64, 3), torch.nn.BatchNorm2d(64)).eval()
    params.stub_weights(model, min_bytes=1024)
    with pytest.raises(CuvilError, match="computed a weight from the values of stub weights"):
        cuvil_mlir.compile(model, (torch.randn(1, 8, 8, 8),), params="external")


def test_a_weight_derived_from_a_small_literal_carries_its_bytes():
    """fp16 norm weights of 1024 (2 KiB) stay literals; widened to f32 (4 KiB) they become derived
    parameters whose recipe holds the literal's bytes."""
    model, args = _llama()
    compiled = cuvil_mlir.compile(model.half(), args, params="external")
    entries = compiled.metadata["parameters"]["entries"]
    derived = {k: e for k, e in entries.items() if k.startswith("derived.")}
    assert all("recipe" in e for e in derived.values())
    from_values = [k for k, e in derived.items() if "'op': 'value'" in str(e["recipe"])]
    assert from_values  # the widened norm weights
    state = {k: params.torch_array(v) for k, v in model.state_dict().items()}
    for key in derived:
        assert np.array_equal(params.evaluate(entries[key]["recipe"], state.__getitem__), compiled.parameters.arrays[key]), key

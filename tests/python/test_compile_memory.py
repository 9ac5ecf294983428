"""What a compile with external parameters holds (benchmarks/params.py measures the memory):
no second copy of the weights (derived ones are recipes, computed when read), no weight inside
the modules, and a .pt2's weights mapped from the file and copied file to file into the archive."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest
import torch

import cuvil_mlir
import models
from cuvil_mlir.compiler.importers import pt2
from cuvil_mlir.compiler.pipeline import Options, compile_program
from cuvil_mlir.core import params
from cuvil_mlir.runtime.parameters import ARCHIVE_NAME

transformers = pytest.importorskip("transformers")


def _llama():
    """One HF Llama layer, d=512: Q/K/V and gate/up are concatenated by passes (derived weights)."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=512, num_hidden_layers=1, num_attention_heads=8, num_key_value_heads=2,
                                      intermediate_size=1024, vocab_size=256, attn_implementation="sdpa",
                                      bos_token_id=0, eos_token_id=0)
    model = transformers.LlamaForCausalLM(config)

    return models.LogitsOnly(model).eval(), (torch.randint(0, 256, (1, 8)),)


def _weights(model) -> list[np.ndarray]:
    return [p.detach().numpy() for p in model.parameters()]


@pytest.fixture(scope="module")
def llama():
    model, args = _llama()
    return model, args, compile_program(model, args, Options(params="external"))


def test_compiled_parameters_hold_no_copy_of_the_weights(llama):
    """Every array the compiled program holds is the model's own weight (a view); the weights
    passes derive by rearranging (Q/K/V, gate/up concatenated) are recipes computed when read."""
    model, _, compiled = llama
    arrays = compiled.parameters.arrays
    computed = [k for k in arrays if arrays.is_computed(k)]
    assert computed and all(k.startswith("derived.") for k in computed)
    weights = _weights(model)
    for key in arrays:
        if not arrays.is_computed(key):
            assert any(np.shares_memory(arrays[key], w) for w in weights), f"{key} is a copy"
    assert compiled.parameters.nbytes == sum(a.nbytes for _, a in arrays.items())  # counted without computing
    weight_bytes = sum(w.nbytes for w in weights)
    assert len(compiled.modules[0].vmfb) < 0.2 * weight_bytes


def test_the_lowered_module_holds_no_weight(llama):
    model, args, _ = llama
    text = compile_program(model, args, Options(params="external"), emit="lowered", elide_weights=False).text
    assert len(text) < 0.05 * sum(w.nbytes for w in _weights(model))


def test_computed_weights_are_written_and_run_bit_for_bit(llama, tmp_path):
    model, args, compiled = llama
    inline = compile_program(model, args, Options(params="inline"))
    compiled.save(tmp_path / "m.cuvilpkg")
    loaded = cuvil_mlir.load(tmp_path / "m.cuvilpkg")
    for a, b in zip(inline(*args), loaded(*args)):
        assert torch.equal(a, b)
    archive = bytes(loaded.parameters.view())
    for key, array in compiled.parameters.arrays.items():
        assert archive.find(array.tobytes()) >= 0, key  # the archive holds each computed weight's bytes


def test_pt2_weights_are_mapped_and_copied_file_to_file(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 64)).eval()
    x = torch.randn(2, 256)
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, (x,)), path)

    program = pt2.load(path)
    big = program.state_dict["0.weight"]
    region = params.file_region(params.torch_array(big))
    assert region is not None and region[0] == str(path)
    with open(path, "rb") as f:
        f.seek(region[1])
        assert f.read(big.numel() * 4) == big.detach().numpy().tobytes()
    assert params.file_region(params.torch_array(program.state_dict["2.bias"])) is None  # small: torch's copy

    copied = []  # the weights the archive writer took from the file
    real = params.file_region
    monkeypatch.setattr(params, "file_region", lambda a: copied.append(real(a)) or copied[-1])
    compiled = cuvil_mlir.compile(program, params="external")
    compiled.save(tmp_path / "mapped.cuvilpkg")
    assert sum(r is not None for r in copied) >= 2  # both linears' weights
    monkeypatch.undo()
    plain = cuvil_mlir.compile(torch.export.load(str(path)), params="external")  # torch's copies, in memory
    plain.save(tmp_path / "plain.cuvilpkg")
    archives = [zipfile.ZipFile(tmp_path / name).read(ARCHIVE_NAME) for name in ("mapped.cuvilpkg", "plain.cuvilpkg")]
    assert archives[0] == archives[1]
    with torch.no_grad():
        np.testing.assert_allclose(cuvil_mlir.load(tmp_path / "mapped.cuvilpkg")(x).numpy(), model(x).numpy(),
                                   rtol=1e-5, atol=1e-5)


def test_a_pt2_record_that_does_not_match_keeps_torchs_copy(tmp_path):
    """A weight whose record is not the bytes torch loaded (here: changed after loading) stays unmapped."""
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 512).eval()
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(2, 256),)), path)
    program = pt2.load(path, mapped=False)
    with torch.no_grad():
        program.state_dict["weight"][0, 0] += 1.0
    assert pt2.map_weights(program, path) == 0
    assert params.file_region(params.torch_array(program.state_dict["weight"])) is None

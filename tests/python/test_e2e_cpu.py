"""End to end on the CPU: real models through import -> Cuvil -> IREE -> runtime, against PyTorch."""

import re

import numpy as np
import pytest
import torch

import cuvil_mlir
import models

pytestmark = pytest.mark.slow

# float32 relative error budgets (max abs error / max abs reference value).
TOLERANCE = {"mlp": 1e-5, "cnn": 1e-5, "transformer": 1e-4, "gpt2": 1e-4, "bert": 1e-4, "llama": 1e-4}
# The Cuvil ops each model's "cuvil" stage must show.
EXPECTED_OPS = {
    "mlp": {"cuvil.linear"},
    "cnn": {"cuvil.conv2d", "cuvil.linear"},
    "transformer": {"cuvil.linear", "cuvil.attention", "cuvil.norm"},
    "gpt2": {"cuvil.linear", "cuvil.attention", "cuvil.norm"},
    "bert": {"cuvil.linear", "cuvil.attention", "cuvil.norm"},
    "llama": {"cuvil.linear", "cuvil.attention"},  # its RMSNorm is written by hand (a fusion pattern's job)
}


def rel_err(got, ref) -> float:
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


@pytest.fixture(scope="module", params=sorted(models.E2E_MODELS))
def compiled(request):
    model, args = models.E2E_MODELS[request.param]()
    return request.param, model, args, cuvil_mlir.compile(model, args, target="cpu")


def test_numerics_match_pytorch(compiled):
    name, model, args, cm = compiled
    with torch.no_grad():
        ref = model(*args)
    got = cm(*args)
    assert isinstance(got, torch.Tensor) and got.dtype == ref.dtype and got.shape == ref.shape
    assert rel_err(got, ref) <= TOLERANCE[name]


def test_fresh_inputs_and_numpy(compiled):
    """Not only the example input: new values, passed as numpy, come back as numpy."""
    name, model, args, cm = compiled
    torch.manual_seed(1)
    fresh = [torch.randint_like(a, 0, 250) if not a.is_floating_point() else torch.randn_like(a) * 3 for a in args]
    with torch.no_grad():
        ref = model(*fresh).numpy()
    got = cm(*[a.numpy() for a in fresh])
    assert isinstance(got, np.ndarray)
    assert rel_err(got, ref) <= TOLERANCE[name]


def test_patterns_fired_recorded(compiled):
    name, _, _, cm = compiled
    raised = cm.patterns_fired.get("raise-torch-to-cuvil", {})
    lowered = cm.patterns_fired.get("lower-cuvil-to-torch", {})
    assert sum(raised.values()) > 0
    # every Cuvil op that was created was lowered again before IREE
    assert sum(lowered.values()) >= len(EXPECTED_OPS[name])


def test_package_round_trip(compiled, tmp_path):
    name, model, args, cm = compiled
    path = tmp_path / f"{name}.cuvilpkg"
    cm.save(path)
    loaded = cuvil_mlir.load(path)
    assert loaded.metadata["signature"] == cm.metadata["signature"]
    assert loaded.metadata["versions"]["iree-base-compiler"]
    np.testing.assert_array_equal(loaded(*args).numpy(), cm(*args).numpy())


@pytest.mark.parametrize("name", sorted(models.E2E_MODELS))
def test_cuvil_stage_shows_cuvil_ops_and_lowered_has_none(name):
    model, args = models.E2E_MODELS[name]()
    cuvil_ir = cuvil_mlir.lower(model, args, stage="cuvil")
    ops = set(re.findall(r'"(cuvil\.[a-z0-9_]+)"', cuvil_ir))
    assert EXPECTED_OPS[name] <= ops
    lowered = cuvil_mlir.lower(model, args, stage="lowered")
    assert "cuvil." not in lowered
    torch_ir = cuvil_mlir.lower(model, args, stage="torch")
    assert "cuvil." not in torch_ir and "torch.aten" in torch_ir


def test_pt2_file_and_exported_program(tmp_path):
    model, args = models.mlp(batch=3)
    program = torch.export.export(model, args)
    path = tmp_path / "mlp.pt2"
    torch.export.save(program, path)
    with torch.no_grad():
        ref = model(*args)
    for source in (program, str(path), path):
        got = cuvil_mlir.compile(source, target="cpu")(*args)
        assert rel_err(got, ref) <= 1e-5


def test_opt_level_zero_also_correct():
    model, args = models.mlp(batch=2)
    cm = cuvil_mlir.compile(model, args, opt_level=0)
    assert "--iree-opt-level=O0" in cm.modules[0].iree_flags
    with torch.no_grad():
        assert rel_err(cm(*args), model(*args)) <= 1e-5


def test_multiple_outputs_and_inputs():
    class TwoInTwoOut(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 4)

        def forward(self, x, y):
            return self.a(x) + y, torch.relu(y)

    model = TwoInTwoOut().eval()
    args = (torch.randn(3, 8), torch.randn(3, 4))
    cm = cuvil_mlir.compile(model, args)
    got = cm(*args)
    assert isinstance(got, tuple) and len(got) == 2
    with torch.no_grad():
        ref = model(*args)
    for g, r in zip(got, ref):
        assert rel_err(g, r) <= 1e-5


def test_hf_causal_lm_with_cache_on_compiles_as_a_plain_forward():
    """A transformers causal LM as loaded (config.use_cache on) returns a DynamicCache, which
    torch.export cannot flatten: cuvil exports it with use_cache off (the logits alone) and puts
    the config back. Its fp16 form also fuses the tanh GELU through the widened addmm's cast."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=1, n_embd=64, n_head=4, vocab_size=128, n_positions=32)
    model = transformers.GPT2LMHeadModel(config).eval()
    assert model.config.use_cache is True
    ids = torch.randint(0, 128, (1, 16), generator=torch.Generator().manual_seed(0))
    cm = cuvil_mlir.compile(model, (ids,), target="cpu")
    assert model.config.use_cache is True
    with torch.no_grad():
        want = model(ids, use_cache=False).logits
    got = cm(ids)
    got = got[0] if isinstance(got, (list, tuple)) else got
    got = got["logits"] if isinstance(got, dict) else getattr(got, "logits", got)
    assert rel_err(np.asarray(got), want.numpy()) < 1e-4
    from cuvil_mlir.compiler.pipeline import Options, compile_program

    fused = compile_program(model.half(), (ids,), Options(target="cpu"), emit="fused")
    assert 'activation = "gelu_tanh"' in fused.text

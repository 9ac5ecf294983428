"""compile_causal_lm: prefill_first + prefill + decode over a device-resident KV cache
(docs/generation.md).

Small configs with random weights; greedy tokens must equal transformers' generate (eager,
fp32) for 64 new tokens on the CPU.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import cuvil_mlir
from cuvil_mlir.core.diagnostics import ImportError_, InputError
from cuvil_mlir.runtime.generation import CausalLM
from cuvil_mlir.runtime.session import Session, available_devices

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

BATCH, MAX_SEQ, CHUNK, NEW = 2, 80, 8, 64


def _config(arch: str):
    common = dict(vocab_size=8192, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128)
    if arch == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=8192, n_embd=64, n_layer=2, n_head=4, n_positions=128))
    if arch == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
    if arch == "mistral":
        return transformers.MistralForCausalLM(transformers.MistralConfig(**common, sliding_window=None))
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common))


@pytest.fixture(scope="module", params=["gpt2", "llama", "mistral", "qwen2"])
def compiled_lm(request):
    torch.manual_seed(0)
    model = _config(request.param).eval()
    model.generation_config.eos_token_id = None  # random weights: compare all 64 tokens
    return request.param, model, cuvil_mlir.compile_causal_lm(model, max_seq_len=MAX_SEQ, batch=BATCH, prefill_len=CHUNK)


def _calls(monkeypatch) -> list[str]:
    """The names of the functions the session invokes from now on (waited on, or queued:
    ``decode$async``)."""
    called = []

    def spy(name, suffix):
        original = getattr(Session, name)

        def call(self, function, args, **kwargs):
            called.append(function + suffix)
            return original(self, function, args, **kwargs)
        monkeypatch.setattr(Session, name, call)

    spy("invoke_resident", "")
    spy("invoke_async", "$async")
    return called


# longer than a prefill chunk (prefill_first at 0, prefill at 5: a last chunk overlapping the first), shorter (padded),
# one chunk, three chunks (the middle one at 8)
@pytest.mark.parametrize("prompt_len,prefills", [(13, [("prefill_first", 0), ("prefill", 5)]), (5, [("prefill_first", 0)]),
                                                 (8, [("prefill_first", 0)]),
                                                 (17, [("prefill_first", 0), ("prefill", 8), ("prefill", 9)])])
def test_greedy_tokens_equal_transformers(compiled_lm, prompt_len, prefills, monkeypatch):
    arch, model, lm = compiled_lm
    if prompt_len in (8, 17) and arch not in ("gpt2", "llama"):
        pytest.skip("two architectures are enough")
    ids = torch.randint(0, 8192, (BATCH, prompt_len), generator=torch.Generator().manual_seed(prompt_len))
    new = min(NEW, MAX_SEQ - prompt_len)
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False)
    assert lm.prefill_calls(prompt_len) == prefills
    called = _calls(monkeypatch)
    assert lm.device_greedy  # the steps return their greedy tokens: passed on the device, calls queued ahead
    got = lm.generate(ids, max_new_tokens=new)
    assert called == [function for function, _ in prefills] + ["decode$async"] * (new - 1)
    assert got.shape == (BATCH, prompt_len + new)
    assert torch.equal(got, expected), f"{arch}: first difference at {(got != expected).nonzero()[:1].tolist()}"
    called.clear()
    monkeypatch.setattr(lm, "device_greedy", False)  # each token read back, chosen on the host and uploaded
    assert torch.equal(lm.generate(ids, max_new_tokens=new), expected)
    assert called == [function for function, _ in prefills] + ["decode"] * (new - 1)


def test_one_module_three_functions_fused(compiled_lm):
    arch, model, lm = compiled_lm
    assert lm.functions == ("prefill_first", "prefill", "decode") == tuple(lm.metadata["causal_lm"]["functions"])
    fired = lm.patterns_fired
    assert fired["raise-torch-to-cuvil"]["sdpa"] == 3 * 2  # one cuvil.attention per layer in each function
    if arch != "gpt2":  # GPT-2's c_attn is one matmul already
        assert fired["fuse-horizontal"]["horizontal_linears"] == 3 * 2  # q, k, v as one linear
        assert fired["fuse-gated-ffn"]["gated_ffn"] == 3 * 2  # gate and up as one
    weight_bytes = sum(t.numel() * 4 for t in model.state_dict().values())  # tied embeddings counted twice
    assert len(lm.modules[0].vmfb) < 1.5 * weight_bytes  # one copy of the weights for the three functions, not three


def test_padding_after_the_prompt_does_not_change_it(compiled_lm):
    """A prompt shorter than a chunk is padded at its end: with causal attention no real token
    sees a pad, so the logits at the prompt's last token, and the decode steps after it (which
    overwrite the pads' cache slots before attending to them), do not depend on the pads."""
    arch, _, lm = compiled_lm
    ids = np.random.default_rng(0).integers(0, 8192, (BATCH, 5))
    outs = []
    for pads in (np.zeros((BATCH, CHUNK - 5)), np.random.default_rng(1).integers(0, 8192, (BATCH, CHUNK - 5))):
        piece = np.ascontiguousarray(np.concatenate([ids, pads], axis=1).astype(np.int64))
        views = lm._run_step("prefill_first", [piece, np.array([4], np.int64)])  # selects the session first
        logits = lm._session.to_host(views[:1])[0]
        steps = [lm.decode(torch.tensor([[7 + i]] * BATCH), 5 + i).numpy() for i in range(4)]
        outs.append([logits, *steps])
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5, err_msg=arch)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_prefill_first_attention_is_causal_without_mask(arch):
    """prefill_first's attention raises to cuvil.attention {is_causal} with no mask operand over
    the chunk's own keys (the form the Hopper attention kernel takes), one per layer; prefill
    keeps its boolean mask over the filled prefix."""
    import re

    from cuvil_mlir.compiler.causal_lm import _export_programs
    from cuvil_mlir.compiler.pipeline import Options, compile_functions

    torch.manual_seed(0)
    model = _config(arch).eval()
    programs, _, _ = _export_programs(model, BATCH, MAX_SEQ, (CHUNK,))
    text = compile_functions(programs, Options(), entry="decode", emit="cuvil").text
    functions = dict(re.findall(r"func\.func (?:\w+ )?@(\w+)\((.*?)\n  \}", text, re.S))
    attention = {name: re.findall(r'"cuvil\.attention"\(([^)]*)\) \{is_causal = (\w+).*?: \((.*?)\) ->', body)
                 for name, body in functions.items()}
    assert len(attention["prefill_first"]) == 2  # a layer each
    for operands, causal, types in attention["prefill_first"]:
        assert causal == "true" and len(operands.split(",")) == 3, (operands, causal)  # q, k, v: no mask
        assert types.count(f"[{BATCH},4,{CHUNK},16]") == 3, types  # keys: the chunk's own, kv heads repeated
    for operands, causal, types in attention["prefill"]:
        assert causal == "false" and len(operands.split(",")) == 4, (operands, causal)  # the mask over the prefix


def test_package_without_prefill_first(compiled_lm, tmp_path, monkeypatch, capsys):
    """A package written before prefill_first (a module with prefill and decode, no "functions"
    in its metadata) loads and prefills every chunk, the first too, with prefill."""
    from cuvil_mlir.compiler.causal_lm import _export_programs
    from cuvil_mlir.compiler.pipeline import Options, compile_functions

    arch, model, lm = compiled_lm
    if arch != "gpt2":
        pytest.skip("one architecture is enough")
    programs, _, _ = _export_programs(model, BATCH, MAX_SEQ, (CHUNK,))
    del programs["prefill_first"]
    modules, metadata, parameters = compile_functions(programs, Options(), entry="decode")
    # neither "functions", "prefill_lens" nor "step_outputs": its steps are read as returning logits alone (the greedy tokens go
    # through the host)
    metadata["causal_lm"] = {k: v for k, v in lm.metadata["causal_lm"].items() if k not in ("functions", "step_outputs", "prefill_lens")}
    path = tmp_path / "old.cuvilpkg"
    CausalLM(modules, metadata, parameters=parameters).save(path)
    old = cuvil_mlir.load(path)
    assert old.functions == ("prefill", "decode") and old.prefill_calls(13) == [("prefill", 0), ("prefill", 5)]
    assert not old.device_greedy
    for prompt_len, prefills in ((13, ["prefill", "prefill"]), (5, ["prefill"])):
        ids = torch.randint(0, 8192, (BATCH, prompt_len), generator=torch.Generator().manual_seed(prompt_len))
        with torch.no_grad():
            expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)
        called = _calls(monkeypatch)
        assert torch.equal(old.generate(ids, max_new_tokens=12), expected)
        assert called == prefills + ["decode"] * 11
        monkeypatch.undo()
    from cuvil_mlir.cli import main

    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "causal lm:   functions prefill, decode (no prefill_first" in out
    assert "steps return logits (greedy tokens through the host)" in out


def test_cache_stays_on_device(compiled_lm, monkeypatch):
    _, model, lm = compiled_lm
    ids = torch.randint(0, 8192, (BATCH, 9))
    lm.generate(ids, max_new_tokens=2)
    cache = list(lm._cache)
    read_back = []
    original = Session.queue_read

    def spy(self, views, after=None):
        read_back.extend(int(v.byte_length) for v in views)
        return original(self, views, after)

    monkeypatch.setattr(Session, "queue_read", spy)
    uploads = dict(lm._session._uploads)
    lm.generate(ids, max_new_tokens=6)
    assert all(a is b for a, b in zip(lm._cache, cache))  # the same device buffers, not new ones per step
    # the prompt's inputs (ids, position, last) go through the same kept buffers every call
    assert lm._session._uploads.keys() == uploads.keys() and all(lm._session._uploads[k] is v for k, v in uploads.items())
    assert read_back == [BATCH * 8] * 6  # per step only the greedy token ids come back: no logits, never the cache
    read_back.clear()
    monkeypatch.setattr(lm, "device_greedy", False)  # through the host: per step the logits come back
    lm.generate(ids, max_new_tokens=6)
    assert read_back == [BATCH * lm.vocab_size * 4] * 6
    monkeypatch.undo()
    # the functions wrote the cache in place: it holds the keys transformers computes
    with torch.no_grad():
        out = model(ids, use_cache=True)
    keys = lm._session.to_host(cache[:1])[0]
    np.testing.assert_allclose(keys[:, :, :9], out.past_key_values.layers[0].keys.numpy(), atol=1e-5)


def test_attention_reads_only_the_filled_prefix(compiled_lm):
    """Cache slots past the current position are never read: with NaN there (stale or never
    written memory) the tokens still equal transformers'. Attending over every slot with a
    mask would not survive this: 0 * NaN in the weighted sum of values is NaN."""
    arch, model, lm = compiled_lm
    ids = torch.randint(0, 8192, (BATCH, 5), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)
    session = lm._session_with_cache()
    lm._cache = [session._to_device(np.full(shape, np.nan, dtype=np.dtype(dtype))) for shape, dtype in lm.cache_layout]
    try:
        got = lm.generate(ids, max_new_tokens=12)
    finally:
        lm._cache_session = None  # a fresh zero cache for the other tests
    assert torch.equal(got, expected), f"{arch}: first difference at {(got != expected).nonzero()[:1].tolist()}"


def test_bad_calls(compiled_lm):
    _, _, lm = compiled_lm
    with pytest.raises(InputError, match="exceeds max_seq_len 80"):
        lm.generate(torch.zeros(BATCH, 20, dtype=torch.int64), max_new_tokens=61)
    with pytest.raises(InputError, match=r"compiled for batch 2; input_ids has batch 3 \(generate takes up to that many rows\)"):
        lm.generate(torch.zeros(3, 4, dtype=torch.int64), max_new_tokens=2)
    with pytest.raises(InputError, match="outside the vocabulary"):
        lm.generate(torch.full((BATCH, 4), 9000), max_new_tokens=2)
    with pytest.raises(InputError, match="integer token ids"):
        lm.generate(torch.zeros(BATCH, 4), max_new_tokens=2)
    with pytest.raises(InputError, match=r"\.generate"):
        lm(torch.zeros(BATCH, 4, dtype=torch.int64))
    ids = torch.zeros(BATCH, 4, dtype=torch.int64)
    with pytest.raises(InputError, match="row 0 is not left padding"):
        lm.generate(ids, attention_mask=torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]]), max_new_tokens=2)
    with pytest.raises(InputError, match="row 1 keeps no token"):
        lm.generate(ids, attention_mask=torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]]), max_new_tokens=2)
    with pytest.raises(InputError, match=r"attention_mask has shape \[2, 3\]"):
        lm.generate(ids, attention_mask=torch.ones(BATCH, 3), max_new_tokens=2)
    with pytest.raises(InputError, match="generate does not take min_new_tokens, num_beams"):
        lm.generate(ids, max_new_tokens=2, num_beams=4, min_new_tokens=2)
    # transformers' all-ones mask is taken
    assert lm.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=2).shape == (BATCH, 6)


def test_fewer_rows_than_the_compiled_batch(compiled_lm):
    """A prompt batch smaller than the compiled one: the same tokens as transformers for those
    rows, and only those rows come back."""
    arch, model, lm = compiled_lm
    ids = torch.randint(0, 8192, (BATCH - 1, 6), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False)
    got = lm.generate(ids, max_new_tokens=10)
    assert got.shape == expected.shape and torch.equal(got, expected), arch


def test_left_padded_prompts(compiled_lm):
    """Prompts of different lengths, padded on the left as transformers' tokenizers pad them:
    the same tokens as transformers' generate on the padded batch, padding kept."""
    arch, model, lm = compiled_lm
    ids = torch.randint(1, model.config.vocab_size, (BATCH, 11), generator=torch.Generator().manual_seed(5))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0
    ids[0, :4] = 0
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0)
    got = lm.generate(ids, attention_mask=mask, max_new_tokens=12)
    assert got.shape == expected.shape and torch.equal(got[:, :11], ids)
    assert torch.equal(got, expected), f"{arch}: first difference at {(got != expected).nonzero()[:1].tolist()}"


def test_save_load_and_sampling(compiled_lm, tmp_path):
    arch, _, lm = compiled_lm
    if arch != "llama":
        pytest.skip("one architecture is enough")
    path = tmp_path / "lm.cuvilpkg"
    lm.save(path)
    loaded = cuvil_mlir.load(path)
    assert isinstance(loaded, CausalLM) and loaded.max_seq_len == MAX_SEQ
    ids = torch.randint(0, 8192, (BATCH, 7))
    assert torch.equal(loaded.generate(ids, max_new_tokens=10), lm.generate(ids, max_new_tokens=10))
    sampled = [lm.generate(ids, max_new_tokens=10, do_sample=True, top_k=50, top_p=0.9, generator=torch.Generator().manual_seed(1))
               for _ in range(2)]
    assert torch.equal(sampled[0], sampled[1]) and torch.equal(sampled[0][:, :7], ids)
    with pytest.raises(InputError, match="temperature"):
        lm.generate(ids, max_new_tokens=2, do_sample=True, temperature=0)


def test_several_prefill_sizes(tmp_path, monkeypatch):
    """prefill_len=(16, 4): a prefill_first and a prefill per size, the smallest under the plain
    names; a prompt runs the largest chunks that fit what is left of it (the last one overlapping
    or padded), with the tokens of transformers' greedy generate; the sizes survive save/load."""
    torch.manual_seed(0)
    model = _config("llama").eval()
    model.generation_config.eos_token_id = None
    lm = cuvil_mlir.compile_causal_lm(model, max_seq_len=MAX_SEQ, batch=BATCH, prefill_len=(16, 4))
    assert lm.functions == ("prefill_first", "prefill_first_16", "prefill", "prefill_16", "decode")
    assert lm.metadata["causal_lm"]["prefill_lens"] == [4, 16] and lm.prefill_len == 4
    plans = {37: [("prefill_first_16", 0), ("prefill_16", 16), ("prefill", 32), ("prefill", 33)],
             3: [("prefill_first", 0)], 20: [("prefill_first_16", 0), ("prefill", 16)], 17: [("prefill_first_16", 0), ("prefill", 13)]}
    path = tmp_path / "lm.cuvilpkg"
    lm.save(path)
    loaded = cuvil_mlir.load(path)
    for prompt_len, plan in plans.items():
        assert lm.prefill_calls(prompt_len) == plan == loaded.prefill_calls(prompt_len)
        ids = torch.randint(0, 8192, (BATCH, prompt_len), generator=torch.Generator().manual_seed(prompt_len))
        new = min(24, MAX_SEQ - prompt_len)
        with torch.no_grad():
            expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False)
        called = _calls(monkeypatch)
        got = lm.generate(ids, max_new_tokens=new)
        assert called == [function for function, _ in plan] + ["decode$async"] * (new - 1)
        assert torch.equal(got, expected), f"prompt {prompt_len}: first difference at {(got != expected).nonzero()[:1].tolist()}"
        monkeypatch.undo()
    assert loaded.step_arguments("prefill_16")[0].shape == (BATCH, 16)


def test_eos_stops_and_pads(compiled_lm):
    arch, _, lm = compiled_lm
    if arch != "gpt2":
        pytest.skip("one architecture is enough")
    ids = torch.randint(0, 8192, (BATCH, 6))
    free = lm.generate(ids, max_new_tokens=8)
    eos = int(free[0, 6])  # row 0's first new token
    got = lm.generate(ids, max_new_tokens=8, eos_token_id=eos, pad_token_id=7)
    assert torch.equal(got[0, :7], free[0, :7]) and (got[0, 7:] == 7).all()
    if eos not in free[1, 6:].tolist():  # row 1 runs on: all 8 new tokens, as without eos
        assert torch.equal(got[1], free[1])


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_external_parameters_round_trip(arch, tmp_path):
    """params="external": the weights go to one archive both functions read (by state-dict name,
    each once), not into the vmfb; saved and loaded, greedy tokens still equal transformers'."""
    torch.manual_seed(0)
    model = _config(arch).eval()
    model.generation_config.eos_token_id = None
    lm = cuvil_mlir.compile_causal_lm(model, max_seq_len=MAX_SEQ, batch=BATCH, prefill_len=CHUNK, params="external")
    weight_bytes = sum(t.numel() * 4 for t in model.state_dict().values())
    assert lm.parameters is not None and len(lm.modules[0].vmfb) < 0.25 * weight_bytes
    assert lm.parameters.nbytes <= 1.05 * weight_bytes  # one copy for prefill and decode
    assert lm.metadata["parameters"]["count"] == len(lm.parameters.arrays)
    path = tmp_path / "lm.cuvilpkg"
    lm.save(path)
    loaded = cuvil_mlir.load(path)
    assert isinstance(loaded, CausalLM) and loaded.parameters.path == path
    ids = torch.randint(0, 8192, (BATCH, 11), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False)
    assert torch.equal(loaded.generate(ids, max_new_tokens=24), expected)
    data = bytearray(path.read_bytes())
    data[loaded.parameters.offset + 100] ^= 0xFF  # a flipped byte in the archive: refused at load
    path.write_bytes(bytes(data))
    with pytest.raises(Exception, match="sha256"):
        cuvil_mlir.load(path)


def test_parameters_supplied_at_load(tmp_path, capsys):
    """A causal LM saved without its weights loads with them supplied (the archive prefill and
    decode share), checked per key like any package; without them it is refused."""
    from cuvil_mlir.core.diagnostics import PackageError

    torch.manual_seed(0)
    model = _config("llama").eval()
    model.generation_config.eos_token_id = None
    lm = cuvil_mlir.compile_causal_lm(model, max_seq_len=MAX_SEQ, batch=BATCH, prefill_len=CHUNK, params="external")
    entries = lm.metadata["parameters"]["entries"]
    assert set(entries) == set(lm.parameters.arrays)  # what both functions read, with shapes and dtypes
    path, weights = tmp_path / "lm.cuvilpkg", tmp_path / "lm.irpa"
    lm.save(path, parameters="none")
    lm.save_parameters(weights)
    with pytest.raises(PackageError, match="saved without its parameters"):
        cuvil_mlir.load(path)
    loaded = cuvil_mlir.load(path, parameters=weights)
    assert isinstance(loaded, CausalLM) and loaded.parameters.path == weights
    ids = torch.randint(0, 8192, (BATCH, 11), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)
    assert torch.equal(loaded.generate(ids, max_new_tokens=12), expected)
    from cuvil_mlir.cli import main

    prompt = ";".join(",".join(map(str, row)) for row in ids.tolist())
    assert main(["generate", str(path), "--parameters", str(weights), "--prompt-ids", prompt, "--max-new-tokens", "12",
                 "--no-progress"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()[-BATCH:]
    assert [list(map(int, r.split(","))) for r in rows] == expected.tolist()
    arrays = {k: np.asarray(v) for k, v in lm.parameters.arrays.items()}
    key = next(iter(arrays))
    wrong = {**arrays, key: arrays[key].astype(np.float16)}
    del wrong[sorted(arrays)[-1]]
    with pytest.raises(PackageError, match="2 problem") as e:
        cuvil_mlir.load(path, parameters=wrong)
    assert f"{key}: float16" in str(e.value) and f"{sorted(arrays)[-1]}: missing" in str(e.value)


def test_params_inline_keeps_weights_in_the_module():
    torch.manual_seed(0)
    model = _config("qwen2").eval()
    lm = cuvil_mlir.compile_causal_lm(model, max_seq_len=32, batch=1, prefill_len=8, params="inline")
    assert lm.parameters is None and "parameters" not in lm.metadata
    with pytest.raises(Exception, match="params='bogus'"):
        cuvil_mlir.compile_causal_lm(model, max_seq_len=32, batch=1, prefill_len=8, params="bogus")


def test_compile_errors():
    model = _config("llama").eval()
    with pytest.raises(InputError, match="max_position_embeddings"):
        cuvil_mlir.compile_causal_lm(model, max_seq_len=4096)
    with pytest.raises(InputError, match="prefill_len"):
        cuvil_mlir.compile_causal_lm(model, max_seq_len=16, prefill_len=32)
    with pytest.raises(InputError, match=r"in 1\.\.max_seq_len \(16\), got 0, 17"):
        cuvil_mlir.compile_causal_lm(model, max_seq_len=16, prefill_len=(4, 0, 17))
    with pytest.raises(InputError, match="a sequence of sizes"):
        cuvil_mlir.compile_causal_lm(model, max_seq_len=16, prefill_len=(4.0,))
    windowed = transformers.MistralForCausalLM(transformers.MistralConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, sliding_window=16, max_position_embeddings=128))
    with pytest.raises(InputError, match="sliding window"):
        cuvil_mlir.compile_causal_lm(windowed, max_seq_len=64)
    with pytest.raises(InputError, match="transformers causal LM"):
        cuvil_mlir.compile_causal_lm(torch.nn.Linear(2, 2), max_seq_len=16)


def _cuda_ready() -> bool:
    return torch.cuda.is_available() and bool(available_devices().get("cuda"))


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_ready(), reason="needs a CUDA device for both torch and IREE's cuda driver")
def test_cuda_fp16_logits_close():
    torch.manual_seed(0)
    model = _config("llama").eval()
    lm = cuvil_mlir.compile_causal_lm(model.half(), max_seq_len=MAX_SEQ, batch=BATCH, prefill_len=CHUNK, target="cuda")
    ids = torch.randint(0, 8192, (BATCH, 13))
    got = lm.prefill(ids).float()
    with torch.no_grad():
        expected = model.float()(ids).logits[:, -1]
    torch.testing.assert_close(got, expected, atol=2e-2, rtol=2e-2)


def test_cli_generate(compiled_lm, tmp_path, capsys):
    from cuvil_mlir.cli import main

    arch, _, lm = compiled_lm
    if arch != "qwen2":
        pytest.skip("one architecture is enough")
    path = tmp_path / "lm.cuvilpkg"
    lm.save(path)
    assert main(["inspect", str(path)]) == 0
    assert ("causal lm:   functions prefill_first, prefill, decode; batch 2, max_seq_len 80, prefill chunks 8; steps return "
            "logits, next_token, next_position (greedy tokens on the device)") in capsys.readouterr().out
    assert main(["generate", str(path), "--prompt-ids", "1,2,3;4,5,6", "--max-new-tokens", "5", "--no-progress"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-3].endswith("prefill: prefill_first@0")
    rows = lines[-2:]
    expected = lm.generate(torch.tensor([[1, 2, 3], [4, 5, 6]]), max_new_tokens=5)
    assert [list(map(int, r.split(","))) for r in rows] == expected.tolist()
    assert main(["generate", str(path), "--prompt-ids", "1,2;3", "--no-progress"]) != 0  # ragged rows: an error, no traceback


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_prefill_first_gets_the_hopper_attention_kernel(arch):
    """fp16 on cuda:h200 (compiled here, not run): prefill_first's causal attention, one per
    layer, goes to the Hopper attention kernel; prefill's and decode's attention over the filled
    prefix of the cache to the prefix kernel, which reads the position on the device (a decode
    step of batch 1 at this short cache: one split, one extern dispatch)."""
    from cuvil_mlir.targets import cuda_kernels

    if cuda_kernels.available() is not None:
        pytest.skip(f"kernels cannot be built here: {cuda_kernels.available()}")
    torch.manual_seed(0)
    if arch == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=128, n_head=2, vocab_size=512, n_positions=128))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            num_hidden_layers=2, hidden_size=128, num_attention_heads=2, num_key_value_heads=1, intermediate_size=256,
            vocab_size=512, max_position_embeddings=128))  # head dim 64: what the kernel takes
    lm = cuvil_mlir.compile_causal_lm(model.eval().half(), max_seq_len=64, batch=1, prefill_len=32, target="cuda:h200")
    fired = lm.patterns_fired["lower-cuvil-to-kernels"]
    assert fired["attention (strided)"] == 2 and fired["attention over a cache prefix"] == 2 * 2, fired
    assert not any(name.startswith("kept attention") for name in fired), fired
    records = [k for k in lm.metadata["kernels"] if k.get("op") == "attention"]
    prefix = {r["tq"]: r for r in records if r.get("prefix")}
    assert set(prefix) == {1, 32} and all(r["kernel"] and r["tkv"] == 64 for r in prefix.values()), records
    assert prefix[1]["splits"] == 1


@pytest.mark.slow
def test_profile_one_decode_step(tmp_path, capsys):
    """`cuvil profile PKG --function decode`: the step's own dispatches (the package records every
    function's; the other functions' are left out), timed with a zero cache at a position."""
    from cuvil_mlir.cli import main as cli_main
    from cuvil_mlir.eval.profiler import profile_compiled

    torch.manual_seed(0)
    lm = cuvil_mlir.compile_causal_lm(_config("gpt2").eval(), max_seq_len=MAX_SEQ, batch=BATCH, prefill_len=CHUNK,
                                      record_dispatches=True)
    sites = lm.metadata["dispatches"]["cpu"]
    assert {s["function"] for s in sites} == {"prefill_first", "prefill", "decode"}
    decode_sites = [s for s in sites if s["function"] == "decode"]
    args = lm.step_arguments("decode", 40)
    assert [a.shape for a in args[:3]] == [(BATCH, 1), (1,), (1,)] and int(args[1][0]) == 40
    assert len(args) == 3 + len(lm.cache_layout) and not any(a.any() for a in args[3:])
    prof = profile_compiled(lm, repetitions=2, iterations=3, model="lm", position=40)
    assert prof["model"] == "lm decode at position 40"
    # every decode call site is accounted for, and nothing of prefill's: a prefill-only dispatch is not timed
    assert sum(r["calls"] for r in prof["rows"]) == len(decode_sites)
    assert any("lm_head" in p for r in prof["rows"] for p in r["module_paths"])
    with pytest.raises(InputError, match="runs past the cache"):
        lm.step_arguments("prefill", MAX_SEQ - CHUNK + 1)
    with pytest.raises(InputError, match="no function 'verify'"):
        lm.step_arguments("verify")
    path = tmp_path / "lm.cuvilpkg"
    lm.save(path)
    assert cli_main(["profile", str(path), "--function", "prefill", "--position", "8", "--repetitions", "1",
                     "--iterations", "2"]) == 0
    assert "prefill at position 8" in capsys.readouterr().out
    assert cli_main(["profile", str(path), "--function", "decode", "--position", "80"]) != 0
    assert "positions 0..79" in capsys.readouterr().err


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_no_step_copies_the_cache(arch):
    """Every function writes the cache in place and copies none of it (IREE's own form of a
    written argument copied every layer's whole cache per call: targets/iree.py
    tie_written_arguments). Checked in IREE's stream IR: no transfer of a cache tensor's size."""
    import re

    from cuvil_mlir.compiler.causal_lm import _export_programs
    from cuvil_mlir.compiler.context import make_context
    from cuvil_mlir.compiler.pipeline import Options, compile_functions
    from cuvil_mlir.core.ir import parse_module
    from cuvil_mlir.targets import iree, parse_target

    torch.manual_seed(0)
    programs, cache, _ = _export_programs(_config(arch).eval(), BATCH, MAX_SEQ, (CHUNK,))
    lowered = compile_functions(programs, Options(params="inline"), entry="decode", emit="lowered", elide_weights=False).text
    stream = iree.compile_to_vmfb(parse_module(lowered, make_context()), [*parse_target("cpu").iree_flags(), "--compile-to=stream",
                                                                         "--mlir-elide-elementsattrs-if-larger=8"]).decode()
    cache_bytes = {t.numel() * t.element_size() for t in cache}
    copied = [int(n) for n in re.findall(r"stream\.cmd\.copy [^\n]*, %c(\d+) :", stream)]
    assert len(re.findall(r"util\.func public @\w+\$async", stream)) == 3
    assert copied and not cache_bytes & set(copied), copied  # only the position's 8-byte read-back


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_cuda_steps_write_the_cache_on_the_device(arch):
    """fp16 on cuda:h200 (compiled here, not run): prefill's and decode's cache writes go to the
    cache-write kernel, which reads the position on the device and writes in place, so no step
    reads anything back to the host in the middle of the call (IREE's own write needs the
    position as a push constant: an 8-byte read-back and a wait per call) and none copies the
    cache. prefill_first writes at 0, a constant: IREE's own copy, nothing to read back."""
    import re

    from cuvil_mlir.compiler.causal_lm import _export_programs
    from cuvil_mlir.compiler.context import make_context
    from cuvil_mlir.compiler.pipeline import Options, compile_functions
    from cuvil_mlir.core.ir import parse_module
    from cuvil_mlir.targets import cuda, cuda_kernels, iree, parse_target

    if cuda_kernels.available() is not None:
        pytest.skip(f"kernels cannot be built here: {cuda_kernels.available()}")
    torch.manual_seed(0)
    if arch == "gpt2":  # head dim 64: what the prefix attention kernel takes (else IREE's attention reads the position)
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=128, n_head=2, vocab_size=512, n_positions=128))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            num_hidden_layers=2, hidden_size=128, num_attention_heads=2, num_key_value_heads=1, intermediate_size=256,
            vocab_size=512, max_position_embeddings=128))
    programs, cache, _ = _export_programs(model.eval().half(), BATCH, MAX_SEQ, (CHUNK,))
    lowered = compile_functions(programs, Options(target="cuda:h200", params="inline"), entry="decode", emit="lowered",
                                elide_weights=False).text
    target = parse_target("cuda:h200")
    report = []
    stream = iree.compile_to_vmfb(parse_module(lowered, make_context()), [*target.iree_flags(), "--compile-to=stream",
                                                                         "--mlir-elide-elementsattrs-if-larger=8"],
                                  kernels=cuda.materialize_kernel, report=report).decode()
    writes = [r for r in report if r.get("op") == "cache_write"]
    assert writes and all(r["kernel"] for r in writes), writes
    cache_bytes = {t.numel() * t.element_size() for t in cache}
    for name in ("prefill", "decode"):
        body = stream.split(f"util.func public @{name}$async(")[1].split("util.func public")[0]
        assert body.count("cuvil_cache_write_") == len(cache), name
        copied = {int(n) for n in re.findall(r"stream\.cmd\.copy [^\n]*, %c(\d+) :", body)}
        assert 8 not in copied and not cache_bytes & copied, (name, copied)
        assert "stream.resource.load" not in body, name  # the host reading the position
        if name == "decode":  # k and v read where the QKV projection wrote them: no copy dispatch to cut them out
            assert "slow_memcpy" not in body, name


def _more_architectures():
    common = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128)
    return {
        "gemma": lambda: transformers.GemmaForCausalLM(transformers.GemmaConfig(**common, head_dim=16)),
        # logit softcapping: SDPA does not take it, so the steps export the written-out attention with an
        # additive mask, and there is no prefill_first (its causal SDPA has no softcap either)
        "gemma2": lambda: transformers.Gemma2ForCausalLM(transformers.Gemma2Config(**common, head_dim=16, sliding_window=128)),
        "phi3": lambda: transformers.Phi3ForCausalLM(transformers.Phi3Config(**common, pad_token_id=0)),
        "qwen3": lambda: transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**common, head_dim=16)),
        "gpt_neox": lambda: transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(
            vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=128)),
        # its own attention module: prefill_first cannot be exported, prefill and decode can
        "falcon": lambda: transformers.FalconForCausalLM(transformers.FalconConfig(
            vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, new_decoder_architecture=True, num_kv_heads=2)),
        # ALiBi and its own attention code, which reads a boolean mask as "True is masked out": the
        # eager check of the steps turns the boolean mask down and the additive one is taken
        "mpt": lambda: transformers.MptForCausalLM(transformers.MptConfig(
            d_model=64, n_heads=4, n_layers=2, vocab_size=512, max_seq_len=128)),
        # mixture of experts: exported with transformers' batched_mm experts (its default grouped_mm
        # counts tokens per expert with aten.histc, which torch-mlir does not lower)
        "mixtral": lambda: transformers.MixtralForCausalLM(transformers.MixtralConfig(
            **common, num_local_experts=4, num_experts_per_tok=2)),
    }


@pytest.mark.parametrize("arch", list(_more_architectures()))
def test_more_architectures_match_transformers(arch):
    """Architectures beyond the four the issue names: greedy tokens equal transformers' for a
    prompt of two chunks; a model whose attention prefill_first cannot take compiles without it
    (the metadata says why) and prefills every chunk with prefill."""
    torch.manual_seed(0)
    model = _more_architectures()[arch]().eval()
    model.generation_config.eos_token_id = None
    ids = torch.randint(0, 512, (2, 11))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lm = cuvil_mlir.compile_causal_lm(model, max_seq_len=48, batch=2, prefill_len=8)
    skipped = lm.metadata["causal_lm"].get("prefill_first_skipped")
    assert (skipped is not None) == (arch in ("gemma2", "falcon", "mpt")), skipped
    assert ("prefill_first" in lm.functions) == (skipped is None)
    assert (skipped is None) or any("no prefill_first" in str(w.message) for w in caught)
    out = lm.generate(ids, max_new_tokens=12)
    ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert torch.equal(out, ref), (out, ref)
    experts = getattr(model.config, "_experts_implementation", None)
    assert experts in (None, "grouped_mm", "eager"), experts  # the user's model is left as it was


class _InvertedMask(transformers.LlamaForCausalLM):
    """Reads every 4-D mask the other way round: no step convention gives its forward's logits."""

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        if attention_mask is not None and attention_mask.dim() == 4:
            attention_mask = ~attention_mask if attention_mask.dtype == torch.bool else \
                (attention_mask == 0).to(attention_mask.dtype) * torch.finfo(attention_mask.dtype).min
        return super().forward(input_ids=input_ids, attention_mask=attention_mask, **kwargs)


def test_steps_that_disagree_with_the_model_are_an_error():
    """The steps are run eagerly against the model's own forward before export: a model that
    reads the mask by a convention neither step form matches is an error naming the step and
    the difference, not a package that generates wrong tokens."""
    torch.manual_seed(0)
    model = _InvertedMask(transformers.LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                                   num_attention_heads=4, num_key_value_heads=2)).eval()
    with pytest.raises(ImportError_, match=r"_InvertedMask: its prefill/decode step could not be exported: its prefill "
                                           r"\(eager attention\) step, run eagerly, differs from the model's own forward by"):
        cuvil_mlir.compile_causal_lm(model, max_seq_len=48, batch=2, prefill_len=8)


def test_model_without_a_4d_mask_path_is_a_clear_error():
    """BLOOM builds ALiBi from a 2-D attention mask: the error says what compile_causal_lm needs."""
    model = transformers.BloomForCausalLM(transformers.BloomConfig(vocab_size=512, hidden_size=64, n_layer=2, n_head=4)).eval()
    with pytest.raises(ImportError_, match=r"BloomForCausalLM: its prefill/decode step could not be exported: .*4-D attention mask"):
        cuvil_mlir.compile_causal_lm(model, max_seq_len=48, batch=2, prefill_len=8)


def test_step_greedy_token_is_torch_argmax():
    """The steps' next_token (two-step argmax over runs of 128 logits) is torch's argmax, the
    first maximum on ties, for vocabularies that are and are not a multiple of the run."""
    from cuvil_mlir.compiler.causal_lm import _step_results

    g = torch.Generator().manual_seed(0)
    for vocab in (7, 128, 130, 32000, 50257):
        logits = torch.randint(-3, 4, (5, vocab), generator=g).to(torch.float16)  # many ties
        logits[4] = 0  # all equal: the first index
        got, token, position = _step_results(logits, torch.tensor([9]))
        assert got.dtype == torch.float32 and token.dtype == torch.int64 and token.shape == (5, 1)
        assert torch.equal(token[:, 0], logits.float().argmax(-1)), vocab
        assert int(token[4]) == 0 and int(position) == 9

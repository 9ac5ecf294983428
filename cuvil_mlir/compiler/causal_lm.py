"""``compile_causal_lm``: a Hugging Face causal LM as one module with three functions over a KV
cache that stays on the device and is updated in place (docs/generation.md).

    prefill_first(input_ids[B, P], last[1], *cache) -> (logits[B, V], next_token[B, 1], next_position[1])
    prefill(input_ids[B, P], position[1], last[1], *cache) -> (logits[B, V], next_token[B, 1], next_position[1])
    decode(input_ids[B, 1], position[1], last[1], *cache) -> (logits[B, V], next_token[B, 1], next_position[1])

With several prefill sizes (``prefill_len=(128, 512)``), the smallest has the names above and
each larger size ``n`` its own ``prefill_first_n`` and ``prefill_n``: a prompt is prefilled in the
largest chunks that fit it (runtime/generation.py ``prefill_calls``).

(logits in float32 whatever the model's dtype, as transformers' generate reads them; next_token
their greedy choice and next_position the position it goes to, ``position + last + 1``: what
the next decode call takes, so a greedy generate passes them on without leaving the device.)

``cache`` is the keys and values of every layer, ``[B, kv_heads, max_seq_len, head_dim]`` each,
arguments the functions write in place (a slice at ``position``: IREE ties them, no copy per
call). The tokens of a call sit at positions ``position .. position+T-1``; each attends to the
cache up to its own position (a boolean mask built from ``position`` over the filled prefix, so
decode's attention is one ``cuvil.attention`` of a single query against that prefix). ``last``
picks the position whose logits are returned (the prompt's last token in a padded prefill chunk).

``prefill_first`` is a prompt's first chunk, positions ``0 .. P-1``: it writes slots
``0 .. P-1`` like ``prefill`` but its tokens attend only to each other, plain causal SDPA with
no mask (``cuvil.attention {is_causal}`` over P keys: what the Hopper attention kernel takes;
``prefill``'s masked attention over the filled prefix is IREE's codegen). Nothing before the
chunk is read, so the cache need not be empty.

The model runs its own forward (HF's modeling code, its attention through SDPA) with a cache
object whose layers write into those arguments; so any HF causal LM whose attention goes
through ``Cache.update`` and takes a 4-D mask compiles (checked: GPT-2, Llama, Mistral, Qwen2; more in
docs/generation.md). Mixture-of-experts layers are exported with transformers' ``batched_mm`` experts.
"""

from __future__ import annotations

import warnings

from cuvil_mlir.core.diagnostics import CuvilError, ImportError_, InputError

STEP_OUTPUTS = ("logits", "next_token", "next_position")  # what every step function returns (metadata step_outputs)


def compile_causal_lm(hf_model, *, max_seq_len: int, batch: int = 1, prefill_len=None, target: str = "cpu",
                      precision: str = "fp32", opt_level: int = 3, params: str = "auto", record_dispatches: bool = False):
    """Compile ``hf_model`` (a transformers ``*ForCausalLM``) for ``batch`` sequences of up to
    ``max_seq_len`` tokens (prompt and new tokens); prompts are prefilled ``prefill_len`` tokens
    at a time (default: min(max_seq_len, 128)), or in chunks of several sizes (a sequence of
    sizes: each prompt in the largest chunks that fit it, so a long prompt runs few large calls
    and a short one a small call). ``params``: the weights ``"inline"`` in each
    target's module or ``"external"`` (one parameter archive all functions and targets
    read); ``"auto"``: external from 64 MiB of weights (cuvil_mlir.compile's rule).
    ``record_dispatches``: the functions' IREE dispatches kept in the metadata, for ``cuvil
    profile PKG --function decode`` (docs/profiling.md). Returns a
    ``cuvil_mlir.runtime.generation.CausalLM``."""
    from cuvil_mlir.compiler.pipeline import Options, compile_functions
    from cuvil_mlir.runtime.generation import CausalLM

    config = _check_model(hf_model, max_seq_len, batch)
    sizes = prefill_sizes(prefill_len, max_seq_len)
    programs, cache, skipped = _export_programs(hf_model, batch, max_seq_len, sizes)
    options = Options(target=target, opt_level=opt_level, precision=precision, params=params,
                      record_dispatches=record_dispatches)
    modules, metadata, parameters = compile_functions(programs, options, entry="decode")
    generation = getattr(hf_model, "generation_config", None)
    metadata["causal_lm"] = {
        "architecture": config.model_type,
        "batch": batch,
        "max_seq_len": max_seq_len,
        "prefill_len": sizes[0],  # the chunk of prefill_first / prefill (a reader of one size sees this one)
        "prefill_lens": list(sizes),  # every chunk size, ascending (prefill_names gives each one's functions)
        "functions": list(programs),  # prefill_first, prefill, decode: what CausalLM may call
        "step_outputs": list(STEP_OUTPUTS),
        **({"prefill_first_skipped": skipped} if skipped else {}),  # why prefill_first could not be exported
        "vocab_size": int(config.get_text_config().vocab_size),
        "cache": [{"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")} for t in cache],
        "eos_token_id": _token_ids(getattr(generation, "eos_token_id", None)),
        "pad_token_id": getattr(generation, "pad_token_id", None),
    }
    return CausalLM(modules, metadata, parameters=parameters)


def prefill_sizes(prefill_len, max_seq_len: int) -> tuple[int, ...]:
    """The prefill chunk sizes, ascending and distinct, from ``prefill_len`` (None, a size, or
    a sequence of sizes), each checked to be in 1..max_seq_len."""
    if prefill_len is None:
        return (min(max_seq_len, 128),)
    values = [prefill_len] if isinstance(prefill_len, int) else list(prefill_len)
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise InputError(f"prefill_len must be a chunk size or a sequence of sizes (ints), got {prefill_len!r}")
    bad = [v for v in values if not 1 <= v <= max_seq_len]
    if bad:
        raise InputError(f"prefill_len sizes must be in 1..max_seq_len ({max_seq_len}), got {', '.join(map(str, bad))}")
    return tuple(sorted(set(values)))


def _export_programs(hf_model, batch: int, max_seq_len: int, sizes: tuple[int, ...]):
    """The steps exported (torch.export), by function name, and the example cache tensors
    (their shapes and dtypes are the cache's). Each must write every cache tensor."""
    import torch

    from cuvil_mlir.compiler.export_modes import export_module, static_experts
    from cuvil_mlir.runtime.generation import prefill_names

    cache = [torch.zeros(shape, dtype=dtype) for shape, dtype in _cache_layout(hf_model, batch, max_seq_len)]
    step, first = _step_classes()

    def ids(length):  # distinct tensors: torch.export would trace one tensor passed twice as one input
        return torch.zeros((batch, length), dtype=torch.int64)

    def index():
        return torch.zeros(1, dtype=torch.int64)

    programs, skipped = {}, None
    check = _StepCheck(hf_model, max_seq_len, sizes[0], cache)
    with torch.no_grad(), static_experts(hf_model):
        try:
            with _attention(hf_model, _CAUSAL_SDPA):
                check.first(first(hf_model))
                for size in sizes:
                    name = prefill_names(size, sizes[0])[0]
                    programs[name] = export_module(first(hf_model), (ids(size), index(), *cache), {}, None)
        except CuvilError as e:  # attention that is not plain SDPA (softcapping, ALiBi, its own kernels)
            skipped = str(e)
            programs.clear()
        # SDPA (one op the importer keeps whole: cuvil.attention), else the model's written-out
        # attention ("eager": what transformers requires for e.g. Gemma 2's logit softcapping) with
        # an additive mask, which is also what a model with its own attention code may expect
        for implementation in ("sdpa", "eager"):
            try:
                with _attention(hf_model, implementation):
                    additive = implementation == "eager"
                    check.steps(step(hf_model, additive), implementation)
                    for size in sizes:
                        name = prefill_names(size, sizes[0])[1]
                        programs[name] = export_module(step(hf_model, additive), (ids(size), index(), index(), *cache), {}, None)
                    programs["decode"] = export_module(step(hf_model, additive), (ids(1), index(), index(), *cache), {}, None)
                break
            except CuvilError as e:
                if implementation == "eager":
                    raise ImportError_(f"{type(hf_model).__name__}: its prefill/decode step could not be exported: {e}. "
                                       "compile_causal_lm runs the model's own forward with a 4-D attention mask over "
                                       "the cache and cache layers written through transformers' Cache.update; a model "
                                       "that builds its attention from a 2-D mask (e.g. ALiBi's) does not take that") from e
    for name, program in programs.items():
        written = _mutated_inputs(program)
        if written != len(cache):
            raise CuvilError(f"{type(hf_model).__name__}: its {name} step writes {written} of the {len(cache)} KV-cache "
                             "tensors; cuvil needs a model whose attention stores keys and values through transformers' "
                             "Cache.update")
    if skipped is not None:
        warnings.warn(f"{type(hf_model).__name__}: no prefill_first (every prompt chunk runs prefill, the masked "
                      f"attention over the cache): {skipped}", stacklevel=3)
    return programs, cache, skipped


class _StepCheck:
    """The step modules run eagerly before they are exported, against the model's own forward
    on a random prompt (one row, a chunk of up to 16 tokens): the chunk at 0 and one decode
    token after it must give the logits the plain forward gives. A model that reads the 4-D
    mask by another convention (MPT: True is masked out) or ignores the position it is given
    would otherwise export without error and generate wrong tokens. A disagreement is a
    CuvilError naming the step and the size of the difference."""

    def __init__(self, model, max_seq_len: int, prefill_len: int, cache):
        import torch

        # one row and a short chunk: eager steps are shape-generic, and a large model's forward on
        # the CPU is not free (the row's cache is a view of the export's example tensors)
        self.model, self.cache, self.rows = model, cache, [t[:1] for t in cache]
        self.chunk = max(1, min(prefill_len, max_seq_len - 1, 16))
        vocab = int(model.config.get_text_config().vocab_size)
        self.ids = torch.randint(0, vocab, (1, self.chunk + 1), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            self.expected = [model(input_ids=self.ids[:, :n], use_cache=False).logits[:, -1].float()
                             for n in (self.chunk, self.chunk + 1)]
        half = any(t.dtype in (torch.float16, torch.bfloat16) for t in cache)
        self.tolerance = 3e-2 if half else 1e-3

    def first(self, module) -> None:
        import torch

        try:
            self._compare("prefill_first", 0, self._run("prefill_first", module, self.ids[:, :self.chunk],
                                                        torch.tensor([self.chunk - 1])))
        finally:
            self._clear()

    def steps(self, module, implementation: str) -> None:
        import torch

        try:
            name = f"prefill ({implementation} attention)"
            self._compare(name, 0, self._run(name, module, self.ids[:, :self.chunk], torch.tensor([0]),
                                             torch.tensor([self.chunk - 1])))
            name = f"decode ({implementation} attention)"
            self._compare(name, 1, self._run(name, module, self.ids[:, self.chunk:], torch.tensor([self.chunk]),
                                             torch.tensor([0])))
        finally:
            self._clear()

    def _run(self, name: str, module, *args):
        try:
            return module(*args, *self.rows)
        except CuvilError:
            raise
        except Exception as e:  # the model's own code refused the step's arguments
            raise CuvilError(f"its {name} step failed when run eagerly: {type(e).__name__}: {e}") from e

    def _clear(self) -> None:
        for t in self.cache:  # the export's example tensors: zeros again
            t.zero_()

    def _compare(self, name: str, which: int, got) -> None:
        got, expected = got[0], self.expected[which]  # the step's logits
        if tuple(got.shape) != tuple(expected.shape):
            raise CuvilError(f"its {name} step returns logits of shape {list(got.shape)}, the model's forward "
                             f"{list(expected.shape)}")
        err = float((got.float() - expected).abs().max())
        scale = max(1.0, float(expected.abs().max()))
        if not err <= self.tolerance * scale:
            raise CuvilError(f"its {name} step, run eagerly, differs from the model's own forward by {err:.3g} "
                             f"(max |logit| {scale:.3g}): the model does not read the 4-D attention mask or the "
                             "positions the way transformers' attention interface does")


def _check_model(model, max_seq_len: int, batch: int):
    import torch

    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config") or not hasattr(model.config, "get_text_config"):
        raise InputError(f"compile_causal_lm takes a transformers causal LM (e.g. LlamaForCausalLM), got {type(model).__name__}")
    if batch < 1 or max_seq_len < 2:
        raise InputError(f"batch must be >= 1 and max_seq_len >= 2, got batch={batch}, max_seq_len={max_seq_len}")
    config = model.config.get_text_config()
    positions = getattr(config, "max_position_embeddings", None)
    if positions is not None and max_seq_len > positions:
        raise InputError(f"max_seq_len {max_seq_len} exceeds the model's max_position_embeddings ({positions})")
    window = getattr(config, "sliding_window", None)
    if window is not None and getattr(config, "use_sliding_window", True) and max_seq_len > window:
        raise InputError(f"max_seq_len {max_seq_len} exceeds the model's sliding window ({window}); a sliding-window "
                         "cache is not supported: compile with max_seq_len <= the window")
    return model.config


def _cache_layout(model, batch: int, max_seq_len: int) -> list[tuple[tuple[int, ...], object]]:
    """(shape, dtype) of every layer's keys then values, found by running the model on one
    token with transformers' own cache: heads, head dims and dtypes as the model stores them."""
    import torch

    with torch.no_grad():
        out = model(input_ids=torch.zeros((batch, 1), dtype=torch.int64), use_cache=True)
    layers = getattr(out.past_key_values, "layers", None)
    if not layers or any(getattr(layer, "keys", None) is None for layer in layers):
        raise CuvilError(f"{type(model).__name__} returned no per-layer key/value cache from a forward with use_cache=True")
    layout = []
    for layer in layers:
        for t in (layer.keys, layer.values):
            if t.dim() != 4:
                raise CuvilError(f"{type(model).__name__}: expected [batch, heads, seq, head_dim] cache tensors, got {list(t.shape)}")
            layout.append(((t.shape[0], t.shape[1], max_seq_len, t.shape[3]), t.dtype))
    return layout


def _mutated_inputs(program) -> int:
    """How many user inputs the program writes (after functionalization)."""
    return len(program.run_decompositions({}).graph_signature.user_inputs_to_mutate)


def _token_ids(value):
    if value is None:
        return None
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


_CAUSAL_SDPA = "cuvil_causal_sdpa"  # prefill_first's attention implementation (registered with transformers)


class _attention:
    """Run the model's attention as ``implementation`` while exporting, whatever it was loaded
    with; restored afterwards. ``"sdpa"``: SDPA with the mask the model builds (one op the
    importer keeps whole: cuvil.attention). ``_CAUSAL_SDPA``: SDPA with ``is_causal`` and no
    mask; transformers builds no mask for an implementation it has no mask function for (under
    torch.export its "sdpa" would build one, never trusting is_causal)."""

    def __init__(self, model, implementation: str):
        self.config, self.implementation = model.config, implementation
        self.saved = getattr(model.config, "_attn_implementation", None)

    def __enter__(self):
        if self.implementation == _CAUSAL_SDPA:
            from transformers import AttentionInterface

            AttentionInterface.register(_CAUSAL_SDPA, _causal_sdpa)
        if self.saved is not None:
            self.config._attn_implementation = self.implementation

    def __exit__(self, *exc):
        if self.saved is not None:
            self.config._attn_implementation = self.saved


def _causal_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """SDPA with is_causal and no mask over the chunk's own keys; grouped key/value heads are
    repeated (transformers' ``repeat_kv``, as its masked path does): cuvil.attention takes
    equal head counts, not SDPA's ``enable_gqa``."""
    import torch
    from transformers.integrations.sdpa_attention import repeat_kv

    extra = sorted(k for k in ("softcap", "position_bias", "sinks") if kwargs.get(k) is not None)
    if extra:
        raise CuvilError(f"{type(module).__name__}: prefill_first's causal attention does not take {', '.join(extra)}")
    groups = query.shape[1] // key.shape[1]
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, dropout_p=dropout, scale=scaling, is_causal=True)
    return out.transpose(1, 2).contiguous(), None


def _step_results(logits, next_position):
    """A step's results (STEP_OUTPUTS): the float32 logits after the chosen token (as
    transformers' generate reads them), their greedy choice ``[batch, 1]`` and the position that
    token goes to. A greedy generate feeds the last two to the next decode call as they are, on
    the device (runtime/generation.py).

    The choice is the first maximum, as torch's argmax, taken in two steps: the maximum and its
    first index in each run of 128 logits, then the first run holding the largest maximum. IREE
    3.13's CUDA codegen gave the one-pass argmax over a 32000-wide row, fused after Llama-1B's
    lm_head, 128 KB of shared memory (past sm_89's 99 KB), and compiled the max-then-least-index
    form to -1 on the H100 (docs/known-issues.md); this form was checked there against torch."""
    import torch

    logits = logits.float()
    batch, vocab = logits.shape
    run = 128
    padded = torch.nn.functional.pad(logits, (0, (-vocab) % run), value=float("-inf"))
    best, first = padded.view(batch, -1, run).max(-1)
    which = best.argmax(-1, keepdim=True)
    return logits, which * run + first.gather(1, which), next_position


def _step_classes():
    """(the step of prefill and decode, the step of prefill_first): torch modules over a
    transformers causal LM."""
    import torch
    from transformers.cache_utils import Cache, StaticLayer

    class ArgumentLayer(StaticLayer):
        """A cache layer over two tensors the exported function takes as arguments: ``update``
        writes the new keys and values into slots ``start .. end-1`` in place (a slice at a
        dynamic offset: IREE updates the argument's buffer there) and returns what attention
        reads: the filled prefix, slots ``0 .. end-1``, or with ``own`` the new keys and values
        alone (a chunk that sees nothing before it)."""

        def __init__(self, keys, values, start, end, own: bool = False):
            super().__init__(max_cache_len=keys.shape[2])
            self.keys, self.values, self.start, self.end, self.own = keys, values, start, end, own
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            length = key_states.shape[2]
            key_states, value_states = key_states.to(self.keys.dtype), value_states.to(self.values.dtype)
            self.keys.narrow(2, self.start, length).copy_(key_states)
            self.values.narrow(2, self.start, length).copy_(value_states)
            if self.own:
                return key_states, value_states
            return self.keys[:, :, :self.end], self.values[:, :, :self.end]

    class Step(torch.nn.Module):
        """prefill and decode: tokens at ``position ..`` attend to the cache up to their own position."""

        def __init__(self, model, additive: bool = False):
            super().__init__()
            self.model, self.additive = model, additive

        def forward(self, input_ids, position, last, *cache):
            batch, length = input_ids.shape
            start = position.item()  # a symbolic size: the functions take any position
            torch._check(start >= 0)
            torch._check(start + length <= cache[0].shape[2])
            end = start + length
            index = position + torch.arange(length, dtype=torch.int64)
            # token i sees the cache up to its own position
            seen = torch.arange(end, dtype=torch.int64)[None, :] <= index[:, None]
            mask = seen[None, None].expand(batch, 1, length, end)
            if self.additive:  # the written-out ("eager") attention adds its mask to the scores
                dtype = cache[0].dtype
                mask = (~mask).to(dtype) * torch.finfo(dtype).min
            layers = [ArgumentLayer(cache[i], cache[i + 1], start, end) for i in range(0, len(cache), 2)]
            out = self.model(input_ids=input_ids, position_ids=index[None, :].expand(batch, length), attention_mask=mask,
                             past_key_values=Cache(layers=layers), use_cache=True, logits_to_keep=last)
            return _step_results(out.logits[:, 0], position + last + 1)

    class FirstStep(torch.nn.Module):
        """prefill_first: tokens at positions ``0 .. P-1`` attend causally to each other only
        (exported under ``_attention(model, _CAUSAL_SDPA)``); their keys and values are written
        to slots ``0 .. P-1``."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, last, *cache):
            batch, length = input_ids.shape
            layers = [ArgumentLayer(cache[i], cache[i + 1], 0, length, own=True) for i in range(0, len(cache), 2)]
            index = torch.arange(length, dtype=torch.int64)[None, :].expand(batch, length)
            out = self.model(input_ids=input_ids, position_ids=index, attention_mask=None,
                             past_key_values=Cache(layers=layers), use_cache=True, logits_to_keep=last)
            return _step_results(out.logits[:, 0], last + 1)

    return Step, FirstStep

"""``compile_causal_lm``: a Hugging Face causal LM as one module with two functions over a KV
cache that stays on the device and is updated in place (docs/generation.md).

    prefill(input_ids[B, P], position[1], last[1], *cache) -> logits[B, V]
    decode(input_ids[B, 1], position[1], last[1], *cache) -> logits[B, V]

``cache`` is the keys and values of every layer, ``[B, kv_heads, max_seq_len, head_dim]`` each,
arguments the functions write in place (``index_copy_`` at ``position``: IREE ties them, no copy
per call). The tokens of a call sit at positions ``position .. position+T-1``; each attends to
the cache up to its own position (a boolean mask built from ``position``, so decode's attention
is one ``cuvil.attention`` of a single query against the whole cache). ``last`` picks the
position whose logits are returned (the prompt's last token in a padded prefill chunk).

The model runs its own forward (HF's modeling code, its attention through SDPA) with a cache
object whose layers write into those arguments; so any HF causal LM whose attention goes
through ``Cache.update`` and takes a 4-D mask compiles (checked: GPT-2, Llama, Mistral, Qwen2).
"""

from __future__ import annotations

from cuvil_mlir.core.diagnostics import CuvilError, InputError

FUNCTIONS = ("prefill", "decode")


def compile_causal_lm(hf_model, *, max_seq_len: int, batch: int = 1, prefill_len: int | None = None, target: str = "cpu",
                      precision: str = "fp32", opt_level: int = 3, params: str = "auto"):
    """Compile ``hf_model`` (a transformers ``*ForCausalLM``) for ``batch`` sequences of up to
    ``max_seq_len`` tokens (prompt and new tokens); prompts are prefilled ``prefill_len`` tokens
    at a time (default: min(max_seq_len, 128)). ``params``: the weights ``"inline"`` in each
    target's module or ``"external"`` (one parameter archive both functions and all targets
    read); ``"auto"``: external from 64 MiB of weights (cuvil_mlir.compile's rule). Returns a
    ``cuvil_mlir.runtime.generation.CausalLM``."""
    import torch

    from cuvil_mlir.compiler.export_modes import export_module
    from cuvil_mlir.compiler.pipeline import Options, compile_functions
    from cuvil_mlir.runtime.generation import CausalLM

    config = _check_model(hf_model, max_seq_len, batch)
    prefill_len = min(max_seq_len, 128) if prefill_len is None else prefill_len
    if not 1 <= prefill_len <= max_seq_len:
        raise InputError(f"prefill_len must be in 1..max_seq_len ({max_seq_len}), got {prefill_len}")
    cache = [torch.zeros(shape, dtype=dtype) for shape, dtype in _cache_layout(hf_model, batch, max_seq_len)]
    step = _Step(hf_model)

    def example(length):  # distinct tensors: torch.export would trace one tensor passed twice as one input
        return (torch.zeros((batch, length), dtype=torch.int64), torch.zeros(1, dtype=torch.int64),
                torch.zeros(1, dtype=torch.int64), *cache)

    with _sdpa_attention(hf_model), torch.no_grad():
        programs = {"prefill": export_module(step, example(prefill_len), {}, None),
                    "decode": export_module(step, example(1), {}, None)}
    for name, program in programs.items():
        written = _mutated_inputs(program)
        if written != len(cache):
            raise CuvilError(f"{type(hf_model).__name__}: its {name} step writes {written} of the {len(cache)} KV-cache "
                             "tensors; cuvil needs a model whose attention stores keys and values through transformers' "
                             "Cache.update")
    options = Options(target=target, opt_level=opt_level, precision=precision, params=params)
    modules, metadata, parameters = compile_functions(programs, options, entry="decode")
    generation = getattr(hf_model, "generation_config", None)
    metadata["causal_lm"] = {
        "architecture": config.model_type,
        "batch": batch,
        "max_seq_len": max_seq_len,
        "prefill_len": prefill_len,
        "vocab_size": int(config.get_text_config().vocab_size),
        "cache": [{"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")} for t in cache],
        "eos_token_id": _token_ids(getattr(generation, "eos_token_id", None)),
        "pad_token_id": getattr(generation, "pad_token_id", None),
    }
    return CausalLM(modules, metadata, parameters=parameters)


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


class _sdpa_attention:
    """Run the model's attention through SDPA while exporting (one op the importer keeps whole:
    cuvil.attention), whatever implementation it was loaded with; restored afterwards."""

    def __init__(self, model):
        self.config = model.config
        self.saved = getattr(model.config, "_attn_implementation", None)

    def __enter__(self):
        if self.saved is not None:
            self.config._attn_implementation = "sdpa"

    def __exit__(self, *exc):
        if self.saved is not None:
            self.config._attn_implementation = self.saved


def _step_class():
    import torch
    from transformers.cache_utils import Cache, StaticLayer

    class ArgumentLayer(StaticLayer):
        """A cache layer over two tensors the exported function takes as arguments: ``update``
        writes the new keys and values into slots ``start .. end-1`` in place (a slice at a
        dynamic offset: IREE updates the argument's buffer there) and returns the filled prefix,
        slots ``0 .. end-1``: attention reads only those."""

        def __init__(self, keys, values, start, end):
            super().__init__(max_cache_len=keys.shape[2])
            self.keys, self.values, self.start, self.end = keys, values, start, end
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            length = key_states.shape[2]
            self.keys.narrow(2, self.start, length).copy_(key_states.to(self.keys.dtype))
            self.values.narrow(2, self.start, length).copy_(value_states.to(self.values.dtype))
            return self.keys[:, :, :self.end], self.values[:, :, :self.end]

    class Step(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

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
            layers = [ArgumentLayer(cache[i], cache[i + 1], start, end) for i in range(0, len(cache), 2)]
            out = self.model(input_ids=input_ids, position_ids=index[None, :].expand(batch, length), attention_mask=mask,
                             past_key_values=Cache(layers=layers), use_cache=True, logits_to_keep=last)
            return out.logits[:, 0]

    return Step


def _Step(model):
    return _step_class()(model)

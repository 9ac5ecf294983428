"""``CausalLM``: token generation with a compiled causal LM (cuvil_mlir/compiler/causal_lm.py).

The package holds one module per target with the functions ``prefill_first``, ``prefill`` and
``decode``, and metadata ``causal_lm`` (batch, max_seq_len, prefill_len, the cache's tensors,
the functions: a package written before ``prefill_first`` lists none and has the other two). The KV cache is
allocated once on the device when a target is chosen and passed to every call as it is: the
functions update it in place, nothing of it crosses to the host. Greedy generation keeps the
tokens on the device too: each step returns its greedy ``next_token`` and ``next_position``, the
next decode call takes them as they are and is queued before the host reads the tokens before
it (``_greedy_on_device``), so only B token ids a step come back. Sampling (and a package whose
steps return logits alone) reads the logits back and uploads the chosen ids.

A prompt is prefilled in chunks of the package's sizes (``prefill_lens``; one size, ``prefill_len``,
in a package of one), each the largest size that fits what is left of the prompt. The chunk at
position 0 runs ``prefill_first`` where the package has it (causal attention among its own
tokens, no mask), later chunks ``prefill`` (``prefill_first_N`` / ``prefill_N`` for a larger size
N). When no size fits what is left, the last chunk is the smallest size ending at the prompt's
last token: it starts earlier (recomputing a few cached positions gives the same keys and
values), or is padded at its end when the whole prompt is shorter (the pads come after every real
token, so causal attention keeps them out of the real tokens' results; their cache slots are
overwritten by decode before any token attends to them).
"""

from __future__ import annotations

import time

import numpy as np

from cuvil_mlir.core.diagnostics import CuvilError, InputError, PackageError
from cuvil_mlir.runtime import package
from cuvil_mlir.runtime.compiled import CompiledModel, from_package, supplied_parameters


OLD_FUNCTIONS = ("prefill", "decode")  # a package written before prefill_first (no "functions" in its metadata)
DEVICE_GREEDY_OUTPUTS = ("logits", "next_token", "next_position")  # compiler/causal_lm.py STEP_OUTPUTS


class CausalLM(CompiledModel):
    """A compiled causal LM: ``generate(input_ids, max_new_tokens=...)`` like transformers'."""

    def __init__(self, modules, metadata: dict, *, prefer=None, parameters=None):
        super().__init__(modules, metadata, prefer=prefer, parameters=parameters)
        try:
            lm = metadata["causal_lm"]
            self.batch, self.max_seq_len, self.prefill_len = int(lm["batch"]), int(lm["max_seq_len"]), int(lm["prefill_len"])
            self.cache_layout = [(tuple(c["shape"]), c["dtype"]) for c in lm["cache"]]
            self.vocab_size = int(lm["vocab_size"])
            self.eos_token_id = lm.get("eos_token_id")
            self.pad_token_id = lm.get("pad_token_id")
            self.functions = tuple(lm.get("functions", OLD_FUNCTIONS))
            self.prefill_lens = tuple(sorted(int(n) for n in lm.get("prefill_lens", [self.prefill_len])))
            if self.prefill_lens[0] != self.prefill_len:
                raise ValueError(f"prefill_len {self.prefill_len} is not the smallest of prefill_lens {list(self.prefill_lens)}")
            # the tokens of a call of each prefill function
            self.chunk_of = {name: n for n in self.prefill_lens for name in prefill_names(n, self.prefill_len)}
            self.step_outputs = tuple(lm.get("step_outputs", ("logits",)))
        except (KeyError, TypeError, ValueError) as e:
            raise PackageError(f"the package's causal_lm metadata is malformed ({type(e).__name__}: {e})") from e
        # greedy generate: tokens and positions passed between the steps on the device, calls
        # queued ahead (_greedy_on_device); a package from before the steps returned them, or
        # False: each token read back, chosen on the host and uploaded (as sampling does)
        self.device_greedy = self.step_outputs == DEVICE_GREEDY_OUTPUTS
        self._cache: list | None = None  # device buffers of the session that holds them
        self._cache_session = None

    def __call__(self, *args, **kwargs):
        raise InputError("a compiled causal LM is run with .generate(input_ids, max_new_tokens=...), or .prefill / .decode")

    def generate(self, input_ids, max_new_tokens: int = 20, *, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None, eos_token_id=None, pad_token_id=None,
                 streamer=None, progress: bool = False, generator=None, attention_mask=None, **unsupported):
        """The prompt plus up to ``max_new_tokens`` new tokens per row, as transformers'
        ``generate`` returns them (greedy by default; ``do_sample`` samples with ``temperature``,
        ``top_k``, ``top_p``). Rows that produced an end-of-sequence token are padded after it,
        and generation stops when every row has. ``streamer``: an object with ``put(ids)`` and
        ``end()`` (transformers' TextStreamer); ``progress``: a progress bar on the terminal
        that shows the tokens of row 0 as they come. ``attention_mask`` (transformers'
        ``[batch, length]``) may pad rows on the left, as transformers' tokenizers do for
        decoder-only models: the rows are then generated a prompt length at a time (the
        compiled steps attend to every cached token, so rows of different lengths do not share
        calls) and come back as transformers returns them, the padding kept. Fewer rows than the
        compiled batch are fine: the free rows run a copy of the first and are dropped. Other
        transformers arguments are an error that names them."""
        import torch

        if unsupported:
            raise InputError(f"generate does not take {', '.join(sorted(unsupported))}; it takes max_new_tokens, do_sample, "
                             "temperature, top_k, top_p, eos_token_id, pad_token_id, streamer, progress, generator, attention_mask")
        sampling = dict(do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p, eos_token_id=eos_token_id,
                        pad_token_id=pad_token_id, progress=progress, generator=generator)
        if attention_mask is not None:
            ids = self._check_prompt(input_ids, 0, fewer_rows=True)
            mask = torch.as_tensor(attention_mask)
            if tuple(mask.shape) != tuple(ids.shape):
                raise InputError(f"attention_mask has shape {list(mask.shape)}; input_ids has {list(ids.shape)}")
            if not bool((mask != 0).all()):
                return self._generate_left_padded(ids, mask != 0, max_new_tokens, streamer, sampling)
        ids = self._check_prompt(input_ids, max_new_tokens, fewer_rows=True)
        rows = ids.shape[0]
        eos, pad = self._eos_and_pad(eos_token_id, pad_token_id)
        bar = _Progress(max_new_tokens) if progress else None
        if streamer is not None:
            streamer.put(ids.cpu())
        out = [ids]
        # fewer prompts than the compiled batch: the free rows repeat the first prompt, and their
        # tokens are dropped (they count as finished from the start, so they never hold up the end)
        finished = torch.arange(self.batch) >= rows
        prompt = torch.cat([ids, ids[:1].expand(self.batch - rows, -1)]) if rows < self.batch else ids
        if not do_sample and self.device_greedy:
            tokens = self._greedy_on_device(prompt, max_new_tokens)
        else:
            tokens = self._tokens_through_host(prompt, rows, pad, max_new_tokens,
                                               lambda logits: _choose(logits, do_sample, temperature, top_k, top_p, generator))
        for token in tokens:
            token = torch.where(finished, torch.full_like(token, pad), token)
            out.append(token[:rows, None])
            if streamer is not None:
                streamer.put(token[:rows].cpu())
            if bar is not None:
                bar.advance(int(token[0]))
            if eos:
                finished |= torch.isin(token, torch.tensor(eos))
                if bool(finished.all()):
                    break
        tokens.close()  # a greedy generation on the device waits for the step it queued ahead
        if streamer is not None:
            streamer.end()
        if bar is not None:
            bar.close()
        return torch.cat(out, dim=1).to(ids.device)

    def _eos_and_pad(self, eos_token_id, pad_token_id) -> tuple[list[int], int]:
        """The end-of-sequence ids (given, else the model's) and the id finished rows are padded
        with (given, else the model's pad, else its first end-of-sequence id, else 0)."""
        eos = _as_list(eos_token_id if eos_token_id is not None else self.eos_token_id)
        pad = pad_token_id if pad_token_id is not None else (self.pad_token_id if self.pad_token_id is not None else (eos[0] if eos else 0))
        return eos, pad

    def _generate_left_padded(self, ids, keep, max_new_tokens: int, streamer, sampling: dict):
        """``generate`` for rows padded on the left (``keep``: the mask as booleans): each
        prompt length's rows generated together without their padding, the results put back
        under the padded prompts, new tokens padded to the longest row's as transformers does."""
        import torch

        lengths = keep.sum(dim=1)
        for row in range(ids.shape[0]):
            n = int(lengths[row])
            if n == 0:
                raise InputError(f"attention_mask row {row} keeps no token: every prompt needs at least one")
            if not bool(keep[row, ids.shape[1] - n:].all()):
                raise InputError(f"attention_mask row {row} is not left padding (zeros, then ones): pad prompts on the left, as "
                                 "transformers does for decoder-only models (tokenizer.padding_side = 'left')")
        groups = sorted({int(n) for n in lengths})
        if streamer is not None and len(groups) > 1:
            raise InputError("a streamer takes one prompt length at a time; this batch has prompts of "
                             f"{len(groups)} lengths ({', '.join(map(str, groups))} tokens)")
        new = [None] * ids.shape[0]
        for n in groups:
            rows = (lengths == n).nonzero()[:, 0]
            out = self.generate(ids[rows, ids.shape[1] - n:], max_new_tokens, streamer=streamer, **sampling)
            for i, row in enumerate(rows.tolist()):
                new[row] = out[i, n:]
        _, pad = self._eos_and_pad(sampling["eos_token_id"], sampling["pad_token_id"])
        padded = torch.full((ids.shape[0], max(t.shape[0] for t in new)), pad, dtype=ids.dtype)
        for row, tokens in enumerate(new):
            padded[row, :tokens.shape[0]] = tokens
        return torch.cat([ids, padded], dim=1)

    def _tokens_through_host(self, prompt, rows: int, pad: int, max_new_tokens: int, choose):
        """The next token of every row ([batch] int64, torch) per step: for the first ``rows``
        chosen by ``choose`` from the logits read back to the host, ``pad`` for the free rows;
        each step's tokens are uploaded to the next decode call."""
        import torch

        logits = self.prefill(prompt)
        for step in range(max_new_tokens):
            token = choose(logits[:rows])
            if rows < self.batch:
                token = torch.cat([token, torch.full((self.batch - rows,), pad, dtype=token.dtype)])
            yield token
            if step + 1 < max_new_tokens:
                logits = self.decode(token[:, None], prompt.shape[1] + step)

    def _greedy_on_device(self, prompt, max_new_tokens: int):
        """The greedy token of every row ([batch] int64, torch) per step, the tokens and
        positions passed from call to call on the device (each step's ``next_token`` and
        ``next_position`` are the next decode call's inputs) and each call queued before the
        token of the one before is read: the device runs step i+1 while the host reads and
        hands out step i's tokens (8 bytes a row), so no step waits for the host. Closing the
        generator (a finished batch) waits for the step queued ahead; its cache writes are past
        every token kept."""
        import torch

        session = self._session_with_cache()
        results = self._prefill_views(prompt)  # step 0: done when the prefill returns
        last = session.device_zeros((1,), "int64")  # decode's logits row: its one token
        timeline, previous = session.timeline(), None
        queued = 0  # the timeline value of the last call queued
        try:
            for step in range(max_new_tokens):
                read = session.queue_read(results[1:2], after=(timeline, step))
                if step + 1 < max_new_tokens:
                    following = session.invoke_async("decode", [results[1], results[2], last, *self._cache],
                                                     wait=(timeline, step), signal=(timeline, step + 1))
                    queued = step + 1
                token = torch.from_numpy(read()[0][:, 0].astype(np.int64))
                # step `step` is done: the inputs it read (previous) may go; its own results are
                # the next call's inputs and stay until that call is done
                previous, results = results, following if step + 1 < max_new_tokens else None
                yield token
        finally:
            if queued:
                session.wait(timeline, queued)

    def prefill(self, input_ids):
        """Fill the cache with the prompt ``input_ids`` ([batch, L], L <= max_seq_len);
        returns the logits after its last token ([batch, vocab], torch)."""
        import torch

        views = self._prefill_views(input_ids)
        return torch.from_numpy(self._session.to_host(views[:1])[0])

    def _prefill_views(self, input_ids) -> list:
        """The prefill calls of the prompt, waited on; the last one's results on the device."""
        ids = np.ascontiguousarray(self._check_prompt(input_ids, 0).cpu().numpy().astype(np.int64))
        length = ids.shape[1]
        for function, start in self.prefill_calls(length):
            chunk = self.chunk_of[function]
            piece = ids[:, start:start + chunk]
            if piece.shape[1] < chunk:  # a prompt shorter than a chunk: pad its end
                piece = np.concatenate([piece, np.zeros((self.batch, chunk - piece.shape[1]), np.int64)], axis=1)
            last = min(length, start + chunk) - 1 - start
            views = self._run_step(function, _step_inputs(function, piece, start, last))
        return views

    def prefill_calls(self, length: int) -> list[tuple[str, int]]:
        """(function, start position) of each chunk that prefills a prompt of ``length`` tokens:
        from the start, the largest size that fits what is left; when none does, the smallest,
        ending at the prompt's end (overlapping the chunk before it, or padded when it is the
        only one). The chunk at 0 runs ``prefill_first`` where the package has it."""
        calls, position = [], 0
        while position < length:
            fits = [n for n in self.prefill_lens if n <= length - position]
            size = fits[-1] if fits else self.prefill_len
            start = position if fits else max(0, length - size)
            first, later = prefill_names(size, self.prefill_len)
            calls.append((first if start == 0 and first in self.functions else later, start))
            position = start + size
        return calls

    def decode(self, token_ids, position: int):
        """One step: ``token_ids`` ([batch, 1]) at ``position`` (the number of tokens before it
        in the cache); returns the next logits ([batch, vocab], torch)."""
        import torch

        ids = torch.as_tensor(token_ids)
        if tuple(ids.shape) != (self.batch, 1):
            raise InputError(f"decode takes token ids of shape [{self.batch}, 1], got {list(ids.shape)}")
        if not 0 <= position < self.max_seq_len:
            raise InputError(f"decode position {position} is outside the cache (max_seq_len {self.max_seq_len})")
        ids = np.ascontiguousarray(ids.cpu().numpy().astype(np.int64))
        views = self._run_step("decode", _step_inputs("decode", ids, position, 0))
        return torch.from_numpy(self._session.to_host(views[:1])[0])

    def step_arguments(self, function: str = "decode", position: int | None = None, token_ids=None) -> list[np.ndarray]:
        """Host arrays for one call of ``function`` outside a session (``cuvil profile``, IREE's
        tools): the token ids (``token_ids``, else zeros), the position (default: the last one
        the function can run at, the longest cache read), the index of the row whose logits
        come back, and a zero-filled cache."""
        if function not in self.functions:
            raise InputError(f"this package has no function '{function}'; it has {', '.join(self.functions)}")
        length = 1 if function == "decode" else self.chunk_of[function]
        if is_first_chunk(function):
            if position not in (None, 0):
                raise InputError(f"prefill_first runs at position 0, got position {position}")
        else:
            position = self.max_seq_len - length if position is None else position
            if not 0 <= position <= self.max_seq_len - length:
                raise InputError(f"{function} of {length} token(s) at position {position} runs past the cache "
                                 f"(max_seq_len {self.max_seq_len}): positions 0..{self.max_seq_len - length}")
        ids = np.zeros((self.batch, length), np.int64) if token_ids is None else np.asarray(token_ids, np.int64)
        if ids.shape != (self.batch, length):
            raise InputError(f"{function} takes token ids of shape [{self.batch}, {length}], got {list(ids.shape)}")
        return [*_step_inputs(function, ids, position, length - 1),
                *(np.zeros(shape, np.dtype(dtype)) for shape, dtype in self.cache_layout)]

    def _run_step(self, function: str, args: list) -> list:
        """One call of ``function`` with ``args`` (host arrays) and the cache, waited on; its
        results (``step_outputs``) on the device."""
        session = self._session_with_cache()
        return session.invoke_resident(function, [*args, *self._cache], kept_inputs=True)

    def _session_with_cache(self):
        if self._session is None:
            self.select()
        if self._cache_session is not self._session:  # a new device: a new cache on it
            self._cache = [self._session.device_zeros(shape, dtype) for shape, dtype in self.cache_layout]
            self._cache_session = self._session
        return self._session

    def _check_prompt(self, input_ids, max_new_tokens: int, fewer_rows: bool = False):
        import torch

        ids = torch.as_tensor(input_ids)
        if ids.dim() == 1:
            ids = ids[None, :]
        if ids.dim() != 2 or ids.dtype not in (torch.int64, torch.int32):
            raise InputError(f"input_ids must be integer token ids of shape [batch, length], got {ids.dtype} {list(ids.shape)}")
        if ids.shape[0] > self.batch or (ids.shape[0] < self.batch and not fewer_rows) or ids.shape[0] < 1:
            raise InputError(f"this model was compiled for batch {self.batch}; input_ids has batch {ids.shape[0]}"
                             + (" (generate takes up to that many rows)" if fewer_rows else ""))
        if ids.shape[1] < 1:
            raise InputError("input_ids is empty: the prompt needs at least one token")
        if ids.shape[1] + max_new_tokens > self.max_seq_len:
            raise InputError(f"prompt ({ids.shape[1]} tokens) + max_new_tokens ({max_new_tokens}) exceeds max_seq_len "
                             f"{self.max_seq_len} the model was compiled for")
        if bool((ids < 0).any()) or bool((ids >= self.vocab_size).any()):
            raise InputError(f"input_ids has token ids outside the vocabulary [0, {self.vocab_size})")
        return ids.to(torch.int64)


def load(path, prefer=None, *, verify: bool = True, parameters=None):
    """A package on this machine's first usable target: a ``CausalLM`` for a causal LM's
    package (metadata ``causal_lm``), else a ``CompiledModel`` (``verify``: its parameter
    archive's sha256 is checked; ``parameters``: supplied weights, runtime/compiled.py ``load``)."""
    metadata, modules = package.read(path)
    if "causal_lm" not in metadata:
        return from_package(path, metadata, modules, prefer, verify=verify, parameters=parameters)
    if parameters is not None:  # supplied: checked per key against what the functions read
        parameters = supplied_parameters(path, metadata, parameters)
    else:
        parameters = package.read_parameters(path, metadata)
    if parameters is not None and parameters.arrays is None and parameters.sha256:
        parameters.view()  # maps it: a truncated file fails here
        if verify:
            parameters.verify()
    lm = CausalLM(modules, metadata, prefer=prefer, parameters=parameters)
    lm.select()
    return lm


def prefill_names(size: int, smallest: int) -> tuple[str, str]:
    """(prefill_first, prefill) function names of a chunk size: the plain names for the
    smallest size, ``prefill_first_N`` / ``prefill_N`` for a larger one."""
    suffix = "" if size == smallest else f"_{size}"
    return f"prefill_first{suffix}", f"prefill{suffix}"


def is_first_chunk(function: str) -> bool:
    """Whether ``function`` is a ``prefill_first`` of some chunk size (it runs at position 0 and
    takes no position)."""
    return function.startswith("prefill_first")


def _step_inputs(function: str, ids: np.ndarray, position: int, last: int) -> list[np.ndarray]:
    """A step's inputs before the cache: the token ids, the position (not for ``prefill_first``,
    which runs at 0) and the index of the token whose logits come back."""
    index = [np.array([last], np.int64)]
    return [ids, *index] if is_first_chunk(function) else [ids, np.array([position], np.int64), *index]


def _as_list(value) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def _choose(logits, do_sample: bool, temperature: float, top_k, top_p, generator):
    """The next token per row: argmax, or a sample as transformers' warpers draw it
    (temperature, then top-k, then top-p). Greedy is numpy's argmax on one host thread (the first
    maximum, as torch's): torch's runs its intra-op thread pool over a batch's [B, vocab] logits,
    whose threads then spin while the next call waits on the GPU (a decode call after a torch
    argmax took 8.8 ms on an H100 host, after numpy's 2.2 ms; benchmarks/gpu/generate_h200.py
    ``phases``). Same tokens; on the CPU the same decode rate within noise. The steps
    return float32 logits (numpy's float16 argmax took 0.9 ms for [8, 32000] on the H100 host,
    float32's 0.05 ms); a package from before that may return 16-bit ones."""
    import torch

    if not do_sample:
        if isinstance(logits, torch.Tensor):
            host = (logits.float() if logits.dtype == torch.bfloat16 else logits).detach().cpu().numpy()
        else:
            host = np.asarray(logits)
        return torch.from_numpy(np.argmax(host.astype(np.float32, copy=False), axis=-1).astype(np.int64))
    logits = logits.float()
    if temperature <= 0:
        raise InputError(f"temperature must be > 0, got {temperature}")
    logits = logits / temperature
    if top_k is not None and top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        ordered, order = torch.sort(logits, descending=False)
        drop = ordered.softmax(-1).cumsum(-1) <= 1 - top_p
        drop[:, -1] = False
        logits = logits.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator)[:, 0]


class _Progress:
    """A rich progress bar over the new tokens, its text the latest ids of row 0."""

    def __init__(self, total: int):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[rate]} tok/s"), transient=False)
        self.task = self.bar.add_task("", total=total, rate="-")
        self.tokens: list[int] = []
        self.start = time.perf_counter()
        self.bar.start()

    def advance(self, token: int) -> None:
        self.tokens.append(token)
        rate = f"{len(self.tokens) / max(time.perf_counter() - self.start, 1e-9):.1f}"
        self.bar.update(self.task, advance=1, description=" ".join(map(str, self.tokens[-12:])), rate=rate)

    def close(self) -> None:
        self.bar.stop()

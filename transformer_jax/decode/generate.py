"""Generation for ``DecoderLM``: prompts prefilled in one pass into a preallocated KV cache, then
one token per step, the whole loop inside ``jax.jit``.

Prompts of different lengths are right-padded with ``prompt_lengths_B`` (see ``decode.loop``):
the common prefix is prefilled at once, each row's remaining prompt tokens are forced in the
loop, so every token sits at its true position in the cache and no padding is attended.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Int

from transformer_jax.core import compiler
from transformer_jax.decode.beam import BeamOutput, beam_loop
from transformer_jax.decode.cache import gather_rows, repeat_rows
from transformer_jax.decode.loop import Generation, as_graph, check_length, merge, sample_loop
from transformer_jax.decode.strategies import Greedy, SamplingConfig


def _prefill(model, seq_BL, start: int):
    check_length(getattr(model, "cfg", None), seq_BL.shape[1], "prompt length + max_new_tokens")
    logits, aux = model(seq_BL[:, :start], cache=model.init_cache(seq_BL.shape[0], seq_BL.shape[1]))
    return logits, aux["cache"]


def _step(model):
    def step(tokens_B1, cache):
        logits, aux = model(tokens_B1, cache=cache)
        return logits[:, -1], aux["cache"]

    return step


@functools.partial(
    compiler.jit, static_argnames=("graphdef", "start", "max_new_tokens", "sampling", "eos_id", "return_logits")
)
def _sample(graphdef, params, seq_BL, lengths_B, key, *, start, max_new_tokens, sampling, eos_id, return_logits):
    model = merge(graphdef, params)
    logits, cache = _prefill(model, seq_BL, start)
    return sample_loop(
        _step(model),
        cache,
        logits[:, -1],
        seq_BL,
        lengths_B,
        start=start,
        max_new_tokens=max_new_tokens,
        key=key,
        sampling=sampling,
        eos_id=eos_id,
        prefill_logits_BTV=logits,
        return_logits=return_logits,
    )


@functools.partial(
    compiler.jit, static_argnames=("graphdef", "start", "beam_size", "max_new_tokens", "alpha", "eos_id")
)
def _beam(graphdef, params, seq_BL, lengths_B, *, start, beam_size, max_new_tokens, alpha, eos_id):
    model = merge(graphdef, params)
    logits, cache = _prefill(model, seq_BL, start)
    return beam_loop(
        _step(model),
        repeat_rows(cache, beam_size),
        logits[:, -1],
        seq_BL,
        lengths_B,
        start=start,
        beam_size=beam_size,
        max_new_tokens=max_new_tokens,
        alpha=alpha,
        eos_id=eos_id,
        reorder=gather_rows,
    )


def prompt_buffer(prompt_BP, prompt_lengths_B, max_new_tokens: int):
    """(seq_BL with the prompts and room for the new tokens, lengths_B, start = shortest prompt)."""
    prompt = np.asarray(prompt_BP, np.int32)
    if prompt.ndim != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt_BP has shape {prompt.shape}; expected [batch, length >= 1]")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 1")
    B, P = prompt.shape
    lengths = np.full((B,), P, np.int32) if prompt_lengths_B is None else np.asarray(prompt_lengths_B, np.int32)
    if lengths.shape != (B,) or lengths.min() < 1 or lengths.max() > P:
        raise ValueError(f"prompt_lengths_B={lengths.tolist()} must hold {B} lengths in [1, {P}] (right padding)")
    seq = np.zeros((B, P + max_new_tokens), np.int32)
    seq[:, :P] = prompt
    return jnp.asarray(seq), jnp.asarray(lengths), int(lengths.min())


def generate(
    model_or_graphdef,
    params=None,
    *,
    prompt_BP: Int[ArrayLike, "B P"],
    max_new_tokens: int,
    prompt_lengths_B: Int[ArrayLike, " B"] | None = None,
    key: jax.Array | None = None,
    sampling: SamplingConfig = Greedy(),
    eos_id: int | None = None,
    return_logits: bool = False,
) -> Generation:
    """Up to ``max_new_tokens`` new tokens per prompt (fewer after an ``eos_id``) chosen by
    ``sampling`` (greedy, temperature, top-k, top-p); deterministic for a ``key``.

    Pass a DecoderLM or any nnx.Module with its interface (`decode.loop.CachedLM`), or a graphdef
    and its state(s) (``(params, model_state)`` of a TrainState).
    ``prompt_lengths_B`` (default: all ``P``) gives right-padded prompts their lengths.
    ``return_logits`` keeps every step's logits in ``Generation.logits`` (tests, scoring).
    """
    graphdef, params = as_graph(model_or_graphdef, params)
    seq, lengths, start = prompt_buffer(prompt_BP, prompt_lengths_B, max_new_tokens)
    key = jax.random.key(0) if key is None else key
    return _sample(
        graphdef,
        params,
        seq,
        lengths,
        key,
        start=start,
        max_new_tokens=max_new_tokens,
        sampling=sampling,
        eos_id=eos_id,
        return_logits=return_logits,
    )


def lower_generate(
    graphdef,
    params,
    seq_BL,
    lengths_B,
    key,
    *,
    start: int,
    max_new_tokens: int,
    sampling: SamplingConfig = Greedy(),
    eos_id: int | None = None,
):
    """The program `generate` runs, lowered for these arguments (arrays or ShapeDtypeStructs with
    shardings; ``seq_BL`` holds the prompts and room for the new tokens, as from `prompt_buffer`):
    ``.compile()`` it for a target without running it (``transformer-jax compile --what decode``)."""
    return _sample.lower(
        graphdef,
        params,
        seq_BL,
        lengths_B,
        key,
        start=start,
        max_new_tokens=max_new_tokens,
        sampling=sampling,
        eos_id=eos_id,
        return_logits=False,
    )


def beam_search(
    model_or_graphdef,
    params=None,
    *,
    prompt_BP: Int[ArrayLike, "B P"],
    max_new_tokens: int,
    prompt_lengths_B: Int[ArrayLike, " B"] | None = None,
    beam_size: int = 4,
    alpha: float = 0.6,
    eos_id: int | None = None,
) -> BeamOutput:
    """The ``beam_size`` best continuations of each prompt (``decode.beam``), best first."""
    if beam_size < 1:
        raise ValueError(f"beam_size={beam_size} must be >= 1")
    graphdef, params = as_graph(model_or_graphdef, params)
    seq, lengths, start = prompt_buffer(prompt_BP, prompt_lengths_B, max_new_tokens)
    return _beam(
        graphdef,
        params,
        seq,
        lengths,
        start=start,
        beam_size=beam_size,
        max_new_tokens=max_new_tokens,
        alpha=float(alpha),
        eos_id=eos_id,
    )

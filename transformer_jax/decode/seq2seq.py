"""Decoding for ``EncoderDecoder``: the encoder runs once, the cross-attention keys/values of
its output are projected once (``init_cache``), then the decoder steps from BOS with its
self-attention KV cache, the whole loop inside ``jax.jit``. Sampling or beam search.

Sources are right-padded; ``src_segment_ids_BS`` (1 real / 0 padding, as in the seq2seq
batches) default to ``src != 0`` (the pad id).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jaxtyping import ArrayLike, Int

from transformer_jax.core import compiler
from transformer_jax.core.tokens import BOS_ID, EOS_ID, PAD_ID
from transformer_jax.decode.beam import BeamOutput, beam_loop
from transformer_jax.decode.cache import gather_rows, repeat_rows
from transformer_jax.decode.loop import Generation, as_graph, check_length, merge, sample_loop
from transformer_jax.decode.strategies import Greedy, SamplingConfig


def _prefill(model, src_BS, seg_BS, max_new_tokens: int, bos_id: int):
    """Encoder, cross K/V, then the BOS step: (logits of the first target token, cache, seq)."""
    L = 1 + max_new_tokens
    check_length(model.cfg, L, "1 + max_new_tokens")
    memory, _ = model.encode(src_BS, src_segment_ids_BS=seg_BS)
    B = src_BS.shape[0]
    seq_BL = jnp.zeros((B, L), jnp.int32).at[:, 0].set(bos_id)
    logits, aux = model.decode(seq_BL[:, :1], None, src_segment_ids_BS=seg_BS, cache=model.init_cache(memory, L))
    return logits, aux["cache"], seq_BL


def _step(model, seg_BS):
    def step(tokens_B1, cache):
        logits, aux = model.decode(tokens_B1, None, src_segment_ids_BS=seg_BS, cache=cache)
        return logits[:, -1], aux["cache"]

    return step


@functools.partial(
    compiler.jit, static_argnames=("graphdef", "max_new_tokens", "sampling", "bos_id", "eos_id", "return_logits")
)
def _sample(graphdef, params, src_BS, seg_BS, key, *, max_new_tokens, sampling, bos_id, eos_id, return_logits):
    model = merge(graphdef, params)
    logits, cache, seq = _prefill(model, src_BS, seg_BS, max_new_tokens, bos_id)
    ones = jnp.ones((src_BS.shape[0],), jnp.int32)
    return sample_loop(
        _step(model, seg_BS),
        cache,
        logits[:, -1],
        seq,
        ones,
        start=1,
        max_new_tokens=max_new_tokens,
        key=key,
        sampling=sampling,
        eos_id=eos_id,
        return_logits=return_logits,
    )


@functools.partial(
    compiler.jit, static_argnames=("graphdef", "beam_size", "max_new_tokens", "alpha", "bos_id", "eos_id")
)
def _beam(graphdef, params, src_BS, seg_BS, *, beam_size, max_new_tokens, alpha, bos_id, eos_id):
    model = merge(graphdef, params)
    logits, cache, seq = _prefill(model, src_BS, seg_BS, max_new_tokens, bos_id)
    ones = jnp.ones((src_BS.shape[0],), jnp.int32)
    step = _step(model, jnp.repeat(seg_BS, beam_size, axis=0))
    return beam_loop(
        step,
        repeat_rows(cache, beam_size),
        logits[:, -1],
        seq,
        ones,
        start=1,
        beam_size=beam_size,
        max_new_tokens=max_new_tokens,
        alpha=alpha,
        eos_id=eos_id,
        reorder=gather_rows,
    )


def _source(src_BS, src_segment_ids_BS):
    src = jnp.asarray(src_BS, jnp.int32)
    if src.ndim != 2:
        raise ValueError(f"src_BS has shape {src.shape}; expected [batch, source length]")
    seg = (src != PAD_ID) if src_segment_ids_BS is None else jnp.asarray(src_segment_ids_BS)
    return src, seg.astype(jnp.int32)


def translate(
    model_or_graphdef,
    params=None,
    *,
    src_BS: Int[ArrayLike, "B S"],
    max_new_tokens: int,
    src_segment_ids_BS: Int[ArrayLike, "B S"] | None = None,
    key: jax.Array | None = None,
    sampling: SamplingConfig = Greedy(),
    bos_id: int = BOS_ID,
    eos_id: int | None = EOS_ID,
    return_logits: bool = False,
) -> Generation:
    """Target tokens for each source (``Generation.sequences`` starts with BOS), chosen by
    ``sampling``; stops at ``eos_id`` or ``max_new_tokens``."""
    graphdef, params = as_graph(model_or_graphdef, params)
    src, seg = _source(src_BS, src_segment_ids_BS)
    key = jax.random.key(0) if key is None else key
    return _sample(
        graphdef,
        params,
        src,
        seg,
        key,
        max_new_tokens=max_new_tokens,
        sampling=sampling,
        bos_id=bos_id,
        eos_id=eos_id,
        return_logits=return_logits,
    )


def translate_beam(
    model_or_graphdef,
    params=None,
    *,
    src_BS: Int[ArrayLike, "B S"],
    max_new_tokens: int,
    src_segment_ids_BS: Int[ArrayLike, "B S"] | None = None,
    beam_size: int = 4,
    alpha: float = 0.6,
    bos_id: int = BOS_ID,
    eos_id: int | None = EOS_ID,
) -> BeamOutput:
    """Beam search (``decode.beam``): the ``beam_size`` best translations of each source."""
    if beam_size < 1:
        raise ValueError(f"beam_size={beam_size} must be >= 1")
    graphdef, params = as_graph(model_or_graphdef, params)
    src, seg = _source(src_BS, src_segment_ids_BS)
    return _beam(
        graphdef,
        params,
        src,
        seg,
        beam_size=beam_size,
        max_new_tokens=max_new_tokens,
        alpha=float(alpha),
        bos_id=bos_id,
        eos_id=eos_id,
    )

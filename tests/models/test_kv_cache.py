"""Decoding with a KV cache gives the logits of a full recompute at every step, with each
decode attention implementation (blocked with 4-slot blocks, so several blocks, a window that
skips blocks and a cross-attention memory that is not a multiple of the block are exercised)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.models import EmbeddingsConfig, RopePositions, build_model
from transformer_jax.nn.attention_config import LocalGlobalAttention, SlidingWindowAttention

from .helpers import random_tokens, tiny

CASES = {
    "learned": dict(preset="gpt2_tiny"),
    "rope_gqa": dict(preset="llama_tiny"),
    "rope_scan": dict(preset="llama_tiny", scan_layers=True),
    "alibi": dict(preset="gpt2_tiny", position="alibi"),
    "window": dict(preset="llama_tiny", attention=SlidingWindowAttention(window=3)),
    # Gemma 2/3 pieces: alternating local (window 3, own RoPE base) and global layers, soft caps,
    # QK-norm, sandwich norms with (1 + w) RMSNorm, q/k/v-only biases.
    "gemma_like": dict(
        preset="llama_tiny",
        attention=LocalGlobalAttention(local_window=3, softcap=2.0, qk_norm=True, qkv_bias=True),
        position=RopePositions(local_theta=100.0),
        embeddings=EmbeddingsConfig(tie=False, final_softcap=5.0),
        placement="sandwich",
        norm="rmsnorm_plus_one",
        ffn="geglu_tanh",
    ),
}


DECODE = {"dense": dict(decode_impl="dense"), "blocked": dict(decode_impl="blocked", decode_block_size=4)}


@pytest.mark.parametrize("decode", sorted(DECODE))
@pytest.mark.parametrize("case", sorted(CASES))
def test_decoder_lm_cache_equals_recompute(case, decode):
    kw = dict(CASES[case])
    model = build_model(tiny(kw.pop("preset"), **kw, **DECODE[decode]))
    tokens = random_tokens(jax.random.key(0), (2, 9), 200)
    full, _ = model(tokens)
    cache = model.init_cache(2, 16)
    logits, aux = model(tokens[:, :4], cache=cache)
    np.testing.assert_allclose(np.asarray(logits), np.asarray(full[:, :4]), atol=1e-5, rtol=1e-5)
    cache = aux["cache"]
    for t in range(4, 9):
        logits, aux = model(tokens[:, t : t + 1], cache=cache)
        cache = aux["cache"]
        np.testing.assert_allclose(np.asarray(logits[:, 0]), np.asarray(full[:, t]), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("decode", sorted(DECODE))
@pytest.mark.parametrize("scan", [False, True])
def test_encoder_decoder_cache_equals_recompute(scan, decode):
    model = build_model(tiny("original_tiny", dropout=0.0, scan_layers=scan, **DECODE[decode]))
    src = random_tokens(jax.random.key(0), (2, 7), 100)
    src_seg = jnp.array([[1] * 7, [1] * 5 + [0] * 2])
    tgt = random_tokens(jax.random.key(1), (2, 6), 100)
    full, _ = model(src, tgt, src_segment_ids_BS=src_seg)
    memory, _ = model.encode(src, src_segment_ids_BS=src_seg)
    cache = model.init_cache(memory, 8)
    for t in range(6):
        logits, aux = model.decode(tgt[:, t : t + 1], None, src_segment_ids_BS=src_seg, cache=cache)
        cache = aux["cache"]
        np.testing.assert_allclose(np.asarray(logits[:, 0]), np.asarray(full[:, t]), atol=1e-5, rtol=1e-5)

"""Every variant of the model's settings groups has no field the model does not read (issue 43):
a tiny model is built with each, run forward and (where it decodes) a step with a KV cache, and
every field of the variant must have been read on the way. A new variant is covered by registering it."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from tests.variant_reads import unread_fields
from transformer_jax.models import (
    AttentionConfig,
    EmbeddingsConfig,
    InitConfig,
    ModelConfig,
    ModelDims,
    build_model,
    get_preset,
)
from transformer_jax.nn.init import INIT_SCHEMES

TINY = dict(
    dims=ModelDims(vocab_size=40, d_model=16, n_heads=2, n_layers=2, max_len=16), position="rope", norm="rmsnorm"
)


def _forward_and_decode(cfg: ModelConfig) -> None:
    """A forward pass, then (where the kind decodes with a KV cache: not linear) a prefill and a step."""
    model = build_model(cfg)
    tokens_BT = jnp.arange(12).reshape(2, 6) % cfg.dims.vocab_size
    model(tokens_BT)
    if cfg.attention.kind == "linear":
        return
    _, aux = model(tokens_BT[:, :3], cache=model.init_cache(2, 8))
    model(tokens_BT[:, 3:4], cache=aux["cache"])


@pytest.mark.parametrize("kind", AttentionConfig.VARIANTS.names())
def test_every_attention_setting_is_read(kind):
    cfg = ModelConfig(**TINY, attention=AttentionConfig.VARIANTS.get(kind)())
    assert unread_fields(lambda: _forward_and_decode(cfg), cfg.attention) == []


@pytest.mark.parametrize("scheme", INIT_SCHEMES.names())
def test_every_init_setting_is_read_under_every_scheme(scheme):
    cfg = ModelConfig(**TINY, init=InitConfig(scheme=scheme))
    assert unread_fields(lambda: _forward_and_decode(cfg), cfg.init) == []


def test_every_embedding_setting_is_read_by_an_encoder_decoder_and_all_but_share_by_a_decoder_lm():
    """``share`` (one table for source and target) exists for the encoder-decoder only; a decoder_lm
    that sets it is refused by its kind's reads (models.kinds)."""
    seq2seq = get_preset("original_tiny", embeddings=EmbeddingsConfig(tie=True, scale=True, share=False))
    tokens_BT = jnp.arange(12).reshape(2, 6) % seq2seq.dims.vocab_size
    assert unread_fields(lambda: build_model(seq2seq)(tokens_BT, tokens_BT), seq2seq.embeddings) == []
    lm = ModelConfig(**TINY, embeddings=EmbeddingsConfig(tie=False, scale=True))
    assert unread_fields(lambda: _forward_and_decode(lm), lm.embeddings) == ["share"]

"""The model's other settings classes have no field the model does not read (issue 43): every
position encoding, RoPE scaling and norm (enumerated from their families, so a new one is covered by
registering it), the execution settings, MLA and MTP. A tiny model is built with each, run forward,
trained for a loss where the field is a training one, and decoded a step with its KV cache."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from tests.variant_reads import recorded_reads
from transformer_jax.models import (
    MODELS,
    EmbeddingsConfig,
    ExecutionConfig,
    ModelConfig,
    ModelDims,
    NormConfig,
    PositionConfig,
    RNNLMConfig,
    RopePositions,
    baseline_model_config,
    build_model,
    get_preset,
    with_changes,
)
from transformer_jax.models.mla_config import MLAConfig
from transformer_jax.models.mtp_config import MTPConfig
from transformer_jax.nn.position_config import RopeScalingConfig
from transformer_jax.ops import rope as rope_ops

TINY = dict(dims=ModelDims(vocab_size=40, d_model=16, n_heads=2, n_layers=2, max_len=16))


def _use(cfg: ModelConfig, *, decode: bool = True) -> None:
    """Forward, the gradient of a loss (what remat and scan change), and a prefill plus one cached step."""
    model = build_model(cfg)
    tokens_BT = jnp.arange(12).reshape(2, 6) % cfg.dims.vocab_size
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss(params):
        logits = nnx.merge(graphdef, params, rest)(tokens_BT)
        logits = logits[0] if isinstance(logits, tuple) else logits
        return jnp.mean(logits.astype(jnp.float32) ** 2)

    jax.grad(loss)(params)
    if decode:
        _, aux = model(tokens_BT[:, :3], cache=model.init_cache(2, 8))
        model(tokens_BT[:, 3:4], cache=aux["cache"])


def _unread(cfg: ModelConfig, settings: object, **kw) -> list[str]:
    cls = type(settings)
    with recorded_reads([cls]) as reads:
        _use(cfg, **kw)
    return sorted(name for name in vars(settings) if (cls, name) not in reads)


@pytest.mark.parametrize("kind", PositionConfig.VARIANTS.names())
def test_every_position_setting_is_read(kind):
    position = PositionConfig.VARIANTS.get(kind)()
    cfg = ModelConfig(**TINY, position=position)
    assert _unread(cfg, position) == []


@pytest.mark.parametrize("kind", RopeScalingConfig.VARIANTS.names())
def test_every_rope_scaling_setting_is_read(kind):
    scaling = RopeScalingConfig.VARIANTS.get(kind)()
    cfg = ModelConfig(**TINY, position=RopePositions(scaling=scaling))
    assert _unread(cfg, scaling) == []


@pytest.mark.parametrize("kind", RopeScalingConfig.VARIANTS.names())
def test_each_rope_scaling_config_has_the_fields_its_op_reads(kind):
    """ops.rope keeps its own list of the fields each scaling reads (ops cannot import the configs)."""
    fields = {f.name for f in dataclasses.fields(RopeScalingConfig.VARIANTS.get(kind))}
    assert fields == set(rope_ops.SCALING_READS[kind])


@pytest.mark.parametrize("kind", NormConfig.VARIANTS.names())
def test_every_norm_setting_is_read(kind):
    norm = NormConfig.VARIANTS.get(kind)()
    cfg = ModelConfig(**TINY, norm=norm)
    assert _unread(cfg, norm) == []


@pytest.mark.parametrize(
    "execution",
    [
        ExecutionConfig(attention_impl="chunked", attention_block_size=4, decode_impl="blocked", decode_block_size=4),
        ExecutionConfig(dtype="bfloat16", param_dtype="bfloat16", scan_layers=True, remat="full"),
    ],
    ids=["tiled", "scanned"],
)
def test_every_execution_setting_is_read(execution):
    cfg = ModelConfig(**TINY, position=RopePositions(), execution=execution)
    changed = [name for name in vars(execution) if getattr(execution, name) != getattr(ExecutionConfig(), name)]
    unread = _unread(cfg, execution)
    assert not set(changed) & set(unread), unread


def test_every_mla_and_mtp_setting_is_read():
    mla = MLAConfig(q_lora_rank=8, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=4)
    mtp = MTPConfig()
    cfg = ModelConfig(**TINY, position=RopePositions(), norm="rmsnorm", mla=mla, mtp=mtp)
    assert _unread(cfg, mla) == []
    assert _unread(cfg, mtp) == []


def test_every_model_field_is_read_by_its_kind():
    """ModelConfig's own fields: a decoder_lm reads all but the baselines' settings, an
    encoder-decoder all but those and MTP's (`models.kinds` refuses either when set)."""
    lm = ModelConfig(**TINY, position=RopePositions(), embeddings=EmbeddingsConfig(final_softcap=30.0), dropout=0.1)
    assert _unread(lm, lm) == ["baseline"]
    tiny = get_preset("original_tiny")
    seq2seq = with_changes(tiny, embeddings=dataclasses.replace(tiny.embeddings, final_softcap=30.0))
    tokens_BT = jnp.arange(12).reshape(2, 6) % seq2seq.dims.vocab_size
    with recorded_reads([ModelConfig]) as reads:
        build_model(seq2seq)(tokens_BT, tokens_BT)
    assert sorted(f for f in vars(seq2seq) if (ModelConfig, f) not in reads) == ["baseline", "mtp"]


_NEURAL_KINDS = {  # a small model of each kind that has a forward pass
    "decoder_lm": lambda: ModelConfig(**TINY, position=RopePositions()),
    "encoder_decoder": lambda: get_preset("original_tiny"),
    "window_lm": lambda: baseline_model_config("window_lm", vocab_size=40, d_model=16, d_ff=16, n_layers=2),
    "rnn_lm": lambda: baseline_model_config("rnn_lm", RNNLMConfig(), vocab_size=40, d_model=16),
}


@pytest.mark.parametrize("kind", sorted(_NEURAL_KINDS))
def test_each_kind_reads_exactly_the_sizes_its_reads_list_names(kind):
    """``models.kinds`` names the ``model.dims`` fields each kind reads (a size another kind reads is
    refused when set): the list is what building and running the model reads, no more, no less."""
    cfg = _NEURAL_KINDS[kind]()
    tokens_BT = jnp.arange(12).reshape(2, 6) % cfg.dims.vocab_size
    with recorded_reads([ModelDims]) as reads:
        model = build_model(cfg)
        model(tokens_BT, tokens_BT) if kind == "encoder_decoder" else model(tokens_BT)
    listed = sorted(name.removeprefix("dims.") for name in MODELS.reads(kind) if name.startswith("dims."))
    assert sorted(name for _, name in reads) == listed

"""Model-level behaviour of the Gemma / Qwen2 / speedrun variants: which layers are local (by
gradient), which parameters exist, zero-initialised output projections, capped logits, and the
config errors that name the field."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from transformer_jax.core import unread
from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.overrides import apply_overrides
from transformer_jax.models import (
    LinearScaling,
    Llama3Scaling,
    LocalGlobalAttention,
    ModelConfig,
    ModelDims,
    RopePositions,
    SoftmaxAttention,
    build_model,
    get_preset,
)
from transformer_jax.models.config import with_changes
from transformer_jax.nn.embed import EmbeddingsConfig
from transformer_jax.nn.init import InitConfig

BASE = dict(
    dims=ModelDims(vocab_size=50, d_model=32, n_heads=4, n_layers=2), position="rope", norm="rmsnorm", use_bias=False
)


def _input_grad_support(model, T=10, t=9):
    """|d logits_t / d embedding_s| summed over features, for every s (one row)."""
    emb = jax.random.normal(jax.random.key(0), (1, T, model.cfg.dims.d_model))
    tokens = jnp.zeros((1, T), jnp.int32)
    g = jax.grad(lambda e: model(tokens, embeddings_BTD=e)[0][0, t].sum())(emb)
    return np.abs(np.asarray(g[0])).sum(-1)


@pytest.mark.parametrize("every,local", [(2, True), (1, False)])
def test_local_layers_see_only_their_window(every, local):
    cfg = with_changes(
        ModelConfig(**BASE), n_layers=1, attention=LocalGlobalAttention(global_every=every, local_window=3)
    )
    support = _input_grad_support(build_model(cfg))
    if local:  # one local layer: position 9 sees 7, 8, 9 only
        assert np.all(support[:7] == 0) and np.all(support[7:] > 0)
    else:
        assert np.all(support > 0)


def test_local_global_alternates_and_local_layers_take_their_rope_base():
    cfg = with_changes(
        ModelConfig(**BASE),
        n_layers=4,
        position=RopePositions(theta=1e6, scaling=LinearScaling(4.0), local_theta=100.0),
        attention=LocalGlobalAttention(local_window=5),
    )
    layers = build_model(cfg).layers.layers
    windows = [blk.self_attn.layer.window for blk in layers]
    assert windows == [5, None, 5, None]
    ropes = [blk.self_attn.rope for blk in layers]
    assert [r.theta for r in ropes] == [100.0, 1e6, 100.0, 1e6]
    assert ropes[0].scaling is None and ropes[1].scaling is not None and ropes[1].scaling.factor == 4.0


def test_parameters_of_qk_norm_sandwich_and_qkv_bias():
    cfg = ModelConfig(
        **BASE, attention=SoftmaxAttention(qk_norm=True, qkv_bias=True), placement="sandwich", ffn="swiglu"
    )
    model = build_model(cfg)
    blk = model.layers.layers[0]
    assert blk.self_attn.q_norm.scale.shape == (8,) and blk.self_attn.k_norm.scale.shape == (8,)
    assert blk.self_attn_post_norm is not None and blk.ffn_post_norm is not None
    assert blk.self_attn.q.bias is not None and blk.self_attn.v.bias is not None
    assert blk.self_attn.o.bias is None and blk.ffn.w_out.bias is None
    tokens = jnp.arange(12).reshape(2, 6) % 50
    before, _ = model(tokens)
    blk.self_attn.k_norm.scale[...] = 3.0 * jnp.ones(8)  # the k norm's scale is read
    after, _ = model(tokens)
    assert np.abs(np.asarray(after - before)).max() > 1e-3


def test_init_zero_out_makes_every_block_the_identity():
    cfg = ModelConfig(**BASE, init=InitConfig(zero_out=True), embeddings=EmbeddingsConfig(tie=True))
    model = build_model(cfg)
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        if path[-2] in ("o", "w_out"):
            assert not np.any(np.asarray(var[...])), path
    tokens = jnp.arange(12).reshape(2, 6) % 50
    logits, _ = model(tokens)
    emb = np.asarray(model.embed.embedding[...])
    x = emb[np.asarray(tokens)]
    x = x / np.sqrt(np.mean(x**2, -1, keepdims=True) + cfg.norm.eps) * np.asarray(model.final_norm.scale[...])
    np.testing.assert_allclose(np.asarray(logits), x @ emb.T, atol=1e-4)


def test_final_softcap_bounds_logits():
    tokens = jnp.arange(12).reshape(2, 6) % 50
    uncapped, _ = build_model(ModelConfig(**BASE, init=InitConfig(std=1.0)))(tokens)
    capped, _ = build_model(
        ModelConfig(**BASE, embeddings=EmbeddingsConfig(final_softcap=0.5), init=InitConfig(std=1.0))
    )(tokens)
    assert float(jnp.abs(uncapped).max()) > 2.0  # the same weights (same seed) give large logits
    np.testing.assert_allclose(np.asarray(capped), 0.5 * np.tanh(np.asarray(uncapped) / 0.5), atol=1e-6)


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(attention=LocalGlobalAttention(local_window=4), scan_layers=True), "model.execution.scan_layers"),
        (dict(position=RopePositions(local_theta=10.0)), "model.position.local_theta"),
        (dict(attention="local_globl"), "model.attention='local_globl': unknown attention kind; did you mean 'local_"),
    ],
)
def test_config_errors_name_the_field(kw, field):
    with pytest.raises((ValueError, KeyError), match=field.split(".", 1)[1]):
        with_changes(ModelConfig(**BASE), **kw)


@pytest.mark.parametrize(
    "sets,message",
    [
        (["attention.softcap=-1"], "model.attention.softcap"),
        (["attention.local_window=4"], "the attention kind 'softmax' has no setting 'local_window'"),
        (["attention=local_global", "attention.window=4"], "'window' is a setting of 'sliding_window'"),
        (["attention=linear", "attention.qk_norm=true"], "the attention kind 'linear' has no setting 'qk_norm'"),
    ],
)
def test_a_setting_the_attention_kind_lacks_or_breaks_names_the_field(sets, message):
    with pytest.raises(ConfigError, match=message):
        apply_overrides(ModelConfig(**BASE), sets)


def test_a_scaling_field_of_another_scaling_does_not_exist_and_its_own_are_read():
    with pytest.raises(ConfigError, match="has no setting 'low_freq_factor'"):  # linear scaling has no such field
        apply_overrides(ModelConfig(**BASE), ["position.scaling=linear", "position.scaling.low_freq_factor=2.0"])
    llama3 = Llama3Scaling(factor=8.0, low_freq_factor=2.0)
    unread.check_reads(ModelConfig(**{**BASE, "position": RopePositions(scaling=llama3)}))


def test_presets_still_build_unchanged():
    assert get_preset("llama_tiny").attention == SoftmaxAttention()


def test_gemma_like_model_is_the_same_through_chunked_attention():
    cfg = ModelConfig(
        **BASE,
        attention=LocalGlobalAttention(local_window=3, softcap=1.0, qk_norm=True),
        placement="sandwich",
        init=InitConfig(std=0.5),
    )
    tokens = jnp.arange(22).reshape(2, 11) % 50
    xla, _ = build_model(cfg)(tokens)
    chunked, _ = build_model(with_changes(cfg, attention_impl="chunked", attention_block_size=4))(tokens)
    np.testing.assert_allclose(np.asarray(chunked), np.asarray(xla), atol=2e-5)


def test_a_renamed_flat_field_names_its_new_place():
    with pytest.raises(ConfigError, match=r"'qk_norm' was renamed: model.attention.qk_norm"):
        get_preset("llama_tiny", qk_norm=True)

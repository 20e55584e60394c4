"""Fixed-window LM: the forward pass against a numpy formula, causality and the window's reach
by gradient, segments, cache == recompute, sampling through the decoding entry point."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.core.configlib import ConfigError
from transformer_jax.decode import TopK, generate
from transformer_jax.models import WindowLMConfig, baseline_model_config, build_model
from transformer_jax.nn.embed import EmbeddingsConfig

from .test_baselines_rnn import _tokens, grad_matrix, greedy_by_recompute, jitted

N = 3


def _model(direct=False, **kw):
    cfg = baseline_model_config(
        "window_lm",
        WindowLMConfig(window=N, direct=direct),
        **{"vocab_size": 11, "d_model": 4, "d_ff": 6, "n_layers": 1, **kw},
    )
    model = build_model(cfg)
    if direct:  # initialised at zero; make the path visible
        model.direct.kernel[...] = jax.random.normal(jax.random.key(5), model.direct.kernel.shape)
    return model


def test_forward_matches_bengio_formula():
    model = _model(direct=True)
    tokens = np.array([[3, 7, 1, 9, 2]])
    C = np.asarray(model.embed.embedding[...])
    pad = np.asarray(model.boundary_embed[...])
    Hk, d = np.asarray(model.hidden[0].kernel[...]).reshape(N * 4, 6), np.asarray(model.hidden[0].bias[...])
    U, b = np.asarray(model.head.proj.kernel[...]), np.asarray(model.head.bias[...])
    W = np.asarray(model.direct.kernel[...]).reshape(N * 4, 11)
    logits, _ = jitted(model)(tokens)
    for t in range(5):
        x = np.concatenate([C[tokens[0, s]] if s >= 0 else pad for s in range(t - N + 1, t + 1)])
        y = b + W.T @ x + U.T @ np.tanh(Hk.T @ x + d)
        np.testing.assert_allclose(logits[0, t], y, atol=1e-5)


def test_causal_and_limited_to_the_window_by_gradient():
    G = grad_matrix(_model(), 7)
    t, s = np.meshgrid(np.arange(7), np.arange(7), indexing="ij")
    reach = (s <= t) & (s > t - N)
    np.testing.assert_array_equal(G[~reach], 0.0)
    assert np.all(G[reach] > 0.0), G


def test_windows_stay_inside_segments():
    model = _model()
    tokens = jax.random.randint(jax.random.key(2), (1, 8), 0, 11)
    seg = jnp.array([[1, 1, 1, 2, 2, 2, 2, 2]])
    call = jitted(model)
    packed, _ = call(tokens, segment_ids_BT=seg)
    alone, _ = call(tokens[:, 3:])
    chex.assert_trees_all_close(packed[:, 3:], alone, atol=1e-6)


def test_cache_continuation_equals_full_pass():
    model = _model(direct=True)
    tokens = jax.random.randint(jax.random.key(3), (2, 7), 0, 11)
    call = jitted(model)
    full, _ = call(tokens)
    out, aux = call(tokens[:, :2], cache=model.init_cache(2, 7))
    parts = [out]
    for t in range(2, 7):
        logits, aux = call(tokens[:, t : t + 1], cache=aux["cache"])
        parts.append(logits)
    chex.assert_trees_all_close(jnp.concatenate(parts, axis=1), full, atol=1e-5)


def test_sampling_through_generate():
    model = _model()
    prompt = jnp.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    greedy = _tokens(generate(model, prompt_BP=prompt, max_new_tokens=4))
    np.testing.assert_array_equal(greedy, greedy_by_recompute(model, np.asarray(prompt), 4))
    top_k = _tokens(
        generate(
            model,
            prompt_BP=prompt,
            max_new_tokens=5,
            key=jax.random.key(1),
            sampling=TopK(k=3),
        )
    )
    assert top_k.shape == (2, 5) and top_k.min() >= 0 and top_k.max() < 11


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="model.baseline.window"):
        baseline_model_config("window_lm", WindowLMConfig(window=0))
    with pytest.raises(ConfigError, match="model.embeddings.tie"):
        baseline_model_config("window_lm", d_model=8, d_ff=16, embeddings=EmbeddingsConfig(tie=True))
    tied = build_model(baseline_model_config("window_lm", vocab_size=11, d_model=8, d_ff=8))
    assert tied.head.proj is None and jitted(tied)(jnp.ones((1, 3), jnp.int32))[0].shape == (1, 3, 11)

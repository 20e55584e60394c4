"""RNN LM: LSTM/GRU steps against numpy, causality and truncation by gradient, segment resets,
cache == recompute, sampling through the decoding entry point."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from transformer_jax.core.configlib import ConfigError
from transformer_jax.decode import TopK, generate
from transformer_jax.models import RNNCellConfig, RNNLMConfig, baseline_model_config, build_model
from transformer_jax.models.baselines.rnn import CELLS, GRUCell, LSTMCell


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _cfg(cell="lstm", **kw):
    b = RNNLMConfig(cell=cell, tbptt=kw.pop("tbptt", None))  # pyright: ignore[reportArgumentType]
    return baseline_model_config("rnn_lm", b, **{"vocab_size": 13, "d_model": 8, "n_layers": 2, **kw})


def _cell_inputs(cell, names, seed=0):
    rng = np.random.default_rng(seed)
    for v in (cell.b_x, *([cell.b_h] if hasattr(cell, "b_h") else [])):
        v[...] = jnp.asarray(rng.normal(size=v.shape), jnp.float32)  # non-zero biases
    x = rng.normal(size=(3, 5)).astype(np.float32)
    carry = {k: rng.normal(size=(3, 6)).astype(np.float32) for k in names}
    return x, carry


def test_config_checks_cells_against_the_registry():
    assert tuple(CELLS.names()) == ("lstm", "gru") == tuple(RNNCellConfig.VARIANTS.names())
    with pytest.raises(ConfigError, match="model.baseline.cell='rnn': unknown RNN cell"):
        baseline_model_config("rnn_lm", RNNLMConfig(cell="rnn"), vocab_size=10)  # pyright: ignore[reportArgumentType]


def test_lstm_step_matches_numpy():
    cell = LSTMCell(5, 6, dtype=jnp.float32, param_dtype=jnp.float32, rngs=_rngs())
    x, carry = _cell_inputs(cell, ("h", "c"))
    Wx, Wh, b = (np.asarray(v[...]) for v in (cell.w_x, cell.w_h, cell.b_x))  # [D,4,H], [H,4,H], [4,H]
    z = [x @ Wx[:, g] + carry["h"] @ Wh[:, g] + b[g] for g in range(4)]
    i, f, g, o = _sigmoid(z[0]), _sigmoid(z[1]), np.tanh(z[2]), _sigmoid(z[3])
    c = f * carry["c"] + i * g
    h = o * np.tanh(c)
    new, out = cell({k: jnp.asarray(v) for k, v in carry.items()}, jnp.asarray(x))
    chex.assert_trees_all_close((new["h"], new["c"], out), (h, c, h), atol=1e-5)


def test_gru_step_matches_numpy():
    cell = GRUCell(5, 6, dtype=jnp.float32, param_dtype=jnp.float32, rngs=_rngs())
    x, carry = _cell_inputs(cell, ("h",), seed=1)
    Wx, Wh, bx, bh = (np.asarray(v[...]) for v in (cell.w_x, cell.w_h, cell.b_x, cell.b_h))
    h0 = carry["h"]
    r = _sigmoid(x @ Wx[:, 0] + bx[0] + h0 @ Wh[:, 0] + bh[0])
    z = _sigmoid(x @ Wx[:, 1] + bx[1] + h0 @ Wh[:, 1] + bh[1])
    n = np.tanh(x @ Wx[:, 2] + bx[2] + r * (h0 @ Wh[:, 2] + bh[2]))
    h = (1 - z) * n + z * h0
    new, out = cell({"h": jnp.asarray(h0)}, jnp.asarray(x))
    chex.assert_trees_all_close((new["h"], out), (h, h), atol=1e-5)


def _rngs():
    return nnx.Rngs(params=0)


def jitted(model):
    """``model(tokens, **kw)`` under ``jax.jit`` (array keyword arguments such as a cache)."""
    graphdef, state = nnx.split(model)
    fn = jax.jit(lambda state, tokens, kw: nnx.merge(graphdef, state)(tokens, **kw))
    return lambda tokens, **kw: fn(state, jnp.asarray(tokens), kw)


def greedy_by_recompute(model, prompt_BP, n):
    """Greedy continuation by re-running the whole (causal) model on a fixed-size buffer."""
    call, (B, P) = jitted(model), prompt_BP.shape
    seq = np.zeros((B, P + n), np.int32)
    seq[:, :P] = prompt_BP
    for i in range(n):
        seq[:, P + i] = np.argmax(np.asarray(call(seq)[0][:, P + i - 1]), -1)
    return seq[:, P:]


def grad_matrix(model, T, **kw):
    """G[t, s] = sum |d (logits[:, t] . w) / d embeddings[:, s]| (one jitted Jacobian)."""
    graphdef, state = nnx.split(model)
    emb = jax.random.normal(jax.random.key(0), (2, T, model.cfg.dims.d_model))
    w = jax.random.normal(jax.random.key(1), (model.cfg.dims.vocab_size,))

    @jax.jit
    def jac(state, emb):
        fn = lambda e: jnp.einsum(
            "btv,v->t", nnx.merge(graphdef, state)(jnp.zeros((2, T), jnp.int32), embeddings_BTD=e, **kw)[0], w
        )
        return jnp.abs(jax.jacrev(fn)(emb)).sum(axis=(1, 3))

    return np.asarray(jac(state, emb))


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_rnn_is_causal_by_gradient(cell):
    G = grad_matrix(build_model(_cfg(cell)), 6)
    np.testing.assert_array_equal(np.triu(G, 1), 0.0)  # d logits[t] / d x[s] = 0 for s > t
    assert np.all(G[np.tril_indices(6)] > 0.0), G


def test_tbptt_cuts_gradients_every_k_steps():
    G = grad_matrix(build_model(_cfg("lstm", tbptt=3)), 8)
    chunk = np.arange(8) // 3  # chunks [0,3) [3,6) [6,8): gradients stay inside a chunk
    reach = (chunk[:, None] == chunk[None, :]) & (np.arange(8)[None, :] <= np.arange(8)[:, None])
    np.testing.assert_array_equal(G[~reach], 0.0)
    assert np.all(G[reach] > 0.0), G


def test_state_resets_at_segment_starts():
    model = build_model(_cfg("gru"))
    tokens = jax.random.randint(jax.random.key(2), (1, 9), 0, 13)
    seg = jnp.array([[1, 1, 1, 1, 2, 2, 2, 2, 2]])
    call = jitted(model)
    packed, _ = call(tokens, segment_ids_BT=seg)
    alone, _ = call(tokens[:, 4:])
    chex.assert_trees_all_close(packed[:, 4:], alone, atol=1e-5)
    G = grad_matrix(model, 9, segment_ids_BT=jnp.broadcast_to(seg, (2, 9)))
    np.testing.assert_array_equal(G[4:, :4], 0.0)  # nothing flows from the first segment into the second
    assert np.all(G[4:, 4:][np.tril_indices(5)] > 0.0)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_cache_continuation_equals_full_pass(cell):
    model = build_model(_cfg(cell))
    tokens = jax.random.randint(jax.random.key(3), (2, 7), 0, 13)
    call = jitted(model)
    full, _ = call(tokens)
    first, aux = call(tokens[:, :4], cache=model.init_cache(2, 7))
    rest = []
    for t in range(4, 7):
        logits, aux = call(tokens[:, t : t + 1], cache=aux["cache"])
        rest.append(logits)
    chex.assert_trees_all_close(jnp.concatenate([first, *rest], axis=1), full, atol=1e-5)


def _tokens(out):
    """The new tokens of a ``generate`` result (a ``Generation`` or, before decode/ grew it, an array)."""
    return np.asarray(getattr(out, "tokens", out))


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_sampling_through_generate(cell):
    model = build_model(_cfg(cell))
    prompt = jnp.array([[1, 2, 3], [4, 5, 6]])
    greedy = _tokens(generate(model, prompt_BP=prompt, max_new_tokens=5))
    np.testing.assert_array_equal(greedy, greedy_by_recompute(model, np.asarray(prompt), 5))
    top_k = _tokens(
        generate(
            model,
            prompt_BP=prompt,
            max_new_tokens=6,
            key=jax.random.key(1),
            sampling=TopK(k=3),
        )
    )
    assert top_k.shape == (2, 6) and top_k.min() >= 0 and top_k.max() < 13


def test_dropout_only_with_a_key_and_bad_config():
    model = build_model(_cfg("lstm", dropout=0.5))
    tokens = jnp.ones((2, 5), jnp.int32)
    call = jitted(model)
    chex.assert_trees_all_equal(call(tokens)[0], call(tokens)[0])
    assert not np.allclose(call(tokens, dropout_key=jax.random.key(0))[0], call(tokens)[0])
    with pytest.raises(ConfigError, match="model.baseline.cell"):
        _cfg("rnn_tanh")
    with pytest.raises(ConfigError, match="model.baseline.tbptt"):
        _cfg("lstm", tbptt=0)
    with pytest.raises(ConfigError, match="model.position"):
        baseline_model_config("rnn_lm", position="learned")

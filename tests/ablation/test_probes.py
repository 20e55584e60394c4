"""The probes of ``ablation.probes`` against the model's own forward pass, central finite
differences and numpy formulas written here."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from transformer_jax.ablation import probes
from transformer_jax.models import ModelConfig, ModelDims, build_model, with_changes
from transformer_jax.nn.init import InitConfig

B, T, V = 2, 6, 11


def tiny(placement="post", **fields):
    cfg = ModelConfig(
        dims=ModelDims(vocab_size=V, d_model=16, n_heads=2, d_ff=32, n_layers=2, max_len=T),
        placement=placement,
        init=InitConfig(scheme="xavier"),
    )
    model: Any = build_model(with_changes(cfg, **fields), seed=0)
    return model


TOKENS = jax.random.randint(jax.random.key(1), (B, T), 0, V)


@pytest.mark.parametrize(
    "placement, fields",
    [("post", {}), ("pre", {}), ("deepnorm", {}), ("sandwich", {}), ("pre", {"position": "rope", "n_layers": 3})],
)
def test_forward_without_deltas_is_the_models_forward(placement, fields):
    model = tiny(placement, **fields)
    logits, hidden = probes.perturbed_logits(model, TOKENS)
    want, aux = model(TOKENS, return_hidden=True)
    np.testing.assert_allclose(logits, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(hidden, aux["hidden"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("placement", ["post", "pre", "deepnorm"])
def test_hidden_gradients_match_central_finite_differences(placement):
    model = tiny(placement)
    loss, grads = probes.hidden_grads(model, TOKENS)
    assert grads.shape == (3, B, T, 16)  # entering layers 1, 2 and leaving layer 2
    loss_at = lambda d: float(probes.next_token_loss(probes.perturbed_logits(model, TOKENS, d)[0], TOKENS))
    zeros = jnp.zeros_like(grads)
    assert loss == pytest.approx(loss_at(zeros), rel=1e-6)
    central = lambda l, v, h: (loss_at(zeros.at[l].set(h * v)) - loss_at(zeros.at[l].set(-h * v))) / (2 * h)
    for l in range(3):
        g = np.asarray(grads[l])
        rnd = np.asarray(jax.random.normal(jax.random.key(10 + l), g.shape))
        for v in (g / np.linalg.norm(g), rnd / np.linalg.norm(rnd)):
            fd = (4 * central(l, v, 5e-3) - central(l, v, 1e-2)) / 3  # Richardson: the h^2 error cancels
            # float32 rounding of a loss of ~2.4 over 2h = 0.01 leaves ~1e-5 per difference
            assert fd == pytest.approx(float(np.sum(g * v)), abs=2e-3 * float(np.linalg.norm(g)) + 1e-4)
    norms = probes.hidden_grad_norms(model, TOKENS)
    np.testing.assert_allclose(norms, np.sqrt((np.asarray(grads) ** 2).sum(axis=(1, 2, 3))), rtol=1e-5)


def test_gradient_at_the_input_is_the_models_embedding_gradient():
    """Layer 0's gradient, through the model's own ``embeddings_BTD`` argument (x_0 = E + positions)."""
    model = tiny("post")
    _, grads = probes.hidden_grads(model, TOKENS)

    def loss(e):
        logits, _ = model(TOKENS, embeddings_BTD=e)
        return optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], TOKENS[:, 1:]).mean()

    want = jax.grad(loss)(model.embed(TOKENS))
    np.testing.assert_allclose(grads[0], want, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("placement", ["post", "pre", "deepnorm", "sandwich"])
def test_sublayer_trace_rebuilds_the_blocks(placement):
    model = tiny(placement)
    trace = probes.sublayer_trace(model, TOKENS)
    _, hidden = probes.perturbed_logits(model, TOKENS)
    assert len(trace) == 4
    for l in range(2):
        np.testing.assert_allclose(trace[2 * l]["x"], hidden[l], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(trace[2 * l + 1]["out"], hidden[l + 1], rtol=1e-5, atol=1e-6)
    alpha = model.layers.layers[0].cfg.residual.alpha
    for t in trace:  # the placements' formulas, written here
        s = np.asarray(t["x"]) * (alpha if placement == "deepnorm" else 1.0) + np.asarray(t["f"])
        if placement in ("pre", "sandwich"):
            np.testing.assert_allclose(t["out"], s, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_allclose(t["h"], t["x"])
            ln = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + 1e-5)
            np.testing.assert_allclose(t["out"], ln, rtol=1e-4, atol=1e-4)
    v = probes.sublayer_variances(model, TOKENS)
    assert v["ratio"].shape == (2, 2)
    np.testing.assert_allclose(
        v["ratio"][1, 1], np.var(np.asarray(trace[3]["f"])) / np.var(np.asarray(trace[3]["x"])), rtol=1e-5
    )


def test_relative_change_is_the_mean_ratio_of_norms():
    h = np.asarray(jax.random.normal(jax.random.key(0), (4, 2, 3, 5)))
    want = [
        np.mean(
            [
                np.linalg.norm(h[l + 1, b, t] - h[l, b, t]) / np.linalg.norm(h[l, b, t])
                for b in range(2)
                for t in range(3)
            ]
        )
        for l in range(3)
    ]
    np.testing.assert_allclose(probes.relative_change(h), want, rtol=1e-5)


def test_attention_logits_of_the_first_layer():
    model = tiny("pre", init=InitConfig(std=0.25))
    got = probes.attention_logits(model, TOKENS)
    block = model.layers.layers[0]
    positions = jnp.broadcast_to(jnp.arange(T), (B, T))
    x = np.asarray(model.embed(TOKENS)) + np.asarray(model.positions.embed(jnp.zeros((B, T, 16)), positions))
    h = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    q = np.einsum("btd,dhk->bthk", h, np.asarray(block.self_attn.q.kernel[...]))
    k = np.einsum("btd,dhk->bthk", h, np.asarray(block.self_attn.k.kernel[...]))
    logits = np.einsum("bthk,bshk->bhts", q, k)
    causal = np.tril(np.ones((T, T), bool))
    assert got["q_var"] == pytest.approx(q.var(), rel=1e-4) and got["k_var"] == pytest.approx(k.var(), rel=1e-4)
    assert got["logit_std_unscaled"] == pytest.approx(logits[:, :, causal].std(), rel=1e-4)
    assert got["logit_std"] == pytest.approx(logits[:, :, causal].std() / np.sqrt(8), rel=1e-4)
    w = np.where(causal, logits / np.sqrt(8), -np.inf)
    w = np.exp(w - w.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    assert got["max_weight"] == pytest.approx(w.max(-1)[..., 1:].mean(), rel=1e-4)


def test_probes_refuse_a_scanned_stack():
    with pytest.raises(ValueError, match="scan_layers=False"):
        probes.hidden_grads(tiny("pre", scan_layers=True), TOKENS)

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


def _naive_attention(h, block, scale, causal=True):
    """Per-layer numbers of `probes.attention_stats` from the layer's input h, in numpy."""
    h = np.asarray(h, np.float64)
    q = np.einsum("btd,dhk->bthk", h, np.asarray(block.self_attn.q.kernel[...], np.float64))
    k = np.einsum("btd,dhk->bthk", h, np.asarray(block.self_attn.k.kernel[...], np.float64))
    raw = np.einsum("bthk,bshk->bhts", q, k)
    visible = np.tril(np.ones((T, T), bool)) if causal else np.ones((T, T), bool)
    w = np.where(visible, scale * raw, -np.inf)
    w = np.exp(w - w.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    rows = w[:, :, 1:] if causal else w
    jac = [np.linalg.norm(np.diag(p) - np.outer(p, p)) for p in rows.reshape(-1, T)]
    return {
        "q_var": q.var(),
        "k_var": k.var(),
        "logit_std": scale * raw[:, :, visible].std(),
        "logit_std_unscaled": raw[:, :, visible].std(),
        "max_weight": rows.max(-1).mean(),
        "jacobian": np.mean(jac),
    }


@pytest.mark.parametrize("scale", [None, 1.0])
def test_attention_stats_against_numpy(scale):
    from transformer_jax.models import SoftmaxAttention

    model = tiny("pre", init=InitConfig(std=0.25), attention=SoftmaxAttention(scale=scale))
    got = probes.attention_stats(model, TOKENS)
    trace = probes.sublayer_trace(model, TOKENS)[0::2]
    positions = jnp.broadcast_to(jnp.arange(T), (B, T))
    x = np.asarray(model.embed(TOKENS)) + np.asarray(model.positions.embed(jnp.zeros((B, T, 16)), positions))
    h0 = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(trace[0]["h"], h0, rtol=1e-4, atol=1e-5)
    s = 8**-0.5 if scale is None else scale
    for l, (block, t) in enumerate(zip(model.layers.layers, trace)):
        want = _naive_attention(t["h"], block, s)
        for key, value in want.items():
            assert got[key][l] == pytest.approx(value, rel=1e-4), (l, key)
    assert got["max_weight"].shape == (2,)


def test_attention_stats_sees_saturation_and_a_small_jacobian():
    from transformer_jax.models import SoftmaxAttention

    wide = tiny("pre", init=InitConfig(std=2.0), attention=SoftmaxAttention(scale=1.0))
    flat = tiny("pre", init=InitConfig(std=1e-3))
    big, small = probes.attention_stats(wide, TOKENS), probes.attention_stats(flat, TOKENS)
    assert (big["max_weight"] > 0.9).all() and (big["jacobian"] < 0.2).all()
    assert small["logit_std"].max() < 1e-3
    # near-uniform rows over 2..T keys: max weight 1/(t+1), ||J||^2 = 1/n - 1/n^2
    n = np.arange(2, T + 1)
    assert small["max_weight"].mean() == pytest.approx(np.mean(1 / n), rel=1e-3)
    assert small["jacobian"].mean() == pytest.approx(np.mean(np.sqrt(1 / n - 1 / n**2)), rel=1e-3)


def test_probes_refuse_a_scanned_stack():
    with pytest.raises(ValueError, match="scan_layers=False"):
        probes.hidden_grads(tiny("pre", scan_layers=True), TOKENS)


def test_trained_attention_stats_reads_the_init_and_the_last_checkpoint(monkeypatch, tmp_path):
    from transformer_jax import ablation
    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.run import setup

    monkeypatch.setenv(ablation.SMOKE_ENV, "1")
    monkeypatch.setenv("TRANSFORMER_JAX_RUNS", str(tmp_path))
    cfg = ablation.with_seed(ablation.shakespeare_config("probe", steps=4, batch_size=8), 3)
    workdir = ablation.train_curves(cfg, "run", "unit_test_nb").workdir
    got = probes.trained_attention_stats(workdir)
    run, _ = setup(workdir_config(workdir), workdir)
    run.checkpoints.close()
    tokens = jnp.asarray(next(iter(run.data.eval_batches("val", 1)))["inputs"])
    saved = workdir_config(workdir).model  # the vocabulary resolved from the data, as training built it
    want = probes.attention_stats(build_model(saved, seed=3), tokens)
    for key, values in want.items():
        np.testing.assert_allclose(got["init"][key], values, rtol=1e-5)
    assert got["trained"]["logit_std"] != got["init"]["logit_std"]
    assert len(got["trained"]["jacobian"]) == saved.dims.n_layers

"""``ablation.norm_probes`` against the model's own forward pass, the layer probes of
``ablation.probes``, a float64 numpy chain of LayerNorm Jacobians, central finite differences and
formulas written out here."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from transformer_jax.ablation import norm_probes, probes
from transformer_jax.models import ModelConfig, ModelDims, build_model, with_changes
from transformer_jax.nn.init import InitConfig

B, T, V, D, L = 2, 6, 11, 16, 3
TOKENS = jax.random.randint(jax.random.key(1), (B, T), 0, V)
CFG = ModelConfig(
    dims=ModelDims(vocab_size=V, d_model=D, n_heads=2, d_ff=32, n_layers=L, max_len=T),
    init=InitConfig(scheme="xavier"),
)


def tiny(placement: str) -> Any:
    return build_model(with_changes(CFG, placement=placement, scan_layers=False), seed=0)


@pytest.mark.parametrize("placement", ["post", "pre", "deepnorm", "sandwich"])
def test_streams_are_the_models_forward_one_sublayer_at_a_time(placement):
    model = tiny(placement)
    logits, streams = norm_probes.sublayer_streams(model, TOKENS)
    assert streams.shape == (2 * L + 1, B, T, D)
    want, aux = model(TOKENS, return_hidden=True)
    np.testing.assert_allclose(logits, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(streams[::2], aux["hidden"], rtol=1e-5, atol=1e-5)
    trace = probes.sublayer_trace(model, TOKENS)
    np.testing.assert_allclose(streams[:-1], np.stack([t["x"] for t in trace]), rtol=1e-5, atol=1e-6)
    cut, cut_streams = norm_probes.sublayer_streams(model, TOKENS, identity_path=True)
    np.testing.assert_allclose(cut, logits, rtol=1e-6)  # stop_gradient changes no value
    np.testing.assert_allclose(cut_streams, streams, rtol=1e-6)


@pytest.mark.parametrize("placement", ["post", "pre", "deepnorm"])
def test_total_gradient_at_the_layers_inputs_is_the_layer_probes(placement):
    model = tiny(placement)
    g = norm_probes.gradient_norms(model, TOKENS)
    assert g["total"].shape == g["identity"].shape == (2 * L + 1,)
    np.testing.assert_allclose(g["total"][::2], probes.hidden_grad_norms(model, TOKENS), rtol=1e-5)
    assert g["identity"][-1] == pytest.approx(g["total"][-1], rel=1e-6)  # the same gradient leaves the stack


@pytest.mark.parametrize("placement", ["pre", "sandwich"])
def test_pre_ln_identity_path_carries_the_gradient_unchanged(placement):
    """x_(t+1) = x_t + F(Norm(x_t)): with F cut off the Jacobian is the identity, exactly."""
    g = norm_probes.gradient_norms(tiny(placement), TOKENS)
    np.testing.assert_allclose(g["identity"], g["identity"][-1], rtol=1e-6)
    assert not np.allclose(g["total"], g["total"][-1], rtol=1e-2)  # the branches do change the total


def _layernorm_vjp(s: np.ndarray, g: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """g^T dLN(s)/ds per token, from dy_i/ds_j = (delta_ij - 1/d - y_i y_j / d) / sigma (unit gain)."""
    d = s.shape[-1]
    sigma = np.sqrt(s.var(-1, keepdims=True) + eps)
    y = (s - s.mean(-1, keepdims=True)) / sigma
    return (g - g.mean(-1, keepdims=True) - y * (g * y).sum(-1, keepdims=True) / d) / sigma


@pytest.mark.parametrize("placement", ["post", "deepnorm"])
def test_identity_path_is_the_chain_of_layernorm_jacobians(placement):
    """Norm(alpha x + F(x)) with F cut off: dL/dx_k = alpha J_k^T dL/dx_(k+1), J_k the norm's Jacobian
    at s_k = alpha x_k + F_k(x_k), chained in float64 from the gradient leaving the stack."""
    model = tiny(placement)
    alpha = model.layers.layers[0].cfg.residual.alpha
    for block in model.layers.layers:
        for norm in (block.self_attn_norm, block.ffn_norm):
            np.testing.assert_array_equal(norm.scale[...], 1.0)  # unit gain at init
    trace = probes.sublayer_trace(model, TOKENS)
    g = np.asarray(probes.hidden_grads(model, TOKENS)[1][-1], np.float64)
    want = [np.linalg.norm(g)]
    for t in reversed(trace):
        s = alpha * np.asarray(t["x"], np.float64) + np.asarray(t["f"], np.float64)
        g = alpha * _layernorm_vjp(s, g)
        want.append(np.linalg.norm(g))
    got = norm_probes.gradient_norms(model, TOKENS)["identity"]
    np.testing.assert_allclose(got, want[::-1], rtol=2e-4)


def test_last_ffn_gradient_is_the_models_own_and_matches_finite_differences():
    model = tiny("post")
    got = float(norm_probes.gradient_norms(model, TOKENS)["last_ffn"])
    w_out = model.layers.layers[-1].ffn.w_out.kernel
    w0 = jnp.asarray(w_out[...])

    def loss_at(w):
        w_out.value = w
        return float(probes.next_token_loss(model(TOKENS)[0], TOKENS))

    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    loss_of = lambda p: probes.next_token_loss(nnx.merge(graphdef, p, rest)(TOKENS)[0], TOKENS)
    grads = nnx.merge(graphdef, jax.grad(loss_of)(params), rest)  # through the model's own __call__
    grad = np.asarray(grads.layers.layers[-1].ffn.w_out.kernel[...])
    assert got == pytest.approx(np.linalg.norm(grad), rel=1e-5)
    unit = jnp.asarray(grad / np.linalg.norm(grad))
    central = lambda h: (loss_at(w0 + h * unit) - loss_at(w0 - h * unit)) / (2 * h)
    assert (4 * central(5e-3) - central(1e-2)) / 3 == pytest.approx(got, rel=2e-2)  # Richardson
    w_out.value = w0


def test_predicted_identity_path_is_the_product_of_the_notes_factors():
    rng = np.random.default_rng(0)
    v, r, alpha = rng.uniform(0.5, 2, (L, 2)), rng.uniform(0.1, 1.5, (L, 2)), 1.7
    got = norm_probes.predicted_identity_path(v, r, alpha)
    flat_v, flat_r = v.ravel(), r.ravel()
    for k in range(2 * L + 1):
        want = 1.0
        for j in range(k, 2 * L):
            want *= alpha / np.sqrt(flat_v[j] * (alpha**2 + flat_r[j]))
        assert got[k] == pytest.approx(want, rel=1e-12)
    notes = norm_probes.predicted_identity_path(np.ones((L, 2)), np.ones((L, 2)))
    np.testing.assert_allclose(notes, 2.0 ** (-(2 * L - np.arange(2 * L + 1)) / 2))  # x_0 / 2^(l/2)
    assert norm_probes.decay_per_layer(notes) == pytest.approx(1.0)  # one halving per layer of two sublayers


@pytest.mark.parametrize("placement", ["post", "pre", "deepnorm"])
def test_init_probe_records(placement):
    rec = norm_probes.init_probe(with_changes(CFG, placement=placement), [0, 1], TOKENS)
    assert all(len(v) == 2 for v in rec.values())
    model = tiny(placement)
    g, var = norm_probes.gradient_norms(model, TOKENS), probes.sublayer_variances(model, TOKENS)
    np.testing.assert_allclose(rec["total"][0], g["total"][::2], rtol=1e-6)
    np.testing.assert_allclose(rec["identity"][0], g["identity"] / g["identity"][-1], rtol=1e-6)
    alpha = model.layers.layers[0].cfg.residual.alpha
    want = (
        np.ones(2 * L + 1) if placement == "pre" else norm_probes.predicted_identity_path(var["x"], var["ratio"], alpha)
    )
    np.testing.assert_allclose(rec["predicted"][0], want, rtol=1e-6)
    assert rec["identity_decay"][0] == pytest.approx(norm_probes.decay_per_layer(rec["identity"][0]))
    assert rec["log2_var"][0] == pytest.approx(np.mean(np.log2(var["ratio"])), rel=1e-6)
    slope = np.polyfit(np.arange(L + 1), np.log2(g["total"][::2]), 1)[0]
    assert rec["total_slope"][0] == pytest.approx(slope, rel=1e-5)
    assert (placement == "pre") == (rec["identity_decay"][0] == pytest.approx(0.0, abs=1e-6))


def test_xiong_ratios_pair_by_seed_and_fit_the_exponent():
    init = {
        (p, d): {"last_ffn": [c * d ** (0.5 if p == "post" else 0.0) * (1 + 0.01 * s) for s in range(3)]}
        for p, c in (("post", 2.0), ("pre", 1.0))
        for d in (4, 16, 64)
    }
    x = norm_probes.xiong_ratios(init, (4, 16, 64))
    np.testing.assert_allclose(x["by_depth"][16]["ratios"], [8.0] * 3)
    assert x["loglog_slope"]["slope"] == pytest.approx(0.5)
    assert x["by_depth"][64]["sqrt_L"] == 8.0

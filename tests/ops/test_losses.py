"""Cross-entropy (weights, label smoothing, z-loss) against a float64 numpy reference."""

import functools
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from transformer_jax.ops.losses import cross_entropy, perplexity, token_weighted_mean, z_loss

B, T, V = 2, 3, 5


def _np_ce(logits, targets, weights, eps, zc):
    """Per-token float64 reference written from the definitions."""
    logits = np.asarray(logits, np.float64)
    out = {k: 0.0 for k in ("loss_sum", "nll_sum", "z_loss_sum", "correct_sum", "weight_sum")}
    for b, t in np.ndindex(*targets.shape):
        w = weights[b, t]
        row = logits[b, t]
        lse = math.log(sum(math.exp(v) for v in row))
        logp = row - lse
        q = np.full(V, eps / V)
        q[targets[b, t]] += 1 - eps
        z = zc * lse**2
        out["loss_sum"] += w * (-(q * logp).sum() + z)
        out["nll_sum"] += w * -logp[targets[b, t]]
        out["z_loss_sum"] += w * z
        out["correct_sum"] += w * float(np.argmax(row) == targets[b, t])
        out["weight_sum"] += w
    return out


def _data(seed=0):
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((B, T, V)) * 3).astype(np.float32)
    targets = rng.integers(0, V, (B, T))
    weights = np.array([[1.0, 1.0, 0.0], [0.5, 2.0, 1.0]], np.float32)
    return logits, targets, weights


class CrossEntropyTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters((0.0, 0.0), (0.1, 0.0), (0.0, 1e-2), (0.2, 1e-1))
    def test_matches_numpy(self, eps, zc):
        logits, targets, weights = _data()
        fn = self.variant(functools.partial(cross_entropy, label_smoothing=eps, z_loss=zc))
        got = fn(logits, targets, weights_BT=weights)
        ref = _np_ce(logits, targets, weights, eps, zc)
        assert set(got) == set(ref)
        for k in ref:
            chex.assert_shape(got[k], ())
            chex.assert_type(got[k], jnp.float32)
            assert float(got[k]) == pytest.approx(ref[k], rel=1e-5, abs=1e-5), k

    def test_default_weights_are_one(self):
        logits, targets, _ = _data(1)
        got = cross_entropy(logits, targets)
        ref = _np_ce(logits, targets, np.ones((B, T)), 0.0, 0.0)
        assert float(got["weight_sum"]) == B * T
        assert float(got["nll_sum"]) == pytest.approx(ref["nll_sum"], rel=1e-6)
        assert float(got["loss_sum"]) == pytest.approx(ref["nll_sum"], rel=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_gradient_is_softmax_minus_smoothed_target(self):
        logits, targets, weights = _data(2)
        eps, zc = 0.1, 1e-2

        def loss(lg):
            return cross_entropy(lg, targets, weights_BT=weights, label_smoothing=eps, z_loss=zc)["loss_sum"]

        grad = self.variant(jax.grad(loss))(logits)
        lg = logits.astype(np.float64)
        lse = np.log(np.exp(lg).sum(-1, keepdims=True))
        q = (1 - eps) * np.eye(V)[targets] + eps / V
        ref = weights[..., None] * (np.exp(lg - lse) * (1 + 2 * zc * lse) - q)
        np.testing.assert_allclose(grad, ref, atol=1e-5)

    def test_bfloat16_logits_computed_in_float32(self):
        logits, targets, weights = _data(3)
        lb = jnp.asarray(logits * 10, jnp.bfloat16)
        got = cross_entropy(lb, targets, weights_BT=weights, label_smoothing=0.1, z_loss=1e-3)
        ref = _np_ce(np.asarray(lb, np.float64), targets, weights, 0.1, 1e-3)
        chex.assert_type(got["loss_sum"], jnp.float32)
        for k in ref:  # bfloat16 arithmetic would be off by ~1e-2 relative
            assert float(got[k]) == pytest.approx(ref[k], rel=1e-5, abs=1e-5), k

    def test_out_of_range_targets_are_excluded_not_nan(self):
        logits, targets, weights = _data(4)
        bad = targets.copy()
        bad[0, 2], bad[1, 0] = -100, V  # padding ids
        got = cross_entropy(logits, bad, weights_BT=weights, label_smoothing=0.1, z_loss=1e-2)
        w = weights.copy()
        w[0, 2] = w[1, 0] = 0.0
        ref = _np_ce(logits, targets, w, 0.1, 1e-2)
        for k in ref:
            assert np.isfinite(float(got[k]))
            assert float(got[k]) == pytest.approx(ref[k], rel=1e-5, abs=1e-5), k

    def test_padding_with_inf_logits_does_not_leak(self):
        logits, targets, weights = _data(5)
        logits[0, 2, :] = np.inf  # the weight-0 token
        got = cross_entropy(logits, targets, weights_BT=weights)
        assert all(np.isfinite(float(v)) for v in got.values())

    def test_errors(self):
        logits, targets, _ = _data()
        with pytest.raises(ValueError, match="label_smoothing=1.0"):
            cross_entropy(logits, targets, label_smoothing=1.0)
        with pytest.raises(ValueError, match="z_loss=-1"):
            cross_entropy(logits, targets, z_loss=-1.0)
        with pytest.raises(ValueError, match="does not match targets_BT"):
            cross_entropy(logits, targets[:, :2])


def test_z_loss_per_token():
    logits, _, _ = _data(6)
    lse = np.log(np.exp(logits.astype(np.float64)).sum(-1))
    out = z_loss(logits)
    chex.assert_shape(out, (B, T))
    np.testing.assert_allclose(out, lse**2, rtol=1e-5)
    chex.assert_type(z_loss(jnp.asarray(logits, jnp.bfloat16)), jnp.float32)


def test_mean_and_perplexity():
    assert float(token_weighted_mean(6.0, 4.0)) == pytest.approx(1.5)
    assert float(token_weighted_mean(0.0, 0.0)) == 0.0
    assert float(token_weighted_mean(3.0, 0.0)) == 0.0
    assert float(perplexity(0.0)) == pytest.approx(1.0)
    assert float(perplexity(math.log(50.0))) == pytest.approx(50.0, rel=1e-6)
    # uniform logits: perplexity equals the vocabulary size
    ce = cross_entropy(jnp.zeros((1, 4, 7)), jnp.array([[0, 3, 6, 2]]))
    ppl = perplexity(token_weighted_mean(ce["nll_sum"], ce["weight_sum"]))
    assert float(ppl) == pytest.approx(7.0, rel=1e-6)
    g = jax.grad(lambda s, w: token_weighted_mean(s, w))(1.0, 0.0)
    assert np.isfinite(g)

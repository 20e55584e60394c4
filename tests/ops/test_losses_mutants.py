"""The losses stay float32 whatever comes in: float64 logits, weights and Python floats under
jax_enable_x64 included (the module computes everything in float32)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.ops.losses import cross_entropy, perplexity, token_weighted_mean, z_loss


def _np_reference(logits, targets):
    lse = np.log(np.exp(logits).sum(-1))
    nll = lse - np.take_along_axis(logits, targets[..., None], -1)[..., 0]
    return lse, nll


def test_float64_inputs_under_x64_give_float32_results():
    """With x64 on, float64 logits, default weights and float64 sums still give float32 sums and means."""
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((2, 3, 5)) * 2  # float64
    targets = rng.integers(0, 5, (2, 3))
    lse, nll = _np_reference(logits, targets)
    correct = (logits.argmax(-1) == targets).sum()

    @jax.jit  # one compilation instead of one per eager op
    def all_losses(logits, targets, total, weight_sum, mean_nll):
        return (
            z_loss(logits),
            cross_entropy(logits, targets, z_loss=1e-2),  # default weights: float64 ones under x64
            token_weighted_mean(total, weight_sum),
            perplexity(mean_nll),
        )

    with jax.enable_x64(True):
        f64 = [jnp.asarray(x, jnp.float64) for x in (6.0, 4.0, math.log(3.0))]
        z, out, mean, ppl = all_losses(logits, targets, *f64)
    assert z.dtype == np.float32
    np.testing.assert_allclose(z, lse**2, rtol=1e-5)
    assert {k: v.dtype for k, v in out.items()} == dict.fromkeys(out, np.float32)
    assert float(out["nll_sum"]) == pytest.approx(nll.sum(), rel=1e-5)
    assert float(out["z_loss_sum"]) == pytest.approx(1e-2 * (lse**2).sum(), rel=1e-5)
    assert float(out["correct_sum"]) == correct
    assert float(out["weight_sum"]) == 6.0
    assert mean.dtype == np.float32 and float(mean) == 1.5
    assert ppl.dtype == np.float32 and float(ppl) == pytest.approx(3.0, rel=1e-6)

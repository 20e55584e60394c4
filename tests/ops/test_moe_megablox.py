"""megablox grouped matmul (TPU Pallas kernel in interpret mode on CPU) against jax.lax.ragged_dot,
and the `megablox` MoE dispatch built on it against `ragged`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.ops import moe_dispatch, routing
from transformer_jax.ops.moe_megablox import megablox_ragged_dot


def test_megablox_interpret_matches_ragged_dot_values_and_gradients():
    """R=40 rows (padded to 48 in 16-row tiles), an empty group, 5 rows past sum(sizes)."""
    R, D, F = 40, 32, 48
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((R, D)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((3, D, F)), jnp.float32)
    g = jnp.asarray(rng.standard_normal((R, F)), jnp.float32)
    sizes = jnp.asarray([10, 0, 25], jnp.int32)

    def loss(fn):
        return jax.jit(jax.value_and_grad(lambda x, w: jnp.sum(fn(x, w) * g), argnums=(0, 1)))

    got, (dx, dw) = loss(lambda x, w: megablox_ragged_dot(x, w, sizes, block_rows=16, interpret=True))(x, w)
    want, (rdx, rdw) = loss(lambda x, w: jax.lax.ragged_dot(x, w, sizes))(x, w)
    out = megablox_ragged_dot(x, w, sizes, block_rows=16, interpret=True)
    np.testing.assert_allclose(out, jax.lax.ragged_dot(x, w, sizes), atol=1e-4, rtol=1e-5)
    np.testing.assert_array_equal(out[35:], 0.0)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_allclose(dx, rdx, atol=1e-4, rtol=1e-5)
    np.testing.assert_allclose(dw, rdw, atol=1e-4, rtol=1e-5)


def test_megablox_dispatch_interpret_matches_ragged_values_and_gradients():
    """The `megablox` MoE dispatch (SwiGLU with biases, dropless, one empty expert) equals `ragged`."""

    T, D, F, E, K = 20, 16, 24, 4, 2
    ks = jax.random.split(jax.random.key(0), 6)
    w = moe_dispatch.ExpertWeights(
        jax.random.normal(ks[0], (E, D, F)) * 0.3,
        jax.random.normal(ks[1], (E, F, D)) * 0.3,
        jax.random.normal(ks[2], (E, D, F)) * 0.3,
        jax.random.normal(ks[3], (E, F)) * 0.1,
        jax.random.normal(ks[4], (E, D)) * 0.1,
    )
    x = jax.random.normal(ks[5], (T, D))
    logits = jnp.zeros((T, E)).at[:, 0].set(-1e9) + jax.random.normal(ks[0], (T, E))
    r = routing.top_k_route(logits, K)

    def loss(name, **opts):
        def f(x, w):
            y, _ = moe_dispatch.DISPATCHES.get(name)(x, r.experts_TK, r.weights_TK, w, activation="swiglu", **opts)
            return jnp.sum(y * jnp.cos(jnp.arange(D)))

        return jax.jit(jax.value_and_grad(f, argnums=(0, 1)))(x, w)

    got, (gx, gw) = loss("megablox", interpret=True)
    want, (wx, ww) = loss("ragged")
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_allclose(gx, wx, atol=1e-4, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(gw), jax.tree.leaves(ww)):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-5)


def test_megablox_dispatch_refuses_to_run_off_tpu():
    assert jax.default_backend() == "cpu"
    w = moe_dispatch.ExpertWeights(jnp.zeros((2, 8, 8)), jnp.zeros((2, 8, 8)), None, None, None)
    with pytest.raises(ValueError, match="'megablox' is a TPU kernel"):
        moe_dispatch.get_dispatch("megablox")(
            jnp.zeros((4, 8)), jnp.zeros((4, 1), jnp.int32), jnp.ones((4, 1)), w, activation="gelu"
        )

"""megablox grouped matmul (TPU Pallas kernel in interpret mode on CPU) against jax.lax.ragged_dot."""

import jax
import jax.numpy as jnp
import numpy as np

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

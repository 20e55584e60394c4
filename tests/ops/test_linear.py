"""ops.linear: the hand-written backward pass equals autodiff of the plain product."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.ops.linear import dense, matmul_2d


def test_matmul_2d_value_and_gradients_equal_autodiff():
    x = jax.random.normal(jax.random.key(0), (6, 5))
    w = jax.random.normal(jax.random.key(1), (5, 3))
    dy = jax.random.normal(jax.random.key(2), (6, 3))
    y, vjp = jax.vjp(matmul_2d, x, w)
    y_ref, vjp_ref = jax.vjp(lambda a, b: a @ b, x, w)
    np.testing.assert_allclose(y, y_ref, rtol=1e-6)
    for got, want in zip(vjp(dy), vjp_ref(dy)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    dx_np = np.asarray(dy) @ np.asarray(w).T
    np.testing.assert_allclose(vjp(dy)[0], dx_np, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("x_shape,k_shape,n_in", [((2, 4, 6), (6, 3, 5), 1), ((2, 4, 3, 5), (3, 5, 6), 2)])
def test_dense_equals_tensordot_with_gradients(x_shape, k_shape, n_in):
    x = jax.random.normal(jax.random.key(0), x_shape)
    k = jax.random.normal(jax.random.key(1), k_shape)
    ref = lambda a, b: jnp.tensordot(a, b, axes=(tuple(range(a.ndim - n_in, a.ndim)), tuple(range(n_in))))
    np.testing.assert_allclose(dense(x, k, n_in), ref(x, k), rtol=1e-5, atol=1e-5)
    loss = lambda f: lambda a, b: jnp.sum(jnp.sin(f(a, b)))
    got = jax.grad(loss(lambda a, b: dense(a, b, n_in)), argnums=(0, 1))(x, k)
    want = jax.grad(loss(ref), argnums=(0, 1))(x, k)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


def test_dense_under_jit_and_vmap():
    x = jnp.ones((3, 2, 4))
    k = jnp.ones((4, 5))
    out = jax.jit(jax.vmap(lambda a: dense(a, k, 1)))(x)
    assert out.shape == (3, 2, 5) and np.allclose(out, 4.0)

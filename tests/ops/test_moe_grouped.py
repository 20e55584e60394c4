"""``ops.moe_grouped``: expert FFNs on windows from a ladder of sizes, against a numpy loop over
rows, with groups whose windows reach into later experts' rows (and are written in another order)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.ops import activations
from transformer_jax.ops.moe_buffer import ExpertWeights
from transformer_jax.ops.moe_grouped import grouped_ffn, window_sizes

D, F, E = 8, 16, 4


def _weights(gated: bool, seed: int = 0) -> ExpertWeights:
    k = jax.random.split(jax.random.key(seed), 5)
    n = lambda key, shape, s=0.3: jax.random.normal(key, shape, jnp.float64) * s
    return ExpertWeights(
        n(k[0], (E, D, F)),
        n(k[1], (E, F, D)),
        n(k[2], (E, D, F)) if gated else None,
        n(k[3], (E, F), 0.1),
        n(k[4], (E, D), 0.1),
    )


def _np_rows(x, n_E, w, activation):
    """Row r of group e through expert e's FFN, in float64 numpy; rows past sum(n) are 0."""
    spec = activations.FFN_ACTIVATIONS.get(activation)
    act = lambda z: np.asarray(spec.activation(jnp.asarray(z)))
    W = {k: None if v is None else np.asarray(v) for k, v in vars(w).items()}
    y = np.zeros_like(x)
    start = 0
    for e, n in enumerate(n_E):
        rows = x[start : start + n]
        h = rows @ W["w_in_EDF"][e] + W["b_in_EF"][e]
        a = act(rows @ W["w_gate_EDF"][e]) * h if spec.gated else act(h)
        y[start : start + n] = a @ W["w_out_EFD"][e] + W["b_out_ED"][e]
        start += n
    return y


def test_window_ladder_is_static_and_covers_every_group():
    sizes = window_sizes(768, smallest=48)
    assert sizes[0] == 0 and sizes[1] == 48 and sizes[-1] >= 768
    assert all(b % 8 == 0 and b > a for a, b in itertools.pairwise(sizes))
    assert all(b <= 1.25 * a + 8 for a, b in itertools.pairwise(sizes[1:]))  # padding under a quarter (+8)
    with pytest.raises(ValueError, match="ratio"):
        window_sizes(10, ratio=1.0)


# Loads whose windows overhang: (20, 3, 0, 25): expert 0's 24-row window covers expert 1's rows,
# and runs in a later loop (larger windows later) than expert 1's 8-row window, so only the owned-row
# write keeps expert 1's results; (3, 20, 0, 25): the overhang is written over by its owner; an
# empty expert; everything on one expert.
LOADS = [(20, 3, 0, 25), (3, 20, 0, 25), (12, 12, 12, 12), (0, 0, 48, 0), (1, 1, 1, 45), (17, 0, 30, 1)]


@pytest.mark.parametrize("activation", ["gelu", "swiglu"])
@pytest.mark.parametrize("loads", LOADS, ids=[str(x) for x in LOADS])
def test_grouped_ffn_matches_a_row_loop(activation, loads):
    jax.config.update("jax_enable_x64", True)
    try:
        R = 48
        rng = np.random.default_rng(sum(loads))
        x = rng.normal(size=(R, D))
        g_y = rng.normal(size=(R, D))
        w = _weights(activations.FFN_ACTIVATIONS.get(activation).gated)
        n_E = jnp.asarray(loads, jnp.int32)
        f = grouped_ffn(activation, max_rows=48)
        y, vjp = jax.vjp(lambda x, w: f(x, n_E, w), jnp.asarray(x), w)
        used = sum(loads)
        np.testing.assert_allclose(np.asarray(y)[:used], _np_rows(x, loads, w, activation)[:used], atol=1e-12)
        d_x, d_w = vjp(jnp.asarray(g_y))

        # the reference gradient: autodiff of a plain per-expert loop (jnp, no windows)
        def ref(x, w):
            out, start = [], 0
            for e, n in enumerate(loads):
                one = jax.tree.map(lambda a, e=e: a[e], w)
                h = x[start : start + n] @ one.w_in_EDF + one.b_in_EF
                spec = activations.FFN_ACTIVATIONS.get(activation)
                a = spec.activation(x[start : start + n] @ one.w_gate_EDF) * h if spec.gated else spec.activation(h)
                out.append(a @ one.w_out_EFD + one.b_out_ED)
                start += n
            return jnp.concatenate(out + [jnp.zeros((R - used, D))])

        _, ref_vjp = jax.vjp(ref, jnp.asarray(x), w)
        want_x, want_w = ref_vjp(jnp.asarray(np.where(np.arange(R)[:, None] < used, g_y, 0.0)))
        np.testing.assert_allclose(np.asarray(d_x)[:used], np.asarray(want_x)[:used], atol=1e-12)
        for got, want in zip(jax.tree.leaves(d_w), jax.tree.leaves(want_w)):
            np.testing.assert_allclose(got, want, atol=1e-12)
    finally:
        jax.config.update("jax_enable_x64", False)

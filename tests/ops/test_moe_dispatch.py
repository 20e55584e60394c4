"""Dispatch implementations agree with the naive per-expert loop (values and gradients), drop
exactly the assignments beyond capacity, and survive extreme load skew."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.ops import activations, moe_buffer, moe_dispatch, routing

T, D, F, E, K = 24, 8, 16, 4, 2
IMPLS = ("dense", "ragged", "padded", "grouped")


def _weights(activation="swiglu", bias=True, seed=0):
    k = jax.random.split(jax.random.key(seed), 5)
    gated = activations.FFN_ACTIVATIONS.get(activation).gated
    n = lambda key, shape, s=0.3: jax.random.normal(key, shape) * s
    return moe_dispatch.ExpertWeights(
        n(k[0], (E, D, F)),
        n(k[1], (E, F, D)),
        n(k[2], (E, D, F)) if gated else None,
        n(k[3], (E, F), 0.1) if bias else None,
        n(k[4], (E, D), 0.1) if bias else None,
    )


def _inputs(seed=0, skew=0.0):
    k1, k2 = jax.random.split(jax.random.key(seed))
    x = jax.random.normal(k1, (T, D))
    logits = jax.random.normal(k2, (T, E)) * 2 + skew * jnp.arange(E)[::-1]
    r = routing.top_k_route(logits, K)
    return x, r.experts_TK, r.weights_TK


# Two static configurations, each compiled once per implementation and shared by the tests:
# A = SwiGLU with biases, dropless; B = GELU without biases, capacity factor 0.5 (C = 6).
A = dict(activation="swiglu", bias=True, capacity_factor=None)
B = dict(activation="gelu", bias=False, capacity_factor=0.5)


@functools.cache
def _grad_fn(name, activation, capacity_factor):
    fn = moe_dispatch.get_dispatch(name)

    def loss(x, weights, w, experts, valid):
        y, keep = fn(x, experts, weights, w, activation=activation, capacity_factor=capacity_factor, valid_T=valid)
        return jnp.sum(jnp.sin(3 * y)), (y, keep)

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))


def _run(name, cfg, x, experts, weights, valid=None, seed=0):
    w = _weights(cfg["activation"], cfg["bias"], seed)
    valid = jnp.ones(x.shape[:1], bool) if valid is None else valid
    (_, (y, keep)), grads = _grad_fn(name, cfg["activation"], cfg["capacity_factor"])(x, weights, w, experts, valid)
    return y, keep, grads


def _assert_trees_close(a, b, tol=1e-5):
    """Close to float32 rounding of each leaf's scale: under extreme skew one expert's gradient sums
    every token (entries up to ~29, where naive and ragged both sit 3e-5 from a float64 reference)."""
    for x, ref in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        scale = max(1.0, float(jnp.max(jnp.abs(ref))))
        np.testing.assert_allclose(x, ref, atol=tol * scale, rtol=tol)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("cfg", [A, B], ids=["dropless", "capacity"])
def test_matches_naive_loop(impl, cfg):
    x, experts, weights = _inputs()
    y_ref, keep_ref, g_ref = _run("naive", cfg, x, experts, weights)
    y, keep, g = _run(impl, cfg, x, experts, weights)
    np.testing.assert_array_equal(keep, keep_ref)
    assert bool(keep.all()) == (cfg["capacity_factor"] is None)
    _assert_trees_close(y, y_ref)
    _assert_trees_close(g, g_ref)


@pytest.mark.parametrize("impl", IMPLS)
def test_extreme_skew_is_dropless(impl):
    """Every token on expert 0: the padded layout runs many extra rounds."""
    x, experts, weights = _inputs(seed=1, skew=50.0)
    assert int(jnp.sum(experts == 0)) == T
    y_ref, _, g_ref = _run("naive", A, x, experts, weights)
    y, keep, g = _run(impl, A, x, experts, weights)
    assert bool(keep.all())
    _assert_trees_close(y, y_ref)
    _assert_trees_close(g, g_ref)


@pytest.mark.parametrize("impl", IMPLS)
def test_invalid_tokens_take_no_slot_and_give_zero(impl):
    x, experts, weights = _inputs(seed=2)
    valid = jnp.arange(T) % 3 != 0
    y_ref, keep_ref, _ = _run("naive", B, x, experts, weights, valid)
    y, keep, _ = _run(impl, B, x, experts, weights, valid)
    np.testing.assert_array_equal(keep, keep_ref)
    assert not bool(keep[~valid].any())
    np.testing.assert_array_equal(y[~valid], 0.0)
    _assert_trees_close(y, y_ref)


def _np_ffn(x, w, e, activation):
    spec = activations.FFN_ACTIVATIONS.get(activation)
    h = x @ np.asarray(w.w_in_EDF[e])
    if w.b_in_EF is not None:
        h = h + np.asarray(w.b_in_EF[e])
    h = (
        np.asarray(spec.activation(jnp.asarray(x @ np.asarray(w.w_gate_EDF[e])))) * h
        if spec.gated
        else np.asarray(spec.activation(jnp.asarray(h)))
    )
    y = h @ np.asarray(w.w_out_EFD[e])
    return y if w.b_out_ED is None else y + np.asarray(w.b_out_ED[e])


@pytest.mark.parametrize("impl", ("naive",) + IMPLS)
def test_capacity_drops_exactly_the_overflow_in_rank_order(impl):
    """Capacity C = ceil(0.5 * T K / E) = 6: per expert, first choices (in token order) fill the
    buffer before any second choice; the output is the numpy sum over the kept assignments only."""
    x, experts, weights = _inputs(seed=3)
    y, keep, _ = _run(impl, B, x, experts, weights)
    w = _weights(B["activation"], B["bias"])
    C = routing.capacity(T, E, K, 0.5)
    assert C == 6
    ex = np.asarray(experts)
    want_keep = np.zeros((T, K), bool)
    count = np.zeros(E, int)
    for k in range(K):
        for t in range(T):
            want_keep[t, k] = count[ex[t, k]] < C
            count[ex[t, k]] += 1
    assert 0 < want_keep.sum() < T * K
    np.testing.assert_array_equal(keep, want_keep)
    want = np.zeros((T, D))
    for t in range(T):
        for k in range(K):
            if want_keep[t, k]:
                want[t] += float(weights[t, k]) * _np_ffn(np.asarray(x[t]), w, ex[t, k], "gelu")
    np.testing.assert_allclose(y, want, atol=1e-5, rtol=1e-5)


def test_padded_tiles_cover_the_largest_load():
    """Other splits of the padded layout (first round half the mean load, then tiles of half
    the mean) give the same output."""
    x, experts, weights = _inputs(seed=4, skew=1.5)
    w = _weights("swiglu", True)
    y_ref, _, _ = _run("naive", A, x, experts, weights)
    fn = functools.partial(moe_dispatch.padded_dispatch, first=0.5, tile=0.5)
    y, _ = jax.jit(lambda x: fn(x, experts, weights, w, activation="swiglu"))(x)
    _assert_trees_close(y, y_ref)


def test_permute_rows_backward_is_a_gather():
    x = jnp.arange(12.0).reshape(4, 3)
    index = jnp.array([2, 4, 0])  # row 4 is out of range: zeros
    inverse = jnp.array([2, 3, 0, 3])
    out, vjp = jax.vjp(lambda x: moe_buffer.permute_rows(x, index, inverse), x)
    np.testing.assert_array_equal(out, [[6, 7, 8], [0, 0, 0], [0, 1, 2]])
    (g,) = vjp(jnp.ones((3, 3)) * jnp.array([[1.0], [2.0], [3.0]]))
    np.testing.assert_array_equal(g, [[3, 3, 3], [0, 0, 0], [1, 1, 1], [0, 0, 0]])


def test_registry_names_and_backend_default():
    assert set(IMPLS + ("naive",)) <= set(moe_dispatch.DISPATCHES.names())
    assert "expert_parallel" in moe_dispatch.dispatch_names() and "auto" in moe_dispatch.dispatch_names()
    assert moe_dispatch.default_dispatch("cpu") == "padded"
    assert moe_dispatch.default_dispatch("gpu") == "ragged"
    assert moe_dispatch.get_dispatch("auto") is moe_dispatch.get_dispatch(moe_dispatch.default_dispatch())
    with pytest.raises(KeyError, match="padded"):
        moe_dispatch.get_dispatch("paded")


def test_padded_tile_sizes_are_static_options():
    """``first``/``tile`` (the padded layout's first round and tile sizes) pass through
    ``get_dispatch``: many small tiles give the naive loop's values and gradients."""
    x, experts, weights = _inputs(seed=3, skew=2.0)
    w = _weights("gelu", True)
    fn = moe_dispatch.get_dispatch("padded")
    naive = moe_dispatch.get_dispatch("naive")

    def loss(f, **kw):
        return lambda x, w: jnp.sum(jnp.sin(3 * f(x, experts, weights, w, activation="gelu", **kw)[0]))

    got = jax.value_and_grad(loss(fn, first=0.25, tile=0.125), argnums=(0, 1))(x, w)
    want = jax.value_and_grad(loss(naive), argnums=(0, 1))(x, w)
    _assert_trees_close(got, want)


def test_overflow_tiles_hold_each_overflow_assignment_once():
    """Every kept assignment at position >= first sits in exactly one tile row, inside a tile of
    its own expert at its own position; tiles in use = sum_e ceil(max(0, load_e - first) / m)."""
    x, experts, weights = _inputs(seed=5, skew=1.0)
    first, m = 3, 2
    slots = routing.expert_positions(experts, E)
    tiles = moe_buffer.overflow_tiles(experts, slots.position_TK, slots.keep_TK, E, first, m)
    ex, pos = np.asarray(experts).ravel(), np.asarray(slots.position_TK).ravel()
    load = np.bincount(ex, minlength=E)
    assert int(tiles.n) == sum(-(-max(0, n - first) // m) for n in load) > 0
    row, expert_J, start_J = np.asarray(tiles.row_A), np.asarray(tiles.expert_J), np.asarray(tiles.start_J)
    over = pos >= first
    assert len(set(row[over])) == over.sum() and np.all(row[~over] >= expert_J.size * m)
    for a in np.flatnonzero(over):
        j, r = divmod(int(row[a]), m)
        assert j < int(tiles.n) and expert_J[j] == ex[a] and start_J[j] + r == pos[a]


@pytest.mark.parametrize("skew", [0.0, 1.5, 4.0])
def test_padded_equals_naive_under_skew(skew):
    """Balanced, skewed and nearly all-to-one loads (several tiles per expert, several
    overflowing experts): values and gradients equal the naive loop."""
    x, experts, weights = _inputs(seed=7, skew=skew)
    w = _weights("gelu", True)
    fn, naive = moe_dispatch.get_dispatch("padded"), moe_dispatch.get_dispatch("naive")

    def loss(f, **kw):
        return lambda x, wt, w: jnp.sum(jnp.sin(3 * f(x, experts, wt, w, activation="gelu", **kw)[0]))

    got = jax.value_and_grad(loss(fn, first=0.5, tile=0.25), argnums=(0, 1, 2))(x, weights, w)
    want = jax.value_and_grad(loss(naive), argnums=(0, 1, 2))(x, weights, w)
    _assert_trees_close(got, want)

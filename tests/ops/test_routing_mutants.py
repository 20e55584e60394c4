"""Routing at its edges: group-limit bounds and default, score-order ties among many assignments,
padding in the sequence-level and flattened balance losses and in the router z-loss, and float32
results under jax_enable_x64, against numpy formulas and loops written here."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.ops import routing


def _np_softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _np_group_mask(scores, n_groups, topk_groups):
    """Experts of the topk_groups groups with the highest max score (ties: lower group first)."""
    T, E = scores.shape
    g = scores.reshape(T, n_groups, E // n_groups).max(-1)
    best = np.argsort(-g, -1, kind="stable")[:, :topk_groups]
    allowed = np.zeros((T, n_groups), bool)
    np.put_along_axis(allowed, best, True, -1)
    return np.repeat(allowed, E // n_groups, -1)


@pytest.mark.parametrize("topk_groups", [1, 2, 4])
def test_group_mask_bounds_and_max_default(topk_groups):
    """topk_groups may be 1 .. n_groups (all groups: every expert allowed); the default group score is max."""
    scores = np.random.default_rng(0).random((6, 8)).astype(np.float32)
    got = jax.jit(routing.group_limited_mask, static_argnums=(1, 2))(scores, 4, topk_groups)
    np.testing.assert_array_equal(got, _np_group_mask(scores, 4, topk_groups))


def _np_top_k(select, k):
    return np.argsort(-select, -1, kind="stable")[:, :k]


def test_top_k_route_group_defaults_and_bounds():
    """With n_groups > 1 (2 included) the defaults are one group by max score; k may be every expert
    of the chosen groups (and, without groups, every expert)."""
    logits = np.random.default_rng(5).standard_normal((6, 8)).astype(np.float32)
    s = _np_softmax(logits.astype(np.float64))

    @jax.jit
    def routes(z):
        return (
            routing.top_k_route(z, 2, n_groups=2),
            routing.top_k_route(z, 4, n_groups=2),
            routing.top_k_route(z, 4, n_groups=4, topk_groups=2),
            routing.top_k_route(z, 8),
        )

    one_group_of_two, whole_group, two_of_four, all_experts = routes(logits)
    in_group = lambda n, g: np.where(_np_group_mask(s, n, g), s, -np.inf)
    np.testing.assert_array_equal(one_group_of_two.experts_TK, _np_top_k(in_group(2, 1), 2))
    np.testing.assert_array_equal(whole_group.experts_TK, _np_top_k(in_group(2, 1), 4))
    np.testing.assert_array_equal(two_of_four.experts_TK, _np_top_k(in_group(4, 2), 4))
    np.testing.assert_array_equal(all_experts.experts_TK, _np_top_k(s, 8))


@pytest.mark.parametrize(
    "k,kwargs,message",
    [
        (9, {}, "k=9 must be in [1, 8] (the number of experts)"),
        (5, dict(n_groups=4, topk_groups=2), "k=5 exceeds the 4 experts of the chosen groups"),
    ],
)
def test_top_k_route_errors(k, kwargs, message):
    """k above the experts (or above those of the chosen groups) is refused with these messages."""
    with pytest.raises(ValueError) as err:
        jax.jit(lambda z: routing.top_k_route(z, k, **kwargs))(jnp.zeros((12, 8)))
    assert str(err.value) == message


@pytest.mark.parametrize("topk_groups", [0, 5])
def test_group_mask_refuses_topk_groups_outside_1_to_n_groups(topk_groups):
    """topk_groups outside [1, n_groups] is refused with a message naming both."""
    with pytest.raises(ValueError) as err:
        routing.group_limited_mask(jnp.zeros((2, 8)), 4, topk_groups)
    assert str(err.value) == f"topk_groups={topk_groups} must be in [1, n_groups=4]"


def _np_score_order_positions(experts, weights, E):
    """Position of each assignment in its expert's buffer, higher weight first, ties by token then rank."""
    T, K = experts.shape
    order = sorted(((t, k) for t in range(T) for k in range(K)), key=lambda tk: (-weights[tk], tk[0] * K + tk[1]))
    count, pos = np.zeros(E, int), np.zeros((T, K), int)
    for t, k in order:
        pos[t, k] = count[experts[t, k]]
        count[experts[t, k]] += 1
    return pos


def test_score_order_breaks_ties_by_token_then_rank_among_many():
    """With 64 assignments on 3 distinct weights (most of them tied), the score order still numbers
    tied assignments by token, then rank."""
    rng = np.random.default_rng(1)
    T, K, E = 32, 2, 4
    experts = np.stack([rng.permutation(E)[:K] for _ in range(T)]).astype(np.int32)
    weights = rng.integers(0, 3, (T, K)).astype(np.float32) / 4
    got = _positions(experts, n_experts=E, weights_TK=weights, drop_order="score")
    np.testing.assert_array_equal(got.position_TK, _np_score_order_positions(experts, weights, E))


_positions = jax.jit(routing.expert_positions, static_argnames=("n_experts", "capacity", "drop_order"))


def test_score_order_without_weights_is_token_order():
    """drop_order='score' without weights: all weights tie, so assignments go by token, then rank."""
    experts = np.array([[0, 1], [1, 0], [0, 2], [2, 0]], np.int32)
    by_score = _positions(experts, n_experts=3, capacity=1, drop_order="score")
    by_position = _positions(experts, n_experts=3, capacity=1, drop_order="position")
    np.testing.assert_array_equal(by_score.position_TK, by_position.position_TK)
    np.testing.assert_array_equal(by_score.keep_TK, [[1, 1], [0, 0], [0, 1], [0, 0]])


def test_slots_are_int32_counts():
    """Positions and loads come back as int32 (positions index buffers; counts are whole numbers)."""
    slots = _positions(np.array([[0, 1], [0, 2]], np.int32), n_experts=3, capacity=1)
    assert slots.position_TK.dtype == jnp.int32 and slots.counts_E.dtype == jnp.int32
    np.testing.assert_array_equal(slots.counts_E, [2, 1, 1])


def test_load_ratio_with_a_mean_load_below_one():
    """max / mean also when fewer assignments than experts (mean < 1): [1, 0, 1, 0] gives 2; no load gives 0."""
    assert float(routing.load_max_over_mean(jnp.array([1.0, 0.0, 1.0, 0.0]))) == pytest.approx(2.0)
    assert float(routing.load_max_over_mean(jnp.zeros(4))) == 0.0


def test_bias_update_keeps_the_bias_dtype():
    """A bfloat16 bias stays bfloat16: the sign step is cast to the bias dtype."""
    new = routing.update_balance_bias(jnp.zeros(3, jnp.bfloat16), jnp.array([3.0, 0.0, 0.0]), 0.125)
    assert new.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(new, np.float32), [-0.125, 0.125, 0.125])


def _balance_data(B=3, T=5, E=4, K=2, seed=2):
    """Routing of B sequences of T tokens (T != E != K, so no axis can stand in for another)."""
    rng = np.random.default_rng(seed)
    probs = _np_softmax(rng.standard_normal((B, T, E)) * 2).astype(np.float32)
    experts = np.stack([[rng.permutation(E)[:K] for _ in range(T)] for _ in range(B)]).astype(np.int32)
    valid = rng.random((B, T)) < 0.7
    valid[:, 0] = True
    return probs, experts, valid


def _np_expert_balance(probs, experts, valid):
    """DeepSeekMoE's sum_i f_i P_i over the valid tokens: f_i = E / (K n) * count_i, P_i = mean prob."""
    E, K = probs.shape[-1], experts.shape[-1]
    p, e = probs[valid], experts[valid]
    f = E / (K * len(p)) * np.bincount(e.ravel(), minlength=E)
    return float(np.sum(f * p.mean(0)))


def _np_switch_balance(probs, experts, valid):
    """Switch's E * sum_i f_i P_i over the valid tokens: f_i = share of first choices, P_i = mean prob."""
    E = probs.shape[-1]
    p, e = probs[valid], experts[valid]
    f = np.bincount(e[:, 0], minlength=E) / len(p)
    return float(E * np.sum(f * p.mean(0)))


def test_balance_losses_by_name_skip_padding():
    """BALANCE_LOSSES take [B, T, ...] and valid_BT: padding counts nowhere; 'sequence' averages the
    per-sequence expert loss, the token-level forms pool every valid token."""
    probs, experts, valid = _balance_data()
    want = {
        "switch": _np_switch_balance(probs, experts, valid),
        "expert": _np_expert_balance(probs, experts, valid),
        "sequence": np.mean([_np_expert_balance(p, e, v) for p, e, v in zip(probs, experts, valid)]),
    }
    fns = {name: routing.BALANCE_LOSSES.get(name) for name in want}
    got = jax.jit(lambda p, e, v: {n: f(p, e, v) for n, f in fns.items()})(probs, experts, valid)
    for name in want:
        assert float(got[name]) == pytest.approx(want[name], rel=1e-5), name


@pytest.mark.parametrize("n_valid", [1, 3])
def test_token_level_balance_losses_skip_padding(n_valid):
    """switch / expert balance losses of [T, ...] routing with valid_T: the mean over the valid tokens
    only, also when a single token is valid."""
    probs, experts, _ = _balance_data(B=1, T=5)
    probs, experts = probs[0], experts[0]
    valid = np.arange(5) < n_valid
    fns = (routing.switch_balance_loss, routing.expert_balance_loss)
    got = jax.jit(lambda p, e, v: [f(p, e, v) for f in fns])(probs, experts, valid)
    want = (_np_switch_balance(probs, experts, valid), _np_expert_balance(probs, experts, valid))
    assert [float(g) for g in got] == pytest.approx(want, rel=1e-5)


def test_router_z_loss_skips_padding_and_averages_one_token():
    """Padding tokens are left out of the mean of logsumexp^2, also when a single token is valid."""
    logits = np.random.default_rng(3).standard_normal((4, 6)).astype(np.float32) * 3
    lse2 = np.log(np.exp(logits.astype(np.float64)).sum(-1)) ** 2
    fn = jax.jit(routing.router_z_loss)
    for valid in ([True, False, True, True], [False, False, True, False]):
        valid = np.array(valid)
        assert float(fn(logits, valid)) == pytest.approx(lse2[valid].mean(), rel=1e-5)


def test_float64_inputs_under_x64_give_float32_statistics():
    """With x64 on, the router z-loss, the loads and the balance losses of float64 inputs (with or
    without a validity mask) are float32."""
    logits = np.random.default_rng(4).standard_normal((5, 4))  # float64
    probs, experts, valid = _balance_data(B=1, T=5)
    probs, experts, valid = probs[0].astype(np.float64), experts[0], valid[0]

    @jax.jit
    def statistics(z, p, e, v):
        return (
            routing.router_z_loss(z),
            routing.router_z_loss(z, v),
            routing.expert_load(e, 4),
            routing.switch_balance_loss(p, e),
            routing.expert_balance_loss(p, e, v),
        )

    with jax.enable_x64(True):
        out = statistics(logits, probs, experts, valid)
    assert [x.dtype for x in out] == [jnp.float32] * len(out)
    lse2 = np.log(np.exp(logits).sum(-1)) ** 2
    assert float(out[0]) == pytest.approx(lse2.mean(), rel=1e-5)
    assert float(out[1]) == pytest.approx(lse2[valid].mean(), rel=1e-5)
    np.testing.assert_array_equal(out[2], np.bincount(experts.ravel(), minlength=4))
    assert float(out[3]) == pytest.approx(_np_switch_balance(probs, experts, np.ones(5, bool)), rel=1e-5)
    assert float(out[4]) == pytest.approx(_np_expert_balance(probs, experts, valid), rel=1e-5)

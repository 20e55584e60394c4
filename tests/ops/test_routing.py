"""Routing: top-k scores, group limits, capacity and drop order, balance losses, bias balancing,
against numpy formulas and loops written here."""

import functools
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from transformer_jax.ops import routing


def _np_softmax(z):
    z = np.asarray(z, np.float64)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _np_sigmoid(z):
    return 1.0 / (1.0 + np.exp(-np.asarray(z, np.float64)))


def _logits(T=12, E=8, seed=0, scale=2.0):
    return (np.random.default_rng(seed).standard_normal((T, E)) * scale).astype(np.float32)


class TopKRouteTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(("softmax_topk", False), ("softmax_topk", True), ("sigmoid_topk", True))
    def test_matches_numpy(self, router, renormalize):
        logits = _logits()
        bias = np.linspace(-1.0, 1.0, 8).astype(np.float32)
        fn = self.variant(functools.partial(routing.top_k_route, k=3, router=router, renormalize=renormalize))
        r = fn(logits, bias_E=bias)
        s = _np_softmax(logits) if router == "softmax_topk" else _np_sigmoid(logits)
        experts = np.argsort(-(s + bias), axis=-1, kind="stable")[:, :3]
        weights = np.take_along_axis(s, experts, -1)
        if renormalize:
            weights = weights / weights.sum(-1, keepdims=True)
        probs = s if router == "softmax_topk" else s / s.sum(-1, keepdims=True)
        np.testing.assert_array_equal(r.experts_TK, experts)
        np.testing.assert_allclose(r.weights_TK, weights, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(r.probs_TE, probs, rtol=1e-5, atol=1e-6)

    def test_bias_changes_selection_not_weights(self):
        logits = _logits()
        bias = np.zeros(8, np.float32)
        bias[5] = 100.0
        r = routing.top_k_route(logits, 2, bias_E=bias)
        assert (r.experts_TK[:, 0] == 5).all()
        np.testing.assert_allclose(r.weights_TK[:, 0], _np_softmax(logits)[:, 5], rtol=1e-5)

    @parameterized.parameters("max", "top2_sum")
    def test_group_limited_routing_picks_from_best_groups(self, group_score):
        logits = _logits(T=20, E=8, seed=1)
        r = routing.top_k_route(logits, 2, n_groups=4, topk_groups=2, group_score=group_score)
        s = _np_softmax(logits).reshape(20, 4, 2)
        g = s.max(-1) if group_score == "max" else np.sort(s, -1)[..., -2:].sum(-1)
        best = np.argsort(-g, -1, kind="stable")[:, :2]
        allowed = np.zeros((20, 4), bool)
        np.put_along_axis(allowed, best, True, -1)
        masked = np.where(np.repeat(allowed, 2, -1), _np_softmax(logits), -np.inf)
        np.testing.assert_array_equal(r.experts_TK, np.argsort(-masked, -1, kind="stable")[:, :2])
        assert np.take_along_axis(np.repeat(allowed, 2, -1), np.asarray(r.experts_TK), -1).all()

    def test_errors_name_the_argument(self):
        with pytest.raises(ValueError, match="k=9"):
            routing.top_k_route(_logits(), 9)
        with pytest.raises(ValueError, match="n_groups=3"):
            routing.top_k_route(_logits(), 2, n_groups=3, topk_groups=1)
        with pytest.raises(KeyError, match="softmax_topk"):
            routing.top_k_route(_logits(), 2, router="softmax_top")


def _np_positions(experts, E, capacity, order, weights=None, valid=None):
    """Loop reference: walk the assignments in priority order, count per expert."""
    T, K = experts.shape
    valid = np.ones(T, bool) if valid is None else valid
    if order == "rank":
        seq = [(t, k) for k in range(K) for t in range(T)]
    elif order == "position":
        seq = [(t, k) for t in range(T) for k in range(K)]
    else:
        seq = sorted(((t, k) for t in range(T) for k in range(K)), key=lambda tk: (-weights[tk], tk[0] * K + tk[1]))
    count = np.zeros(E, int)
    pos = np.zeros((T, K), int)
    keep = np.zeros((T, K), bool)
    for t, k in seq:
        if not valid[t]:
            continue
        e = experts[t, k]
        pos[t, k] = count[e]
        keep[t, k] = capacity is None or count[e] < capacity
        count[e] += 1
    return pos, keep, count


class CapacityTest(chex.TestCase):
    def test_capacity_formula(self):
        assert routing.capacity(100, 8, 2, 1.25) == math.ceil(1.25 * 100 * 2 / 8) == 32
        assert routing.capacity(10, 8, 2, 100.0) == 10  # never more than T
        assert routing.capacity(3, 64, 1, 0.01) == 1
        assert routing.capacity(100, 8, 2, None) is None

    def test_rank_order_drops_second_choices_first(self):
        # 4 tokens; expert 0 is everyone's choice: first choices of tokens 0, 2 and second choices
        # of tokens 1, 3. With capacity 2 the first choices win, whatever the token order.
        experts = np.array([[0, 1], [2, 0], [0, 3], [1, 0]], np.int32)
        slots = routing.expert_positions(experts, 4, 2)
        np.testing.assert_array_equal(slots.keep_TK, [[1, 1], [1, 0], [1, 1], [1, 0]])
        np.testing.assert_array_equal(slots.position_TK[:, 0], [0, 0, 1, 0])
        np.testing.assert_array_equal(slots.counts_E, [4, 2, 1, 1])
        by_position = routing.expert_positions(experts, 4, 2, drop_order="position")
        np.testing.assert_array_equal(by_position.keep_TK, [[1, 1], [1, 1], [0, 1], [1, 0]])

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.product(order=("rank", "position", "score"), capacity=(None, 1, 3))
    def test_matches_loop_reference(self, order, capacity):
        rng = np.random.default_rng(3)
        T, K, E = 16, 2, 4
        experts = np.stack([rng.permutation(E)[:K] for _ in range(T)]).astype(np.int32)
        weights = rng.random((T, K)).astype(np.float32)
        weights[3, 1] = weights[5, 0]  # a tie, broken by token then rank
        valid = rng.random(T) > 0.2
        fn = self.variant(functools.partial(routing.expert_positions, n_experts=E, capacity=capacity, drop_order=order))
        slots = fn(experts, valid_T=valid, weights_TK=weights)
        pos, keep, count = _np_positions(experts, E, capacity, order, weights, valid)
        np.testing.assert_array_equal(slots.keep_TK, keep)
        np.testing.assert_array_equal(np.where(keep, slots.position_TK, -1), np.where(keep, pos, -1))
        np.testing.assert_array_equal(slots.counts_E, count)

    def test_vmap_over_groups(self):
        experts = np.random.default_rng(0).integers(0, 4, (3, 8, 1)).astype(np.int32)
        slots = jax.vmap(lambda e: routing.expert_positions(e, 4, 2))(experts)
        for g in range(3):
            _, keep, _ = _np_positions(experts[g], 4, 2, "rank")
            np.testing.assert_array_equal(slots.keep_TK[g], keep)


class LossTest(chex.TestCase):
    def _data(self, T=24, E=6, K=2, seed=0):
        logits = _logits(T, E, seed)
        r = routing.top_k_route(logits, K)
        return logits, np.asarray(r.probs_TE, np.float64), np.asarray(r.experts_TK)

    @chex.variants(with_jit=True, without_jit=True)
    def test_switch_form(self):
        _, probs, experts = self._data()
        T, E = probs.shape
        f = np.bincount(experts[:, 0], minlength=E) / T
        want = E * np.sum(f * probs.mean(0))
        got = self.variant(routing.switch_balance_loss)(probs.astype(np.float32), experts)
        assert float(got) == pytest.approx(want, rel=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_deepseek_expert_form(self):
        _, probs, experts = self._data()
        T, E = probs.shape
        K = experts.shape[1]
        f = E / (K * T) * np.bincount(experts.ravel(), minlength=E)
        want = np.sum(f * probs.mean(0))
        got = self.variant(routing.expert_balance_loss)(probs.astype(np.float32), experts)
        assert float(got) == pytest.approx(want, rel=1e-5)

    def test_forms_are_one_when_uniform_and_agree_for_top1(self):
        T, E = 16, 4
        probs = np.full((T, E), 1 / E, np.float32)
        experts = (np.arange(T) % E)[:, None].astype(np.int32)
        for name in ("switch", "expert", "sequence"):
            loss = routing.BALANCE_LOSSES.get(name)(probs.reshape(2, 8, E), experts.reshape(2, 8, 1))
            assert float(loss) == pytest.approx(1.0, rel=1e-6), name
        _, probs, experts = self._data(K=1)
        a = routing.switch_balance_loss(probs, experts)
        b = routing.expert_balance_loss(probs, experts)
        assert float(a) == pytest.approx(float(b), rel=1e-6)

    def test_sequence_form_and_padding(self):
        _, probs, experts = self._data(T=24)
        per_seq = [
            routing.expert_balance_loss(probs[i * 8 : (i + 1) * 8], experts[i * 8 : (i + 1) * 8]) for i in range(3)
        ]
        got = routing.sequence_balance_loss(probs.reshape(3, 8, -1), experts.reshape(3, 8, -1))
        assert float(got) == pytest.approx(float(np.mean(per_seq)), rel=1e-5)
        valid = np.arange(24) < 16  # padding counts nowhere
        padded = routing.expert_balance_loss(probs, experts, valid)
        assert float(padded) == pytest.approx(float(routing.expert_balance_loss(probs[:16], experts[:16])), rel=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_router_z_loss(self):
        logits = _logits()
        lse = np.log(np.exp(logits.astype(np.float64)).sum(-1))
        assert float(self.variant(routing.router_z_loss)(logits)) == pytest.approx(np.mean(lse**2), rel=1e-5)

    def test_balance_loss_gradient_pushes_probability_off_the_busy_expert(self):
        logits = _logits()
        experts = np.zeros((12, 1), np.int32)  # everyone on expert 0
        grad = jax.grad(lambda z: routing.switch_balance_loss(jax.nn.softmax(z), experts))(logits)
        assert (np.asarray(grad)[:, 0] > 0).all()


def test_load_statistics():
    experts = np.array([[0, 1], [0, 2], [0, 1]], np.int32)
    load = routing.expert_load(experts, 4)
    np.testing.assert_array_equal(load, [3, 2, 1, 0])
    assert float(routing.load_max_over_mean(load)) == pytest.approx(3 / 1.5)
    np.testing.assert_array_equal(routing.expert_load(experts, 4, np.array([True, False, True])), [2, 2, 0, 0])


def test_bias_update_rule_and_no_gradient():
    bias = jnp.zeros(4)
    new = routing.update_balance_bias(bias, jnp.array([5.0, 1.0, 2.0, 0.0]), 0.1)
    np.testing.assert_allclose(new, [-0.1, 0.1, 0.0, 0.1])
    grad = jax.grad(lambda b: jnp.sum(routing.update_balance_bias(b, jnp.ones(4) * b, 0.1)))(bias)
    np.testing.assert_array_equal(grad, 0.0)


BIAS_STEPS = 60


def test_bias_balancing_fixes_a_skewed_router_within_60_steps():
    """Auxiliary-loss-free balancing (DeepSeek-V3) on a stream of synthetic tokens (2048 per step):
    a router whose centroids favour experts 0 and 1 starts with max/mean load > 3 (on a fixed
    8192-token evaluation batch); after ``BIAS_STEPS`` = 60 updates with gamma = 0.005 the ratio
    is below 1.2, and stays there for 40 more steps."""
    D, E, K, T, gamma = 16, 8, 2, 2048, 0.005
    key = jax.random.key(0)
    centroids = jax.random.normal(key, (D, E)) * 0.3
    skew = jnp.array([2.0, 1.5, 0, 0, 0, 0, 0, 0])
    x_eval = jax.random.normal(jax.random.key(1), (8192, D))

    def load_ratio(bias, x):
        r = routing.top_k_route(x @ centroids + skew, K, bias_E=bias)
        return routing.load_max_over_mean(routing.expert_load(r.experts_TK, E))

    @jax.jit
    def step(bias, key):
        x = jax.random.normal(key, (T, D))
        r = routing.top_k_route(x @ centroids + skew, K, bias_E=bias)
        bias = routing.update_balance_bias(bias, routing.expert_load(r.experts_TK, E), gamma)
        return bias, load_ratio(bias, x_eval)

    bias = jnp.zeros(E)
    assert float(load_ratio(bias, x_eval)) > 3.0
    ratios = []
    for i in range(BIAS_STEPS + 40):
        bias, ratio = step(bias, jax.random.fold_in(key, i))
        ratios.append(float(ratio))
    assert max(ratios[BIAS_STEPS - 1 :]) < 1.2, ratios


def test_scaling_factor_multiplies_the_combine_weights_only():
    """DeepSeek-V3's routed_scaling_factor: the same experts, weights (after renormalising) times s."""
    logits = jnp.asarray(_logits())
    plain = routing.top_k_route(logits, 3, router="sigmoid_topk", renormalize=True, n_groups=4, topk_groups=2)
    scaled = routing.top_k_route(
        logits, 3, router="sigmoid_topk", renormalize=True, n_groups=4, topk_groups=2, scaling_factor=2.5
    )
    np.testing.assert_array_equal(scaled.experts_TK, plain.experts_TK)
    np.testing.assert_allclose(scaled.weights_TK, 2.5 * np.asarray(plain.weights_TK), rtol=1e-6)
    np.testing.assert_allclose(np.sum(scaled.weights_TK, -1), 2.5, rtol=1e-6)
    np.testing.assert_array_equal(scaled.probs_TE, plain.probs_TE)

"""Every MoE dispatch (and the MoE layer) against a numpy reference written here: a loop over the
tokens and their top-k assignments, ``y_t = sum_k keep_tk w_tk FFN_e(x_t)``, with capacity drops
("rank" order, per GShard group) and gradients derived by hand. None of the package's dispatch,
routing or FFN code is used to build the expected values."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from transformer_jax.nn.moe import MoE, MoESpec
from transformer_jax.nn.moe_config import CapacityConfig, SoftmaxRouter
from transformer_jax.ops import moe_dispatch
from transformer_jax.parallel import MeshConfig, make_mesh

T, D, F, E, K = 32, 8, 16, 4, 2
# XLA's backend optimisations do not change what is computed; turning them off about halves the
# compile time of these gradient programs (the bulk of this file's run time).
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
# expert_parallel runs the capacity case only (per-group drops): its dropless SwiGLU case is
# compared with the single-device dispatches (checked here) in tests/parallel/test_expert_parallel.py.
IMPLS = ("naive", "dense", "ragged", "padded", "grouped", "expert_parallel")
INVALID = (3, 17, 30)  # padding tokens: no output, no capacity
# Expert parallelism on mesh (data=2, expert=4): 8 chunks of T / 8 = 4 consecutive tokens, each
# a GShard group with its own capacity.
EP_MESH = MeshConfig(data=2, expert=4)
EP_GROUP = 4
# name: (activation, capacity_factor, capacity of a T-token group, capacity of a 4-token group)
#   capacity = ceil(factor * tokens * K / E): ceil(0.6 * 32 * 2 / 4) = ceil(9.6) = 10,
#                                             ceil(0.6 * 4 * 2 / 4) = ceil(1.2) = 2.
CASES = {
    "swiglu_dropless": ("swiglu", None, None, None),
    "gelu_capacity": ("gelu", 0.6, 10, 2),
}


# numpy reference ------------------------------------------------------------------------------


def _erf(z):
    return np.vectorize(math.erf)(z)


def _act(name, z):
    """(act(z), act'(z)) in float64: SiLU for the SwiGLU gate, exact (erf) GELU."""
    if name == "silu":
        s = 1.0 / (1.0 + np.exp(-z))
        return z * s, s * (1.0 + z * (1.0 - s))
    cdf = 0.5 * (1.0 + _erf(z / math.sqrt(2.0)))
    return z * cdf, cdf + z * np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)


def _rank_keep(experts_TK, valid_T, capacity, group):
    """Drop order "rank" within each group of ``group`` consecutive tokens: every expert takes
    first choices (k = 0) in token order, then second choices, ...; an assignment is kept if
    fewer than ``capacity`` assignments of its expert came before it. Invalid tokens take no
    slot and are never kept."""
    keep_TK = np.zeros(experts_TK.shape, bool)
    for start in range(0, len(experts_TK), group):
        taken = [0] * E
        for k in range(K):
            for t in range(start, start + group):
                if not valid_T[t]:
                    continue
                e = experts_TK[t, k]
                keep_TK[t, k] = capacity is None or taken[e] < capacity
                taken[e] += 1
    return keep_TK


def _reference(x_TD, experts_TK, weights_TK, keep_TK, w, gated, activation, dy_TD):
    """Forward ``y_t = sum_k keep w FFN_e(x_t)`` (gated: ``(silu(x Wg) * (x Win + b_in)) Wout +
    b_out``; plain: ``act(x Win + b_in) Wout + b_out``) and the gradients of ``sum(y * dy)``,
    by the chain rule, one assignment at a time (float64)."""
    y = np.zeros((T, D))
    g = {name: np.zeros_like(a) for name, a in w.items()}
    g_x, g_weights = np.zeros((T, D)), np.zeros((T, K))
    for t in range(T):
        for k in range(K):
            if not keep_TK[t, k]:
                continue
            e, gate = experts_TK[t, k], weights_TK[t, k]
            u_F = x_TD[t] @ w["w_in"][e] + w["b_in"][e]
            if gated:
                v_F = x_TD[t] @ w["w_gate"][e]
                s_F, ds_F = _act("silu", v_F)
                a_F = s_F * u_F
            else:
                a_F, da_F = _act(activation, u_F)
            f_D = a_F @ w["w_out"][e] + w["b_out"][e]
            y[t] += gate * f_D
            # backward of sum(y * dy)
            g_weights[t, k] = f_D @ dy_TD[t]
            df_D = gate * dy_TD[t]
            g["w_out"][e] += np.outer(a_F, df_D)
            g["b_out"][e] += df_D
            d_a_F = w["w_out"][e] @ df_D
            if gated:
                du_F, dv_F = d_a_F * s_F, d_a_F * u_F * ds_F
                g["w_gate"][e] += np.outer(x_TD[t], dv_F)
                g_x[t] += w["w_gate"][e] @ dv_F
            else:
                du_F = d_a_F * da_F
            g["w_in"][e] += np.outer(x_TD[t], du_F)
            g["b_in"][e] += du_F
            g_x[t] += w["w_in"][e] @ du_F
    return y, g_x, g_weights, g


def _problem(gated, seed=0):
    """Skewed routing (expert 0 takes about half the first choices, so padded's first round of
    16 rows overflows into tiles), random positive gates, random weights with biases."""
    rng = np.random.default_rng(seed)
    experts_TK = np.stack([rng.choice(E, K, replace=False, p=[0.55, 0.2, 0.15, 0.1]) for _ in range(T)])
    weights_TK = rng.uniform(0.1, 1.0, (T, K))
    x_TD = rng.normal(size=(T, D))
    valid_T = np.ones(T, bool)
    valid_T[list(INVALID)] = False
    w = {
        "w_in": rng.normal(size=(E, D, F)) * 0.4,
        "w_out": rng.normal(size=(E, F, D)) * 0.4,
        "b_in": rng.normal(size=(E, F)) * 0.3,
        "b_out": rng.normal(size=(E, D)) * 0.3,
    }
    if gated:
        w["w_gate"] = rng.normal(size=(E, D, F)) * 0.4
    dy_TD = rng.normal(size=(T, D))
    as32 = lambda a: a.astype(np.float32).astype(np.float64)  # the values the float32 run sees
    return (
        as32(x_TD),
        experts_TK.astype(np.int32),
        as32(weights_TK),
        valid_T,
        {n: as32(a) for n, a in w.items()},
        as32(dy_TD),
    )


def _expert_weights(w):
    f32 = lambda name: None if name not in w else jnp.asarray(w[name], jnp.float32)
    return moe_dispatch.ExpertWeights(
        w_in_EDF=jnp.asarray(w["w_in"], jnp.float32),
        w_out_EFD=jnp.asarray(w["w_out"], jnp.float32),
        w_gate_EDF=f32("w_gate"),
        b_in_EF=f32("b_in"),
        b_out_ED=f32("b_out"),
    )


@pytest.mark.parametrize("activation", ["swiglu", "gelu"])
def test_reference_gradients_match_finite_differences(activation):
    """The hand-derived backward of the reference (what the dispatches' gradients are checked
    against) is the derivative of its forward: a central difference in float64 along a random
    direction of (x, gates, all expert weights)."""
    gated = activation == "swiglu"
    x, experts, weights, valid, w, dy = _problem(gated)
    keep = _rank_keep(experts, valid, 10, T)
    _, g_x, g_weights, g_w = _reference(x, experts, weights, keep, w, gated, activation, dy)
    rng = np.random.default_rng(1)
    d_x, d_weights = rng.normal(size=x.shape), rng.normal(size=weights.shape)
    d_w = {n: rng.normal(size=a.shape) for n, a in w.items()}

    def loss_along(s):
        w_s = {n: w[n] + s * d_w[n] for n in w}
        y = _reference(x + s * d_x, experts, weights + s * d_weights, keep, w_s, gated, activation, dy)[0]
        return np.sum(y * dy)

    eps = 1e-5
    numeric = (loss_along(eps) - loss_along(-eps)) / (2 * eps)
    analytic = np.sum(g_x * d_x) + np.sum(g_weights * d_weights) + sum(np.sum(g_w[n] * d_w[n]) for n in w)
    np.testing.assert_allclose(numeric, analytic, rtol=1e-6)


# the package's dispatches -----------------------------------------------------------------------


@functools.cache
def _value_and_grad(name, activation, capacity_factor):
    fn = moe_dispatch.get_dispatch(name)

    def loss(x, weights, w, experts, valid, dy):
        y, keep = fn(x, experts, weights, w, activation=activation, capacity_factor=capacity_factor, valid_T=valid)
        return jnp.sum(y * dy), (y, keep)

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True), compiler_options=FAST_COMPILE)


def _run_dispatch(name, activation, capacity_factor, x, experts, weights, valid, w, dy):
    args = [jnp.asarray(a, jnp.float32) for a in (x, weights)]
    weights32 = _expert_weights(w)
    call = lambda w32: _value_and_grad(name, activation, capacity_factor)(
        args[0], args[1], w32, jnp.asarray(experts), jnp.asarray(valid), jnp.asarray(dy, jnp.float32)
    )
    if name != "expert_parallel":
        return call(weights32)
    mesh = make_mesh(EP_MESH)
    with jax.set_mesh(mesh):
        return call(jax.device_put(weights32, NamedSharding(mesh, P("expert"))))


@pytest.mark.parametrize(
    "impl,case",
    [(impl, case) for impl in IMPLS for case in sorted(CASES) if impl != "expert_parallel" or case == "gelu_capacity"],
)
def test_dispatch_matches_numpy_reference(impl, case):
    """Values, kept assignments and gradients (x, gates, every expert weight and bias) of each
    dispatch equal the numpy loop: a wrong bias, a swapped gate/up projection, a wrong drop rule
    or a broken hand-written backward pass fails here."""
    activation, factor, cap_all, cap_group = CASES[case]
    gated = activation == "swiglu"
    x, experts, weights, valid, w, dy = _problem(gated)
    assert np.bincount(experts.ravel(), minlength=E).max() > 16  # padded runs overflow tiles
    if impl == "expert_parallel":
        keep_ref = _rank_keep(experts, valid, cap_group, EP_GROUP)
    else:
        keep_ref = _rank_keep(experts, valid, cap_all, T)
    if factor is not None:
        assert not keep_ref[valid].all()  # the case really drops assignments
    y_ref, g_x_ref, g_weights_ref, g_w_ref = _reference(x, experts, weights, keep_ref, w, gated, activation, dy)

    (_, (y, keep)), (g_x, g_weights, g_w) = _run_dispatch(impl, activation, factor, x, experts, weights, valid, w, dy)

    np.testing.assert_array_equal(np.asarray(keep), keep_ref, err_msg="keep_TK")
    close = lambda got, ref, what: np.testing.assert_allclose(np.asarray(got), ref, rtol=2e-5, atol=2e-5, err_msg=what)
    close(y, y_ref, "y_TD")
    close(g_x, g_x_ref, "d/dx")
    close(g_weights, g_weights_ref, "d/dweights_TK")
    got = {
        "w_in": g_w.w_in_EDF,
        "w_out": g_w.w_out_EFD,
        "w_gate": g_w.w_gate_EDF,
        "b_in": g_w.b_in_EF,
        "b_out": g_w.b_out_ED,
    }
    assert (got["w_gate"] is not None) == gated
    for name, ref in g_w_ref.items():
        close(got[name], ref, f"d/d{name}")


# the MoE layer: numpy router + reference + shared expert -----------------------------------------


def _softmax_top_k(logits_TE, renormalize):
    """Softmax over the experts; the K largest (ties: lower index first); gates = their
    probabilities, divided by their sum when ``renormalize``."""
    z = logits_TE - logits_TE.max(-1, keepdims=True)
    probs_TE = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    experts_TK = np.argsort(-probs_TE, axis=-1, kind="stable")[:, :K]
    weights_TK = np.take_along_axis(probs_TE, experts_TK, -1)
    if renormalize:
        weights_TK = weights_TK / weights_TK.sum(-1, keepdims=True)
    return experts_TK, weights_TK


@pytest.mark.parametrize("renormalize", [False, True])
def test_moe_layer_matches_numpy(renormalize):
    """`nn.moe.MoE` (SwiGLU experts with biases, one shared expert, capacity 1.0, padding
    tokens): output and metrics equal a numpy router (softmax top-2, renormalised as configured)
    followed by the reference loop plus the shared SwiGLU FFN (whose gate has a bias too)."""
    B, L = 2, 16
    spec = MoESpec(
        n_experts=E,
        top_k=K,
        d_expert=F,
        n_shared=1,
        ffn="swiglu",
        router=SoftmaxRouter(renormalize=renormalize),
        capacity=CapacityConfig(factor=1.0),
        dispatch="dense",  # the dispatches are checked above; dense compiles fastest
    )
    layer = nnx.eval_shape(lambda: MoE(D, spec, use_bias=True, rngs=nnx.Rngs(0)))
    rng = np.random.default_rng(2)
    for _, v in nnx.iter_graph(layer):  # random values everywhere, biases included
        if isinstance(v, nnx.Param):
            v.set_value(jnp.asarray(rng.normal(size=v.shape) * 0.4, jnp.float32))
    f64 = lambda p: np.asarray(p[...], np.float64)
    x_BTD = rng.normal(size=(B, L, D)).astype(np.float32)
    valid_BT = np.ones((B, L), bool)
    valid_BT[1, -3:] = False

    graphdef, state = nnx.split(layer)
    call = jax.jit(lambda state, x, valid: nnx.merge(graphdef, state)(x, valid_BT=valid), compiler_options=FAST_COMPILE)
    y, aux = call(state, jnp.asarray(x_BTD), jnp.asarray(valid_BT))

    x_TD, valid_T = x_BTD.reshape(B * L, D).astype(np.float64), valid_BT.ravel()
    experts_TK, weights_TK = _softmax_top_k(x_TD @ f64(layer.router.kernel), renormalize)
    capacity = 16  # ceil(1.0 * 32 tokens * K / E)
    keep_TK = _rank_keep(experts_TK, valid_T, capacity, B * L)
    assert not keep_TK[valid_T].all()
    w = {n: f64(getattr(layer, n)) for n in ("w_in", "w_out", "w_gate", "b_in", "b_out")}
    y_TD, *_ = _reference(x_TD, experts_TK, weights_TK, keep_TK, w, True, "swiglu", np.zeros((B * L, D)))
    sh = layer.shared
    assert sh is not None and sh.w_gate is not None
    lin = lambda m, z: z @ f64(m.kernel) + f64(m.bias)
    y_TD += lin(sh.w_out, _act("silu", lin(sh.w_gate, x_TD))[0] * lin(sh.w_in, x_TD))
    np.testing.assert_allclose(np.asarray(y).reshape(B * L, D), y_TD, rtol=2e-5, atol=2e-5)

    m = aux["metrics"]
    n_assigned = K * valid_T.sum()
    load_E = np.bincount(experts_TK[valid_T].ravel(), minlength=E)
    np.testing.assert_allclose(m["moe_load"], load_E / n_assigned, rtol=1e-6)
    np.testing.assert_allclose(m["moe_dropped_fraction"], 1 - keep_TK.sum() / n_assigned, rtol=1e-6)

"""The MoE layer: output against a per-token numpy reference, gradients to the router, shared
experts, aux losses and statistics, the balancing bias, sharding metadata."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from transformer_jax.nn.moe import MoE, MoESpec
from transformer_jax.nn.moe_config import BalanceLossConfig, CapacityConfig, SigmoidRouter
from transformer_jax.ops import activations

D, B, T = 8, 2, 6
SPEC = MoESpec(
    n_experts=4,
    top_k=2,
    d_expert=12,
    n_shared=1,
    d_shared=6,
    ffn="swiglu",
    balance=BalanceLossConfig(coef=0.01),
    z_loss_coef=1e-3,
    dispatch="padded",
)


def _layer(spec=SPEC, seed=0, use_bias=True):
    return MoE(D, spec, use_bias=use_bias, rngs=nnx.Rngs(params=seed))


def _call(layer, x, **kw):
    """``layer(x, **kw)`` under jit (eager dispatch of the many small ops is slow to compile);
    variables the call writes are written back."""
    graphdef, state = nnx.split(layer)

    @jax.jit
    def run(state, x):
        module = nnx.merge(graphdef, state)
        out = module(x, **kw)
        return out, nnx.state(module)

    out, new_state = run(state, x)
    nnx.update(layer, new_state)
    return out


def _x(seed=1):
    return jax.random.normal(jax.random.key(seed), (B, T, D))


def _np(v):
    return np.asarray(v[...], np.float64)


def _np_ffn(x, w_in, w_out, w_gate, b_in, b_out, kind, b_gate=0.0):
    act = activations.FFN_ACTIVATIONS.get(kind)
    h = x @ w_in + (0 if b_in is None else b_in)
    h = np.asarray(act.activation(jnp.asarray(x @ w_gate + b_gate))) * h if act.gated else np.asarray(act.activation(h))
    return h @ w_out + (0 if b_out is None else b_out)


def _reference(layer, x):
    """Per-token loop: softmax over x @ router, top-k, weighted sum of expert FFNs + shared FFN."""
    spec = layer.spec
    x = np.asarray(x, np.float64).reshape(-1, D)
    logits = x @ _np(layer.router.kernel)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    sh = layer.shared
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        for e in np.argsort(-probs[t], kind="stable")[: spec.top_k]:
            out[t] += probs[t, e] * _np_ffn(
                x[t],
                _np(layer.w_in)[e],
                _np(layer.w_out)[e],
                _np(layer.w_gate)[e],
                _np(layer.b_in)[e],
                _np(layer.b_out)[e],
                spec.ffn,
            )
        out[t] += _np_ffn(
            x[t],
            _np(sh.w_in.kernel),
            _np(sh.w_out.kernel),
            _np(sh.w_gate.kernel),
            _np(sh.w_in.bias),
            _np(sh.w_out.bias),
            spec.ffn,
            _np(sh.w_gate.bias),
        )
    return out.reshape(B, T, D)


def _randomise_biases(layer):
    for path, var in nnx.to_flat_state(nnx.state(layer, nnx.Param)):
        if path[-1] in ("bias", "b_in", "b_out"):
            var[...] = 0.1 * jax.random.normal(jax.random.key(len(path)), var.shape)
    return layer


@pytest.mark.parametrize("dispatch", ["padded", "ragged", "dense", "naive"])
def test_matches_per_token_reference(dispatch):
    layer = _randomise_biases(_layer(dataclasses.replace(SPEC, dispatch=dispatch)))
    x = _x()
    y, aux = _call(layer, x)
    np.testing.assert_allclose(y, _reference(layer, x), atol=1e-5, rtol=1e-5)
    assert set(aux["losses"]) == {"moe_balance", "router_z"}


def test_gradients_reach_the_router():
    """Through the combine weights (not only through the aux losses): with both coefficients 0
    the router still gets a gradient, equal for the padded and naive dispatches."""
    spec = dataclasses.replace(SPEC, balance=None, z_loss_coef=0.0)
    x = _x()

    probe = jax.random.normal(jax.random.key(2), x.shape)

    def router_grad(dispatch):
        layer = _layer(dataclasses.replace(spec, dispatch=dispatch))
        for w in (layer.w_in, layer.w_gate, layer.w_out):
            w[...] = 50 * w[...]  # O(1) expert outputs
        graphdef, params = nnx.split(layer)

        def loss(params):
            y, aux = nnx.merge(graphdef, params)(x)
            assert not aux["losses"]
            return jnp.sum(y * probe)

        return jax.jit(jax.grad(loss))(params)["router"]["kernel"][...]

    g = router_grad("padded")
    assert float(jnp.linalg.norm(g)) > 1e-2
    np.testing.assert_allclose(g, router_grad("naive"), atol=1e-5, rtol=1e-5)


def test_shared_experts_receive_every_token():
    """Zero routed experts and drop nearly every assignment: each token still gets the shared FFN."""
    layer = _randomise_biases(_layer(dataclasses.replace(SPEC, capacity=CapacityConfig(factor=0.01))))
    layer.w_out[...] = jnp.zeros_like(layer.w_out[...])
    layer.b_out[...] = jnp.zeros_like(layer.b_out[...])
    x = _x()
    y, aux = _call(layer, x)
    shared = layer.shared(x)
    assert float(aux["metrics"]["moe_dropped_fraction"]) > 0.5
    np.testing.assert_allclose(y, shared, atol=1e-6)
    assert float(jnp.min(jnp.linalg.norm(shared, axis=-1))) > 0
    graphdef, state = nnx.split(layer)
    jac = jax.jit(jax.jacobian(lambda x: nnx.merge(graphdef, state)(x)[0]))(
        x
    )  # [B, T, D, B, T, D]: every token's own block is non-zero
    own = jnp.einsum("btdbte->bt", jnp.abs(jac.reshape(B, T, D, B, T, D)))
    assert bool(jnp.all(own > 0))


def test_aux_statistics():
    layer = _layer(dataclasses.replace(SPEC, capacity=CapacityConfig(factor=0.5)))
    valid = jnp.arange(T)[None, :].repeat(B, 0) < 4  # 2 padding tokens per row
    y, aux = _call(layer, _x(), valid_BT=valid)
    m = aux["metrics"]
    assert m["moe_load"].shape == (4,)
    np.testing.assert_allclose(jnp.sum(m["moe_load"]), 1.0, rtol=1e-6)
    assert float(m["moe_load_max_over_mean"]) == pytest.approx(float(jnp.max(m["moe_load"]) * 4), rel=1e-5)
    assert 0.0 < float(m["moe_dropped_fraction"]) < 1.0
    assert float(aux["losses"]["moe_balance"]) > 0 and float(aux["losses"]["router_z"]) > 0
    np.testing.assert_array_equal(y[~valid], layer.shared(_x())[~valid])  # padding: shared experts only


def test_balancing_bias_is_state_updated_only_by_training_calls():
    spec = dataclasses.replace(SPEC, router=SigmoidRouter(renormalize=True, bias_update_rate=0.1))
    layer = _layer(spec)
    assert "bias" not in nnx.state(layer, nnx.Param)
    assert next(iter(nnx.to_flat_state(nnx.state(layer, nnx.Not(nnx.Param)))))[0] == ("bias",)
    x = _x()
    _call(layer, x)
    np.testing.assert_array_equal(layer.bias[...], 0.0)
    _, aux = _call(layer, x, train=True)
    load = aux["metrics"]["moe_load"]
    want = 0.1 * jnp.sign(jnp.mean(load) - load)
    np.testing.assert_allclose(layer.bias[...], want, atol=1e-7)


def test_expert_kernels_are_sharded_on_experts_first():
    layer = _layer()
    for name in ("w_in", "w_gate", "w_out", "b_in", "b_out"):
        var = getattr(layer, name)
        assert var.get_metadata()["logical_axes"][0] == "experts", name
        assert var.shape[0] == 4
    assert layer.router.kernel.get_metadata()["logical_axes"] == ("embed", None)


def test_fine_grained_segmentation_keeps_parameters():
    """4 experts of width 12, top-2 == 8 experts of width 6, top-4 in parameters (FLOPs per token:
    tests/models/test_moe_models.py, from XLA's cost analysis)."""
    coarse = dataclasses.replace(SPEC, n_shared=0)
    fine = dataclasses.replace(coarse, n_experts=8, top_k=4, d_expert=6)
    expert_params = lambda spec: sum(
        v.size for v in jax.tree.leaves(nnx.state(_layer(spec, use_bias=False), nnx.Param)) if v.ndim == 3
    )
    assert expert_params(coarse) == expert_params(fine) == 3 * 4 * D * 12

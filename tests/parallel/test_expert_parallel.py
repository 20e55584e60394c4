"""Expert parallelism on 8 host CPU devices (tests/conftest.py) equals the single-device result."""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from transformer_jax.models import build_model, get_preset
from transformer_jax.models.moe_config import MoEConfig
from transformer_jax.ops import moe_dispatch, routing
from transformer_jax.parallel import MeshConfig, make_mesh, state_shardings

T, D, F, E, K = 32, 8, 16, 8, 2


def _problem(seed=0):
    k = jax.random.split(jax.random.key(seed), 6)
    x = jax.random.normal(k[0], (T, D))
    r = routing.top_k_route(jax.random.normal(k[1], (T, E)) * 2, K)
    w = moe_dispatch.ExpertWeights(
        *(jax.random.normal(k[i], s) * 0.3 for i, s in ((2, (E, D, F)), (3, (E, F, D)), (4, (E, D, F)), (5, (E, F))))
    )
    return x, r.experts_TK, r.weights_TK, w


def _value_and_grad(name, capacity_factor=None):
    fn = moe_dispatch.get_dispatch(name)

    def loss(x, weights, w, experts):
        y, keep = fn(x, experts, weights, w, activation="swiglu", capacity_factor=capacity_factor)
        return jnp.sum(jnp.sin(3 * y)), (y, keep)

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))


@pytest.mark.parametrize(
    "mesh_cfg", [MeshConfig(data=1, expert=8), MeshConfig(data=2, expert=4)], ids=["expert8", "data2_expert4"]
)
def test_dispatch_equals_single_device(mesh_cfg):
    x, experts, weights, w = _problem()
    (_, (y_ref, keep_ref)), g_ref = _value_and_grad("padded")(x, weights, w, experts)
    mesh = make_mesh(mesh_cfg)
    w_sharded = jax.device_put(w, NamedSharding(mesh, P("expert")))
    with jax.set_mesh(mesh):
        (_, (y, keep)), g = _value_and_grad("expert_parallel")(x, weights, w_sharded, experts)
    assert bool(keep.all())
    np.testing.assert_array_equal(keep, keep_ref)
    chex.assert_trees_all_close((y, g), (y_ref, g_ref), atol=1e-5, rtol=1e-5)
    assert g[2].w_in_EDF.sharding.spec[0] == "expert"


def test_capacity_is_per_device_chunk():
    """With a capacity factor each device's chunk of T / 8 tokens is a GShard group: the same as
    the single-device dispatch applied to each chunk separately."""
    x, experts, weights, w = _problem(seed=1)
    with jax.set_mesh(make_mesh(MeshConfig(data=1, expert=8))):
        (_, (y, keep)), _ = _value_and_grad("expert_parallel", 1.0)(x, weights, w, experts)
    chunk = T // 8
    fn = jax.jit(lambda *a: moe_dispatch.dense_dispatch(*a, w, activation="swiglu", capacity_factor=1.0))
    for c in range(8):
        s = slice(c * chunk, (c + 1) * chunk)
        y_c, keep_c = fn(x[s], experts[s], weights[s])
        np.testing.assert_array_equal(keep[s], keep_c)
        np.testing.assert_allclose(y[s], y_c, atol=1e-5, rtol=1e-5)
    assert not bool(keep.all())


def test_clear_errors():
    x, experts, weights, w = _problem()
    with pytest.raises(ValueError, match="needs a mesh with an 'expert' axis"):
        _value_and_grad("expert_parallel")(x, weights, w, experts)
    w6 = jax.tree.map(lambda a: a[:6], w)
    with jax.set_mesh(make_mesh(MeshConfig(data=2, expert=4))), pytest.raises(ValueError, match="6 experts"):
        _value_and_grad("expert_parallel")(x, weights, w6, experts)


def test_model_with_expert_parallel_equals_single_device():
    """A MoE DecoderLM with experts sharded over mesh.expert=4 (x data=2), as the training command
    builds it (``--set mesh.expert=4 model.moe.dispatch=expert_parallel``): loss and gradients
    equal the single-device model's."""
    moe = MoEConfig(n_experts=8, top_k=2, z_loss_coef=1e-3)
    base = get_preset("llama_tiny", n_layers=2, moe=moe)
    tokens = jax.random.randint(jax.random.key(0), (4, 8), 1, 200)

    def loss_and_grads(cfg, mesh=None):
        graphdef, params = nnx.split(build_model(cfg), nnx.Param)

        def loss(params):
            logits, aux = nnx.merge(graphdef, params)(tokens)
            return jnp.mean(jax.nn.logsumexp(logits, -1)) + sum(aux["losses"].values())

        if mesh is None:
            return jax.jit(jax.value_and_grad(loss))(params)
        params = jax.device_put(params, state_shardings(params, mesh))
        with jax.set_mesh(mesh):
            return jax.jit(jax.value_and_grad(loss))(params)

    ref = loss_and_grads(dataclasses.replace(base, moe=dataclasses.replace(moe, dispatch="padded")))
    mesh = make_mesh(MeshConfig(data=2, expert=4))
    got = loss_and_grads(dataclasses.replace(base, moe=dataclasses.replace(moe, dispatch="expert_parallel")), mesh)
    chex.assert_trees_all_close(jax.device_get(got), jax.device_get(ref), atol=1e-5, rtol=1e-5)
    w_in = got[1]["layers"]["layers"][0]["ffn"]["w_in"]
    assert w_in.sharding.spec[0] == "expert"

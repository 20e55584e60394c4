"""The optimizer reads the model's roles (`train.roles`, `train.state.model_infos`): for our models
the same masks, partition and updates as the path rules; for a module written by a user, with
attribute names of its own and the standard logical axes, the right weight decay and Muon/AdamW
split, where the path rules would have sent its embedding to Muon."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tests.train.test_muon import _flat, _matrix, _moe_lm, _muon_updates
from transformer_jax.models import get_preset
from transformer_jax.models.lora import LoraConfig
from transformer_jax.models.model_roles import model_param_infos, model_param_roles
from transformer_jax.train.optim import Muon, OptimConfig, make_optimizer
from transformer_jax.train.roles import adapter_labels, muon_dimension_numbers, muon_labels, weight_decay_mask
from transformer_jax.train.state import model_graph, model_infos

V, D, F, H, HD = 11, 8, 12, 2, 4


class UserNet(nnx.Module):
    """Another project's model: its own attribute names, our logical axis names."""

    def __init__(self, rngs: nnx.Rngs):
        normal = lambda *shape: jax.random.normal(rngs.params(), shape) * 0.1
        self.tok = nnx.Param(normal(V, D), logical_axes=("vocab", "embed"))
        self.mix = nnx.Param(normal(D, F), logical_axes=("embed", "mlp"))
        self.back = nnx.Param(normal(F, D), logical_axes=("mlp", "embed"))
        self.offset = nnx.Param(jnp.zeros((F,)), logical_axes=("mlp",))
        self.gain = nnx.Param(jnp.ones((D,)), logical_axes=("norm",))
        self.to_heads = nnx.Param(normal(D, H, HD), logical_axes=("embed", "heads", "head_dim"))
        self.readout = nnx.Param(normal(D, V), logical_axes=("embed", "vocab"))


def _user():
    model = UserNet(nnx.Rngs(0))
    return nnx.to_pure_dict(nnx.state(model, nnx.Param)), model_param_infos(model)


def test_user_module_roles_and_weight_decay():
    params, infos = _user()
    assert model_param_roles(UserNet(nnx.Rngs(0))) == {
        "tok": "embedding",
        "mix": "hidden_matrix",
        "back": "hidden_matrix",
        "offset": "bias",
        "gain": "norm",
        "to_heads": "hidden_matrix",
        "readout": "head",
    }
    mask = weight_decay_mask(params, infos=infos)
    assert {k for k, m in mask.items() if m} == {"mix", "back", "to_heads", "readout"}
    # The path rules knew none of these names: the embedding would have been a Muon matrix.
    assert muon_labels({"tok": params["tok"]}) == {"tok": "muon"}
    assert muon_labels(params, infos=infos) == {
        **dict.fromkeys(("tok", "offset", "gain", "readout"), "adamw"),
        **dict.fromkeys(("mix", "back", "to_heads"), "muon"),
    }
    assert muon_dimension_numbers(params, infos=infos)["to_heads"] == optax.contrib.MuonDimensionNumbers((0,), (1, 2))


def test_user_module_trains_hidden_matrices_with_muon_and_the_embedding_with_adamw():
    params, infos = _user()
    muon = Muon(adam_lr=0.01, weight_decay=0.1)
    cfg = OptimConfig(optimizer=muon, lr=0.5, schedule="constant", warmup_steps=0, grad_clip=None)
    tx, _ = make_optimizer(cfg, 10, infos=infos)
    rng = np.random.default_rng(0)
    grads = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), jnp.float32), params)
    updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
    for name, view in (("mix", _matrix), ("to_heads", _flat(0, 1))):
        p, g = np.asarray(params[name]), np.asarray(grads[name])
        (want,) = _muon_updates([g], p, view, beta=muon.momentum, lr=0.5, wd=0.1)
        np.testing.assert_allclose(updates[name], want, rtol=2e-4, atol=2e-5)
    # AdamW's first step: -adam_lr * g / (|g| + eps); the embedding is not decayed.
    g = np.asarray(grads["tok"])
    np.testing.assert_allclose(updates["tok"], -0.01 * g / (np.abs(g) + muon.eps), rtol=1e-4)


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
@pytest.mark.parametrize("scan", [False, True])
def test_our_models_get_the_same_updates_from_roles_as_from_paths(optimizer, scan):
    cfg = _moe_lm(scan)  # dense and MoE layers, shared expert, untied head
    _, state, _ = model_graph(cfg)
    params = jax.tree.map(
        lambda x: jax.random.normal(jax.random.key(len(x.shape)), x.shape, x.dtype), nnx.to_pure_dict(state)
    )
    infos = model_infos(cfg)
    assert jax.tree.leaves(weight_decay_mask(params, infos=infos)) == jax.tree.leaves(weight_decay_mask(params))
    assert jax.tree.leaves(muon_labels(params, infos=infos)) == jax.tree.leaves(muon_labels(params))
    optim = OptimConfig(optimizer=optimizer, lr=0.02, schedule="constant", warmup_steps=0)
    grads = jax.tree.map(lambda x: jnp.cos(x), params)
    by_roles, by_paths = (make_optimizer(optim, 10, infos=i).tx for i in (infos, None))
    u_roles, _ = by_roles.update(grads, by_roles.init(params), params)
    u_paths, _ = by_paths.update(grads, by_paths.init(params), params)
    jax.tree.map(np.testing.assert_array_equal, u_roles, u_paths)


def test_lora_labels_from_the_model():
    cfg = get_preset("llama_tiny", d_model=32, n_heads=4, n_kv_heads=2, n_layers=1)
    lora = LoraConfig(rank=2)
    infos = model_infos(cfg, lora)
    params = nnx.to_pure_dict(model_graph(cfg, lora)[1])
    labels = adapter_labels(params, infos=infos)
    assert jax.tree.leaves(labels) == jax.tree.leaves(adapter_labels(params))
    assert sorted(set(jax.tree.leaves(labels))) == ["adapters", "frozen"]

"""Every MoE settings class has no field the model does not read (issue 43): a tiny decoder_lm with
MoE runs a forward pass, a train step (its aux losses and the balancing bias's update) and a cached
decoding step under each router variant, with group-limited routing, a capacity and a balance loss
on, and every field of every group must have been read on the way. A new router is covered by
registering it. The flat layout these groups replaced maps both ways (``core.migration.model``)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest

from tests.variant_reads import recorded_reads
from transformer_jax.core import configlib, migration
from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.overrides import apply_overrides
from transformer_jax.models import ModelConfig, ModelDims, build_model
from transformer_jax.models.forward import FORWARDS
from transformer_jax.models.moe_config import MoEConfig
from transformer_jax.nn.moe_config import (
    BalanceLossConfig,
    CapacityConfig,
    ExpertGroupsConfig,
    RouterConfig,
    SigmoidRouter,
    SoftmaxRouter,
)
from transformer_jax.ops import routing
from transformer_jax.parallel import MeshConfig, make_mesh
from transformer_jax.train.config import Config, TrainConfig
from transformer_jax.train.optim import OptimConfig, make_optimizer
from transformer_jax.train.state import init_state, model_graph
from transformer_jax.train.step import make_train_step

TINY = dict(
    dims=ModelDims(vocab_size=40, d_model=16, n_heads=2, n_layers=2, max_len=16), position="rope", norm="rmsnorm"
)


def _moe(kind: str) -> MoEConfig:
    """Every optional group on and every switch away from its no-op value, so each field matters."""
    router = RouterConfig.VARIANTS.get(kind)(
        renormalize=True,
        scaling_factor=2.0,
        groups=ExpertGroupsConfig(n_groups=2, topk_groups=1, score="top2_sum"),
        bias_update_rate=0.01,
    )
    return MoEConfig(
        n_experts=4,
        top_k=2,
        every=2,
        first_dense=0,
        d_expert=16,
        segments=2,
        n_shared=2,
        ffn="swiglu",
        router=router,
        capacity=CapacityConfig(factor=1.0, drop_order="score"),
        dispatch="padded",
        balance=BalanceLossConfig(loss="sequence", coef=0.01),
        z_loss_coef=1e-3,
    )


def _forward_train_and_decode(cfg: ModelConfig) -> None:
    """A forward pass, a real train step (aux losses, the bias update), a prefill and a cached step."""
    model = build_model(cfg)
    tokens_BT = jnp.arange(24).reshape(2, 12) % cfg.dims.vocab_size
    _, aux = model(tokens_BT)
    assert {"moe_balance", "router_z"} <= set(aux["losses"])
    _, aux = model(tokens_BT[:, :3], cache=model.init_cache(2, 8))
    model(tokens_BT[:, 3:4], cache=aux["cache"])

    train = TrainConfig(steps=1, batch_size=2, optim=OptimConfig(lr=1e-3, warmup_steps=0))
    tx, schedule = make_optimizer(train.optim, train.steps)
    state = init_state(cfg, tx, seed=0, mesh=make_mesh(MeshConfig(), jax.devices()[:1]))
    step = jax.jit(make_train_step(model_graph(cfg)[0], tx, FORWARDS.get("lm"), train, schedule))
    batch = {
        "inputs": tokens_BT[:, :-1],
        "targets": tokens_BT[:, 1:],
        "weights": jnp.ones((2, 11)),
        "positions": jnp.broadcast_to(jnp.arange(11), (2, 11)),
        "segment_ids": jnp.ones((2, 11), jnp.int32),
    }
    new_state, metrics = step(state, batch, jax.random.key(0))
    assert {"aux/moe_balance", "aux/router_z"} <= set(metrics)
    assert any(float(jnp.abs(b).sum()) > 0 for b in jax.tree.leaves(new_state.model_state))  # the bias moved


def _groups_of(moe: MoEConfig) -> list:
    groups = [moe, moe.router, moe.router.groups, moe.capacity, moe.balance]
    assert all(g is not None for g in groups)
    return groups


@pytest.mark.parametrize("kind", RouterConfig.VARIANTS.names())
def test_every_moe_setting_is_read_under_every_router(kind):
    cfg = ModelConfig(**TINY, moe=_moe(kind))
    assert cfg.moe is not None
    groups = _groups_of(cfg.moe)
    with recorded_reads([type(g) for g in groups]) as reads:
        _forward_train_and_decode(cfg)
    unread = {
        type(g).__name__: [f.name for f in dataclasses.fields(g) if (type(g), f.name) not in reads] for g in groups
    }
    assert unread == {type(g).__name__: [] for g in groups}


def test_the_routers_are_the_score_functions_of_the_ops():
    assert set(RouterConfig.VARIANTS.names()) == set(routing.ROUTERS.names())


# The flat layout of model.moe (runs saved before the groups) ------------------------------------


@pytest.mark.parametrize(
    "flat, moe",
    [
        ({}, MoEConfig()),
        (
            {"router": "sigmoid_topk", "renormalize": True, "n_groups": 2, "topk_groups": 1, "group_score": "top2_sum"},
            MoEConfig(router=SigmoidRouter(renormalize=True, groups=ExpertGroupsConfig(n_groups=2, score="top2_sum"))),
        ),
        (
            {"capacity_factor": 1.5, "drop_order": "position", "balance_coef": 0.0, "bias_update_rate": 1e-3},
            MoEConfig(
                router=SoftmaxRouter(bias_update_rate=1e-3),
                capacity=CapacityConfig(factor=1.5, drop_order="position"),
                balance=None,
            ),
        ),
        (
            {"balance_loss": "sequence", "balance_coef": 1e-4, "routed_scaling_factor": 2.5},
            MoEConfig(router=SoftmaxRouter(scaling_factor=2.5), balance=BalanceLossConfig("sequence", 1e-4)),
        ),
    ],
)
def test_old_moe_fields_become_the_groups_and_map_back(flat, moe):
    old = {"n_experts": 8, "top_k": 2, **flat}
    cfg = configlib.from_dict(ModelConfig, migration.upgrade({"moe": old}, whole=False))
    assert cfg.moe == moe
    back = migration.legacy(configlib.to_dict(cfg), whole=False)["moe"]
    assert {k: back[k] for k in old} == old
    assert configlib.from_dict(ModelConfig, migration.upgrade({"moe": back}, whole=False)) == cfg
    assert migration.legacy({"moe": None}, whole=False) == {"moe": None}


@pytest.mark.parametrize(
    "old, new",
    [
        ("model.moe.n_groups=4", "model.moe.router.groups.n_groups"),
        ("model.moe.group_score=max", "model.moe.router.groups.score"),
        ("model.moe.routed_scaling_factor=2.5", "model.moe.router.scaling_factor"),
        ("model.moe.capacity_factor=1.25", "model.moe.capacity.factor"),
        ("model.moe.balance_coef=0", "model.moe.balance.coef"),
    ],
)
def test_an_old_moe_set_key_names_its_new_key(old, new):
    with pytest.raises(ConfigError, match=rf"'{old.split('=')[0]}' was renamed: {new}"):
        apply_overrides(Config(), ["model.moe=on", old])


def test_a_field_the_chosen_router_lacks_is_refused_naming_its_fields():
    with pytest.raises(ConfigError, match=r"the router 'softmax_topk' has no setting 'n_groups' \(its settings: "):
        apply_overrides(Config(), ["model.moe=on", "model.moe.router.n_groups=4"])
    with pytest.raises(ConfigError, match=r"model.moe.capacity is None \(off\)"):
        apply_overrides(Config(), ["model.moe=on", "model.moe.capacity.factor=2"])
    cfg = apply_overrides(
        Config(),
        ["model.moe=on", "model.moe.router=sigmoid_topk", "model.moe.router.groups=on", "model.moe.balance=none"],
    )
    assert cfg.model.moe == MoEConfig(router=SigmoidRouter(groups=ExpertGroupsConfig()), balance=None)

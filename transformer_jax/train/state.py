"""The functional training state: parameters and optimizer state as plain pytrees."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from transformer_jax.models import ModelConfig, build_model
from transformer_jax.parallel import state_shardings


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TrainState:
    """``params`` is the model's ``nnx.Param`` state as a pure nested dict (``nnx.merge``-able);
    ``skips`` counts consecutive steps whose update was dropped for non-finite values."""

    step: jax.Array
    params: Any
    opt_state: Any
    skips: jax.Array
    total_skips: jax.Array


def model_graph(cfg: ModelConfig):
    """(graphdef, abstract nnx.State) of the model: structure and shapes, nothing allocated."""
    abstract = nnx.eval_shape(lambda: build_model(cfg))
    return nnx.split(abstract)


def param_shardings(abstract_state: nnx.State, mesh) -> Any:
    """Pure-dict NamedShardings of the parameters, from their logical axis names."""
    return nnx.to_pure_dict(state_shardings(abstract_state, mesh))


def init_state(cfg: ModelConfig, tx: optax.GradientTransformation, *, seed: int, mesh) -> TrainState:
    """A fresh TrainState created directly with its shardings (jit with out_shardings), so the
    whole model never has to sit on one device."""
    _, abstract = model_graph(cfg)
    p_sh = param_shardings(abstract, mesh)

    def make_params():
        return nnx.to_pure_dict(nnx.split(build_model(cfg, seed=seed))[1])

    params = jax.jit(make_params, out_shardings=p_sh)()
    opt_state = jax.jit(tx.init)(params)
    rep = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    zero = lambda: jax.device_put(jnp.zeros((), jnp.int32), rep)  # noqa: E731 - distinct buffers (donation)
    return TrainState(step=zero(), params=params, opt_state=opt_state, skips=zero(), total_skips=zero())


def abstract_state(cfg: ModelConfig, tx: optax.GradientTransformation, *, mesh) -> TrainState:
    """ShapeDtypeStructs (with shardings) of a TrainState: the restore target of a checkpoint."""
    _, abstract = model_graph(cfg)
    p_sh = param_shardings(abstract, mesh)
    params = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                          nnx.to_pure_dict(abstract), p_sh)
    opt_shapes = jax.eval_shape(tx.init, params)
    opt_sh = jax.jit(tx.init).lower(params).compile().output_shardings
    opt_state = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), opt_shapes, opt_sh)
    rep = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    scalar = jax.ShapeDtypeStruct((), jnp.int32, sharding=rep)
    return TrainState(step=scalar, params=params, opt_state=opt_state, skips=scalar, total_skips=scalar)


def state_sharding_tree(state: TrainState):
    """The sharding of every leaf (for jit in/out shardings)."""
    return jax.tree.map(lambda x: x.sharding, state)

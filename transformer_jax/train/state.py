"""The functional training state: parameters, other model variables and optimizer state as
plain pytrees (pure nested dicts that ``nnx.merge(graphdef, params, model_state)`` accepts)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from transformer_jax.core.tracing import cheap_tracer_errors
from transformer_jax.models import ModelConfig, build_model
from transformer_jax.models.lora import LoraConfig, apply_lora
from transformer_jax.models.model_roles import model_param_infos
from transformer_jax.parallel import state_shardings


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TrainState:
    """``params``: the ``nnx.Param`` variables (trained by the optimizer); ``model_state``: every
    other model variable (e.g. MoE load-balancing biases, updated by the forward pass itself);
    ``skips``: consecutive steps whose update was dropped for non-finite values."""

    step: jax.Array
    params: Any
    model_state: Any
    opt_state: Any
    skips: jax.Array
    total_skips: jax.Array


def split_model(model: nnx.Module):
    """(graphdef, params, model_state) with params = ``nnx.Param`` variables, model_state = the rest."""
    return nnx.split(model, nnx.Param, ...)


def build_trained_model(cfg: ModelConfig, lora: LoraConfig | None = None, *, seed: int = 0) -> nnx.Module:
    """``build_model(cfg, seed)``, with LoRA adapters (``models.lora.apply_lora``) when ``lora``."""
    model = build_model(cfg, seed=seed)
    if lora is not None:
        apply_lora(model, lora, seed=seed)
    return model


def model_graph(cfg: ModelConfig, lora: LoraConfig | None = None):
    """(graphdef, abstract params State, abstract model_state State): shapes only, nothing allocated."""
    with cheap_tracer_errors():
        return split_model(nnx.eval_shape(lambda: build_trained_model(cfg, lora)))


def model_infos(cfg: ModelConfig, lora: LoraConfig | None = None) -> Any:
    """The `param_roles.ParamInfo` of every parameter (shaped like ``TrainState.params``), from the
    abstract model's metadata (`models.model_roles`): what ``train.optim.make_optimizer(infos=...)``
    reads."""
    return model_param_infos(model_graph(cfg, lora)[1])


def _shardings(abstract: nnx.State, mesh) -> Any:
    return nnx.to_pure_dict(state_shardings(abstract, mesh))


def _scalar(mesh):
    return jax.device_put(jnp.zeros((), jnp.int32), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))


def init_state(cfg: ModelConfig, tx: optax.GradientTransformation, *, seed: int, mesh) -> TrainState:
    """A fresh TrainState created directly with its shardings (jit with out_shardings), so the
    whole model never has to sit on one device."""
    _, params_abs, rest_abs = model_graph(cfg)

    def make():
        _, params, rest = split_model(build_model(cfg, seed=seed))
        return nnx.to_pure_dict(params), nnx.to_pure_dict(rest)

    with cheap_tracer_errors():
        params, model_state = jax.jit(make, out_shardings=(_shardings(params_abs, mesh), _shardings(rest_abs, mesh)))()
    return _fresh(params, model_state, tx, mesh)


def opt_state_shardings(tx: optax.GradientTransformation, params: Any, mesh) -> Any:
    """The sharding of every optimizer-state leaf: a copy of a parameter tree (Adam's ``mu`` and
    ``nu``, momenta) is sharded like the parameters it belongs to, everything else (counts, scalars)
    replicated. ``params``: arrays or ShapeDtypeStructs with shardings."""
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    shapes = jax.eval_shape(tx.init, params)

    def like(leaf, param):
        if isinstance(leaf, optax.MaskedNode):  # a parameter another optimizer of a multi_transform owns
            return leaf
        return param.sharding if getattr(leaf, "shape", None) == tuple(param.shape) else replicated

    masked = lambda x: isinstance(x, optax.MaskedNode)
    return optax.tree_map_params(tx, like, shapes, params, transform_non_params=lambda _: replicated, is_leaf=masked)


def _fresh(params, model_state, tx: optax.GradientTransformation, mesh) -> TrainState:
    return TrainState(
        step=_scalar(mesh),
        params=params,
        model_state=model_state,
        opt_state=jax.jit(tx.init, out_shardings=opt_state_shardings(tx, params, mesh))(params),
        skips=_scalar(mesh),
        total_skips=_scalar(mesh),
    )


def state_from_model(model: nnx.Module, tx: optax.GradientTransformation, *, mesh) -> TrainState:
    """A fresh TrainState (step 0, new optimizer state) holding ``model``'s variables, each placed
    with the sharding its logical axes give on ``mesh`` (pretrained weights, LoRA adapters)."""
    _, params, rest = split_model(model)
    place = lambda state: jax.device_put(nnx.to_pure_dict(state), _shardings(state, mesh))
    return _fresh(place(params), place(rest), tx, mesh)


def _structs(abstract: nnx.State, mesh) -> Any:
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
        nnx.to_pure_dict(abstract),
        _shardings(abstract, mesh),
    )


def abstract_model(cfg: ModelConfig, *, mesh, lora: LoraConfig | None = None):
    """(graphdef, params, model_state) with ShapeDtypeStructs (with shardings) for the states."""
    graphdef, params_abs, rest_abs = model_graph(cfg, lora)
    return graphdef, _structs(params_abs, mesh), _structs(rest_abs, mesh)


def abstract_state(
    cfg: ModelConfig, tx: optax.GradientTransformation, *, mesh, lora: LoraConfig | None = None
) -> TrainState:
    """ShapeDtypeStructs (with shardings) of a TrainState: the restore target of a checkpoint."""
    _, params, model_state = abstract_model(cfg, mesh=mesh, lora=lora)
    opt_shapes = jax.eval_shape(tx.init, params)
    opt_sh = opt_state_shardings(tx, params, mesh)
    opt_state = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), opt_shapes, opt_sh)
    scalar = jax.ShapeDtypeStruct(
        (), jnp.int32, sharding=jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    )
    # An abstract TrainState: ShapeDtypeStruct leaves stand in for the arrays its fields are typed with.
    return TrainState(
        step=scalar,  # pyright: ignore[reportArgumentType]
        params=params,
        model_state=model_state,
        opt_state=opt_state,
        skips=scalar,  # pyright: ignore[reportArgumentType]
        total_skips=scalar,  # pyright: ignore[reportArgumentType]
    )


def state_sharding_tree(state: TrainState):
    """The sharding of every leaf (for jit in/out shardings)."""
    return jax.tree.map(lambda x: x.sharding, state)

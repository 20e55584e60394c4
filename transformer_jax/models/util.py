"""Building models by config, counting parameters without allocating them."""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx

from transformer_jax.core.tracing import cheap_tracer_errors
from transformer_jax.models.config import ModelConfig
from transformer_jax.models.kinds import MODELS


def build_model(cfg: ModelConfig, *, seed: int = 0) -> nnx.Module:
    """The model class registered for ``cfg.kind``, initialised from ``seed``."""
    return MODELS.get(cfg.kind)(cfg, rngs=nnx.Rngs(params=seed))


def abstract_model(cfg: ModelConfig) -> nnx.Module:
    """The model with ``jax.ShapeDtypeStruct`` leaves: shapes without allocating memory (traced
    in time linear in its size, see `core.tracing`)."""
    with cheap_tracer_errors():
        return nnx.eval_shape(lambda: build_model(cfg))


def count_params(model_or_cfg) -> int:
    """Number of parameters (``nnx.Param`` leaves); a config is counted via ``abstract_model``."""
    model = abstract_model(model_or_cfg) if isinstance(model_or_cfg, ModelConfig) else model_or_cfg
    params = nnx.state(model, nnx.Param)
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(params)))


def count_active_params(model_or_cfg: ModelConfig) -> int:
    """Parameters one token uses: all of them, except the routed experts it is not sent to
    (a token uses ``top_k`` of the ``n_experts`` routed experts of each MoE layer; shared experts
    and the router always). Dense models: `count_params`."""
    cfg = model_or_cfg
    total = count_params(cfg)
    spec = cfg.moe_spec()
    if spec is None:
        return total
    params = nnx.state(abstract_model(cfg), nnx.Param)
    variables = jax.tree.leaves(params, is_leaf=lambda x: isinstance(x, nnx.Variable))
    routed = sum(int(np.prod(v.shape)) for v in variables if "experts" in (v.get_metadata().get("logical_axes") or ()))
    return total - routed * (spec.n_experts - spec.top_k) // spec.n_experts

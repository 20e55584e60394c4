"""Building models by config, counting parameters without allocating them."""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx

from transformer_jax.models.config import ModelConfig
from transformer_jax.models.kinds import MODELS


def build_model(cfg: ModelConfig, *, seed: int = 0) -> nnx.Module:
    """The model class registered for ``cfg.kind``, initialised from ``seed``."""
    return MODELS.get(cfg.kind)(cfg, rngs=nnx.Rngs(params=seed))


def abstract_model(cfg: ModelConfig) -> nnx.Module:
    """The model with ``jax.ShapeDtypeStruct`` leaves: shapes without allocating memory."""
    return nnx.eval_shape(lambda: build_model(cfg))


def count_params(model_or_cfg) -> int:
    """Number of parameters (``nnx.Param`` leaves); a config is counted via ``abstract_model``."""
    model = abstract_model(model_or_cfg) if isinstance(model_or_cfg, ModelConfig) else model_or_cfg
    params = nnx.state(model, nnx.Param)
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(params)))

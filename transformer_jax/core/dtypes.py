"""The dtypes a config may name (``model.execution.dtype``, ``model.execution.param_dtype``), by name."""

import jax.numpy as jnp

from transformer_jax.core.registry import Registry

DTYPES: Registry = Registry("dtype")
DTYPES.register("float32", jnp.float32)
DTYPES.register("bfloat16", jnp.bfloat16)
DTYPES.register("float16", jnp.float16)

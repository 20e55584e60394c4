"""The dtypes a config may name (``model.dtype``, ``model.param_dtype``), by name."""

import jax.numpy as jnp

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}

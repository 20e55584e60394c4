"""What a rematerialised layer keeps for the backward pass (``model.execution.remat``)."""

from __future__ import annotations

import jax

from transformer_jax.core.registry import Registry

REMAT_POLICIES: Registry = Registry("remat policy")
REMAT_POLICIES.register("none", None)
REMAT_POLICIES.register("full", jax.checkpoint_policies.nothing_saveable)
REMAT_POLICIES.register("save_dots", jax.checkpoint_policies.dots_with_no_batch_dims_saveable)

"""Meshes, logical-axis rules and sharding helpers (``jax.sharding``; no pmap)."""

from transformer_jax.core.sharding import constrain, logical_to_spec
from transformer_jax.parallel.config import MESH_AXES, MeshConfig
from transformer_jax.parallel.mesh import (
    LOGICAL_RULES,
    batch_sharding,
    make_mesh,
    replicated,
    sharding_context,
    state_shardings,
)

__all__ = [
    "LOGICAL_RULES",
    "MESH_AXES",
    "MeshConfig",
    "batch_sharding",
    "constrain",
    "logical_to_spec",
    "make_mesh",
    "replicated",
    "sharding_context",
    "state_shardings",
]

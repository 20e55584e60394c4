"""Meshes, logical-axis rules and sharding helpers (``jax.sharding``; no pmap)."""

from transformer_jax.parallel.config import MESH_AXES, MeshConfig
from transformer_jax.parallel.mesh import (LOGICAL_RULES, batch_sharding, make_mesh, replicated, sharding_context,
                                           state_shardings)
from transformer_jax.sharding import constrain, logical_to_spec

__all__ = ["MESH_AXES", "MeshConfig", "LOGICAL_RULES", "batch_sharding", "constrain", "logical_to_spec", "make_mesh",
           "replicated", "sharding_context", "state_shardings"]

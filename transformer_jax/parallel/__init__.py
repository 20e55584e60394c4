"""Meshes, logical-axis rules and sharding helpers (``jax.sharding``; no pmap)."""

from transformer_jax.parallel.config import MESH_AXES, MeshConfig
from transformer_jax.parallel.mesh import (LOGICAL_RULES, batch_sharding, logical_to_spec, make_mesh, replicated,
                                           state_shardings)

__all__ = ["MESH_AXES", "MeshConfig", "LOGICAL_RULES", "batch_sharding", "logical_to_spec", "make_mesh",
           "replicated", "state_shardings"]

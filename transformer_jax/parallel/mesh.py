"""Device mesh and logical-axis sharding rules (parameters and activations -> mesh axes)."""

from __future__ import annotations

import contextlib

import jax
import numpy as np
from flax import nnx
from flax.core import spmd
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from transformer_jax.core.sharding import logical_to_spec
from transformer_jax.parallel.config import MESH_AXES, MeshConfig

# Logical axis name -> mesh axes (None: replicated). One table for the whole zoo.
LOGICAL_RULES: dict[str, tuple[str, ...] | str | None] = {
    "batch": ("data", "fsdp"),
    "vocab": "tensor",
    "embed": "fsdp",
    "heads": "tensor",
    "kv_heads": "tensor",
    "head_dim": None,
    "mlp": "tensor",
    "experts": "expert",
    "layers": None,
    "norm": None,
    "max_len": None,
    "buckets": None,
    # activations
    "length": None,
    "act_embed": None,
    "act_heads": "tensor",
    "act_mlp": "tensor",
    "act_vocab": "tensor",
}


def make_mesh(cfg: MeshConfig, devices=None) -> Mesh:
    """A ``Mesh`` with axes (data, fsdp, tensor, expert), Auto axis types."""
    devices = jax.devices() if devices is None else devices
    sizes = cfg.resolve(len(devices))
    shape = tuple(sizes[a] for a in MESH_AXES)
    return Mesh(np.asarray(devices).reshape(shape), MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES))


def state_shardings(tree, mesh: Mesh, rules=LOGICAL_RULES):
    """A pytree of NamedShardings matching ``tree`` (an nnx State, or any pytree holding
    ``nnx.Variable``s such as an optimizer state), from each Variable's ``logical_axes`` metadata;
    plain arrays are replicated."""

    def one(x):
        if isinstance(x, nnx.Variable):
            axes = x.get_metadata().get("logical_axes")
            return x.replace(NamedSharding(mesh, logical_to_spec(axes, tuple(x.shape), dict(mesh.shape), rules)))
        return NamedSharding(mesh, P())

    return jax.tree.map(one, tree, is_leaf=lambda x: isinstance(x, nnx.Variable))


@contextlib.contextmanager
def sharding_context(mesh: Mesh, rules=LOGICAL_RULES):
    """``jax.set_mesh(mesh)`` plus Flax's logical-axis rules: inside it, parameters and
    ``transformer_jax.core.sharding.constrain``-annotated activations follow ``rules``."""
    with jax.set_mesh(mesh), spmd.logical_axis_rules(tuple(rules.items())):
        yield mesh


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Batch arrays: leading axis split over (data, fsdp), the rest replicated."""
    return NamedSharding(mesh, P(("data", "fsdp"), *([None] * (ndim - 1))))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())

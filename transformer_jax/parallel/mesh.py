"""Device mesh and logical-axis sharding rules (parameters and activations -> mesh axes)."""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

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
}


def make_mesh(cfg: MeshConfig, devices=None) -> Mesh:
    """A ``Mesh`` with axes (data, fsdp, tensor, expert), Auto axis types."""
    devices = jax.devices() if devices is None else devices
    sizes = cfg.resolve(len(devices))
    shape = tuple(sizes[a] for a in MESH_AXES)
    return Mesh(np.asarray(devices).reshape(shape), MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES))


def logical_to_spec(axes: tuple[str | None, ...] | None, shape: tuple[int, ...], mesh: Mesh,
                    rules=LOGICAL_RULES) -> P:
    """PartitionSpec for an array with logical ``axes``; an axis whose size the mesh axes do not
    divide (or a mesh axis already used) stays replicated."""
    if axes is None:
        return P()
    used, spec = set(), []
    for name, dim in zip(axes, shape):
        mesh_axes = rules.get(name) if name is not None else None
        mesh_axes = (mesh_axes,) if isinstance(mesh_axes, str) else tuple(mesh_axes or ())
        mesh_axes = tuple(a for a in mesh_axes if mesh.shape[a] > 1 and a not in used)
        size = int(np.prod([mesh.shape[a] for a in mesh_axes])) if mesh_axes else 1
        if not mesh_axes or dim % size:
            spec.append(None)
            continue
        used.update(mesh_axes)
        spec.append(mesh_axes[0] if len(mesh_axes) == 1 else mesh_axes)
    return P(*spec)


def state_shardings(tree, mesh: Mesh, rules=LOGICAL_RULES):
    """A pytree of NamedShardings matching ``tree`` (an nnx State, or any pytree holding
    ``nnx.Variable``s such as an optimizer state), from each Variable's ``logical_axes`` metadata;
    plain arrays are replicated."""

    def one(x):
        if isinstance(x, nnx.Variable):
            axes = x.get_metadata().get("logical_axes")
            return x.replace(NamedSharding(mesh, logical_to_spec(axes, tuple(x.shape), mesh, rules)))
        return NamedSharding(mesh, P())

    return jax.tree.map(one, tree, is_leaf=lambda x: isinstance(x, nnx.Variable))


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Batch arrays: leading axis split over (data, fsdp), the rest replicated."""
    return NamedSharding(mesh, P(("data", "fsdp"), *([None] * (ndim - 1))))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())

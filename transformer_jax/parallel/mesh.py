"""Device mesh and logical-axis sharding rules (parameters and activations -> mesh axes)."""

from __future__ import annotations

import contextlib

import jax
import numpy as np
from flax import nnx
from flax.core import spmd
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from transformer_jax.core.configlib import fail
from transformer_jax.core.mesh_axes import BATCH_AXES, CONTEXT, EXPERT, FSDP, TENSOR
from transformer_jax.core.sharding import logical_to_spec
from transformer_jax.parallel.config import MESH_AXES, MeshConfig

# Logical axis name -> mesh axes (None: replicated). One table for the whole zoo.
LOGICAL_RULES: dict[str, tuple[str, ...] | str | None] = {
    "batch": BATCH_AXES,
    "vocab": TENSOR,
    "embed": (FSDP, CONTEXT),  # ZeRO-3 over the context devices too: they hold the same parameters
    "heads": TENSOR,
    "kv_heads": TENSOR,
    "head_dim": None,
    "mlp": TENSOR,
    "experts": EXPERT,
    "layers": None,
    "norm": None,
    "max_len": None,
    "buckets": None,
    # activations
    "length": CONTEXT,  # context parallelism: the sequence split (zigzag layout, parallel.context)
    "act_embed": None,
    "act_heads": TENSOR,
    "act_mlp": TENSOR,
    "act_vocab": TENSOR,
}


def make_mesh(cfg: MeshConfig, devices=None) -> Mesh:
    """A ``Mesh`` with axes (data, fsdp, context, tensor, expert), Auto axis types.

    Accelerator devices are laid out by their physical topology (``mesh_utils.create_device_mesh``:
    neighbouring chips on the inner axes); devices of several slices (a multi-slice TPU pod) by
    ``create_hybrid_device_mesh``, with the ``data`` axis across slices (the data-centre network)
    and the rest inside each slice. CPU devices keep their order."""
    devices = list(jax.devices() if devices is None else devices)
    sizes = cfg.resolve(len(devices))
    shape = tuple(sizes[a] for a in MESH_AXES)
    return Mesh(_arrange(devices, shape), MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES))


def _arrange(devices: list, shape: tuple[int, ...]) -> np.ndarray:
    if devices[0].platform == "cpu":
        return np.asarray(devices).reshape(shape)
    slices = len({getattr(d, "slice_index", 0) for d in devices})
    if slices > 1:
        if shape[0] % slices:
            fail(
                "mesh.data",
                shape[0],
                f"must be a multiple of the {slices} slices (the data axis spans the slices)",
                f"set mesh.data to a multiple of {slices}",
            )
        ici = (shape[0] // slices, *shape[1:])
        return mesh_utils.create_hybrid_device_mesh(ici, (slices,) + (1,) * (len(shape) - 1), devices)
    try:
        return mesh_utils.create_device_mesh(shape, devices)
    except (ValueError, NotImplementedError, AssertionError):  # a shape the physical grid cannot take whole
        return mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True)


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
    """Batch arrays: leading axis split over (data, fsdp), the sequence axis (the second) over
    ``context`` (laid out zigzag first: ``parallel.context.lay_out``), the rest replicated."""
    return NamedSharding(mesh, P(BATCH_AXES, *([CONTEXT] if ndim > 1 else []), *([None] * (ndim - 2))))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())

"""Run a kernel XLA cannot partition on each device's own slice: the one ``shard_map`` wrapper of
the package's Pallas kernels (splash and megablox on TPU, the Triton attention and flash-decoding
kernels on GPU).

XLA refuses to partition a Mosaic (TPU) call ("Mosaic kernels cannot be automatically
partitioned") and gathers the global operands onto every device around a Triton (GPU) call, so
every device would compute the whole batch. `per_shard` calls the kernel inside ``jax.shard_map``
over the mesh of the surrounding ``jax.set_mesh``. Each operand names its dimensions by role:
``"batch"`` splits over the batch axes (``data``, ``fsdp``), ``"sequence"`` over ``context``,
``"heads"`` over ``tensor``, ``"experts"`` over ``expert`` (`core.mesh_axes`), using the axes of
size > 1 whose product divides that dimension in every operand; other dimensions, and operands
named ``None``, are replicated.
Without a mesh, on a one-device mesh, or inside a ``shard_map`` already, the kernel is called as is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.sharding import PartitionSpec as P

from transformer_jax.core.mesh_axes import BATCH_AXES, CONTEXT, EXPERT, TENSOR

Dims = tuple[str | None, ...] | None
ROLE_AXES: dict[str, tuple[str, ...]] = {
    "batch": BATCH_AXES,
    "sequence": (CONTEXT,),
    "heads": (TENSOR,),
    "experts": (EXPERT,),
}


def _role_axes(mesh, operands: Sequence[Any], dims: Sequence[Dims]) -> dict[str, tuple[str, ...]]:
    """For each role, the leading mesh axes (size > 1) whose product divides every dimension of that role."""
    sizes: dict[str, list[int]] = {}
    for x, names in zip(operands, dims):
        for name, n in zip(names or (), getattr(x, "shape", ())):
            if name is not None:
                sizes.setdefault(name, []).append(n)
    out = {}
    for role, found in sizes.items():
        axes = [a for a in ROLE_AXES[role] if mesh.shape.get(a, 1) > 1]
        while axes and any(n % math.prod(mesh.shape[a] for a in axes) for n in found):
            axes.pop()
        out[role] = tuple(axes)
    return out


def _spec(names: Dims, axes: dict[str, tuple[str, ...]]) -> P:
    if names is None:
        return P()
    parts = []
    for name in names:
        chosen = axes.get(name, ()) if name is not None else ()
        parts.append(None if not chosen else chosen[0] if len(chosen) == 1 else chosen)
    return P(*parts)


def per_shard(
    kernel: Callable[..., Any], operands: Sequence[Any], dims: Sequence[Dims], out_dims: Dims | list[Dims]
) -> Any:
    """``kernel(*operands)`` with every device running it on its slice (see the module docstring).

    ``dims``: one entry per operand, a role name (or None) per dimension, or None (replicated);
    ``out_dims``: the same for the output, a list of them for a tuple of outputs."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1 or mesh.manual_axes:
        return kernel(*operands)
    axes = _role_axes(mesh, operands, dims)
    if not any(axes.values()):
        return kernel(*operands)
    in_specs = tuple(_spec(d, axes) for d in dims)
    out_specs = tuple(_spec(d, axes) for d in out_dims) if isinstance(out_dims, list) else _spec(out_dims, axes)
    return jax.shard_map(kernel, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)(*operands)

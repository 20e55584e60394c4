"""Logical axis names -> mesh axes, for parameters and activations.

Parameters carry logical axis names as metadata (``logical_axes``); activations are annotated with
``constrain(x, ("batch", "length", "act_embed"))``. Both are resolved by a rule table
(``transformer_jax.parallel.LOGICAL_RULES``) activated with Flax's own context,
``flax.core.spmd.logical_axis_rules``, together with ``jax.set_mesh``. Outside such a context
``constrain`` does nothing, so modules stay usable without any mesh.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
import numpy as np
from flax.core import spmd
from jax.sharding import PartitionSpec as P

Rules = Mapping[str, "str | tuple[str, ...] | None"] | Sequence[tuple[str, "str | tuple[str, ...] | None"]]


def _as_dict(rules: Rules) -> dict:
    return dict(rules.items()) if isinstance(rules, Mapping) else dict(rules)


def logical_to_spec(
    axes: Sequence[str | None] | None, shape: Sequence[int], mesh_shape: Mapping[str, int], rules: Rules
) -> P:
    """PartitionSpec for an array of ``shape`` whose dimensions have logical names ``axes``.

    A dimension stays replicated when its rule names no mesh axis of size > 1, when the mesh axes
    do not divide its size, or when those mesh axes already shard another dimension.
    """
    if axes is None:
        return P()
    rules = _as_dict(rules)
    used, spec = set(), []
    for name, dim in zip(axes, shape):
        mesh_axes = rules.get(name) if name is not None else None
        mesh_axes = (mesh_axes,) if isinstance(mesh_axes, str) else tuple(mesh_axes or ())
        mesh_axes = tuple(a for a in mesh_axes if mesh_shape.get(a, 1) > 1 and a not in used)
        size = int(np.prod([mesh_shape[a] for a in mesh_axes])) if mesh_axes else 1
        if not mesh_axes or dim % size:
            spec.append(None)
            continue
        used.update(mesh_axes)
        spec.append(mesh_axes[0] if len(mesh_axes) == 1 else mesh_axes)
    return P(*spec)


def constrain(x: jax.Array, logical_axes: Sequence[str | None]) -> jax.Array:
    """``jax.lax.with_sharding_constraint`` by logical names under the active mesh and rules;
    the identity when no mesh or no rules are active."""
    rules = spmd.get_logical_axis_rules()
    mesh = jax.sharding.get_abstract_mesh()
    if not rules or mesh is None or mesh.empty:
        return x
    spec = logical_to_spec(logical_axes, x.shape, dict(mesh.shape), rules)
    return jax.lax.with_sharding_constraint(x, spec)

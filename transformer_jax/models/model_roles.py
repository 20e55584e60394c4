"""Parameter roles from the model itself: each ``nnx.Param``'s ``logical_axes`` metadata (the names
``transformer_jax.parallel.LOGICAL_RULES`` shards by) and, where the axes cannot say it, the
``role`` / ``projection`` metadata the module declares.

`model_param_infos` is computed once, from the abstract model (``nnx.eval_shape``), before the
train state exists; it returns a pytree of `param_roles.ParamInfo` shaped like the plain
parameter dict (``nnx.to_pure_dict``) that the optimizer, the weight-decay mask and LoRA then
read. The path rules (`param_roles.classify`) remain only for parameter trees that carry no
metadata (a foreign checkpoint, a bare dict); a test holds the two equal on every preset.

Rules, on the axes after the leading batch axes (`BATCH_AXES`: ``layers`` of a scanned stack,
``experts``), the first that applies:

- ``norm`` anywhere: ``norm`` (a norm's bias, declared ``role="bias"``, is in both decay groups);
- a declared ``role`` (one of `param_roles.ROLES`): that role;
- no axis left: ``other``; one axis: ``bias`` (a vector: a bias or a gain);
- ``("vocab", ...)``: ``embedding``; ``("max_len" | "buckets", ...)``: ``position``;
- ``(..., "vocab")``: ``head``; ``(..., "experts")``: ``router`` [D, E];
- otherwise a matrix, ``expert_matrix`` under an ``experts`` batch axis, else ``hidden_matrix``,
  with the matrix view: the axes up to and including ``embed`` are the input (reduction) axes,
  unless ``embed`` is last, when it alone is the output: ``("embed", "heads", "head_dim")`` is
  D -> (H, Dh), ``("heads", "head_dim", "embed")`` (H, Dh) -> D, ``(None, "embed", "mlp")``
  (N, D) -> F; without ``embed`` the first axis is the input, ``(None, "mlp")`` F -> F.
"""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx

from transformer_jax.models.param_roles import PROJECTIONS, ROLES, MatrixView, ParamInfo, path_names

BATCH_AXES = ("layers", "experts")  # leading axes that make a stack of separate matrices
EMBED, VOCAB, NORM = "embed", "vocab", "norm"
POSITION_AXES = ("max_len", "buckets")  # the first axis of a learned position table
_GROUP_OF_ROLE = {"norm": "norm", "bias": "bias", "embedding": "embedding"}


def _matrix_view(feature: tuple, offset: int) -> MatrixView:
    """Input/output axes of a weight's non-batch axes ``feature`` (``offset`` batch axes first)."""
    n = len(feature)
    if EMBED in feature and feature.index(EMBED) < n - 1:
        split = feature.index(EMBED) + 1
    elif EMBED in feature:  # (..., embed): projects back onto the residual stream
        split = n - 1
    else:
        split = 1
    return MatrixView(tuple(range(offset, offset + split)), tuple(range(offset + split, offset + n)))


def roles_from_axes(axes: tuple, *, role: str | None = None, projection: str | None = None) -> ParamInfo:
    """The `ParamInfo` of a parameter with logical axis names ``axes`` (see the module docstring);
    ``role``/``projection``: what its module declares in the metadata, or None."""
    axes = tuple(axes)
    n_batch = 0
    while n_batch < len(axes) and axes[n_batch] in BATCH_AXES:
        n_batch += 1
    feature = axes[n_batch:]
    if NORM in feature:
        kind = "norm"
    elif role is not None:
        kind = role
    elif not feature:
        kind = "other"
    elif len(feature) == 1:
        kind = "bias"
    elif feature[0] == VOCAB:
        kind = "embedding"
    elif feature[0] in POSITION_AXES:
        kind = "position"
    elif feature[-1] == VOCAB:
        kind = "head"
    elif feature[-1] == "experts":
        kind = "router"
    else:
        kind = "expert_matrix" if "experts" in axes[:n_batch] else "hidden_matrix"
    groups = {_GROUP_OF_ROLE[r] for r in (kind, role) if r in _GROUP_OF_ROLE}
    view = _matrix_view(feature, n_batch) if kind in ("hidden_matrix", "expert_matrix") else None
    return ParamInfo(kind, frozenset(groups), view, projection)


def _info(name: str, var: nnx.Variable) -> ParamInfo:
    meta = var.get_metadata()
    axes, role, projection = meta.get("logical_axes"), meta.get("role"), meta.get("projection")
    ndim = len(getattr(var, "shape", ()))
    if axes is None or len(axes) != ndim:
        raise ValueError(
            f"parameter {name!r} of shape {tuple(var.shape)} has logical_axes={axes!r}: the optimizer, the "
            f"weight-decay mask and LoRA take a parameter's role from them; declare one name per axis, "
            f"e.g. nnx.Param(w, logical_axes=('embed', 'mlp')) (names: transformer_jax.parallel.LOGICAL_RULES)"
        )
    if role is not None and role not in ROLES:
        raise ValueError(f"parameter {name!r}: role={role!r} is not one of {', '.join(ROLES)}")
    if projection is not None and projection not in PROJECTIONS:
        raise ValueError(f"parameter {name!r}: projection={projection!r} is not one of {', '.join(PROJECTIONS)}")
    return roles_from_axes(axes, role=role, projection=projection)


def model_param_infos(model: nnx.Module | nnx.State) -> Any:
    """A pytree of `ParamInfo`s shaped like ``nnx.to_pure_dict(nnx.state(model, nnx.Param))`` (the
    train state's ``params``), from the metadata of each ``nnx.Param`` of ``model`` (a module,
    abstract or not, or its Param state). Raises ``ValueError`` naming every parameter without
    logical axes."""
    state = nnx.state(model, nnx.Param) if isinstance(model, nnx.Module) else model
    is_var = lambda x: isinstance(x, nnx.Variable)
    infos, missing = {}, []
    for path, var in jax.tree_util.tree_flatten_with_path(state, is_leaf=is_var)[0]:
        name = "/".join(path_names(path))
        try:
            infos[name] = _info(name, var)
        except ValueError as err:
            missing.append(str(err))
    if missing:
        raise ValueError(f"{len(missing)} parameter(s) cannot be classified: " + "; ".join(missing))
    pure = nnx.to_pure_dict(state)
    return jax.tree_util.tree_map_with_path(lambda p, _: infos["/".join(path_names(p))], pure)


def model_param_roles(model: nnx.Module | nnx.State) -> Any:
    """A pytree like the plain parameter dict of role names (`param_roles.ROLES`)."""
    return jax.tree.map(lambda info: info.role, model_param_infos(model), is_leaf=is_param_info)


def is_param_info(x: Any) -> bool:
    """``is_leaf`` for trees of `ParamInfo` (a NamedTuple, which jax would otherwise descend into)."""
    return isinstance(x, ParamInfo)

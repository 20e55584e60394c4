"""How the optimizers tell parameters apart: the weight-decay mask, Muon's partition and matrix
views, and LoRA's adapters-only labels, all from one `param_roles.ParamInfo` per parameter.

The infos come from the model (`models.model_roles.model_param_infos`, its ``logical_axes``
metadata; `model_roles` here builds them from a ``ModelConfig``), computed once before the train
state exists. A caller with a bare parameter tree and no model (a foreign checkpoint, a test's
dict) passes ``infos=None``, which says explicitly: classify by path (`param_roles.classify`).

Every function takes the tree the optimizer is given, which inside ``optax.partition`` /
``multi_transform`` holds ``optax.MaskedNode`` for the parameters another part owns; those are kept.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from transformer_jax.models.param_roles import DECAY_GROUPS, MATRIX_ROLES, ParamInfo, classify, path_names


def _masked(x: Any) -> bool:
    return isinstance(x, optax.MaskedNode)


def map_infos(f: Callable[[Any, Any, ParamInfo], Any], tree: Any, infos: Any = None) -> Any:
    """``f(path, leaf, info)`` for every leaf of ``tree`` (``MaskedNode``s kept); ``info`` from
    ``infos`` (a `ParamInfo` pytree whose structure ``tree`` shares) or, with None, the path rules.
    A tree without leaves (``optax.tree_map_params``'s placeholder) comes back as it is."""
    if infos is None or not jax.tree_util.tree_leaves(tree, is_leaf=_masked):
        return jax.tree_util.tree_map_with_path(
            lambda p, x: x if _masked(x) else f(p, x, classify(p, x)), tree, is_leaf=_masked
        )
    return jax.tree_util.tree_map_with_path(
        lambda p, x, info: x if _masked(x) else f(p, x, info), tree, infos, is_leaf=_masked
    )


def check_exclude(exclude: tuple[str, ...]) -> frozenset[str]:
    excluded = frozenset(exclude)
    bad = excluded - set(DECAY_GROUPS)
    if bad:
        raise ValueError(f"exclude={tuple(exclude)!r}: unknown groups {sorted(bad)}; choose from {DECAY_GROUPS}")
    return excluded


def weight_decay_mask(params: Any, exclude: tuple[str, ...] = DECAY_GROUPS, *, infos: Any = None) -> Any:
    """A pytree of bools like ``params``: True where weight decay applies.

    ``params`` is any pytree of arrays (or ``jax.ShapeDtypeStruct``s): nested dicts, an
    ``nnx.State`` (its ``Variable`` leaves' trailing ``value`` key is ignored), lists. A leaf is
    decayed unless one of its decay groups (`param_roles.ParamInfo.groups`, from ``infos`` or, with
    None, from its path) is in ``exclude``. For ``{"embed": {"embedding": E}, "layers": {"0":
    {"attn": {"q": {"kernel": W, "bias": b}}, "norm1": {"scale": g}}}}`` with the default
    ``exclude`` only ``W`` is decayed.
    """
    excluded = check_exclude(exclude)
    return map_infos(lambda p, x, info: not (info.groups & excluded), params, infos)


def param_groups(path, leaf) -> frozenset[str]:
    """The decay groups (subset of ``DECAY_GROUPS``) of one parameter of a tree without metadata,
    from its path and shape (`param_roles.classify`):

    - ``bias``: the last key is ``bias`` or starts with ``b_``.
    - ``norm``: a key contains ``norm`` (``norm1``, ``LayerNorm_0``, ``final_norm``), or has
      ``ln`` as a ``_``/digit-separated token (``ln``, ``ln_f``, ``ln1``, ``attn_ln``), or the
      leaf is a 1-D ``scale``.
    - ``embedding``: a key contains ``embed`` (also ``unembed``) or ``pos_emb``, or has the token
      ``wte``/``wpe`` (GPT-2 names).
    Keys are compared lower-cased.
    """
    return classify(path, leaf).groups


def _muon_dims(path, leaf, info: ParamInfo) -> optax.contrib.MuonDimensionNumbers | None:
    if info.role in MATRIX_ROLES:
        assert info.view is not None  # every matrix role has a view
        return optax.contrib.MuonDimensionNumbers(info.view.reduction, info.view.output)
    if info.role == "other" and len(getattr(leaf, "shape", ())) >= 2:
        raise ValueError(
            f"optimizer='muon': parameter {'/'.join(path_names(path))!r} of shape {tuple(leaf.shape)} is "
            "not a known weight (no rule gives its input and output axes); give it logical axes "
            "(transformer_jax.models.model_roles) or choose another train.optim.optimizer"
        )
    return None


def muon_dimension_numbers(params: Any, *, infos: Any = None) -> Any:
    """A pytree like ``params``: ``optax.contrib.MuonDimensionNumbers(reduction, output)`` for each
    hidden or expert matrix (its `param_roles.MatrixView`; the other axes are batch axes), None for
    a parameter AdamW trains. Raises for an array of >= 2 axes whose matrix view no rule knows."""
    return map_infos(_muon_dims, params, infos)


def muon_labels(params: Any, *, infos: Any = None) -> Any:
    """``"muon"`` for the hidden and expert matrices, ``"adamw"`` for the rest."""
    return map_infos(lambda p, x, info: "adamw" if _muon_dims(p, x, info) is None else "muon", params, infos)


def scale_by_matrix_shape(rms: float | None, *, infos: Any = None) -> optax.GradientTransformation:
    """Each orthogonalised update (a batch of [fan_in, fan_out] matrices, spectral norm about 1)
    times ``sqrt(max(1, fan_out / fan_in))`` (Jordan's width scaling), or, with ``rms``, times
    ``rms * sqrt(max(fan_in, fan_out))`` (update RMS about ``rms``; Liu et al. 2025); as
    ``optax.contrib.muon`` scales."""

    def scale(path, u, info: ParamInfo):
        assert info.view is not None  # only Muon's leaves reach here
        fan_in, fan_out = info.view.matrix_shape(u.shape)
        factor = math.sqrt(max(1.0, fan_out / fan_in)) if rms is None else rms * math.sqrt(max(fan_in, fan_out))
        return u * jnp.asarray(factor, u.dtype)

    def update(updates, state, params=None):
        del params
        return map_infos(scale, updates, infos), state

    return optax.GradientTransformation(optax.init_empty_state, update)


def adapter_labels(params: Any, *, infos: Any = None) -> Any:
    """``"adapters"`` for the LoRA adapter factors (role ``adapter``), ``"frozen"`` for the rest."""
    return map_infos(lambda p, x, info: "adapters" if info.role == "adapter" else "frozen", params, infos)


@dataclasses.dataclass(frozen=True)
class ParamRoles:
    """What an optimizer of `train.optim.OPTIMIZERS` reads about the parameters: ``infos`` (see
    the module docstring; None: path rules) and ``exclude`` (the decay groups that skip decay);
    ``mask`` optionally a precomputed weight-decay mask of the whole tree."""

    infos: Any = None
    exclude: tuple[str, ...] = DECAY_GROUPS
    mask: Any = None

    def decay_mask(self, tree: Any) -> Any:
        return weight_decay_mask(tree, self.exclude, infos=self.infos)

    @property
    def optax_mask(self) -> Any:
        """The mask for ``optax.add_decayed_weights``: the precomputed tree, else `decay_mask`."""
        return self.mask if self.mask is not None else self.decay_mask

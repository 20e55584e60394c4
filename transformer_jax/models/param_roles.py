"""What each parameter is: its role, its weight-decay groups and, for a hidden weight, its matrix view.

The vocabulary (`ROLES`, `ParamInfo`, `MatrixView`) that the optimizers (Muon's partition, the
weight-decay mask) and LoRA share, and the path rules (`classify`).

A model's roles come from its own metadata: `models.model_roles.model_param_infos` reads each
``nnx.Param``'s ``logical_axes`` (and a declared ``role`` / ``projection``), once, from the
abstract model; training passes that tree to the optimizer (``train.state.model_infos``). The path
rules here are the explicit fallback for a parameter tree without metadata (a plain dict, a foreign
checkpoint, ``infos=None``): they read a parameter's path and shape, written against this package's
own attribute names (``self_attn/q``, ``ffn/w_in``, ``lm_head``, ...), and a test holds them equal
to the metadata roles on every preset and baseline (scanned or not).

Roles (`ROLES`):

================  ===========================================================  ================
role              parameters                                                   matrix view
================  ===========================================================  ================
``embedding``     token embedding tables (``embed/embedding``, ``wte``, ...)    -
``position``      learned position tables (``positions/table``, ``wpe``)        -
``head``          output projections to the vocabulary (``lm_head``, ``head``)  -
``norm``          norm scales and a norm's bias                                -
``bias``          every other bias (``bias``, ``b_*``)                          -
``router``        MoE router kernels [D, E]                                    -
``hidden_matrix`` attention q/k/v/o, FFN and shared-expert kernels, RNN gates,  in -> out
                  any other 2-D weight
``expert_matrix`` MoE expert kernels [E, D, F] / [E, F, D]                     D -> F / F -> D
``adapter``       LoRA adapter factors ``*/lora/a``, ``*/lora/b`` (models.lora)   -
``other``         anything else (e.g. a 1-D non-norm vector, or a >2-D array    -
                  whose matrix view no rule knows)
================  ===========================================================  ================

A weight of a named projection also carries that name (`PROJECTIONS`): ``q``/``k``/``v``/``o`` for
the attention kernels (MLA's: ``q`` or ``q_a``/``q_b``, ``kv_a``/``kv_b``, ``o``), ``up``/``gate``/``down``
for the FFN's ``w_in``/``w_gate``/``w_out`` (dense, shared-expert and routed-expert alike). LoRA
chooses its targets by these names.

A `MatrixView` names the input (reduction) axes and the output axes of a weight used as
``y = x W``; every other axis is a batch axis (the leading ``layers`` axis of a scanned stack, the
expert axis), and each batch slice is a matrix of its own. DenseGeneral kernels keep their
input/output split: q/k/v [D, H, Dh] are D -> (H, Dh), o [H, Dh, D] is (H, Dh) -> D.
"""

from __future__ import annotations

import math
import re
from typing import Any, NamedTuple

import jax

DECAY_GROUPS = ("norm", "bias", "embedding")
ROLES = (
    "embedding",
    "position",
    "head",
    "norm",
    "bias",
    "router",
    "hidden_matrix",
    "expert_matrix",
    "adapter",
    "other",
)
MATRIX_ROLES = ("hidden_matrix", "expert_matrix")
PROJECTIONS = ("q", "k", "v", "o", "up", "gate", "down", "q_a", "q_b", "kv_a", "kv_b")
ADAPTER_KEYS = ("a", "b")  # the factors of a LoRA adapter (models.lora.LoraAdapter), under a ``lora`` key

_NAMELESS = ("value", "raw_value")  # trailing attribute keys of nnx.Variable leaves
_FFN_KERNELS = ("w_in", "w_gate", "w_out")  # FeedForward / MoE / shared-expert projections
_FFN_PROJECTIONS = {"w_in": "up", "w_gate": "gate", "w_out": "down"}
_QKV, _OUT = ("q", "k", "v"), ("o",)  # Attention projections
_LATENT_DOWN, _LATENT_UP = ("q_a", "kv_a"), ("q_b", "kv_b")  # MLA: [D, C] and [C, H, Dh]
_RNN_GATES = ("w_x", "w_h")  # baselines.rnn cells: [D, G, H], [H, G, H]


class MatrixView(NamedTuple):
    """Non-negative axes of a weight: ``reduction`` (input, contracted with the activations) and
    ``output``; the remaining axes are batch axes."""

    reduction: tuple[int, ...]
    output: tuple[int, ...]

    def matrix_shape(self, shape: tuple[int, ...]) -> tuple[int, int]:
        """(fan_in, fan_out) of each batch slice."""
        return math.prod(shape[a] for a in self.reduction), math.prod(shape[a] for a in self.output)


class ParamInfo(NamedTuple):
    """``role`` (one of `ROLES`), ``groups`` (the subset of `DECAY_GROUPS` the parameter belongs
    to; a norm's bias is in ``norm`` and ``bias``), ``view`` (for the `MATRIX_ROLES`) and
    ``projection`` (one of `PROJECTIONS` for the kernel of a named projection, else None)."""

    role: str
    groups: frozenset[str]
    view: MatrixView | None
    projection: str | None = None


def path_names(path) -> list[str]:
    """The keys of a pytree path as strings (an ``nnx.Variable``'s trailing ``value`` dropped)."""
    keys = list(path)
    while len(keys) > 1 and getattr(keys[-1], "name", None) in _NAMELESS:
        keys.pop()
    names = []
    for key in keys:
        if isinstance(key, jax.tree_util.DictKey | jax.tree_util.FlattenedIndexKey):
            names.append(str(key.key))
        elif isinstance(key, jax.tree_util.GetAttrKey):
            names.append(key.name)
        elif isinstance(key, jax.tree_util.SequenceKey):
            names.append(str(key.idx))
        else:
            names.append(str(key))
    return names


def _groups(names: list[str], tokens: set[str], ndim: int) -> frozenset[str]:
    last = names[-1] if names else ""
    groups = set()
    if last == "bias" or last.startswith("b_"):
        groups.add("bias")
    if any("norm" in n for n in names) or "ln" in tokens or (last == "scale" and ndim == 1):
        groups.add("norm")
    if any("embed" in n or "pos_emb" in n for n in names) or tokens & {"wte", "wpe"}:
        groups.add("embedding")
    return frozenset(groups)


def _trailing(ndim: int, n_in: int, n_out: int) -> MatrixView:
    """The last ``n_in + n_out`` axes split into input then output; leading axes are batch axes."""
    start = ndim - n_in - n_out
    return MatrixView(tuple(range(start, start + n_in)), tuple(range(start + n_in, ndim)))


def _hidden_view(names: list[str], ndim: int) -> MatrixView | None:
    last = names[-1] if names else ""
    parent = names[-2] if len(names) > 1 else ""
    module = names[-3] if len(names) > 2 else ""
    if last == "kernel" and module.endswith("attn") and ndim >= 3:
        if parent in _QKV:  # [..., D, H, Dh]: D -> (H, Dh)
            return _trailing(ndim, 1, 2)
        if parent in _OUT:  # [..., H, Dh, D]: (H, Dh) -> D
            return _trailing(ndim, 2, 1)
        if parent in _LATENT_UP:  # [..., C, H, Dh]: C -> (H, Dh)
            return _trailing(ndim, 1, 2)
    if last == "kernel" and module.endswith("attn") and parent in _LATENT_DOWN:  # [..., D, C]
        return _trailing(ndim, 1, 1)
    if last == "kernel" and parent in _FFN_KERNELS:  # [..., D, F] / [..., F, D]
        return _trailing(ndim, 1, 1)
    if last in _RNN_GATES and ndim == 3:  # [D, G, H]: D -> (G, H)
        return _trailing(ndim, 1, 2)
    if last == "kernel" and module == "hidden" and ndim == 3:  # baselines.window [N, D, F]: (N, D) -> F
        return _trailing(ndim, 2, 1)
    if ndim == 2:
        return MatrixView((0,), (1,))
    return None


def classify_names(names: list[str], shape: tuple[int, ...]) -> ParamInfo:
    """`classify` from the path's key names and the shape."""
    names = [n.lower() for n in names]
    tokens = {t for n in names for t in re.split(r"[^a-z]+", n) if t}
    ndim = len(shape)
    last = names[-1] if names else ""
    groups = _groups(names, tokens, ndim)
    if "norm" in groups:
        return ParamInfo("norm", groups, None)
    if "bias" in groups:
        return ParamInfo("bias", groups, None)
    if "positions" in names or any("pos_emb" in n for n in names) or "wpe" in tokens:
        return ParamInfo("position", groups, None)
    if "embedding" in groups:
        return ParamInfo("embedding", groups, None)
    if "head" in tokens or "direct" in names:  # lm_head, baselines' head/proj and window direct
        return ParamInfo("head", groups, None)
    if "router" in tokens:
        return ParamInfo("router", groups, None)
    if len(names) > 1 and names[-2] == "lora" and last in ADAPTER_KEYS:
        return ParamInfo("adapter", groups, None)
    if last in _FFN_KERNELS and ndim >= 3:  # MoE experts [..., E, D, F]: E (and layers) batch
        return ParamInfo("expert_matrix", groups, _trailing(ndim, 1, 1), _FFN_PROJECTIONS[last])
    view = _hidden_view(names, ndim)
    if view is not None:
        return ParamInfo("hidden_matrix", groups, view, _projection(names))
    return ParamInfo("other", groups, None)


def _projection(names: list[str]) -> str | None:
    """The `PROJECTIONS` name of an ``*attn/{q,k,v,o}/kernel`` or ``{w_in,w_gate,w_out}/kernel``."""
    if len(names) < 2 or names[-1] != "kernel":
        return None
    parent = names[-2]
    if parent in _QKV + _OUT + _LATENT_DOWN + _LATENT_UP and len(names) > 2 and names[-3].endswith("attn"):
        return parent
    return _FFN_PROJECTIONS.get(parent)


def classify(path, leaf) -> ParamInfo:
    """The role, decay groups and matrix view of one parameter, from its pytree path and shape.

    Rules, first match wins (keys compared lower-cased):

    - ``norm``: a key contains ``norm``, or has the ``_``/digit-separated token ``ln``, or the leaf
      is a 1-D ``scale``; ``bias``: the last key is ``bias`` or starts with ``b_``.
    - ``position``: a key is ``positions`` or contains ``pos_emb``, or has the token ``wpe``.
    - ``embedding``: a key contains ``embed`` or has the token ``wte``.
    - ``head``: a key has the token ``head`` (``lm_head``, ``head``) or is ``direct``.
    - ``router``: a key has the token ``router``.
    - ``adapter``: the last two keys are ``lora`` and ``a``/``b`` (a LoRA adapter's factors).
    - ``expert_matrix``: the last key is ``w_in``/``w_gate``/``w_out`` (a bare parameter, not a
      ``kernel``) and the leaf has >= 3 axes: the last two are D -> F (or F -> D).
    - ``hidden_matrix``: an ``*attn/{q,k,v}/kernel`` (last 3 axes D -> (H, Dh)), an
      ``*attn/o/kernel`` ((H, Dh) -> D), a ``{w_in,w_gate,w_out}/kernel`` (last 2 axes), an RNN
      gate ``w_x``/``w_h`` (D -> (G, H)), the window baseline's ``hidden/0/kernel``
      ((N, D) -> F), or any other 2-D leaf (axis 0 -> axis 1). Leading axes beyond those are batch
      axes (the scanned ``layers`` axis).
    - ``other``: the rest.

    ``projection``: ``q``/``k``/``v``/``o`` for ``*attn/{q,k,v,o}/kernel``, ``up``/``gate``/``down``
    for ``{w_in,w_gate,w_out}/kernel`` and the routed experts' ``w_in``/``w_gate``/``w_out``.

    The decay groups (`DECAY_GROUPS`) are the ``norm``/``bias``/``embedding`` matches above, every
    one that applies, so a norm's bias is in both ``norm`` and ``bias``.
    """
    return classify_names(path_names(path), tuple(getattr(leaf, "shape", ())))


def param_infos(params: Any) -> Any:
    """A pytree like ``params`` of `ParamInfo`s (arrays, ``ShapeDtypeStruct``s or an ``nnx.State``)."""
    return jax.tree_util.tree_map_with_path(classify, params)


def param_roles(params: Any) -> Any:
    """A pytree like ``params`` of role names (`ROLES`)."""
    return jax.tree_util.tree_map_with_path(lambda p, x: classify(p, x).role, params)


def adapter_mask(params: Any) -> Any:
    """A pytree of bools like ``params``: True for the LoRA adapter factors (role ``adapter``)."""
    return jax.tree_util.tree_map_with_path(lambda p, x: classify(p, x).role == "adapter", params)


def role_table(params: Any) -> dict[str, ParamInfo]:
    """``{"layers/0/self_attn/q/kernel": ParamInfo(...), ...}``: every leaf by its ``/``-joined path."""
    return {"/".join(path_names(p)): classify(p, x) for p, x in jax.tree_util.tree_flatten_with_path(params)[0]}

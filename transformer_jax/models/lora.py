"""LoRA (Hu et al. 2021): low-rank adapters on projections chosen by name.

An adapted projection computes ``y = x W + b + (alpha / r) (x A) B`` with ``A`` [In, r] drawn
from N(0, 1/fan_in) and ``B`` [r, Out] zero, so the adapted model starts equal to its base.
``apply_lora`` attaches an adapter (`LoraAdapter`, params ``lora/a`` and ``lora/b``, role
``adapter``) to every ``DenseGeneral`` whose kernel's ``projection`` metadata (set by the module that
owns it: ``nn.Attention``, ``nn.FeedForward``) is one of ``targets`` (``q``, ``k``, ``v``, ``o``,
``up``, ``gate``, ``down``); a scanned stack's kernels carry a leading ``layers`` axis and so do
their adapters. ``merge_lora`` folds ``(alpha / r) A B`` into ``W`` (for export). Training only
the adapters is the optimizer's business (``train.optim``, through the roles of
`models.model_roles`; `split_adapters` and `param_roles.adapter_mask` read a plain dict's paths).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float

from transformer_jax.core.configlib import Config, ConfigError, fail, setting
from transformer_jax.core.registry import unknown_name_message
from transformer_jax.models.model_roles import is_param_info, model_param_infos
from transformer_jax.models.param_roles import PROJECTIONS, adapter_mask, classify_names, path_names
from transformer_jax.nn.linear import DenseGeneral
from transformer_jax.ops import linear as linear_ops


@dataclasses.dataclass(frozen=True)
class LoraConfig(Config):
    """``rank`` r, ``alpha`` (the update is scaled by ``alpha / rank``) and ``targets``: the
    projections that get an adapter, by name (`param_roles.PROJECTIONS`; Hu et al.: q, v)."""

    rank: int = setting(8, ge=1)
    alpha: float = setting(16.0, gt=0.0)
    targets: tuple[str, ...] = ("q", "v")

    PATH: ClassVar[str] = "train.lora"

    def check(self) -> None:
        _check_targets(self)

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


def _check_targets(cfg: LoraConfig) -> None:
    """A non-empty tuple (a list is made one) of distinct `param_roles.PROJECTIONS` names."""
    targets = cfg.targets
    if isinstance(targets, str) or not isinstance(targets, tuple | list) or not targets:
        fail("train.lora.targets", targets, "must be a non-empty tuple of projection names",
             f"e.g. q,v (choose from {', '.join(PROJECTIONS)})")  # fmt: skip
    for name in targets:
        if name not in PROJECTIONS:
            fail("train.lora.targets", name, unknown_name_message("projection", name, PROJECTIONS))
    if len(set(targets)) != len(targets):
        fail("train.lora.targets", tuple(targets), "names a projection twice", "list each projection once")
    object.__setattr__(cfg, "targets", tuple(targets))


class LoraAdapter(nnx.Module):
    """``delta(x) = scale * (x A) B``: ``a`` [*In, r] contracts x's trailing ``n_in`` axes, ``b``
    [r, *Out]; both stored in float32, multiplied in ``dtype``."""

    def __init__(self, a: jax.Array, b: jax.Array, *, a_axes, b_axes, n_in: int, scale: float, dtype):
        self.a = nnx.Param(a, logical_axes=tuple(a_axes), role="adapter")
        self.b = nnx.Param(b, logical_axes=tuple(b_axes), role="adapter")
        self.n_in = n_in
        self.scale = scale
        self.dtype = dtype

    def __call__(self, x: Float[Array, "... In"]) -> Float[Array, "... Out"]:
        h = linear_ops.dense(x, self.a[...].astype(self.dtype), self.n_in)
        return linear_ops.dense(h, self.b[...].astype(self.dtype), 1) * jnp.asarray(self.scale, self.dtype)


def _name(path) -> str:
    return "/".join(str(p) for p in path)


def projections(model: nnx.Module) -> list[tuple[str, str, DenseGeneral]]:
    """``(path, projection name, module)`` of every ``DenseGeneral`` of ``model`` whose kernel names
    its projection (metadata ``projection``, one of `param_roles.PROJECTIONS`), in graph order."""
    out = []
    for path, node in nnx.iter_graph(model):
        if isinstance(node, DenseGeneral):
            proj = node.kernel.get_metadata().get("projection")
            if proj is not None:
                out.append((_name(path), proj, node))
    return out


def _check_experts(model: nnx.Module, targets: tuple[str, ...]) -> None:
    """Routed MoE experts are bare [E, ...] parameters, not ``DenseGeneral``: no adapter for them."""
    flat = jax.tree_util.tree_flatten_with_path(model_param_infos(model), is_leaf=is_param_info)[0]
    experts = []
    for path, info in flat:
        if info.role == "expert_matrix" and info.projection in targets:
            experts.append("/".join(path_names(path)))
    if experts:
        raise ConfigError(
            f"train.lora.targets={targets!r}: LoRA on routed MoE experts is not supported ({', '.join(experts)}); "
            "target the attention projections (q, k, v, o) of a MoE model"
        )


def apply_lora(model: nnx.Module, cfg: LoraConfig, *, seed: int = 0) -> list[str]:
    """Attaches a fresh adapter (``A`` ~ N(0, 1/fan_in), ``B`` = 0) to every projection of ``model``
    named in ``cfg.targets``, in place; returns their paths. A target the model lacks, a routed
    MoE expert among the targets, or adapters already present raise ``ConfigError``."""
    _check_experts(model, cfg.targets)
    found = [(path, proj, dense) for path, proj, dense in projections(model) if proj in cfg.targets]
    missing = sorted(set(cfg.targets) - {proj for _, proj, _ in found}, key=PROJECTIONS.index)
    if missing:
        have = sorted({proj for _, proj, _ in projections(model)}, key=PROJECTIONS.index)
        raise ConfigError(
            f"train.lora.targets={cfg.targets!r}: the model has no {', '.join(missing)} projection "
            f"(it has: {', '.join(have) or 'none'})"
        )
    key = jax.random.key(seed)
    for i, (path, _, dense) in enumerate(found):
        if dense.lora is not None:
            raise ConfigError(f"{path} already has a LoRA adapter; apply_lora once (or merge_lora first)")
        kernel = dense.kernel
        n_in, n_out = len(dense.in_shape), len(dense.out_shape)
        lead = tuple(kernel.shape[: kernel.ndim - n_in - n_out])  # a scanned stack's layers axis
        axes = kernel.get_metadata().get("logical_axes") or (None,) * kernel.ndim
        lead_axes, in_axes, out_axes = axes[: len(lead)], axes[len(lead) : len(lead) + n_in], axes[len(lead) + n_in :]
        fan_in = math.prod(dense.in_shape)
        a = jax.random.normal(jax.random.fold_in(key, i), lead + dense.in_shape + (cfg.rank,)) / math.sqrt(fan_in)
        b = jnp.zeros(lead + (cfg.rank,) + dense.out_shape, jnp.float32)
        dense.lora = nnx.data(
            LoraAdapter(
                a,
                b,
                a_axes=(*lead_axes, *in_axes, None),
                b_axes=(*lead_axes, None, *out_axes),
                n_in=n_in,
                scale=cfg.scale,
                dtype=dense.dtype,
            )
        )
    return [path for path, _, _ in found]


def has_lora(model: nnx.Module) -> bool:
    return any(isinstance(node, LoraAdapter) for _, node in nnx.iter_graph(model))


def merge_lora(model: nnx.Module) -> nnx.Module:
    """A copy of ``model`` with every adapter folded into its kernel, ``W + (alpha / r) A B``
    (computed in float32, stored in the kernel's dtype), and the adapters removed."""
    model = nnx.clone(model)
    for _, node in list(nnx.iter_graph(model)):
        if not isinstance(node, DenseGeneral) or node.lora is None:
            continue
        adapter = node.lora
        assert isinstance(adapter, LoraAdapter)  # apply_lora attaches only these
        kernel = node.kernel[...]
        n_in, n_out = len(node.in_shape), len(node.out_shape)
        lead = kernel.shape[: kernel.ndim - n_in - n_out]
        rank = adapter.a.shape[-1]
        a = adapter.a[...].astype(jnp.float32).reshape(lead + (math.prod(node.in_shape), rank))
        b = adapter.b[...].astype(jnp.float32).reshape(lead + (rank, math.prod(node.out_shape)))
        delta = (adapter.scale * (a @ b)).reshape(kernel.shape)
        node.kernel.set_value((kernel.astype(jnp.float32) + delta).astype(kernel.dtype))  # a new array, never in place
        node.lora = None
    return model


# Pure parameter dicts (the train state's ``params``) --------------------------------------------


def _partition(tree: Any, names: list[str], keep) -> Any:
    if isinstance(tree, dict):
        out = {}
        for k, v in tree.items():
            sub = _partition(v, [*names, str(k)], keep)
            if sub is not None:
                out[k] = sub
        return out or None
    return tree if keep(names, tree) else None


def _is_adapter(names: list[str], leaf) -> bool:
    return classify_names(names, tuple(getattr(leaf, "shape", ()))).role == "adapter"


def split_adapters(params: dict) -> tuple[dict, dict]:
    """(adapters, base): the nested dict ``params`` (``nnx.to_pure_dict``) cut into the LoRA
    factors and everything else, each keeping the nesting of ``params``."""
    adapters = _partition(params, [], _is_adapter) or {}
    base = _partition(params, [], lambda n, x: not _is_adapter(n, x)) or {}
    return adapters, base


def join_adapters(base: dict, adapters: dict) -> dict:
    """The inverse of `split_adapters`: ``base`` with ``adapters`` merged into its nesting."""
    out = dict(base)
    for k, v in adapters.items():
        out[k] = join_adapters(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


__all__ = [
    "LoraAdapter",
    "LoraConfig",
    "adapter_mask",
    "apply_lora",
    "has_lora",
    "join_adapters",
    "merge_lora",
    "projections",
    "split_adapters",
]

"""Norm placements around a residual sublayer F: post-LN, pre-LN and DeepNorm.

A ``Placement`` bundles the forward rule ``apply(x, sublayer_fn, norm_fn, alpha)``, whether the
stack needs a final norm, and ``constants(**depths) -> (alpha, beta)``: alpha scales the residual
in the forward pass, beta is the init gain (DeepNet: the Xavier gain of the FFN weights and of
the attention value and output projections; query and key keep gain 1). Adding a placement is one
``Placement`` plus one registry line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from jaxtyping import Array, Float

from transformer_jax.core.registry import Registry

SublayerFn = Callable[[Array], Array]


@dataclasses.dataclass(frozen=True)
class Placement:
    """``apply(x, sublayer_fn, norm_fn, alpha) -> x``; ``constants(**kw) -> (alpha, beta)``.
    ``sublayer_norm``: the layer also normalises each sublayer's output (a second norm per
    sublayer, folded into ``sublayer_fn`` by the caller: see ``sandwich``)."""

    name: str
    apply: Callable[[Array, SublayerFn, SublayerFn, float], Array]
    final_norm: bool
    constants: Callable[..., tuple[float, float]]
    sublayer_norm: bool = False


PLACEMENTS: Registry[Placement] = Registry("norm placement")

_ARCHITECTURES = ("decoder_only", "encoder_only", "encoder_decoder")
_SIDES = ("encoder", "decoder")


def _check_layers(name: str, n: int) -> None:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"{name}={n!r} must be a positive int for DeepNorm constants")


def deepnorm_constants(
    *, architecture: str, n_encoder_layers: int, n_decoder_layers: int, side: str
) -> tuple[float, float]:
    """DeepNet (Wang et al. 2022, Figure 2) ``(alpha, beta)`` for N encoder / M decoder layers.

    decoder_only: ``((2M)^(1/4), (8M)^(-1/4))``; encoder_only: ``((2N)^(1/4), (8N)^(-1/4))``;
    encoder_decoder, encoder side: ``(0.81 (N^4 M)^(1/16), 0.87 (N^4 M)^(-1/16))``;
    decoder side: ``((3M)^(1/4), (12M)^(-1/4))``.
    """
    if architecture not in _ARCHITECTURES:
        raise ValueError(f"architecture={architecture!r} must be one of {_ARCHITECTURES}")
    if side not in _SIDES:
        raise ValueError(f"side={side!r} must be one of {_SIDES}")
    if architecture == "decoder_only":
        if side != "decoder":
            raise ValueError("side='encoder' is invalid for architecture='decoder_only'; use side='decoder'")
        _check_layers("n_decoder_layers", n_decoder_layers)
        m = n_decoder_layers
        return (2 * m) ** 0.25, (8 * m) ** -0.25
    if architecture == "encoder_only":
        if side != "encoder":
            raise ValueError("side='decoder' is invalid for architecture='encoder_only'; use side='encoder'")
        _check_layers("n_encoder_layers", n_encoder_layers)
        n = n_encoder_layers
        return (2 * n) ** 0.25, (8 * n) ** -0.25
    _check_layers("n_encoder_layers", n_encoder_layers)
    _check_layers("n_decoder_layers", n_decoder_layers)
    n, m = n_encoder_layers, n_decoder_layers
    if side == "encoder":
        return 0.81 * (n**4 * m) ** (1 / 16), 0.87 * (n**4 * m) ** (-1 / 16)
    return (3 * m) ** 0.25, (12 * m) ** -0.25


def _unit_constants(**_depths) -> tuple[float, float]:
    return 1.0, 1.0


def _post(x: Float[Array, "... D"], sublayer_fn, norm_fn, alpha: float = 1.0):
    """Post-LN (Vaswani et al. 2017): ``Norm(x + F(x))``."""
    return norm_fn(x + sublayer_fn(x))


def _pre(x: Float[Array, "... D"], sublayer_fn, norm_fn, alpha: float = 1.0):
    """Pre-LN (Xiong et al. 2020): ``x + F(Norm(x))``; the stack ends with a final norm."""
    return x + sublayer_fn(norm_fn(x))


def _deepnorm(x: Float[Array, "... D"], sublayer_fn, norm_fn, alpha: float = 1.0):
    """DeepNorm (Wang et al. 2022): ``Norm(alpha * x + F(x))``."""
    return norm_fn(alpha * x + sublayer_fn(x))


PLACEMENTS.register("post", Placement("post", _post, final_norm=False, constants=_unit_constants))
PLACEMENTS.register("pre", Placement("pre", _pre, final_norm=True, constants=_unit_constants))
PLACEMENTS.register("deepnorm", Placement("deepnorm", _deepnorm, final_norm=False, constants=deepnorm_constants))
# Sandwich (Ding et al. 2021, CogView; Gemma 2/3): x + PostNorm(F(PreNorm(x))). The caller passes
# sublayer_fn = PostNorm o F, so the rule itself is pre-LN's; the stack ends with a final norm.
PLACEMENTS.register(
    "sandwich", Placement("sandwich", _pre, final_norm=True, constants=_unit_constants, sublayer_norm=True)
)


def placement_constants(
    name: str, *, architecture: str, n_encoder_layers: int, n_decoder_layers: int, side: str
) -> tuple[float, float]:
    """``(alpha, beta)`` of placement ``name``: (1, 1) for post/pre, DeepNet's for deepnorm."""
    return PLACEMENTS.get(name).constants(
        architecture=architecture,
        n_encoder_layers=n_encoder_layers,
        n_decoder_layers=n_decoder_layers,
        side=side,
    )

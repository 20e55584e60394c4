"""Rotary position embedding (RoPE, Su et al. 2021) and its context-extension scalings.

``apply_rope`` rotates each pair of head dimensions ``i`` by the angle ``pos * inv_freq[i]`` with
``inv_freq[i] = theta^(-2i/D)``. A scaling (``linear``, ``ntk``, ``yarn``) changes ``inv_freq``
and may return an attention factor that multiplies cos and sin. Adding a scaling is one function
``(head_dim, theta, RopeScaling) -> (inv_freq [D/2], attention_factor)`` plus one registry line.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from transformer_jax.core.registry import Registry, unknown_name_message

ScalingFn = Callable[[int, float, "RopeScaling"], tuple[np.ndarray, float]]
ROPE_SCALINGS: Registry[ScalingFn] = Registry("rope scaling")
ROPE_THETA = 10000.0
"""The RoPE base of Su et al. 2021 (and of LLaMA 1-2, GPT-NeoX): ``inv_freq[i] = ROPE_THETA^(-2i/D)``."""


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """How RoPE frequencies are stretched beyond the training length.

    ``factor``: context extension ratio s >= 1. ``original_max_len``: the pre-training length
    (YaRN, Llama 3). ``beta_fast`` / ``beta_slow``: YaRN's rotation counts bounding the ramp.
    ``low_freq_factor`` / ``high_freq_factor``: Llama 3's wavelength bounds of the ramp.
    YaRN's cos/sin factor is ``attention_factor`` when set, else mscale(s, ``mscale``) /
    mscale(s, ``mscale_all_dim``) when both are set (DeepSeek), else mscale(s) = 0.1 ln s + 1;
    ``truncate``: round the ramp's bounds to whole frequency indices (Hugging Face's default).
    """

    kind: str = "none"
    factor: float = 1.0
    original_max_len: int = 2048
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    truncate: bool = True

    def __post_init__(self):
        if self.kind not in ROPE_SCALINGS:
            names = ROPE_SCALINGS.names()
            raise ValueError(unknown_name_message("rope scaling kind", self.kind, names))
        if not self.factor >= 1.0:
            raise ValueError(f"factor={self.factor} must be >= 1 (1 means no scaling)")
        if self.kind == "none" and self.factor != 1.0:
            raise ValueError(
                f"factor={self.factor} has no effect with kind='none'; "
                "choose kind='linear', 'ntk' or 'yarn', or set factor=1"
            )
        if self.original_max_len < 1:
            raise ValueError(f"original_max_len={self.original_max_len} must be >= 1")
        if not self.beta_fast > self.beta_slow > 0:
            raise ValueError(
                f"beta_fast={self.beta_fast} and beta_slow={self.beta_slow} must satisfy "
                "beta_fast > beta_slow > 0 (YaRN defaults: 32 and 1)"
            )
        if not self.high_freq_factor > self.low_freq_factor > 0:
            raise ValueError(
                f"high_freq_factor={self.high_freq_factor} and low_freq_factor={self.low_freq_factor} must "
                "satisfy high_freq_factor > low_freq_factor > 0 (Llama 3.1: 4 and 1)"
            )
        unread = [
            f.name
            for f in dataclasses.fields(self)
            if f.name not in ("kind", *SCALING_READS.get(self.kind, (f.name,))) and getattr(self, f.name) != f.default
        ]
        if unread:
            reads = ", ".join(SCALING_READS[self.kind]) or "nothing"
            raise ValueError(
                f"{', '.join(unread)}: not read by the {self.kind!r} scaling (it reads {reads}); keep the default"
            )
        for name in ("mscale", "mscale_all_dim", "attention_factor"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name}={value} must be > 0 (or None: not set)")


SCALING_READS = {
    "none": (),
    "linear": ("factor",),
    "ntk": ("factor",),
    "yarn": (
        "factor",
        "original_max_len",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
        "attention_factor",
        "truncate",
    ),
    "llama3": ("factor", "original_max_len", "low_freq_factor", "high_freq_factor"),
}
"""The `RopeScaling` fields each kind reads (a kind not listed: all of them); any other must keep its default."""


def _base_inv_freq(head_dim: int, theta: float) -> np.ndarray:
    return 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)


@ROPE_SCALINGS.register("none")
def _none(head_dim: int, theta: float, scaling: RopeScaling) -> tuple[np.ndarray, float]:
    return _base_inv_freq(head_dim, theta), 1.0


@ROPE_SCALINGS.register("linear")
def _linear(head_dim: int, theta: float, scaling: RopeScaling) -> tuple[np.ndarray, float]:
    """Position interpolation (Chen et al. 2023): angle = (pos / s) * inv_freq."""
    return _base_inv_freq(head_dim, theta) / scaling.factor, 1.0


@ROPE_SCALINGS.register("ntk")
def _ntk(head_dim: int, theta: float, scaling: RopeScaling) -> tuple[np.ndarray, float]:
    """NTK-aware base scaling: theta' = theta * s^(D / (D - 2))."""
    if head_dim <= 2:
        raise ValueError(f"head_dim={head_dim} must be > 2 for NTK-aware scaling")
    new_theta = theta * scaling.factor ** (head_dim / (head_dim - 2))
    return _base_inv_freq(head_dim, new_theta), 1.0


def _yarn_correction_dim(num_rotations: float, head_dim: int, theta: float, max_len: int) -> float:
    """Frequency index i whose wavelength 2 pi theta^(2i/D) fits num_rotations times in max_len."""
    return head_dim * math.log(max_len / (num_rotations * 2 * math.pi)) / (2 * math.log(theta))


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude correction ``0.1 * mscale * ln(factor) + 1`` (1 for factor <= 1)."""
    return 0.1 * mscale * math.log(factor) + 1.0 if factor > 1 else 1.0


@ROPE_SCALINGS.register("yarn")
def _yarn(head_dim: int, theta: float, scaling: RopeScaling) -> tuple[np.ndarray, float]:
    """YaRN (Peng et al. 2023), as Hugging Face ``_compute_yarn_parameters``.

    Frequencies rotating more than ``beta_fast`` times over ``original_max_len`` are kept
    (extrapolation), those rotating fewer than ``beta_slow`` times are divided by s
    (interpolation), with a linear ramp over the frequency index in between (its bounds rounded
    outward when ``truncate``). Attention factor: see `RopeScaling`.
    """
    s = scaling.factor
    extrapolation = _base_inv_freq(head_dim, theta)
    interpolation = extrapolation / s
    low = _yarn_correction_dim(scaling.beta_fast, head_dim, theta, scaling.original_max_len)
    high = _yarn_correction_dim(scaling.beta_slow, head_dim, theta, scaling.original_max_len)
    if scaling.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(head_dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    inv_freq = interpolation * ramp + extrapolation * (1.0 - ramp)
    return inv_freq, _yarn_attention_factor(scaling)


def _yarn_attention_factor(scaling: RopeScaling) -> float:
    """The cos/sin factor: ``attention_factor``, else m(mscale) / m(mscale_all_dim) when both are
    set, else m(1) (`yarn_mscale`)."""
    if scaling.attention_factor is not None:
        return scaling.attention_factor
    if scaling.mscale and scaling.mscale_all_dim:
        return yarn_mscale(scaling.factor, scaling.mscale) / yarn_mscale(scaling.factor, scaling.mscale_all_dim)
    return yarn_mscale(scaling.factor)


def softmax_mscale(scaling: RopeScaling | None) -> float:
    """The factor DeepSeek's MLA multiplies its softmax scale by under YaRN: mscale(s,
    ``mscale_all_dim``)^2 (Hugging Face ``yarn_apply_mscale``); 1 without YaRN or ``mscale_all_dim``."""
    if scaling is None or scaling.kind != "yarn" or not scaling.mscale_all_dim:
        return 1.0
    return yarn_mscale(scaling.factor, scaling.mscale_all_dim) ** 2


@ROPE_SCALINGS.register("llama3")
def _llama3(head_dim: int, theta: float, scaling: RopeScaling) -> tuple[np.ndarray, float]:
    """Llama 3.1's scaling: with wavelength w_i = 2 pi / inv_freq_i and L = ``original_max_len``,
    frequencies with w_i < L / high_freq_factor are kept, those with w_i > L / low_freq_factor
    are divided by s, and in between ``(1 - a) inv_freq / s + a inv_freq`` with
    ``a = (L / w_i - low_freq_factor) / (high_freq_factor - low_freq_factor)``."""
    s, low, high = scaling.factor, scaling.low_freq_factor, scaling.high_freq_factor
    inv_freq = _base_inv_freq(head_dim, theta)
    wavelen = 2 * math.pi / inv_freq
    L = scaling.original_max_len
    a = np.clip((L / wavelen - low) / (high - low), 0.0, 1.0)
    return (1 - a) * inv_freq / s + a * inv_freq, 1.0


def rope_frequencies(
    head_dim: int, *, theta: float = ROPE_THETA, scaling: RopeScaling | None = None
) -> tuple[Float[Array, "D/2"], float]:  # noqa: F821 - jaxtyping axis expression
    """``(inv_freq [head_dim // 2] float32, attention_factor)`` for RoPE with optional scaling."""
    if head_dim <= 0 or head_dim % 2:
        raise ValueError(f"head_dim={head_dim} must be a positive even number for RoPE")
    if theta <= 1.0:
        raise ValueError(f"theta={theta} must be > 1 ({ROPE_THETA:g} is the usual base)")
    scaling = scaling or RopeScaling()
    inv_freq, attention_factor = ROPE_SCALINGS.get(scaling.kind)(head_dim, theta, scaling)
    return jnp.asarray(inv_freq, jnp.float32), float(attention_factor)


def _rotate_split(x, cos, sin):
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _rotate_adjacent(x, cos, sin):
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = jnp.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.reshape(x.shape)


ROPE_PAIRINGS: Registry[Callable] = Registry("rope pairing")
ROPE_PAIRINGS.register("split", _rotate_split)  # GPT-NeoX / HF LLaMA rotate_half
ROPE_PAIRINGS.register("adjacent", _rotate_adjacent)  # RoFormer / Meta LLaMA


def _check_positions(shape: tuple[int, ...], x_shape: tuple[int, ...]) -> None:
    """positions must be [T] or [B|1, T] for x of shape [B, T, H, D]."""
    B, T = x_shape[0], x_shape[1]
    if len(shape) not in (1, 2) or shape[-1] != T or (len(shape) == 2 and shape[0] not in (1, B)):
        raise ValueError(
            f"positions_BT has shape {shape}; expected [T] or [B|1, T] = [{B}|1, {T}] for x_BTHD of shape "
            f"{tuple(x_shape)} (one position per token: e.g. jnp.arange(T), or offset + jnp.arange(T) when decoding)"
        )


def apply_rope(
    x_BTHD: Float[Array, "B T H D"],
    positions_BT: Int[ArrayLike, "B T"],
    *,
    theta: float = ROPE_THETA,
    pairing: str = "split",
    scaling: RopeScaling | None = None,
) -> Float[Array, "B T H D"]:
    """Rotate pairs of head dims of ``x_BTHD`` by ``positions_BT * inv_freq`` (Su et al. 2021).

    ``pairing="split"`` pairs ``(x[i], x[i + D/2])`` (GPT-NeoX / HF LLaMA ``rotate_half``);
    ``pairing="adjacent"`` pairs ``(x[2i], x[2i+1])`` (RoFormer / Meta's original LLaMA). Pair
    ``(a, b)`` becomes ``(a cos - b sin, b cos + a sin)`` times the scaling's attention factor
    (1 except YaRN). Positions may be any integers, e.g. decoding offsets; a ``[T]`` vector
    broadcasts over the batch. Computed in float32, returned in ``x``'s dtype.
    """
    if pairing not in ROPE_PAIRINGS:
        raise ValueError(unknown_name_message(ROPE_PAIRINGS.kind, pairing, ROPE_PAIRINGS.names()))
    head_dim = x_BTHD.shape[-1]
    if head_dim % 2:
        raise ValueError(f"head_dim={head_dim} (last axis of x_BTHD) must be even for RoPE")
    _check_positions(jnp.shape(positions_BT), x_BTHD.shape)
    inv_freq, attention_factor = rope_frequencies(head_dim, theta=theta, scaling=scaling)
    angles_BT1F = jnp.asarray(positions_BT, jnp.float32)[..., None, None] * inv_freq
    cos = jnp.cos(angles_BT1F) * attention_factor
    sin = jnp.sin(angles_BT1F) * attention_factor
    out = ROPE_PAIRINGS.get(pairing)(x_BTHD.astype(jnp.float32), cos, sin)
    return out.astype(x_BTHD.dtype)

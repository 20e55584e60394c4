"""Settings of the position encodings (``model.position``): one class per encoding, chosen by name.

Each class has only the fields its encoding reads: ``model.position=rope`` chooses `RopePositions`,
``model.position.theta=500000`` sets its base, and a RoPE field under ``learned`` does not exist.
RoPE's context-extension scaling is chosen the same way (``model.position.scaling=yarn``).
"""

from __future__ import annotations

import dataclasses
import typing

from transformer_jax.core.configlib import Variant, fail, setting, variant
from transformer_jax.core.registry import Registry
from transformer_jax.nn.attention import RopeSpec
from transformer_jax.ops import rope as rope_ops


class RopeScalingConfig(Variant):
    """How RoPE's frequencies stretch beyond the training length (``ops.rope.ROPE_SCALINGS``)."""

    PATH = "model.position.scaling"
    VARIANTS: typing.ClassVar[Registry[type[RopeScalingConfig]]] = Registry("RoPE scaling")

    def to_ops(self) -> rope_ops.RopeScaling:
        names = [f.name for f in dataclasses.fields(typing.cast(typing.Any, self))]
        return rope_ops.RopeScaling(kind=self.kind, **{name: getattr(self, name) for name in names})


@variant("linear")
@dataclasses.dataclass(frozen=True)
class LinearScaling(RopeScalingConfig):
    """Position interpolation (Chen et al. 2023): positions divided by ``factor``."""

    factor: float = setting(1.0, ge=1)


@variant("ntk")
@dataclasses.dataclass(frozen=True)
class NtkScaling(RopeScalingConfig):
    """NTK-aware base scaling: theta * factor^(D / (D - 2))."""

    factor: float = setting(1.0, ge=1)


@variant("yarn")
@dataclasses.dataclass(frozen=True)
class YarnScaling(RopeScalingConfig):
    """YaRN (Peng et al. 2023) over the pre-training length ``original_max_len``: frequencies
    between ``beta_fast`` and ``beta_slow`` rotations ramp from kept to divided by ``factor``
    (bounds rounded when ``truncate``); cos and sin times ``attention_factor``, or when unset
    mscale(``mscale``) / mscale(``mscale_all_dim``), or mscale(1) (`ops.rope.RopeScaling`). With
    ``model.mla``, ``mscale_all_dim`` also multiplies the softmax scale by its mscale squared
    (DeepSeek-V2/V3)."""

    factor: float = setting(1.0, ge=1)
    original_max_len: int = setting(2048, ge=1)
    beta_fast: float = setting(32.0, gt=0)
    beta_slow: float = setting(1.0, gt=0)
    mscale: float | None = setting(None, gt=0)
    mscale_all_dim: float | None = setting(None, gt=0)
    attention_factor: float | None = setting(None, gt=0)
    truncate: bool = True

    def check(self) -> None:
        if not self.beta_fast > self.beta_slow:
            fail(
                f"{self.PATH}.beta_fast",
                self.beta_fast,
                f"must be above beta_slow={self.beta_slow} (YaRN's defaults: 32 and 1)",
            )
        if self.mscale is not None and (self.mscale_all_dim is None or self.attention_factor is not None):
            fail(
                f"{self.PATH}.mscale",
                self.mscale,
                "is read only in the cos/sin factor m(mscale) / m(mscale_all_dim), which needs mscale_all_dim and "
                "no attention_factor",
                "unset it, or set mscale_all_dim and unset attention_factor",
            )


@variant("llama3")
@dataclasses.dataclass(frozen=True)
class Llama3Scaling(RopeScalingConfig):
    """Llama 3.1's wavelength-banded scaling."""

    factor: float = setting(1.0, ge=1)
    original_max_len: int = setting(2048, ge=1)
    low_freq_factor: float = setting(1.0, gt=0)
    high_freq_factor: float = setting(4.0, gt=0)

    def check(self) -> None:
        if not self.high_freq_factor > self.low_freq_factor:
            fail(
                f"{self.PATH}.high_freq_factor",
                self.high_freq_factor,
                f"must be above low_freq_factor={self.low_freq_factor} (Llama 3.1: 4 and 1)",
            )


class PositionConfig(Variant):
    """Where position information enters the network (``nn.positions.POSITIONS``)."""

    PATH = "model.position"
    VARIANTS: typing.ClassVar[Registry[type[PositionConfig]]] = Registry("position encoding")


@variant("none")
@dataclasses.dataclass(frozen=True)
class NoPositions(PositionConfig):
    """No position information: the model is permutation-equivariant."""


@variant("sinusoidal")
@dataclasses.dataclass(frozen=True)
class SinusoidalPositions(PositionConfig):
    """The fixed sin/cos table of Vaswani et al. 2017 added to the embeddings."""


@variant("learned")
@dataclasses.dataclass(frozen=True)
class LearnedPositions(PositionConfig):
    """A learned ``[max_len, d_model]`` table added to the embeddings (GPT-2's ``wpe``)."""


@variant("rope")
@dataclasses.dataclass(frozen=True)
class RopePositions(PositionConfig):
    """Rotary embeddings (Su et al. 2021): base ``theta``, dimension ``pairing`` (split halves or
    adjacent pairs), optional ``scaling``; ``local_theta``: the base of the local layers of
    ``model.attention=local_global`` (None: ``theta``)."""

    theta: float = setting(rope_ops.ROPE_THETA, gt=0)
    pairing: str = setting("split", choice=rope_ops.ROPE_PAIRINGS)
    scaling: RopeScalingConfig | None = None
    local_theta: float | None = setting(None, gt=0)

    def spec(self, *, local: bool = False) -> RopeSpec:
        """The rotation attention applies (``local``: the local layers' base, unscaled)."""
        if local and self.local_theta is not None:
            return RopeSpec(theta=self.local_theta, pairing=self.pairing)
        scaling = None if self.scaling is None else self.scaling.to_ops()
        return RopeSpec(theta=self.theta, pairing=self.pairing, scaling=scaling)


@variant("relative_bias")
@dataclasses.dataclass(frozen=True)
class RelativeBiasPositions(PositionConfig):
    """T5's learned bias over ``buckets`` log-spaced relative distances up to ``max_distance``."""

    buckets: int = setting(32, ge=1)
    max_distance: int = setting(128, ge=1)


@variant("alibi")
@dataclasses.dataclass(frozen=True)
class AlibiPositions(PositionConfig):
    """ALiBi (Press et al. 2022): fixed per-head linear distance penalties."""

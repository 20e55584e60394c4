"""Settings of the norms (``model.norm``): one class per kind of ``ops.norms.NORMS``, chosen by name.

``model.norm=rmsnorm`` chooses `RMSNormConfig`; ``model.norm.eps=1e-6`` sets its epsilon; a bias
exists only on `LayerNormConfig` (RMSNorm has none to turn off).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from transformer_jax.core.configlib import Variant, setting, variant
from transformer_jax.core.registry import Registry


class NormConfig(Variant):
    """Which normalisation every norm of the model applies (``ops.norms.NORMS``) and its settings."""

    PATH = "model.norm"
    VARIANTS: typing.ClassVar[Registry[type[NormConfig]]] = Registry("norm")
    eps: float

    def module_kwargs(self) -> dict[str, Any]:
        """``nn.norm.Norm``'s keyword arguments for these settings."""
        return {"kind": self.kind, "eps": self.eps, "use_bias": getattr(self, "bias", False)}


@variant("layernorm")
@dataclasses.dataclass(frozen=True)
class LayerNormConfig(NormConfig):
    """LayerNorm (Ba et al. 2016): (x - mean) / sqrt(var + eps) * scale (+ bias when ``bias``)."""

    eps: float = setting(1e-5, gt=0)
    bias: bool = True


@variant("rmsnorm")
@dataclasses.dataclass(frozen=True)
class RMSNormConfig(NormConfig):
    """RMSNorm (Zhang & Sennrich 2019): x / sqrt(mean(x^2) + eps) * scale."""

    eps: float = setting(1e-5, gt=0)


@variant("rmsnorm_plus_one")
@dataclasses.dataclass(frozen=True)
class RMSNormPlusOneConfig(NormConfig):
    """Gemma's RMSNorm with a zero-centred weight: x / rms(x) * (1 + scale)."""

    eps: float = setting(1e-5, gt=0)

"""Weight-initialisation schemes, chosen by name (``model.init.scheme``), and their settings.

A scheme maps (in/out axes of a kernel, whether it is a residual-branch output, a gain) to a
``jax.nn.initializers`` initializer. The gain is how DeepNorm's beta (Wang et al. 2022) reaches
the value/output/FFN projections whatever the scheme.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Sequence

import jax
from jax.nn import initializers

from transformer_jax.core.configlib import Config, setting
from transformer_jax.core.registry import Registry

Initializer = jax.nn.initializers.Initializer
Axes = int | Sequence[int]


@dataclasses.dataclass(frozen=True)
class _Scheme:
    kernel: Callable[[InitScheme, Axes, Axes, bool, float], Initializer]
    embedding: Callable[[InitScheme, int, bool], Initializer]


def _embedding_init(scheme: InitScheme, d_model: int, scaled: bool) -> Initializer:
    # Scaled embeddings (x * sqrt(d)) start at unit variance after scaling, as in fairseq/t2t.
    return initializers.normal(stddev=d_model**-0.5 if scaled else scheme.settings.std)


def _normal_kernel(scheme, in_axis, out_axis, residual_out, gain):
    std = scheme.settings.std * gain
    if residual_out:
        std /= math.sqrt(scheme.n_residual_layers)
    return initializers.normal(stddev=std)


def _xavier_kernel(scheme, in_axis, out_axis, residual_out, gain):
    return initializers.variance_scaling(gain**2, "fan_avg", "uniform", in_axis=in_axis, out_axis=out_axis)


INIT_SCHEMES: Registry[_Scheme] = Registry("init scheme")
INIT_SCHEMES.register("normal", _Scheme(_normal_kernel, _embedding_init))
INIT_SCHEMES.register("xavier", _Scheme(_xavier_kernel, _embedding_init))


@dataclasses.dataclass(frozen=True)
class InitConfig(Config):
    """How fresh weights are drawn (``model.init``; loaded weights replace them).

    ``scheme``: the kernels' scheme (``INIT_SCHEMES``); ``std``: the standard deviation of
    ``normal`` kernels and, under every scheme, of the (unscaled) embedding and position tables
    (GPT-2: 0.02); ``zero_out``: residual-branch output projections start at zero, so every block
    starts as the identity (modded-nanogpt; ReZero-like), whatever the scheme.
    """

    PATH: typing.ClassVar[str] = "model.init"
    scheme: str = setting("normal", choice=INIT_SCHEMES)
    std: float = setting(0.02, gt=0)
    zero_out: bool = False


@dataclasses.dataclass(frozen=True)
class InitScheme:
    """How the kernels and embeddings of one model are initialised: its ``settings`` and the number
    of residual sublayers feeding the stream (GPT-2 scales the residual output projections by
    1/sqrt(n_residual_layers), i.e. 1/sqrt(2 * n_layers))."""

    settings: InitConfig = InitConfig()
    n_residual_layers: int = 1

    def kernel(self, in_axis: Axes, out_axis: Axes, *, residual_out: bool = False, gain: float = 1.0) -> Initializer:
        if residual_out and self.settings.zero_out:
            return initializers.zeros
        return INIT_SCHEMES.get(self.settings.scheme).kernel(self, in_axis, out_axis, residual_out, gain)

    def embedding(self, d_model: int, *, scaled: bool) -> Initializer:
        return INIT_SCHEMES.get(self.settings.scheme).embedding(self, d_model, scaled)

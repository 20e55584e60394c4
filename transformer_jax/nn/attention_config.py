"""Settings of self-attention (``model.attention``): one class per kind, chosen by name.

Each class has only the fields its kind reads: ``model.attention=sliding_window`` chooses
`SlidingWindowAttention`, ``model.attention.window=128`` sets its window, and linear attention has
no scale, soft cap or QK-norm to set. ``local_global`` alternates sliding-window and full layers
(Gemma 2 and 3); `AttentionConfig.layer` gives each layer's settings.
"""

from __future__ import annotations

import dataclasses
import typing

from transformer_jax.core.configlib import Variant, setting, variant
from transformer_jax.core.registry import Registry


class AttentionConfig(Variant):
    """How self-attention mixes positions. ``causal``: a decoder's self-attention mask (False only
    for ablations); ``qkv_bias``: biases on q/k/v only (None: ``model.use_bias``)."""

    PATH = "model.attention"
    VARIANTS: typing.ClassVar[Registry[type[AttentionConfig]]] = Registry("attention kind")
    causal: bool
    qkv_bias: bool | None

    def layer(self, i: int) -> AttentionConfig:
        """The settings of layer ``i`` (a pattern's local layers differ from its global ones)."""
        return self

    def is_local(self, i: int) -> bool:
        """Whether layer ``i`` is a local layer of a local/global pattern."""
        return False


class LogitAttention(AttentionConfig):
    """The kinds that softmax scaled q k^T logits: their ``scale``, ``softcap`` and ``qk_norm``."""

    scale: float | None
    softcap: float | None
    qk_norm: bool


@variant("softmax")
@dataclasses.dataclass(frozen=True)
class SoftmaxAttention(LogitAttention):
    """softmax(q k^T * scale) v over every visible position. ``scale`` None: 1/sqrt(head_dim);
    ``softcap``: cap * tanh(logits / cap) (Gemma 2); ``qk_norm``: q and k normalised over head_dim
    with ``model.norm`` before RoPE (Dehghani et al. 2023; Gemma 3, OLMo 2)."""

    scale: float | None = setting(None, gt=0)
    softcap: float | None = setting(None, gt=0)
    qk_norm: bool = False
    causal: bool = True
    qkv_bias: bool | None = None


@variant("sliding_window")
@dataclasses.dataclass(frozen=True)
class SlidingWindowAttention(LogitAttention):
    """Softmax attention over the last ``window`` positions (Longformer; Mistral: 4096); the other
    fields as in `SoftmaxAttention`."""

    window: int = setting(256, ge=1)
    scale: float | None = setting(None, gt=0)
    softcap: float | None = setting(None, gt=0)
    qk_norm: bool = False
    causal: bool = True
    qkv_bias: bool | None = None


@variant("local_global")
@dataclasses.dataclass(frozen=True)
class LocalGlobalAttention(LogitAttention):
    """Layer i is global (softmax) when (i + 1) % ``global_every`` == 0, else local (a sliding
    window of ``local_window`` tokens, RoPE base ``model.position.local_theta`` if set): Gemma 2 is
    every=2, Gemma 3 every=6. The other fields as in `SoftmaxAttention`, for both kinds of layer."""

    local_window: int = setting(256, ge=1)
    global_every: int = setting(2, ge=1)
    scale: float | None = setting(None, gt=0)
    softcap: float | None = setting(None, gt=0)
    qk_norm: bool = False
    causal: bool = True
    qkv_bias: bool | None = None

    def is_local(self, i: int) -> bool:
        return (i + 1) % self.global_every != 0

    def layer(self, i: int) -> AttentionConfig:
        if self.is_local(i):
            return SlidingWindowAttention(
                window=self.local_window,
                scale=self.scale,
                softcap=self.softcap,
                qk_norm=self.qk_norm,
                causal=self.causal,
                qkv_bias=self.qkv_bias,
            )
        return SoftmaxAttention(
            scale=self.scale, softcap=self.softcap, qk_norm=self.qk_norm, causal=self.causal, qkv_bias=self.qkv_bias
        )


@variant("linear")
@dataclasses.dataclass(frozen=True)
class LinearAttention(AttentionConfig):
    """Linear attention (Katharopoulos et al. 2020, ``ops.linear_attention``): no logits, so no
    scale, soft cap, QK-norm or position bias."""

    causal: bool = True
    qkv_bias: bool | None = None

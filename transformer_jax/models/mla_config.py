"""``MLAConfig``: Multi-head Latent Attention settings of a ModelConfig (``model.mla``; None = off).

Each field declares its range (``setting``); the rules across fields are the small functions below,
each refusing one combination by name: ``MLAConfig.check`` runs the one among its own fields,
``MLAConfig.validate`` (called by ``ModelConfig``) those that read the model's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from transformer_jax.core.configlib import Config, fail, setting
from transformer_jax.nn.attention_config import LogitAttention


@dataclasses.dataclass(frozen=True)
class MLAConfig(Config):
    """Multi-head Latent Attention (DeepSeek-V2, Liu et al. 2024, section 2.1; DeepSeek-V3).

    Keys and values of all heads come from one latent c = RMSNorm(x W_DKV) of ``kv_lora_rank``
    dims; queries from q_lora_rank dims (RMSNorm(x W_DQ), or x directly when ``q_lora_rank`` is
    None). Each head's query/key is ``qk_nope_head_dim`` dims without position plus
    ``qk_rope_head_dim`` RoPE dims, the RoPE key being one vector shared by every head (decoupled
    RoPE); values have ``v_head_dim`` dims. Logits are scaled by 1/sqrt(qk_nope + qk_rope), times
    m(mscale_all_dim)^2 under YaRN (DeepSeek; m(x) = 0.1 x ln factor + 1), or by
    ``model.attention.scale``. Decoding caches only c and the RoPE key, kv_lora_rank +
    qk_rope_head_dim numbers per token and layer, and attends in the latent space (the key and
    value up-projections absorbed into the query and the output). ``norm_eps``: epsilon of the
    two latent RMSNorms (Hugging Face's ``DeepseekV3RMSNorm`` default, whatever
    ``rms_norm_eps`` says).
    """

    q_lora_rank: int | None = setting(None, ge=1)
    kv_lora_rank: int = setting(64, ge=1)
    qk_nope_head_dim: int = setting(32, ge=1)
    qk_rope_head_dim: int = setting(16, ge=1)  # even
    v_head_dim: int = setting(32, ge=1)
    norm_eps: float = setting(1e-6, gt=0.0)

    PATH: ClassVar[str] = "model.mla"

    def check(self) -> None:
        _rope_pairs(self)

    @property
    def qk_head_dim(self) -> int:
        """Dims of each head's query and key (no-position part + RoPE part)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def cache_dims(self) -> int:
        """Numbers cached per token and layer: the latent and the shared RoPE key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def validate(self, model: Any) -> None:
        """The rules across ``model``'s fields (called by ``ModelConfig``)."""
        for rule in (_needs_softmax, _needs_rope, _own_head_sizes, _own_norms, _one_scale, _no_pallas_decode):
            rule(self, model)


def _rope_pairs(mla: MLAConfig) -> None:
    if mla.qk_rope_head_dim % 2:
        fail("model.mla.qk_rope_head_dim", mla.qk_rope_head_dim, "RoPE rotates pairs of dimensions: use an even size")


def _needs_softmax(mla: MLAConfig, model: Any) -> None:
    if model.attention.kind == "linear":
        fail("model.attention", "linear", "MLA is softmax attention over a latent", "use softmax or sliding_window")


def _needs_rope(mla: MLAConfig, model: Any) -> None:
    if model.position.kind != "rope":
        fail(
            "model.position",
            model.position.kind,
            "MLA carries position in its decoupled RoPE key (model.mla.qk_rope_head_dim)",
            "use --set model.position=rope with model.mla",
        )


def _own_head_sizes(mla: MLAConfig, model: Any) -> None:
    for name in ("head_dim", "n_kv_heads"):
        if getattr(model.dims, name) is not None:
            fail(
                f"model.dims.{name}",
                getattr(model.dims, name),
                "MLA sizes its heads itself (model.mla.qk_nope_head_dim, qk_rope_head_dim, v_head_dim) and "
                "shares one latent across heads",
                f"unset model.dims.{name} with model.mla",
            )


def _own_norms(mla: MLAConfig, model: Any) -> None:
    if isinstance(model.attention, LogitAttention) and model.attention.qk_norm:
        why = "MLA normalises its latents (model.mla.norm_eps), not q and k"
        fail("model.attention.qk_norm", True, why, "set it False")
    if model.attention.qkv_bias is not None:
        fail(
            "model.attention.qkv_bias",
            model.attention.qkv_bias,
            "MLA's down-projections take model.use_bias (Hugging Face's attention_bias)",
            "unset it",
        )


def _one_scale(mla: MLAConfig, model: Any) -> None:
    scale = getattr(model.attention, "scale", None)
    if scale is not None and getattr(getattr(model.position, "scaling", None), "mscale_all_dim", None) is not None:
        fail(
            "model.attention.scale",
            scale,
            "replaces MLA's logit scale, which with YaRN's model.position.scaling.mscale_all_dim is "
            "m(mscale_all_dim)^2 / sqrt(qk_nope + qk_rope)",
            "unset one of them",
        )


def _no_pallas_decode(mla: MLAConfig, model: Any) -> None:
    if model.execution.decode_impl == "pallas_gpu":
        fail(
            "model.execution.decode_impl",
            "pallas_gpu",
            "the flash-decoding kernel has no latent (MLA) form",
            "use auto, blocked or dense",
        )

"""Multi-head attention (self or cross, GQA/MQA, RoPE, KV cache) over ``ops.attention``."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from transformer_jax.nn.attention_config import (
    AttentionConfig,
    LocalGlobalAttention,
    LogitAttention,
    SlidingWindowAttention,
    SoftmaxAttention,
)
from transformer_jax.nn.execution_config import ExecutionConfig
from transformer_jax.nn.init import InitScheme
from transformer_jax.nn.linear import DenseGeneral
from transformer_jax.nn.norm import Norm
from transformer_jax.nn.norm_config import NormConfig, RMSNormConfig
from transformer_jax.ops import attention as attention_ops
from transformer_jax.ops import rope as rope_ops
from transformer_jax.ops.context_parallel import context_size
from transformer_jax.ops.decode_attention import decode_attention
from transformer_jax.ops.kv_cache import KVCache, kv_cache_of, update_kv_cache
from transformer_jax.ops.masks import AttentionMask


@dataclasses.dataclass(frozen=True)
class RopeSpec:
    """Static RoPE settings passed to ``ops.rope.apply_rope`` (hashable, so jit caches stay warm)."""

    theta: float = rope_ops.ROPE_THETA
    pairing: str = "split"
    scaling: rope_ops.RopeScaling | None = None

    def __call__(self, x_BTHD, positions_BT):
        return rope_ops.apply_rope(x_BTHD, positions_BT, theta=self.theta, pairing=self.pairing, scaling=self.scaling)


@dataclasses.dataclass(frozen=True)
class LayerAttention:
    """What one layer's attention settings ask of ``ops.attention`` (a kind without a field reads it
    as off): the ops ``kind``, ``window``, logit ``scale`` (None: 1/sqrt(head_dim)), ``softcap``,
    ``qk_norm``."""

    kind: str
    window: int | None
    scale: float | None
    softcap: float | None
    qk_norm: bool

    @staticmethod
    def of(settings: AttentionConfig) -> LayerAttention:
        if isinstance(settings, LocalGlobalAttention):
            raise ValueError("local_global sets each layer's attention: pass settings.layer(i) to the layer")
        logits = settings if isinstance(settings, LogitAttention) else None
        return LayerAttention(
            kind=settings.kind,
            window=settings.window if isinstance(settings, SlidingWindowAttention) else None,
            scale=None if logits is None else logits.scale,
            softcap=None if logits is None else logits.softcap,
            qk_norm=logits is not None and logits.qk_norm,
        )


class Attention(nnx.Module):
    """softmax(Q K^T * scale + bias) V with H query heads and K <= H key/value heads.

    Kernels: q [D, H, Dh], k/v [D, K, Dh] (logical ``embed``, ``heads``/``kv_heads``, ``head_dim``),
    o [H, Dh, D]. ``settings``: the layer's attention (``nn.attention_config``; its ``qkv_bias``:
    biases on q, k, v only, Qwen2; None follows ``use_bias``); ``execution``: the kernels and block
    sizes (``attention_impl``, ``decode_impl``...). With ``settings.qk_norm``: ``q_norm`` and ``k_norm``
    scales [Dh], normalised as ``norm`` says. ``value_gain`` multiplies the init of v and o
    (DeepNorm's beta).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        head_dim: int,
        *,
        cross: bool = False,
        use_bias: bool = False,
        rope: RopeSpec | None = None,
        settings: AttentionConfig = SoftmaxAttention(),
        execution: ExecutionConfig = ExecutionConfig(),
        norm: NormConfig = RMSNormConfig(),
        init: InitScheme = InitScheme(),
        value_gain: float = 1.0,
        dtype: jnp.dtype = jnp.float32,
        param_dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs,
    ):
        if cross and rope is not None:
            raise ValueError("cross-attention takes no RoPE (query and key positions live in different sequences)")
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads={n_heads} is not divisible by n_kv_heads={n_kv_heads}")
        common: dict[str, Any] = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        in_bias = use_bias if settings.qkv_bias is None else settings.qkv_bias
        self.q = DenseGeneral(
            d_model,
            (n_heads, head_dim),
            axes=("embed", "heads", "head_dim"),
            projection="q",
            kernel_init=init.kernel(0, (1, 2)),
            use_bias=in_bias,
            **common,
        )
        self.k = DenseGeneral(
            d_model,
            (n_kv_heads, head_dim),
            axes=("embed", "kv_heads", "head_dim"),
            projection="k",
            kernel_init=init.kernel(0, (1, 2)),
            use_bias=in_bias,
            **common,
        )
        self.v = DenseGeneral(
            d_model,
            (n_kv_heads, head_dim),
            axes=("embed", "kv_heads", "head_dim"),
            projection="v",
            kernel_init=init.kernel(0, (1, 2), gain=value_gain),
            use_bias=in_bias,
            **common,
        )
        self.o = DenseGeneral(
            (n_heads, head_dim),
            d_model,
            axes=("heads", "head_dim", "embed"),
            projection="o",
            kernel_init=init.kernel((0, 1), 2, residual_out=True, gain=value_gain),
            use_bias=use_bias,
            **common,
        )
        self.layer = LayerAttention.of(settings)
        if self.layer.qk_norm:
            qk: dict[str, Any] = dict(kind=norm.kind, eps=norm.eps, use_bias=False, param_dtype=param_dtype)
            self.q_norm, self.k_norm = Norm(head_dim, **qk), Norm(head_dim, **qk)
        else:
            self.q_norm = self.k_norm = None
        self.cross = cross
        self.rope = rope
        self.execution = execution

    def _keys(self, x_BSD: Float[Array, "B S D"]) -> Float[Array, "B S K D"]:
        k_BSKD = self.k(x_BSD)
        return k_BSKD if self.k_norm is None else self.k_norm(k_BSKD)

    def project_kv(self, kv_BSD: Float[Array, "B S D"]) -> KVCache:
        """Keys/values of a fixed memory (cross-attention), computed once and reused every step."""
        return kv_cache_of(self._keys(kv_BSD), self.v(kv_BSD))

    def __call__(
        self,
        x_BTD: Float[Array, "B T D"],
        *,
        mask: AttentionMask | None,
        positions_BT: Int[Array, "B T"] | None = None,
        kv_BSD: Float[Array, "B S D"] | None = None,
        bias: Float[Array, "B H T S"] | None = None,
        cache: KVCache | None = None,
    ) -> tuple[Float[Array, "B T D"], KVCache | None]:
        """Self-attention, or (``cross=True``) attention from x to the memory ``kv_BSD``.

        With a ``cache``: self-attention appends this call's keys/values at ``cache.index`` and
        attends over the written slots the mask lets it see (``ops.decode_attention``);
        cross-attention uses the cache's keys/values as they are (see ``project_kv``) and ignores
        ``kv_BSD``.
        """
        if cache is not None and context_size() > 1:
            raise ValueError(
                f"decoding with a KV cache under a context mesh axis of {context_size()} devices: the cache "
                "is not split over the sequence; generate on a mesh with mesh.context=1"
            )
        q_BTHD = self.q(x_BTD)
        if self.q_norm is not None:
            q_BTHD = self.q_norm(q_BTHD)
        if self.cross:
            if cache is None and kv_BSD is None:
                raise ValueError("cross-attention needs kv_BSD (the encoder output) or a cache from project_kv")
            if cache is None:
                assert kv_BSD is not None  # checked above
                k_BSKD, v_BSKD = self._keys(kv_BSD), self.v(kv_BSD)
        else:
            k_BSKD, v_BSKD = self._keys(x_BTD), self.v(x_BTD)
            if self.rope is not None:
                if positions_BT is None:
                    raise ValueError("RoPE attention needs positions_BT")
                q_BTHD = self.rope(q_BTHD, positions_BT)
                k_BSKD = self.rope(k_BSKD, positions_BT)
            if cache is not None:
                cache = update_kv_cache(cache, k_BSKD, v_BSKD)
        layer, execution = self.layer, self.execution
        if cache is not None and layer.kind in ("softmax", "sliding_window"):
            if layer.window is not None:
                mask = (AttentionMask() if mask is None else mask).with_window(layer.window)
            y_BTHD = decode_attention(
                q_BTHD,
                cache,
                mask=mask,
                bias_BHTS=bias,
                scale=layer.scale,
                impl=execution.decode_impl,
                block_size=execution.decode_block_size,
                softcap=layer.softcap,
            )
            return self.o(y_BTHD), cache
        if cache is not None:
            k_BSKD, v_BSKD = cache.keys_values()
        y_BTHD = attention_ops.attention(
            q_BTHD,
            k_BSKD.astype(q_BTHD.dtype),
            v_BSKD.astype(q_BTHD.dtype),
            mask=mask,
            bias=bias,
            scale=layer.scale,
            kind=layer.kind,
            impl=execution.attention_impl,
            window=layer.window,
            block_size=execution.attention_block_size,
            softcap=layer.softcap,
        )
        return self.o(y_BTHD), cache

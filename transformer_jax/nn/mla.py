"""Multi-head Latent Attention (DeepSeek-V2/V3) over ``ops.mla``, with a latent KV cache."""

from __future__ import annotations

from typing import Any, Protocol

import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from transformer_jax.nn.attention import LayerAttention, RopeSpec
from transformer_jax.nn.attention_config import AttentionConfig, SoftmaxAttention
from transformer_jax.nn.execution_config import ExecutionConfig
from transformer_jax.nn.init import InitScheme
from transformer_jax.nn.linear import DenseGeneral
from transformer_jax.nn.norm import Norm
from transformer_jax.ops import mla as mla_ops
from transformer_jax.ops import rope as rope_ops
from transformer_jax.ops.context_parallel import context_size
from transformer_jax.ops.decode_attention import decode_attention
from transformer_jax.ops.kv_cache import KVCache, update_kv_cache
from transformer_jax.ops.masks import AttentionMask

LATENT = "latent"  # logical axis of the latents (no sharding rule: replicated)


class MLADims(Protocol):
    """The sizes MLA reads (``models.mla_config.MLAConfig`` has them)."""

    @property
    def q_lora_rank(self) -> int | None: ...
    @property
    def kv_lora_rank(self) -> int: ...
    @property
    def qk_nope_head_dim(self) -> int: ...
    @property
    def qk_rope_head_dim(self) -> int: ...
    @property
    def v_head_dim(self) -> int: ...
    @property
    def norm_eps(self) -> float: ...


class MultiHeadLatentAttention(nnx.Module):
    """Self-attention of H heads through a latent (``ops.mla``), laid out as Hugging Face's
    ``DeepseekV3Attention`` so checkpoints map 1:1 (kernels transposed to [in, out]):

    - ``q`` [D, H, N + R] (``q_proj``) when ``q_lora_rank`` is None, else ``q_a`` [D, Cq]
      (``q_a_proj``), ``q_a_norm`` [Cq] (RMSNorm), ``q_b`` [Cq, H, N + R] (``q_b_proj``);
    - ``kv_a`` [D, C + R] (``kv_a_proj_with_mqa``: the latent, then the shared RoPE key),
      ``kv_a_norm`` [C], ``kv_b`` [C, H, N + V] (``kv_b_proj``: per head the key's no-position
      part, then the value);
    - ``o`` [H, V, D] (``o_proj``).

    ``use_bias`` puts biases on ``q_a``, ``kv_a`` and ``o`` (HF's ``attention_bias``). With a
    cache (``KVCache`` of one key head: the RoPE key [B, 1, R, S], and one value head: the latent
    [B, 1, C, S]) attention runs over the latent with kv_b absorbed (``ops.mla``).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dims: MLADims,
        *,
        use_bias: bool = False,
        rope: RopeSpec,
        settings: AttentionConfig = SoftmaxAttention(),
        execution: ExecutionConfig = ExecutionConfig(),
        init: InitScheme = InitScheme(),
        value_gain: float = 1.0,
        dtype: jnp.dtype = jnp.float32,
        param_dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs,
    ):
        H, N, R, V, C = n_heads, dims.qk_nope_head_dim, dims.qk_rope_head_dim, dims.v_head_dim, dims.kv_lora_rank
        common: dict[str, Any] = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        norm: dict[str, Any] = dict(kind="rmsnorm", eps=dims.norm_eps, use_bias=False, param_dtype=param_dtype)
        heads = ("heads", "head_dim")
        if dims.q_lora_rank is None:
            self.q = DenseGeneral(
                d_model,
                (H, N + R),
                axes=("embed", *heads),
                projection="q",
                kernel_init=init.kernel(0, (1, 2)),
                **common,
            )
            self.q_a = self.q_a_norm = self.q_b = None
        else:
            self.q = None
            Cq = dims.q_lora_rank
            self.q_a = DenseGeneral(
                d_model,
                Cq,
                axes=("embed", LATENT),
                projection="q_a",
                use_bias=use_bias,
                kernel_init=init.kernel(0, 1),
                **common,
            )
            self.q_a_norm = Norm(Cq, **norm)
            self.q_b = DenseGeneral(
                Cq, (H, N + R), axes=(LATENT, *heads), projection="q_b", kernel_init=init.kernel(0, (1, 2)), **common
            )
        self.kv_a = DenseGeneral(
            d_model,
            C + R,
            axes=("embed", LATENT),
            projection="kv_a",
            use_bias=use_bias,
            kernel_init=init.kernel(0, 1),
            **common,
        )
        self.kv_a_norm = Norm(C, **norm)
        self.kv_b = DenseGeneral(
            C,
            (H, N + V),
            axes=(LATENT, *heads),
            projection="kv_b",
            kernel_init=init.kernel(0, (1, 2), gain=value_gain),
            **common,
        )
        self.o = DenseGeneral(
            (H, V),
            d_model,
            axes=(*heads, "embed"),
            projection="o",
            use_bias=use_bias,
            kernel_init=init.kernel((0, 1), 2, residual_out=True, gain=value_gain),
            **common,
        )
        self.dims = (N, R, V, C)
        self.rope = rope
        self.layer = LayerAttention.of(settings)
        self.execution = execution
        mscale = rope_ops.softmax_mscale(rope.scaling)
        self.scale = mla_ops.softmax_scale(N, R, mscale) if self.layer.scale is None else self.layer.scale

    def _queries(self, x_BTD: Float[Array, "B T D"]) -> Float[Array, "B T H E"]:
        if self.q is not None:
            return self.q(x_BTD)
        assert self.q_a is not None and self.q_a_norm is not None and self.q_b is not None
        return self.q_b(self.q_a_norm(self.q_a(x_BTD)))

    def _kv_b_kernel(self) -> Float[Array, "C H F"]:
        """kv_b's weight as used by its forward (a LoRA adapter's update folded in, exactly)."""
        if self.kv_b.lora is None:
            return self.kv_b.kernel[...].astype(self.kv_b.dtype)
        return self.kv_b(jnp.eye(self.dims[3], dtype=self.kv_b.dtype))

    def __call__(
        self,
        x_BTD: Float[Array, "B T D"],
        *,
        mask: AttentionMask | None,
        positions_BT: Int[Array, "B T"] | None = None,
        bias: Float[Array, "B H T S"] | None = None,
        cache: KVCache | None = None,
    ) -> tuple[Float[Array, "B T D"], KVCache | None]:
        """Self-attention over x (no cache: keys and values expanded from the latent) or over the
        cache with this call's latents and RoPE keys appended at ``cache.index`` (absorbed)."""
        if positions_BT is None:
            raise ValueError("MLA needs positions_BT for its RoPE part")
        if cache is not None and context_size() > 1:  # as nn.attention.Attention
            raise ValueError(
                f"decoding with a KV cache under a context mesh axis of {context_size()} devices: the latent "
                "cache is not split over the sequence; generate on a mesh with mesh.context=1"
            )
        N, R, V, C = self.dims
        layer, execution = self.layer, self.execution
        q_nope_BTHN, q_pe_BTHR = mla_ops.split_heads(self._queries(x_BTD), N)
        ckr_BTE = self.kv_a(x_BTD)
        c_BTC, k_pe_BTR = self.kv_a_norm(ckr_BTE[..., :C]), ckr_BTE[..., C:]
        q_pe_BTHR = self.rope(q_pe_BTHR, positions_BT)
        k_pe_BTR = self.rope(k_pe_BTR[:, :, None], positions_BT)[:, :, 0]
        if layer.window is not None and cache is not None:
            mask = (AttentionMask() if mask is None else mask).with_window(layer.window)
        if cache is None:
            k_nope_BTHN, v_BTHV = mla_ops.split_heads(self.kv_b(c_BTC), N)
            y_BTHV = mla_ops.mla_attention(
                q_nope_BTHN,
                q_pe_BTHR,
                k_nope_BTHN,
                k_pe_BTR,
                v_BTHV,
                scale=self.scale,
                mask=mask,
                bias=bias,
                kind=layer.kind,
                impl=execution.attention_impl,
                window=layer.window,
                block_size=execution.attention_block_size,
                softcap=layer.softcap,
            )
            return self.o(y_BTHV), None
        cache = update_kv_cache(cache, k_pe_BTR[:, :, None], c_BTC[:, :, None])
        w_uk_CHN, w_uv_CHV = mla_ops.split_heads(self._kv_b_kernel(), N)
        o_lat_BTHC = decode_attention(
            q_pe_BTHR,
            cache,
            mask=mask,
            bias_BHTS=bias,
            scale=self.scale,
            impl=execution.decode_impl,
            block_size=execution.decode_block_size,
            softcap=layer.softcap,
            qv_BTHE=mla_ops.absorb_queries(q_nope_BTHN, w_uk_CHN),
        )
        return self.o(mla_ops.expand_values(o_lat_BTHC, w_uv_CHV)), cache

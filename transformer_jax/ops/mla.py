"""Multi-head Latent Attention (MLA; DeepSeek-V2, Liu et al. 2024, section 2.1), as pure functions.

Alphabet: B batch, T queries, S keys, H heads, D model width, C latent (kv_lora_rank), N the
no-position part of a query/key head (qk_nope_head_dim), R the RoPE part (qk_rope_head_dim),
V value head dim, F = N + V.

Per token, with h_t the layer input (the paper's eqs. 9-19; the module projects and norms):

    c_t        = RMSNorm(h_t W_DKV)                     [C]     the latent: all that decoding caches
    k_t^R      = RoPE(h_t W_KR)                         [R]     one RoPE key, shared by every head
    k_{t,i}^C  = c_t W_UK[:, i],  v_{t,i} = c_t W_UV[:, i]      [N], [V] per head i (W_UKV = kv_b [C, H, F])
    q_{t,i}    = [q_{t,i}^C ; RoPE(q_{t,i}^R)]          [N + R]
    o_{t,i}    = sum_s softmax_s(q_{t,i} . [k_{s,i}^C ; k_s^R] * scale) v_{s,i}

``mla_attention`` computes this from the expanded keys and values (training, prefill without a
cache). Decoding computes the same numbers from the cache alone by absorbing the up-projections
(section 2.1.2): q^C . k_s^C = (q^C W_UK^T) . c_s, and sum_s p_s v_s = (sum_s p_s c_s) W_UV, so
attention runs over the latent: multi-query attention whose single key head is [c_s ; k_s^R]
and whose value is c_s (``absorb_queries``, ``ops.decode_attention`` with ``qv_BTHE``,
``expand_values``).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jaxtyping import Array, Float

from transformer_jax.ops import attention as attention_ops
from transformer_jax.ops.masks import AttentionMask


def softmax_scale(qk_nope_head_dim: int, qk_rope_head_dim: int, mscale: float = 1.0) -> float:
    """``mscale / sqrt(N + R)``: the logits' scale (Hugging Face ``DeepseekV3Attention.scaling``);
    under YaRN ``mscale`` is ``ops.rope.softmax_mscale`` of the scaling, else 1."""
    return mscale / math.sqrt(qk_nope_head_dim + qk_rope_head_dim)


def split_heads(x_BTHF: Float[Array, "B T H F"], first: int) -> tuple[Array, Array]:
    """``x[..., :first]``, ``x[..., first:]``: [q^C ; q^R] of a query, [k^C ; v] of kv_b's output."""
    return x_BTHF[..., :first], x_BTHF[..., first:]


def mla_attention(
    q_nope_BTHN: Float[Array, "B T H N"],
    q_pe_BTHR: Float[Array, "B T H R"],
    k_nope_BSHN: Float[Array, "B S H N"],
    k_pe_BSR: Float[Array, "B S R"],
    v_BSHV: Float[Array, "B S H V"],
    *,
    scale: float,
    mask: AttentionMask | None = None,
    bias: Float[Array, "B|1 H|1 T S"] | None = None,
    kind: str = "softmax",
    impl: str = "xla",
    window: int | None = None,
    block_size: int = 512,
    softcap: float | None = None,
) -> Float[Array, "B T H V"]:
    """softmax([q^C ; q^R] . [k^C ; k^R] * scale + bias, masked) v per head, the RoPE key
    broadcast to every head, run by ``ops.attention.attention`` (``kind``/``impl`` and the rest as
    there). Queries/keys and values are zero-padded to one head size max(N + R, V), which every
    implementation takes and which changes no logit and no output (zeros add nothing to q . k;
    the padded output columns are dropped)."""
    H = q_nope_BTHN.shape[2]
    q_BTHE = jnp.concatenate([q_nope_BTHN, q_pe_BTHR.astype(q_nope_BTHN.dtype)], axis=-1)
    k_pe_BSHR = jnp.broadcast_to(k_pe_BSR[:, :, None], (*k_pe_BSR.shape[:2], H, k_pe_BSR.shape[-1]))
    k_BSHE = jnp.concatenate([k_nope_BSHN, k_pe_BSHR.astype(k_nope_BSHN.dtype)], axis=-1)
    E, V = q_BTHE.shape[-1], v_BSHV.shape[-1]
    width = max(E, V)
    pad = lambda x, n: x if n == width else jnp.pad(x, ((0, 0), (0, 0), (0, 0), (0, width - n)))
    out_BTHW = attention_ops.attention(
        pad(q_BTHE, E),
        pad(k_BSHE, E),
        pad(v_BSHV.astype(q_BTHE.dtype), V),
        mask=mask,
        bias=bias,
        scale=scale,
        kind=kind,
        impl=impl,
        window=window,
        block_size=block_size,
        softcap=softcap,
    )
    return out_BTHW[..., :V]


def absorb_queries(q_nope_BTHN: Float[Array, "B T H N"], w_uk_CHN: Float[Array, "C H N"]) -> Float[Array, "B T H C"]:
    """q^C W_UK^T per head: ``q_lat[b, t, h, c] = sum_n q[b, t, h, n] W_UK[c, h, n]``, so that
    q_lat . c_s = q^C . k_s^C for every cached latent c_s."""
    return jnp.einsum("bthn,chn->bthc", q_nope_BTHN, w_uk_CHN.astype(q_nope_BTHN.dtype))


def expand_values(o_lat_BTHC: Float[Array, "B T H C"], w_uv_CHV: Float[Array, "C H V"]) -> Float[Array, "B T H V"]:
    """(sum_s p_s c_s) W_UV per head: ``y[b, t, h, v] = sum_c o_lat[b, t, h, c] W_UV[c, h, v]``."""
    return jnp.einsum("bthc,chv->bthv", o_lat_BTHC, w_uv_CHV.astype(o_lat_BTHC.dtype))

"""Flash-decoding of one new token over a KV cache: jax.experimental.pallas.ops.gpu.decode_attention.gqa.

Flash-decoding (Dao et al. 2023, "Flash-Decoding for long-context inference") splits the S cache
slots into k_splits chunks, runs an online softmax in each chunk in parallel and merges the chunks
with their (max, sum) statistics. The kernel reads k/v as [B, S, K, D]; our cache stores
[B, K, D, S] (ops.kv_cache), so the cache is moved into the kernel's layout first.
An alternative to `kv_cache.cached_attention` for T = 1, without mask or bias arrays: the query
sees slots [0, cache.index), or a per-row range. GPU (Triton) kernel, run per device on its batch
rows and heads under a mesh (`ops.per_shard`); `interpret=True` runs it anywhere.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from transformer_jax.ops.kv_cache import KVCache
from transformer_jax.ops.per_shard import per_shard


def _splits(S: int, max_splits: int) -> int | None:
    """The largest power of two <= max_splits dividing S with >= 16 slots per split."""
    n = 1
    while n * 2 <= max_splits and S % (n * 2) == 0 and S // (n * 2) >= 16:
        n *= 2
    return n if S % n == 0 and S // n >= 16 else None


def flash_decode_attention(
    q_BTHD: Float[Array, "B 1 H D"],
    cache: KVCache,
    *,
    scale: float | None = None,
    kv_len_B: Int[Array, " B"] | None = None,
    start_B: Int[Array, " B"] | None = None,
    max_splits: int = 16,
    block_k: int = 128,
    interpret: bool = False,
) -> Float[Array, "B 1 H D"]:
    """softmax(q k^T * scale) v over the cache slots [start_B, kv_len_B) (default [0, cache.index)),
    H = K * G (GQA).

    S = cache.max_len must be a multiple of 16; k_splits is the largest power of two <= max_splits
    leaving >= 16 slots per split; block_k is capped to the split length (both powers of two)."""
    B, T, H, D = q_BTHD.shape
    S = cache.max_len
    if T != 1:
        raise ValueError(f"flash_decode_attention decodes one token; got T={T}. Use kv_cache.cached_attention")
    k_splits = _splits(S, max_splits)
    if k_splits is None:
        raise ValueError(f"cache max_len={S} must be a multiple of 16 for flash_decode_attention")
    split = S // k_splits
    while split % block_k:
        block_k //= 2
    if block_k < 16:
        raise ValueError(f"cache max_len={S} split into {k_splits} has no power-of-two block >= 16")
    from jax.experimental.pallas.ops.gpu import decode_attention

    if kv_len_B is None:
        kv_len_B = jnp.broadcast_to(jnp.asarray(cache.index, jnp.int32), (B,))
    sm_scale = float(D**-0.5 if scale is None else scale)

    def local(q_BTHD, k_BKDS, v_BKDS, kv_len_B, start_B):  # one device's batch rows and heads
        k_BSKD = jnp.moveaxis(k_BKDS, -1, 1).astype(q_BTHD.dtype)
        v_BSKD = jnp.moveaxis(v_BKDS, -1, 1).astype(q_BTHD.dtype)
        out_BHD = decode_attention.gqa(
            q_BTHD[:, 0],
            k_BSKD,
            v_BSKD,
            start_idx=start_B,
            kv_seq_len=kv_len_B,
            sm_scale=sm_scale,
            block_k=block_k,
            k_splits=k_splits,
            interpret=interpret,
        )
        return out_BHD[:, None]

    heads = ("batch", None, "heads", None)
    cache_dims = ("batch", "heads", None, None)
    operands = (q_BTHD, cache.k_BKDS, cache.v_BKDS, kv_len_B, start_B)
    return per_shard(local, operands, (heads, cache_dims, cache_dims, ("batch",), ("batch",)), heads)

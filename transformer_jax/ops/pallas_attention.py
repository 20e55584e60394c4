"""Pallas flash-attention kernels behind `ops.attention`: TPU splash attention and the GPU (Triton) mha.

Both run softmax(Q K^T * scale, masked) V blockwise (Dao et al. 2022, FlashAttention) with a
backward pass, on q [B, T, H, D] and k/v [B, S, K, D] (GQA: query head h reads kv head h // G).
Their masks are static, so they take only the parts of an `AttentionMask` that are known at trace
time: `causal`, `window` (splash only) and self-attention segment ids (one array, or the same array
as q_segment_ids and kv_segment_ids, T == S). Key padding (`kv_valid`), explicit positions,
`dense` masks and biases depend on data: `splash_problems` / `pallas_gpu_problems` name them, the
kernels refuse them, and `attention(impl="auto")` never picks a kernel for them.

Under a mesh both run per device on its batch rows and heads (`ops.per_shard`: XLA does not
partition Pallas calls). `interpret=True` runs the kernel in the Pallas interpreter (any backend,
e.g. CPU tests).
"""

from __future__ import annotations

from typing import cast

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from transformer_jax.ops.masks import AttentionMask
from transformer_jax.ops.per_shard import per_shard

_BTHD = ("batch", None, "heads", None)
_BT = ("batch", None)
_DATA_FIELDS = ("q_positions", "kv_positions", "kv_valid", "dense")
SPLASH_LANES = 128  # splash's block_q / block_kv must be multiples of this


def _data_problems(mask: AttentionMask | None, has_bias: bool) -> list[str]:
    out = ["bias"] if has_bias else []
    if mask is not None:
        out += [f"mask.{f}" for f in _DATA_FIELDS if getattr(mask, f) is not None]
    return out


def _segment_problems(mask: AttentionMask | None, T: int, S: int) -> list[str]:
    if mask is None or (mask.q_segment_ids is None and mask.kv_segment_ids is None):
        return []
    both = mask.q_segment_ids is not None and mask.kv_segment_ids is not None
    if T != S or (both and mask.q_segment_ids is not mask.kv_segment_ids):
        return ["mask.kv_segment_ids (only self-attention segments: one array for both sides, T == S)"]
    return []


def _self_segments(mask: AttentionMask | None, B: int) -> Array | None:
    """The [B, T] int32 segment ids of a self-attention mask, or None."""
    if mask is None:
        return None
    seg = mask.q_segment_ids if mask.q_segment_ids is not None else mask.kv_segment_ids
    if seg is None:
        return None
    seg = jnp.atleast_2d(jnp.asarray(seg)).astype(jnp.int32)
    return jnp.broadcast_to(seg, (B, seg.shape[-1]))


def _largest_block(n: int, cap: int, step: int) -> int | None:
    """The largest multiple of `step` that is <= cap and divides n (None if there is none)."""
    for b in range(min(cap, n) // step * step, 0, -step):
        if n % b == 0:
            return b
    return None


def _splash_blocks(T: int, S: int, block_size: int) -> tuple[int | None, int | None]:
    cap = max(block_size, SPLASH_LANES)
    return _largest_block(T, cap, SPLASH_LANES), _largest_block(S, cap, SPLASH_LANES)


def splash_problems(
    mask: AttentionMask | None, has_bias: bool, q_shape: tuple[int, ...], k_shape: tuple[int, ...], block_size: int
) -> list[str]:
    """What keeps `splash_attention` from running these inputs exactly ([] = it can)."""
    T, S = q_shape[1], k_shape[1]
    out = _data_problems(mask, has_bias) + _segment_problems(mask, T, S)
    if mask is not None and mask.window is not None and T != S:
        out.append(f"mask.window with T={T} != S={S} (splash windows are self-attention only)")
    bq, bkv = _splash_blocks(T, S, block_size)
    if bq is None or bkv is None:
        out.append(f"T={T}, S={S} (splash needs both to be multiples of {SPLASH_LANES})")
    return out


SPLASH_TAKES = "causal, window, self-attention segment ids"
PALLAS_GPU_TAKES = "causal, self-attention segment ids"


def refuse_problems(impl: str, problems: list[str], takes: str) -> None:
    """Raise a ValueError naming `problems` (the output of splash_problems / pallas_gpu_problems)."""
    if problems:
        raise ValueError(
            f"impl={impl!r} cannot take {'; '.join(problems)}: its masks are static ({takes}). "
            "Use impl='chunked', impl='xla' or impl='auto' (which falls back for such masks)"
        )


def _splash_kernel(H: int, T: int, S: int, causal: bool, window: int | None, bq: int, bkv: int, interpret: bool):
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    if window is not None:
        head_mask = sm.LocalMask((T, S), window_size=(window - 1, 0 if causal else window - 1), offset=0)
    elif causal:
        head_mask = sm.CausalMask((T, S))
    else:
        head_mask = sm.FullMask((T, S))
    blocks = sk.BlockSizes(
        block_q=bq,
        block_kv=bkv,
        block_kv_compute=bkv,
        block_q_dkv=bq,
        block_kv_dkv=bkv,
        block_kv_dkv_compute=bkv,
        block_q_dq=bq,
        block_kv_dq=bkv,
    )
    # Built in the trace that calls it: its mask tables become constants of that program (built
    # eagerly, they would run on the devices of the mesh in context, which a compile-only target lacks).
    return sk.make_splash_mha_single_device(sm.MultiHeadMask([head_mask] * H), block_sizes=blocks, interpret=interpret)


def splash_attention(
    q_BTHD: Float[Array, "B T H D"],
    k_BSKD: Float[Array, "B S K D"],
    v_BSKD: Float[Array, "B S K D"],
    *,
    mask: AttentionMask | None = None,
    bias: Array | None = None,
    scale: float | None = None,
    block_size: int = 512,
    interpret: bool = False,
) -> Float[Array, "B T H D"]:
    """TPU splash attention (jax.experimental.pallas.ops.tpu.splash_attention), vmapped over B.

    Takes causal, window (T == S) and self-attention segment ids; T and S must be multiples of
    128 (block: the largest multiple of 128 <= max(block_size, 128) dividing each)."""
    problems = splash_problems(mask, bias is not None, q_BTHD.shape, k_BSKD.shape, block_size)
    refuse_problems("splash", problems, SPLASH_TAKES)
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk

    T, S, D = q_BTHD.shape[1], k_BSKD.shape[1], q_BTHD.shape[-1]
    bq, bkv = _splash_blocks(T, S, block_size)
    assert bq is not None and bkv is not None
    causal = mask is not None and mask.causal
    window = None if mask is None else mask.window
    scale = 1.0 / D**0.5 if scale is None else scale

    def local(q_BTHD, k_BSKD, v_BSKD, seg_BT):  # one device's batch rows and heads
        kernel = _splash_kernel(q_BTHD.shape[2], T, S, causal, window, bq, bkv, interpret)
        q_BHTD = jnp.swapaxes(q_BTHD * jnp.asarray(scale, q_BTHD.dtype), 1, 2)
        k_BKSD, v_BKSD = jnp.swapaxes(k_BSKD, 1, 2), jnp.swapaxes(v_BSKD, 1, 2)

        def one(q_HTD, k_KSD, v_KSD, seg_T) -> Array:  # save_residuals=False: the kernel returns out only
            segments = None if seg_T is None else sk.SegmentIds(q=seg_T, kv=seg_T)
            return cast(Array, kernel(q_HTD, k_KSD, v_KSD, segment_ids=segments))

        return jnp.swapaxes(jax.vmap(one)(q_BHTD, k_BKSD, v_BKSD, seg_BT), 1, 2)

    operands = (q_BTHD, k_BSKD, v_BSKD, _self_segments(mask, q_BTHD.shape[0]))
    return per_shard(local, operands, (_BTHD, _BTHD, _BTHD, _BT), _BTHD)


def _pow2_block(n: int, cap: int) -> int | None:
    """The largest power of two in [16, cap] dividing n (None if there is none)."""
    b = 16
    while b * 2 <= cap and n % (b * 2) == 0:
        b *= 2
    return b if n % b == 0 and b <= cap else None


def pallas_gpu_problems(
    mask: AttentionMask | None, has_bias: bool, q_shape: tuple[int, ...], k_shape: tuple[int, ...], block_size: int
) -> list[str]:
    """What keeps `pallas_gpu_attention` from running these inputs exactly ([] = it can)."""
    T, S, D = q_shape[1], k_shape[1], q_shape[-1]
    out = _data_problems(mask, has_bias) + _segment_problems(mask, T, S)
    if mask is not None and mask.window is not None:
        out.append("mask.window (the Pallas GPU kernel has no sliding window; impl='cudnn' has a causal one)")
    if T != S:
        out.append(f"T={T} != S={S} (pallas_gpu is wired for self-attention only)")
    if _pow2_block(T, max(16, min(block_size, 128))) is None:
        out.append(f"T={T} (pallas_gpu needs T to be a multiple of 16)")
    if D & (D - 1):
        out.append(f"head dim D={D} (pallas_gpu needs a power of two)")
    return out


def pallas_gpu_attention(
    q_BTHD: Float[Array, "B T H D"],
    k_BSKD: Float[Array, "B S K D"],
    v_BSKD: Float[Array, "B S K D"],
    *,
    mask: AttentionMask | None = None,
    bias: Array | None = None,
    scale: float | None = None,
    block_size: int = 512,
    interpret: bool = False,
) -> Float[Array, "B T H D"]:
    """GPU flash attention (jax.experimental.pallas.ops.gpu.attention.mha, Triton), with backward.

    Takes causal and self-attention segment ids; T == S a multiple of 16, D a power of two. kv
    heads are repeated to H for GQA. Forward tiles: the largest power of two <= min(block_size,
    128) dividing T; backward tiles: min(that, 32)."""
    problems = pallas_gpu_problems(mask, bias is not None, q_BTHD.shape, k_BSKD.shape, block_size)
    refuse_problems("pallas_gpu", problems, PALLAS_GPU_TAKES)
    from jax.experimental.pallas.ops.gpu import attention as gpu_attention

    T, D = q_BTHD.shape[1], q_BTHD.shape[-1]
    G = q_BTHD.shape[2] // k_BSKD.shape[2]
    b = _pow2_block(T, max(16, min(block_size, 128)))
    assert b is not None
    bb = min(b, 32)
    blocks = gpu_attention.BlockSizes(
        block_q=b, block_k=b, block_q_dkv=bb, block_kv_dkv=bb, block_q_dq=bb, block_kv_dq=bb
    )
    causal = mask is not None and mask.causal
    sm_scale = float(1.0 / D**0.5 if scale is None else scale)

    def local(q_BTHD, k_BSKD, v_BSKD, seg_BT):  # one device's batch rows and heads
        k_BSHD, v_BSHD = jnp.repeat(k_BSKD, G, axis=2), jnp.repeat(v_BSKD, G, axis=2)
        return gpu_attention.mha(
            q_BTHD, k_BSHD, v_BSHD, seg_BT, sm_scale=sm_scale, causal=causal, block_sizes=blocks, interpret=interpret
        )

    operands = (q_BTHD, k_BSKD, v_BSKD, _self_segments(mask, q_BTHD.shape[0]))
    return per_shard(local, operands, (_BTHD, _BTHD, _BTHD, _BT), _BTHD)

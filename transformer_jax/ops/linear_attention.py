"""Kernelized linear attention (Katharopoulos et al. 2020, "Transformers are RNNs").

With the feature map phi(x) = elu(x) + 1 (positive), softmax(Q K^T) V is replaced by

    non-causal:  out_t = phi(q_t) (sum_s phi(k_s)^T v_s) / (phi(q_t) . sum_s phi(k_s))
    causal:      the same sums restricted to s <= t, i.e. an RNN with state
                 S_t = S_{t-1} + phi(k_t)^T v_t

The causal form is computed chunk by chunk: inside a chunk of C steps by a masked (C x C) product,
across chunks through a carried (D x Dv) state, so memory is O(T) in the sequence length.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float


def elu_feature_map(x: Float[Array, ...]) -> Float[Array, ...]:
    """phi(x) = elu(x) + 1 > 0."""
    return jax.nn.elu(x) + 1.0


def linear_attention(
    q_BTHD: Float[Array, "B T H D"],
    k_BSKD: Float[Array, "B S K D"],
    v_BSKE: Float[Array, "B S K E"],
    *,
    causal: bool = False,
    kv_valid: Bool[Array, "B|1 S"] | None = None,
    chunk_size: int = 64,
) -> Float[Array, "B T H E"]:
    """Linear attention with phi = elu + 1 and K kv heads shared by groups of H // K query heads.

    kv_valid (key padding) removes keys from both sums. causal=True needs T == S (query t sees
    keys 0..t). Rows whose sums are empty (all keys invalid) give 0.
    """
    B, T, H, D = q_BTHD.shape
    _, S, K, _ = k_BSKD.shape
    E = v_BSKE.shape[-1]
    if H % K or k_BSKD.shape[:3] != v_BSKE.shape[:3] or k_BSKD.shape[0] != B or k_BSKD.shape[-1] != D:
        raise ValueError(
            f"linear_attention: q {q_BTHD.shape}, k {k_BSKD.shape}, v {v_BSKE.shape} do not fit "
            "[B, T, H, D], [B, S, K, D], [B, S, K, E] with H % K == 0"
        )
    if chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size} must be >= 1")
    G = H // K
    fq = elu_feature_map(q_BTHD.astype(jnp.float32)).reshape(B, T, K, G, D)
    fk = elu_feature_map(k_BSKD.astype(jnp.float32))
    v = v_BSKE.astype(jnp.float32)
    if kv_valid is not None:
        fk = fk * jnp.atleast_2d(kv_valid).astype(jnp.float32)[:, :, None, None]
    if causal:
        if T != S:
            raise ValueError(f"linear_attention(causal=True) needs T == S, got T={T}, S={S}")
        num, den = _causal_sums(fq, fk, v, min(chunk_size, T))
    else:
        kv = jnp.einsum("bskd,bske->bkde", fk, v)
        num = jnp.einsum("btkgd,bkde->btkge", fq, kv)
        den = jnp.einsum("btkgd,bkd->btkg", fq, fk.sum(1))
    ok = den > 0
    out = jnp.where(ok[..., None], num / jnp.where(ok, den, 1.0)[..., None], 0.0)
    return out.reshape(B, T, H, E).astype(q_BTHD.dtype)


def _causal_sums(fq, fk, v, C: int):
    """Causal numerator [B, T, K, G, E] and denominator [B, T, K, G] by a scan over chunks."""
    B, T, K, G, D = fq.shape
    E = v.shape[-1]
    Tp = -(-T // C) * C
    n = Tp // C

    def chunks(x):
        x = jnp.pad(x, [(0, 0), (0, Tp - T)] + [(0, 0)] * (x.ndim - 2))
        return jnp.moveaxis(x.reshape(B, n, C, *x.shape[2:]), 1, 0)

    tri = jnp.tril(jnp.ones((C, C), jnp.float32))

    def step(carry, xs):
        state, z = carry  # [B, K, D, E], [B, K, D]
        q_c, k_c, v_c = xs
        a = jnp.einsum("bqkgd,bskd->bkgqs", q_c, k_c) * tri
        num = jnp.einsum("bkgqs,bske->bqkge", a, v_c) + jnp.einsum("bqkgd,bkde->bqkge", q_c, state)
        den = jnp.einsum("bkgqs->bqkg", a) + jnp.einsum("bqkgd,bkd->bqkg", q_c, z)
        state = state + jnp.einsum("bskd,bske->bkde", k_c, v_c)
        return (state, z + k_c.sum(1)), (num, den)

    init = (jnp.zeros((B, K, D, E), jnp.float32), jnp.zeros((B, K, D), jnp.float32))
    _, (num, den) = jax.lax.scan(step, init, (chunks(fq), chunks(fk), chunks(v)))

    def unchunk(x):
        return jnp.moveaxis(x, 0, 1).reshape(B, Tp, *x.shape[3:])[:, :T]

    return unchunk(num), unchunk(den)

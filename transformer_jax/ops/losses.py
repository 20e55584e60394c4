"""Token-level cross-entropy with label smoothing and z-loss, and helpers to average it.

Everything is computed in float32 whatever the logits dtype. Losses come back as *sums* over
weighted tokens so they can be accumulated across micro-batches and devices, then divided once
with ``token_weighted_mean``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int


def z_loss(logits: Float[Array, "... V"]) -> Float[Array, ...]:
    """Per-token ``logsumexp(logits)^2`` (PaLM's auxiliary z-loss, before its coefficient)."""
    return jnp.square(jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1))


def cross_entropy(
    logits_BTV: Float[Array, "B T V"],
    targets_BT: Int[Array, "B T"],
    *,
    weights_BT: Float[Array, "B T"] | None = None,
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
    groups_B: Int[Array, " B"] | None = None,
    n_groups: int = 0,
) -> dict[str, Float[Array, "..."]]:
    """Weighted token cross-entropy, returned as float32 scalar sums.

    With ``lse = logsumexp(logits)``, ``nll = lse - logits[target]`` and smoothing ``eps``
    (Szegedy et al. 2016; Vaswani et al. 2017), the per-token objective is
    ``(1 - eps) * nll + eps * (lse - mean_v logits_v)``, i.e. the cross-entropy against
    ``(1 - eps) * onehot + eps / V`` (not shifted by the target's entropy), plus
    ``z_loss * lse^2`` (PaLM).

    Returns ``loss_sum`` (the objective to differentiate), ``nll_sum`` (unsmoothed negative
    log-likelihood), ``z_loss_sum`` (included in ``loss_sum``), ``correct_sum`` (argmax hits) and
    ``weight_sum``, each summed over tokens weighted by ``weights_BT`` (default 1; 0 excludes
    padding). A target outside ``[0, V)`` (e.g. -1 or -100 padding) is treated as weight 0, like
    PyTorch's ``ignore_index``: it never produces NaN and is not counted in ``weight_sum``. Callers
    should still mark padding with weight 0 explicitly.

    With ``groups_B`` (each row's group in ``[0, n_groups)``, e.g. its data source), also
    ``nll_sum_by_group`` and ``weight_sum_by_group`` [n_groups]: the row sums of ``nll * w`` and
    ``w`` added per group (a segment sum; a fixed size, so jit-friendly).
    """
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing={label_smoothing} must be in [0, 1)")
    if z_loss < 0.0:
        raise ValueError(f"z_loss={z_loss} must be >= 0 (PaLM used 1e-4)")
    if logits_BTV.shape[:-1] != targets_BT.shape:
        raise ValueError(
            f"logits_BTV shape {logits_BTV.shape} does not match targets_BT shape "
            f"{targets_BT.shape}; expected logits = targets.shape + (V,)"
        )
    vocab = logits_BTV.shape[-1]
    logits = logits_BTV.astype(jnp.float32)
    valid = (targets_BT >= 0) & (targets_BT < vocab)
    w = jnp.ones(targets_BT.shape) if weights_BT is None else weights_BT
    w = jnp.where(valid, w.astype(jnp.float32), 0.0)

    safe_targets = jnp.where(valid, targets_BT, 0)
    lse = jax.nn.logsumexp(logits, axis=-1)
    target_logit = jnp.take_along_axis(logits, safe_targets[..., None], axis=-1)[..., 0]
    nll = lse - target_logit
    smoothed = (1.0 - label_smoothing) * nll + label_smoothing * (lse - jnp.mean(logits, axis=-1))
    z = z_loss * jnp.square(lse)
    correct = (jnp.argmax(logits, axis=-1) == targets_BT).astype(jnp.float32)

    def wsum(v):
        return jnp.sum(jnp.where(w != 0, v * w, 0.0))

    out = {
        "loss_sum": wsum(smoothed + z),
        "nll_sum": wsum(nll),
        "z_loss_sum": wsum(z),
        "correct_sum": wsum(correct),
        "weight_sum": jnp.sum(w),
    }
    if groups_B is not None:
        row_nll_B = jnp.sum(jnp.where(w != 0, nll * w, 0.0), axis=tuple(range(1, w.ndim)))
        row_weight_B = jnp.sum(w, axis=tuple(range(1, w.ndim)))
        out["nll_sum_by_group"] = jax.ops.segment_sum(row_nll_B, groups_B, num_segments=n_groups)
        out["weight_sum_by_group"] = jax.ops.segment_sum(row_weight_B, groups_B, num_segments=n_groups)
    return out


def token_weighted_mean(total: Array, weight_sum: Array) -> Array:
    """``total / weight_sum``, and 0 (not NaN) when ``weight_sum == 0``."""
    total = jnp.asarray(total, jnp.float32)
    weight_sum = jnp.asarray(weight_sum, jnp.float32)
    nonzero = weight_sum != 0
    return jnp.where(nonzero, total / jnp.where(nonzero, weight_sum, 1.0), 0.0)


def perplexity(mean_nll: Array) -> Array:
    """``exp(mean_nll)``, ``mean_nll`` being the token-weighted mean NLL in nats."""
    return jnp.exp(jnp.asarray(mean_nll, jnp.float32))


def mtp_nll_sums(
    logits_DBTV: tuple[Float[Array, "B T V"], ...] | Float[Array, "D B T V"],
    targets_BT: Int[Array, "B T"],
    weights_BT: Float[Array, "B T"],
    segment_ids_BT: Int[Array, "B T"] | None = None,
) -> tuple[Float[Array, " D"], Float[Array, " D"]]:
    """Per-depth NLL and weight sums of multi-token prediction (DeepSeek-V3 section 2.2).

    Depth k (1..D) at position i predicts the target k places further, ``targets[:, i + k]``, with
    weight ``weights[:, i + k]``, counted only if i + k < T and (packed rows) position i + k lies
    in i's segment. Returns ``(nll_sum_D, weight_sum_D)``; the paper's loss is
    ``lambda / D * sum_k nll_sum[k] / N`` with N the main loss's target count.
    """
    T = targets_BT.shape[1]
    nll, weight = [], []
    for k, logits_BTV in enumerate(logits_DBTV, start=1):
        pad = ((0, 0), (0, min(k, T)))
        target_k = jnp.pad(targets_BT[:, k:], pad)[:, :T]
        weight_k = jnp.pad(weights_BT[:, k:].astype(jnp.float32), pad)[:, :T]
        if segment_ids_BT is not None:
            same = jnp.pad(segment_ids_BT[:, k:], pad, constant_values=-1)[:, :T] == segment_ids_BT
            weight_k = jnp.where(same, weight_k, 0.0)
        ce = cross_entropy(logits_BTV, target_k, weights_BT=weight_k)
        nll.append(ce["nll_sum"])
        weight.append(ce["weight_sum"])
    return jnp.stack(nll), jnp.stack(weight)

"""Beam search (Sutskever et al. 2014; Wu et al. 2016 length penalty) over a KV cache, inside
``jax.jit`` as one ``lax.while_loop``; shared by both model families.

Each row keeps W alive hypotheses (cumulative log-probabilities of the new tokens) and the W
best finished ones. At every step the 2W best one-token extensions of the alive beams are
taken: those ending in EOS (or reaching ``max_new_tokens``) are scored
``log P(Y) / lp(|Y|)`` with the GNMT penalty ``lp(n) = ((5 + n) / 6) ** alpha`` (|Y| counts the
EOS) and merged into the finished set; the W best others stay alive, and the cache rows follow
their parents. A row stops when no alive beam can still beat its W-th finished hypothesis (an
alive beam's score can at best reach ``logP / lp(max_new_tokens)``) or at the length limit.
Prompts are right-padded as in ``decode.loop``: slots inside a row's prompt are forced, with
only the first of its W (identical) beams alive, so W distinct hypotheses start after it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from transformer_jax.core.tokens import PAD_ID
from transformer_jax.decode.loop import Step, new_tokens

NEG = -1.0e9  # "impossible" score; finite, so sums and differences stay well defined


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class BeamOutput:
    """n-best lists, best first: ``tokens[b, i]`` the new tokens of hypothesis i (with its EOS,
    then ``PAD_ID``), ``lengths`` how many are real, ``scores`` the length-normalised
    log-probabilities, ``log_probs`` the raw sums, ``sequences`` prompt + new tokens."""

    tokens: Int[Array, "B W N"]
    lengths: Int[Array, "B W"]
    scores: Float[Array, "B W"]
    log_probs: Float[Array, "B W"]
    sequences: Int[Array, "B W L"]


def length_penalty(n: Array, alpha: float) -> Array:
    """GNMT's ``((5 + n) / 6) ** alpha`` (Wu et al. 2016, eq. 14); 1 when alpha = 0."""
    return ((5.0 + n.astype(jnp.float32)) / 6.0) ** alpha


def _take(x_BK, idx_BJ):
    """x[b, idx[b, j], ...] for x of shape [B, K, ...]."""
    idx = idx_BJ.reshape(idx_BJ.shape + (1,) * (x_BK.ndim - 2))
    return jnp.take_along_axis(x_BK, idx, axis=1)


def beam_loop(
    step: Step,
    cache,
    first_logits_BV: Float[Array, "B V"],
    seq_BL: Int[Array, "B L"],
    lengths_B: Int[Array, " B"],
    *,
    start: int,
    beam_size: int,
    max_new_tokens: int,
    alpha: float,
    eos_id: int | None,
    reorder: Callable[[object, Int[Array, " R"]], object],
) -> BeamOutput:
    """``step`` and ``cache`` work on B*W rows (row b*W + i is beam i of b, the cache already
    repeated); ``first_logits_BV`` are the prefill's last logits of the B prompts; ``reorder(cache,
    rows_R)`` moves cache row ``rows_R[r]`` to r."""
    B, L = seq_BL.shape
    W, N = beam_size, max_new_tokens
    V = first_logits_BV.shape[-1]
    if V < 2:
        raise ValueError(f"beam search needs a vocabulary of at least 2 tokens (got {V})")
    if alpha < 0:
        raise ValueError(f"alpha={alpha} must be >= 0 (0: plain summed log-probabilities; GNMT used 0.6-1.0)")
    lengths_B = lengths_B.astype(jnp.int32)
    final_lp = length_penalty(jnp.asarray(N), alpha)
    state = dict(
        seqs=jnp.broadcast_to(seq_BL[:, None], (B, W, L)),
        logp=jnp.tile(jnp.asarray([0.0] + [NEG] * (W - 1), jnp.float32), (B, 1)),
        fin_seqs=jnp.broadcast_to(seq_BL[:, None], (B, W, L)),
        fin_scores=jnp.full((B, W), NEG, jnp.float32),
        fin_logp=jnp.full((B, W), NEG, jnp.float32),
        fin_len=jnp.zeros((B, W), jnp.int32),
        done=jnp.zeros((B,), bool),
    )

    def choose(t, logits_RV, s):
        logp_BWV = jax.nn.log_softmax(logits_RV.astype(jnp.float32), axis=-1).reshape(B, W, V)
        n_B = t - lengths_B + 1  # new tokens once slot t is filled
        forced = t < lengths_B
        active = ~forced & ~s["done"]
        top, idx = jax.lax.top_k((s["logp"][:, :, None] + logp_BWV).reshape(B, W * V), 2 * W)
        parent, tok = idx // V, (idx % V).astype(jnp.int32)
        cand = _take(s["seqs"], parent)
        cand = jax.lax.dynamic_update_slice_in_dim(cand, tok[:, :, None], t, axis=2)
        is_eos = jnp.zeros_like(tok, bool) if eos_id is None else tok == eos_id
        ends = (is_eos | (n_B >= N)[:, None]) & active[:, None]
        fin_cand = jnp.where(ends, top / length_penalty(n_B, alpha)[:, None], NEG)
        f_scores, f_idx = jax.lax.top_k(jnp.concatenate([s["fin_scores"], fin_cand], axis=1), W)
        pool = lambda old, new: _take(jnp.concatenate([old, new], axis=1), f_idx)
        n_2W = jnp.broadcast_to(n_B[:, None], (B, 2 * W))
        alive_logp, a_idx = jax.lax.top_k(jnp.where(is_eos, NEG, top), W)
        keep = forced[:, None]
        new = dict(
            seqs=jnp.where(keep[:, :, None], s["seqs"], _take(cand, a_idx)),
            logp=jnp.where(keep, s["logp"], alive_logp),
            fin_seqs=pool(s["fin_seqs"], cand),
            fin_scores=f_scores,
            fin_logp=pool(s["fin_logp"], jnp.where(ends, top, NEG)),
            fin_len=pool(s["fin_len"], n_2W),
        )
        best_possible = new["logp"][:, 0] / final_lp
        new["done"] = s["done"] | (active & ((n_B >= N) | (f_scores[:, -1] >= best_possible)))
        parents = jnp.where(keep, jnp.arange(W), _take(parent, a_idx))
        rows = (jnp.arange(B)[:, None] * W + parents).reshape(-1)
        return new, rows

    def feed(s, t):
        return jax.lax.dynamic_index_in_dim(s["seqs"], t, axis=2, keepdims=False).reshape(B * W, 1)

    t0 = jnp.int32(start)
    state, rows = choose(t0, jnp.repeat(first_logits_BV, W, axis=0), state)
    cache = reorder(cache, rows)

    def cond(carry):
        t, _, s = carry
        return (t + 1 < L) & ~jnp.all(s["done"])

    def body(carry):
        t, cache, s = carry
        logits, cache = step(feed(s, t), cache)
        s, rows = choose(t + 1, logits, s)
        return t + 1, reorder(cache, rows), s

    _, _, s = jax.lax.while_loop(cond, body, (t0, cache, state))
    n_BW = s["fin_len"]
    tokens = new_tokens(s["fin_seqs"].reshape(B * W, L), jnp.repeat(lengths_B, W), n_BW.reshape(-1), N)
    seqs = jnp.where(jnp.arange(L) < (lengths_B[:, None, None] + n_BW[:, :, None]), s["fin_seqs"], PAD_ID)
    return BeamOutput(
        tokens=tokens.reshape(B, W, N), lengths=n_BW, scores=s["fin_scores"], log_probs=s["fin_logp"], sequences=seqs
    )

"""Speculative greedy decoding with the model's own multi-token prediction modules as the draft
(DeepSeek-V3 section 2.2; ``model.mtp``), the whole loop inside ``jax.jit``.

State before each step: tokens x_0..x_p are final (x_p chosen, not yet in the main KV cache,
which holds slots [0, p)); the D MTP modules have drafted d_1..d_D for positions p+1..p+D.

1. **Verify**: one cached forward of the main model over [x_p, d_1, .., d_D] (slots p..p+D)
   gives greedy tokens g_0..g_D (g_i for position p+i+1). Accept the longest prefix with
   d_i = g_{i-1}: n in [0, D] (the minimum over the batch rows still decoding), then commit
   d_1..d_n and the bonus token g_n: n + 1 tokens, each one plain greedy decoding would have
   chosen, since each was checked against the main model's argmax given the committed prefix.
2. **Roll back**: the main cache's fill index is set to p' = p + n + 1 (`decode.cache.rewind`);
   the slots of rejected drafts are overwritten by the next verify before anything reads them.
3. **Draft**: module k at position j reads h^{k-1}_j and Emb(x_{j+k}), so its cache entry is
   exact once x_{j+k} is final. Each module recomputes the window of W = D + 1 slots
   [p' - W, p'), which covers every entry that used a draft token (those after p' - D - 1),
   and drafts d_k from its logits at p' - 1, feeding d_k to module k + 1 as Emb(x_{p'+k}).

Cost per step: the main model over D + 1 tokens and each module over D + 1 tokens; at best
D + 1 tokens per step. Prompts must have one length (no ragged batch: the caches' fill index is
shared by the rows). Output equals `decode.generate`'s greedy tokens, up to the rounding of a
(D + 1)-token cached forward against 1-token ones in a near-tie of two logits.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Int

from transformer_jax.core import compiler
from transformer_jax.core.tokens import PAD_ID
from transformer_jax.decode.cache import rewind
from transformer_jax.decode.loop import as_graph, check_length, merge, new_tokens, set_column
from transformer_jax.models.decoder_lm import DecoderLM


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SpeculativeGeneration:
    """``tokens``/``lengths``/``sequences`` as `decode.loop.Generation`; ``steps``: verify passes
    (prefill not counted); ``accepted``: draft tokens accepted over all steps (batch-common), so
    the acceptance rate is ``accepted / (steps * depth)`` and tokens per step ``1 + accepted / steps``."""

    tokens: Int[Array, "B N"]
    lengths: Int[Array, " B"]
    sequences: Int[Array, "B L"]
    steps: Int[Array, ""]
    accepted: Int[Array, ""]


def _positions(cfg, start, T: int, B: int):
    """Slot indices start..start+T-1; a learned table's positions clamped to its last row (only
    uncommitted draft slots go past it, and ``jnp.take`` would fill them with NaN)."""
    pos_BT = jnp.broadcast_to(start + jnp.arange(T, dtype=jnp.int32), (B, T))
    return jnp.minimum(pos_BT, cfg.dims.max_len - 1) if cfg.position.kind == "learned" else pos_BT


def _draft(model, h_BCD, seq_BC, caches, p, s, width: int):
    """Every MTP module over slots [s, s + width): caches rewound to s and rewritten; returns the
    drafts [B, D] for positions p+1..p+D (module k's argmax at slot p - 1) and the caches."""
    B = seq_BC.shape[0]
    h_BWD = jax.lax.dynamic_slice_in_dim(h_BCD, s, width, axis=1)
    inputs = model.block_inputs(B, width, s, caches[0], _positions(model.cfg, s, width, B))
    ext_BC, drafts, out = seq_BC, [], []
    for k, layer in enumerate(model.mtp.layers, start=1):
        tok_BW = jax.lax.dynamic_slice_in_dim(ext_BC, s + k, width, axis=1)  # x_{j+k}, drafts past p
        h_BWD, cache = layer(h_BWD, model.embed(tok_BW), inputs, cache=rewind(caches[k - 1], s))
        last_B1D = jax.lax.dynamic_slice_in_dim(h_BWD, p - 1 - s, 1, axis=1)
        d_B = jnp.argmax(model.head(last_B1D, layer.final_norm)[:, 0], axis=-1).astype(jnp.int32)
        ext_BC = set_column(ext_BC, p + k, d_B)
        drafts.append(d_B)
        out.append(cache)
    return jnp.stack(drafts, axis=1), out


@functools.partial(compiler.jit, static_argnames=("graphdef", "max_new_tokens", "eos_id"))
def _speculate(graphdef, params, prompt_BP, *, max_new_tokens: int, eos_id: int | None):
    model = merge(graphdef, params)
    D = model.mtp.depth
    W = D + 1
    B, P = prompt_BP.shape
    L = P + max_new_tokens
    C = L + 2 * D + 2  # room for the last verify (slots up to L + D) and draft windows past it
    seq_BC = jnp.zeros((B, C), jnp.int32).at[:, :P].set(prompt_BP)
    logits_BPV, aux = model(prompt_BP, cache=model.init_cache(B, C), positions_BT=_positions(model.cfg, 0, P, B))
    h_BCD = jnp.zeros((B, C, model.cfg.dims.d_model), aux["last_hidden"].dtype).at[:, :P].set(aux["last_hidden"])
    seq_BC = set_column(seq_BC, P, jnp.argmax(logits_BPV[:, -1], axis=-1))
    drafts_BD, mtp_caches = _draft(model, h_BCD, seq_BC, model.mtp.init_cache(B, C), P, 0, P)
    slot_C = jnp.arange(C)

    def finished(seq_BC, p):
        """Rows with max_new_tokens final tokens, or an EOS among them."""
        done_B = jnp.broadcast_to(p - P + 1 >= max_new_tokens, (B,))
        if eos_id is not None:
            final_C = (slot_C >= P) & (slot_C <= p) & (slot_C < L)
            done_B = done_B | jnp.any(final_C & (seq_BC == eos_id), axis=1)
        return done_B

    def body(carry):
        p, seq_BC, h_BCD, cache, mtp_caches, drafts_BD, done_B, steps, accepted = carry
        tokens_BW = jnp.concatenate([jax.lax.dynamic_slice_in_dim(seq_BC, p, 1, axis=1), drafts_BD], axis=1)
        logits_BWV, aux = model(tokens_BW, cache=cache, positions_BT=_positions(model.cfg, p, W, B))
        g_BW = jnp.argmax(logits_BWV, axis=-1).astype(jnp.int32)
        n_B = jnp.sum(jnp.cumprod(drafts_BD == g_BW[:, :D], axis=1), axis=1)
        n = jnp.min(jnp.where(done_B, D, n_B)).astype(jnp.int32)
        seq_BC = jax.lax.dynamic_update_slice_in_dim(seq_BC, g_BW, p + 1, axis=1)  # final up to p + n + 1
        h_BCD = jax.lax.dynamic_update_slice_in_dim(h_BCD, aux["last_hidden"].astype(h_BCD.dtype), p, axis=1)
        p = p + n + 1
        cache = rewind(aux["cache"], p)
        drafts_BD, mtp_caches = _draft(model, h_BCD, seq_BC, mtp_caches, p, jnp.maximum(p - W, 0), W)
        return p, seq_BC, h_BCD, cache, mtp_caches, drafts_BD, finished(seq_BC, p), steps + 1, accepted + n

    p0 = jnp.int32(P)
    zero = jnp.zeros((), jnp.int32)
    carry = (p0, seq_BC, h_BCD, aux["cache"], mtp_caches, drafts_BD, finished(seq_BC, p0), zero, zero)
    p, seq_BC, *_, steps, accepted = jax.lax.while_loop(lambda c: ~jnp.all(c[6]), body, carry)
    n_new_B = jnp.full((B,), jnp.minimum(p - P + 1, max_new_tokens), jnp.int32)
    if eos_id is not None:
        new_BN = jax.lax.dynamic_slice_in_dim(seq_BC, P, max_new_tokens, axis=1)
        first_B = jnp.argmax(new_BN == eos_id, axis=1) + 1
        n_new_B = jnp.where(jnp.any(new_BN == eos_id, axis=1), jnp.minimum(first_B, n_new_B), n_new_B)
    lengths_B = jnp.full((B,), P, jnp.int32)
    tokens_BN = new_tokens(seq_BC, lengths_B, n_new_B, max_new_tokens)
    sequences_BL = jnp.where(slot_C[None, :L] < P + n_new_B[:, None], seq_BC[:, :L], PAD_ID)
    return SpeculativeGeneration(tokens_BN, n_new_B, sequences_BL, steps, accepted)


def speculative_generate(
    model_or_graphdef,
    params=None,
    *,
    prompt_BP: Int[ArrayLike, "B P"],
    max_new_tokens: int,
    eos_id: int | None = None,
) -> SpeculativeGeneration:
    """Greedy decoding of up to ``max_new_tokens`` tokens per prompt (fewer after ``eos_id``) with
    the model's MTP modules drafting ``model.mtp.depth`` tokens per step (module docstring).
    ``model_or_graphdef``: a DecoderLM built with ``model.mtp``, or its graphdef with its state(s).
    Prompts share one length P; the tokens equal ``generate(..., sampling=greedy)``'s."""
    graphdef, params = as_graph(model_or_graphdef, params)
    model = merge(graphdef, params)
    cfg = model.cfg if isinstance(model, DecoderLM) else None
    if cfg is None or cfg.mtp is None:
        raise ValueError(
            "speculative decoding drafts with the model's multi-token prediction modules; this model has "
            "none (train one with --set model.mtp=on)"
        )
    prompt = np.asarray(prompt_BP, np.int32)
    if prompt.ndim != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt_BP has shape {prompt.shape}; expected [batch, length >= 1] (one length)")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 1")
    check_length(cfg, prompt.shape[1] + max_new_tokens, "prompt length + max_new_tokens")
    return _speculate(graphdef, params, jnp.asarray(prompt), max_new_tokens=max_new_tokens, eos_id=eos_id)

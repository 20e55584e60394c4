"""The sampling loop shared by both model families, run inside ``jax.jit`` as one
``lax.while_loop`` over a preallocated KV cache.

Batches of prompts of different lengths are **right-padded**: row b's prompt is
``seq_BL[b, :lengths_B[b]]``. The caller prefills the first ``start = min(lengths)`` tokens in
one pass (every row has them); the loop then feeds one token per step at the shared cache slot
t, which is the token's position in every row. At a slot still inside row b's prompt the
prompt token is forced (its sampled token is discarded), after it the chosen token is kept. So
no padding ever enters a cache, positions (RoPE, learned, sinusoidal) are the slot indices,
and the only cost of ragged prompts is that their tail after ``start`` goes through the loop
one token at a time. (Left padding would let the whole prompt prefill at once, but the models'
cached attention has no per-row ``kv_valid`` to hide the padding slots.)
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from transformer_jax.core.tokens import PAD_ID
from transformer_jax.decode.strategies import SamplingConfig

# step(tokens_B1, cache) -> (logits_BV of the next position, cache)
Step = Callable[[Int[Array, "B 1"], object], tuple[Float[Array, "B V"], object]]


@typing.runtime_checkable
class CachedLM(typing.Protocol):
    """What `generate` and `beam_search` need of a decoder-only model (an ``nnx.Module``; the
    package's ``DecoderLM`` is one): ``init_cache(batch, max_len)`` returns the empty cache (any
    pytree; arrays with a batch axis hold it first, except our models' own KV caches), and
    ``model(tokens_BT, cache=cache)`` returns ``(logits_BTV, {"cache": cache})`` for tokens written
    at the cache's next ``T`` positions. An optional ``cfg`` lets decoding check learned positions."""

    def init_cache(self, batch: int, max_len: int) -> typing.Any: ...

    def __call__(self, tokens_BT: Int[Array, "B T"], *, cache: typing.Any) -> tuple[Float[Array, "B T V"], dict]: ...


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Generation:
    """``tokens``: the new tokens of each row (an EOS included), then ``PAD_ID``;
    ``lengths``: how many are real; ``sequences``: prompt + new tokens, right-padded;
    ``logits`` (when asked): ``logits[b, t]`` is the distribution the model gave for token t of
    ``sequences[b]`` (t >= 1; t = 0 is zero)."""

    tokens: Int[Array, "B N"]
    lengths: Int[Array, " B"]
    sequences: Int[Array, "B L"]
    logits: Float[Array, "B L V"] | None = None


def set_column(x_BL: Array, t, col_B: Array) -> Array:
    """``x[:, t] = col`` for a traced t."""
    return jax.lax.dynamic_update_slice_in_dim(x_BL, col_B[:, None].astype(x_BL.dtype), t, axis=1)


def new_tokens(
    seq_BL: Int[Array, "B L"], lengths_B: Int[Array, " B"], n_new_B: Int[Array, " B"], max_new_tokens: int
) -> Int[Array, "B N"]:
    """``seq[b, lengths[b] : lengths[b] + n_new[b]]`` left-aligned in N columns, PAD after."""
    i_N = jnp.arange(max_new_tokens)
    idx_BN = jnp.minimum(lengths_B[:, None] + i_N, seq_BL.shape[1] - 1)
    out = jnp.take_along_axis(seq_BL, idx_BN, axis=1)
    return jnp.where(i_N < n_new_B[:, None], out, PAD_ID)


def sample_loop(
    step: Step,
    cache,
    first_logits_BV: Float[Array, "B V"],
    seq_BL: Int[Array, "B L"],
    lengths_B: Int[Array, " B"],
    *,
    start: int,
    max_new_tokens: int,
    key: jax.Array,
    sampling: SamplingConfig,
    eos_id: int | None,
    prefill_logits_BTV=None,
    return_logits: bool = False,
) -> Generation:
    """Chooses token ``start`` from ``first_logits_BV`` (the prefill's last logits), then feeds
    each chosen token through ``step`` until every row has ``max_new_tokens`` new tokens or an
    EOS. The token at slot t is drawn with ``fold_in(key, t)``."""
    B, L = seq_BL.shape
    V = first_logits_BV.shape[-1]
    lengths_B = lengths_B.astype(jnp.int32)
    record = None
    if return_logits:
        record = jnp.zeros((B, L, V), jnp.float32)
        if prefill_logits_BTV is not None and start > 1:
            record = record.at[:, 1:start].set(prefill_logits_BTV[:, :-1].astype(jnp.float32))

    def choose(t, logits_BV, seq, done, n_new, record):
        sampled = sampling.pick(logits_BV, jax.random.fold_in(key, t))
        forced = t < lengths_B
        tok = jnp.where(forced, seq[:, t], jnp.where(done, PAD_ID, sampled))
        n_new = n_new + (~forced & ~done)
        ended = n_new >= max_new_tokens
        if eos_id is not None:
            ended = ended | (tok == eos_id)
        done = done | (~forced & ended)
        if record is not None:
            record = jax.lax.dynamic_update_slice_in_dim(record, logits_BV[:, None].astype(jnp.float32), t, axis=1)
        return set_column(seq, t, tok), tok, done, n_new, record

    t0 = jnp.int32(start)
    zeros = jnp.zeros((B,), jnp.int32)
    seq, tok, done, n_new, record = choose(t0, first_logits_BV, seq_BL, jnp.zeros((B,), bool), zeros, record)

    def cond(carry):
        t, _, _, _, done, _, _ = carry
        return (t + 1 < L) & ~jnp.all(done)

    def body(carry):
        t, seq, tok, cache, done, n_new, record = carry
        logits_BV, cache = step(tok[:, None], cache)
        seq, tok, done, n_new, record = choose(t + 1, logits_BV, seq, done, n_new, record)
        return t + 1, seq, tok, cache, done, n_new, record

    carry = (t0, seq, tok, cache, done, n_new, record)
    _, seq, _, _, _, n_new, record = jax.lax.while_loop(cond, body, carry)
    return Generation(
        tokens=new_tokens(seq, lengths_B, n_new, max_new_tokens), lengths=n_new, sequences=seq, logits=record
    )


def as_graph(model_or_graphdef, params):
    """(graphdef, params): a module is split; a graphdef comes with its state(s) (one state, or a
    tuple such as ``(params, model_state)`` of a TrainState)."""
    if params is None:
        from flax import nnx

        model = model_or_graphdef
        if not isinstance(model, nnx.Module) or not isinstance(model, CachedLM):
            raise TypeError(
                f"decoding takes an nnx.Module with init_cache(batch, max_len) and "
                f"__call__(tokens_BT, cache=...) -> (logits_BTV, {{'cache': ...}}) (decode.loop.CachedLM), "
                f"or a graphdef with its params; got {type(model).__name__}"
            )
        graphdef, *states = nnx.split(model)
        return graphdef, tuple(states)
    return model_or_graphdef, params


def merge(graphdef, params):
    from flax import nnx

    return nnx.merge(graphdef, *params) if isinstance(params, tuple) else nnx.merge(graphdef, params)


def check_length(cfg, length: int, what: str) -> None:
    """Learned position tables (of the Transformer kinds) end at ``model.dims.max_len``; a model of
    another project (``cfg`` None or not ours) is trusted with its own lengths."""
    if getattr(cfg, "position", None) is None:
        return
    if cfg.kind in ("decoder_lm", "encoder_decoder") and cfg.position.kind == "learned" and length > cfg.dims.max_len:
        raise ValueError(
            f"{what}: decoding needs {length} positions but model.dims.max_len={cfg.dims.max_len} (a learned "
            "position table); lower max_new_tokens or shorten the prompt"
        )

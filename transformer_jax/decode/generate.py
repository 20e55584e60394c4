"""Autoregressive generation for DecoderLM with a KV cache, the whole loop inside ``jax.jit``.

The prompt is prefilled in one pass; each further step feeds one token and appends its keys and
values to the preallocated cache, so step t costs O(t) attention instead of recomputing O(t^2).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Int

from transformer_jax.decode.strategies import SamplingConfig, pick


@functools.partial(jax.jit, static_argnames=("graphdef", "max_new_tokens", "sampling", "eos_id"))
def _generate(graphdef, params, prompt_BP, key, *, max_new_tokens: int, sampling: SamplingConfig,
              eos_id: int | None):
    model = nnx.merge(graphdef, *params) if isinstance(params, tuple) else nnx.merge(graphdef, params)
    B, P = prompt_BP.shape
    logits, aux = model(prompt_BP, cache=model.init_cache(B, P + max_new_tokens))
    first = pick(logits[:, -1], jax.random.fold_in(key, 0), sampling)
    out = jnp.zeros((B, max_new_tokens), jnp.int32).at[:, 0].set(first)
    done = jnp.zeros((B,), bool) if eos_id is None else first == eos_id

    def cond(carry):
        i, _, _, _, done = carry
        return (i < max_new_tokens) & ~jnp.all(done)

    def body(carry):
        i, out, cache, last, done = carry
        logits, aux = model(last[:, None], cache=cache)
        nxt = pick(logits[:, 0], jax.random.fold_in(key, i), sampling)
        if eos_id is not None:
            nxt = jnp.where(done, eos_id, nxt)
            done = done | (nxt == eos_id)
        return i + 1, out.at[:, i].set(nxt), aux["cache"], nxt, done

    n, out, _, _, _ = jax.lax.while_loop(cond, body, (jnp.int32(1), out, aux["cache"], first, done))
    return out, n


def generate(model_or_graphdef, params=None, *, prompt_BP: Int[Array, "B P"], max_new_tokens: int,
             key: jax.Array | None = None, sampling: SamplingConfig = SamplingConfig(),
             eos_id: int | None = None) -> Int[Array, "B N"]:
    """``max_new_tokens`` continuations of equal-length prompts (after EOS: EOS repeated).

    Pass a DecoderLM, or a graphdef and its state(s): ``params`` may be one state or a tuple
    ``(params, model_state)`` as in a TrainState.
    """
    if params is None:
        graphdef, *states = nnx.split(model_or_graphdef)
        params = tuple(states)
    else:
        graphdef = model_or_graphdef
    key = jax.random.key(0) if key is None else key
    out, _ = _generate(graphdef, params, jnp.asarray(prompt_BP, jnp.int32), key, max_new_tokens=max_new_tokens,
                       sampling=sampling, eos_id=eos_id)
    return out

"""`generate` and `beam_search` on a model written the way another project would write one: an
nnx.Module with its own cache layout that knows nothing of this package (`decode.loop.CachedLM`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from transformer_jax.decode import CachedLM, TopK, beam_search, generate

V, D = 11, 8


class TinyLM(nnx.Module):
    """h_t = tanh(a * h_{t-1} + E[x_t]); logits_t = h_t W. Its cache is the last state and the
    number of tokens seen, batch first."""

    def __init__(self, rngs: nnx.Rngs):
        self.embed = nnx.Embed(V, D, rngs=rngs)
        self.out = nnx.Linear(D, V, rngs=rngs)
        self.decay = nnx.Param(jnp.full((D,), 0.7))

    def init_cache(self, batch: int, max_len: int):
        return {"h": jnp.zeros((batch, D)), "seen": jnp.zeros((batch,), jnp.int32)}

    def __call__(self, tokens_BT, *, cache):
        def step(h_BD, x_BD):
            h_BD = jnp.tanh(self.decay[...] * h_BD + x_BD)
            return h_BD, h_BD

        h_BD, hs_TBD = jax.lax.scan(step, cache["h"], jnp.swapaxes(self.embed(tokens_BT), 0, 1))
        cache = {"h": h_BD, "seen": cache["seen"] + tokens_BT.shape[1]}
        return self.out(jnp.swapaxes(hs_TBD, 0, 1)), {"cache": cache}


def _naive_greedy(model, prompt, n):
    seq = list(prompt)
    for _ in range(n):
        logits, _ = model(jnp.asarray([seq]), cache=model.init_cache(1, 0))
        seq.append(int(jnp.argmax(logits[0, -1])))
    return seq[len(prompt) :]


def test_it_satisfies_the_protocol_without_importing_anything_of_ours():
    assert isinstance(TinyLM(nnx.Rngs(0)), CachedLM)


def test_greedy_generation_equals_recomputing_the_whole_sequence_each_step():
    model = TinyLM(nnx.Rngs(0))
    prompts = np.array([[3, 1, 4, 1], [5, 9, 2, 0]])
    out = generate(model, prompt_BP=prompts, prompt_lengths_B=[4, 3], max_new_tokens=6)
    assert np.asarray(out.tokens).tolist() == [
        _naive_greedy(model, [3, 1, 4, 1], 6),
        _naive_greedy(model, [5, 9, 2], 6),
    ]


def test_sampling_is_deterministic_for_a_key_and_beam_one_is_greedy():
    model = TinyLM(nnx.Rngs(1))
    prompts = np.array([[2, 7, 1]])
    sampling = TopK(k=3, temperature=1.5)
    a = generate(model, prompt_BP=prompts, max_new_tokens=5, key=jax.random.key(4), sampling=sampling)
    b = generate(model, prompt_BP=prompts, max_new_tokens=5, key=jax.random.key(4), sampling=sampling)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    beam = beam_search(model, prompt_BP=prompts, max_new_tokens=5, beam_size=1)
    greedy = generate(model, prompt_BP=prompts, max_new_tokens=5)
    np.testing.assert_array_equal(np.asarray(beam.tokens)[:, 0], greedy.tokens)


def test_a_model_without_the_interface_is_refused_by_name():
    class NoCache(nnx.Module):
        def __call__(self, tokens_BT):
            return tokens_BT

    with pytest.raises(TypeError, match=r"init_cache\(batch, max_len\).*got NoCache"):
        generate(NoCache(), prompt_BP=np.array([[1]]), max_new_tokens=2)

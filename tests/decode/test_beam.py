"""Beam search on a hand-built model: it finds what greedy misses, and matches brute force."""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.decode.beam import beam_loop, length_penalty

EOS = 0
# A first-order Markov "model": P(next | last token), rows = last token (3 = BOS).
# From BOS, 'a' (1) is the most likely, but after 'a' every continuation is uncertain; 'b' (2)
# is less likely yet almost surely followed by EOS. Greedy: a + (best after a); beam: b EOS.
P = np.array(
    [
        [1.00, 0.00, 0.00, 0.00],  # after EOS (unused)
        [0.25, 0.25, 0.25, 0.25],  # after a
        [0.90, 0.05, 0.05, 0.00],  # after b
        [0.10, 0.50, 0.40, 0.00],  # after BOS
    ]
)
LOGITS = jnp.log(jnp.asarray(P) + 1e-12)


def _run(beam_size, alpha=0.0, max_new=3, table=LOGITS, eos=EOS):
    B = 1
    seq = jnp.zeros((B, 1 + max_new), jnp.int32).at[:, 0].set(3)
    step = lambda tok, cache: (table[tok[:, 0]], cache)
    first = table[seq[:, 0]]
    return beam_loop(
        step,
        jnp.zeros(()),
        first,
        seq,
        jnp.ones((B,), jnp.int32),
        start=1,
        beam_size=beam_size,
        max_new_tokens=max_new,
        alpha=alpha,
        eos_id=eos,
        reorder=lambda c, rows: c,
    )


def _greedy(max_new=3):
    tok, out, logp = 3, [], 0.0
    for _ in range(max_new):
        nxt = int(np.argmax(P[tok]))
        logp += np.log(P[tok, nxt])
        out.append(nxt)
        tok = nxt
        if nxt == EOS:
            break
    return out, logp


def _brute_force(max_new, alpha, table=P):
    """Every sequence of up to max_new tokens that ends in EOS or at max_new, scored exactly."""
    best = []
    V = table.shape[0]
    for n in range(1, max_new + 1):
        for toks in itertools.product(range(V), repeat=n):
            if EOS in toks[:-1] or (toks[-1] != EOS and n < max_new):
                continue
            last, logp = 3, 0.0
            for t in toks:
                logp += np.log(table[last, t] + 1e-12)
                last = t
            best.append((logp / ((5 + n) / 6) ** alpha, toks))
    return sorted(best, reverse=True)


def test_greedy_is_not_optimal_here_and_beam_finds_the_better_sequence():
    greedy, greedy_logp = _greedy()
    assert greedy[0] == 1  # greedy takes 'a' first
    out = _run(beam_size=2)
    toks = np.asarray(out.tokens[0, 0, : int(out.lengths[0, 0])]).tolist()
    assert toks == [2, EOS]
    assert float(out.log_probs[0, 0]) > greedy_logp + 0.5
    np.testing.assert_allclose(float(out.log_probs[0, 0]), np.log(0.4 * 0.9), rtol=1e-5)


def test_width_one_is_greedy():
    out = _run(beam_size=1)
    greedy, logp = _greedy()
    assert np.asarray(out.tokens[0, 0, : int(out.lengths[0, 0])]).tolist() == greedy
    np.testing.assert_allclose(float(out.log_probs[0, 0]), logp, rtol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_wide_beam_equals_brute_force_n_best(alpha):
    rng = np.random.default_rng(0)
    table = rng.dirichlet(np.ones(4) * 0.7, size=4)  # a random 4-token Markov model
    max_new, W = 3, 16  # 16 = every 2-token prefix, so nothing exact is pruned
    out = _run(beam_size=W, alpha=alpha, max_new=max_new, table=jnp.log(jnp.asarray(table) + 1e-12))
    exact = _brute_force(max_new, alpha, table)
    for i in range(4):
        score, toks = exact[i]
        np.testing.assert_allclose(float(out.scores[0, i]), score, rtol=1e-5)
        assert tuple(np.asarray(out.tokens[0, i, : int(out.lengths[0, i])]).tolist()) == toks


def test_length_penalty_formula():
    np.testing.assert_allclose(length_penalty(jnp.asarray(7), 0.6), (12 / 6) ** 0.6, rtol=1e-6)
    assert float(length_penalty(jnp.asarray(30), 0.0)) == 1.0

"""Generation through the jitted loops: every step's logits equal a full recompute (both model
families; learned, sinusoidal and rotary positions; GQA; sliding windows; ragged prompts)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.decode import Sample, beam_search, generate, translate, translate_beam
from transformer_jax.models import build_model, get_preset
from transformer_jax.nn.attention_config import SlidingWindowAttention

SAMPLE = Sample(temperature=1.5)  # random paths, so the test does not see one greedy rut
PROMPT = np.array([[5, 6, 7, 8, 9, 10], [11, 12, 13, 0, 0, 0], [14, 15, 16, 17, 0, 0]])
LENGTHS = np.array([6, 3, 4])

LM_CASES = {
    "learned": dict(preset="gpt2_tiny"),
    "rope_gqa": dict(preset="llama_tiny"),  # 4 query heads, 2 key/value heads
    "rope_mqa_scan": dict(preset="llama_tiny", n_kv_heads=1, scan_layers=True),
    "window": dict(preset="llama_tiny", attention=SlidingWindowAttention(window=3)),
}


@functools.cache
def _lm(case):
    kw = dict(LM_CASES[case])
    return build_model(get_preset(kw.pop("preset"), n_layers=2, **kw))


@pytest.mark.parametrize("case", sorted(LM_CASES))
def test_lm_step_logits_equal_recompute(case):
    model = _lm(case)
    out = generate(
        model,
        prompt_BP=PROMPT,
        prompt_lengths_B=LENGTHS,
        max_new_tokens=7,
        key=jax.random.key(3),
        sampling=SAMPLE,
        return_logits=True,
    )
    seq = np.asarray(out.sequences)
    full, _ = model(jnp.asarray(seq))
    for b in range(len(PROMPT)):
        np.testing.assert_array_equal(seq[b, : LENGTHS[b]], PROMPT[b, : LENGTHS[b]])  # prompt kept
        end = LENGTHS[b] + int(out.lengths[b])
        assert int(out.lengths[b]) == 7
        np.testing.assert_array_equal(np.asarray(out.tokens[b]), seq[b, LENGTHS[b] : end])
        # logits[t] predicts token t: compare from the first slot after the common prefill on,
        # through the forced prompt tail and every generated token.
        for t in range(LENGTHS.min(), end):
            np.testing.assert_allclose(
                np.asarray(out.logits[b, t]),
                np.asarray(full[b, t - 1]),
                atol=1e-5,
                rtol=1e-5,
                err_msg=f"{case}: row {b}, slot {t}",
            )


def test_lm_ragged_batch_equals_row_alone():
    model = _lm("rope_gqa")
    batch = generate(model, prompt_BP=PROMPT, prompt_lengths_B=LENGTHS, max_new_tokens=6, eos_id=3)
    alone = generate(model, prompt_BP=PROMPT[1:2, : LENGTHS[1]], max_new_tokens=6, eos_id=3)  # the shortest
    np.testing.assert_array_equal(batch.tokens[1], alone.tokens[0])


def test_lm_stops_at_eos_and_pads():
    model = _lm("rope_gqa")
    free = generate(model, prompt_BP=PROMPT, prompt_lengths_B=LENGTHS, max_new_tokens=6, eos_id=3)
    eos = int(free.tokens[0, 2])  # stop row 0 at (the first occurrence of) its third token
    out = generate(model, prompt_BP=PROMPT, prompt_lengths_B=LENGTHS, max_new_tokens=6, eos_id=eos)
    for b in range(len(PROMPT)):
        toks = np.asarray(free.tokens[b]).tolist()
        n = toks.index(eos) + 1 if eos in toks else 6
        assert int(out.lengths[b]) == n
        np.testing.assert_array_equal(out.tokens[b, :n], free.tokens[b, :n])
        assert np.all(np.asarray(out.tokens[b, n:]) == 0)
    assert int(out.lengths[0]) <= 3


def test_learned_positions_limit_is_checked():
    model = _lm("learned")  # max_len 128
    with pytest.raises(ValueError, match="model.dims.max_len=128"):
        generate(model, prompt_BP=PROMPT, max_new_tokens=200)


ED_CASES = {
    "sinusoidal": dict(),
    "learned_scan": dict(position="learned", scan_layers=True),
    "rope_gqa": dict(position="rope", n_kv_heads=2),
}
SRC = np.array([[5, 6, 7, 8, 2, 0, 0], [9, 10, 2, 0, 0, 0, 0], [11, 12, 13, 14, 15, 16, 2]])


@functools.cache
def _ed(case):
    return build_model(get_preset("original_tiny", dropout=0.0, n_encoder_layers=1, **ED_CASES[case]))


@pytest.mark.parametrize("case", sorted(ED_CASES))
def test_encoder_decoder_step_logits_equal_recompute(case):
    model = _ed(case)
    out = translate(
        model, src_BS=SRC, max_new_tokens=8, key=jax.random.key(1), sampling=SAMPLE, eos_id=None, return_logits=True
    )
    seq = jnp.asarray(out.sequences)
    assert np.all(np.asarray(seq[:, 0]) == 1)  # BOS
    full, _ = model(jnp.asarray(SRC), seq[:, :-1], src_segment_ids_BS=jnp.asarray(SRC != 0, jnp.int32))
    np.testing.assert_allclose(np.asarray(out.logits[:, 1:]), np.asarray(full), atol=1e-5, rtol=1e-5)


def test_beam_width_one_equals_greedy_lm():
    model = _lm("rope_gqa")
    greedy = generate(model, prompt_BP=PROMPT, prompt_lengths_B=LENGTHS, max_new_tokens=6, eos_id=3)
    beam = beam_search(
        model, prompt_BP=PROMPT, prompt_lengths_B=LENGTHS, max_new_tokens=6, beam_size=1, alpha=0.0, eos_id=3
    )
    np.testing.assert_array_equal(beam.tokens[:, 0], greedy.tokens)
    np.testing.assert_array_equal(beam.lengths[:, 0], greedy.lengths)


def test_beam_width_one_equals_greedy_encoder_decoder():
    model = _ed("sinusoidal")
    greedy = translate(model, src_BS=SRC, max_new_tokens=8, eos_id=None)
    beam = translate_beam(model, src_BS=SRC, max_new_tokens=8, beam_size=1, alpha=0.0, eos_id=None)
    np.testing.assert_array_equal(beam.tokens[:, 0], greedy.tokens)


def test_beam_n_best_scores_are_length_normalised_log_probs():
    model = _ed("sinusoidal")
    W, alpha, N = 4, 0.6, 8
    eos = int(translate(model, src_BS=SRC, max_new_tokens=N, eos_id=None).tokens[0, 2])  # so some beams end early
    out = translate_beam(model, src_BS=SRC, max_new_tokens=N, beam_size=W, alpha=alpha, eos_id=eos)
    scores, lengths = np.asarray(out.scores), np.asarray(out.lengths)
    tokens = np.asarray(out.tokens)  # [B, W, N], PAD after each hypothesis
    assert np.all(np.diff(scores, axis=1) <= 1e-6), "n-best lists are sorted best first"
    assert np.any(lengths < N), "some hypotheses should end with EOS"
    # One teacher-forced pass over all B*W hypotheses gives their exact log-probabilities.
    src = jnp.repeat(jnp.asarray(SRC), W, axis=0)
    flat = tokens.reshape(-1, N)
    tgt_in = np.concatenate([np.ones((len(flat), 1), np.int32), flat[:, :-1]], axis=1)
    logits, _ = model(src, jnp.asarray(tgt_in), src_segment_ids_BS=(src != 0).astype(jnp.int32))
    token_logp = np.take_along_axis(np.asarray(jax.nn.log_softmax(logits, -1)), flat[:, :, None], -1)[..., 0]
    n = lengths.reshape(-1)
    logp = np.where(np.arange(N) < n[:, None], token_logp, 0.0).sum(1).reshape(lengths.shape)
    np.testing.assert_allclose(np.asarray(out.log_probs), logp, atol=1e-4)
    np.testing.assert_allclose(scores, logp / ((5 + lengths) / 6) ** alpha, atol=1e-4)
    for b in range(len(SRC)):
        hyps = [tuple(tokens[b, i, : lengths[b, i]]) for i in range(W)]
        assert len(set(hyps)) == W, "distinct hypotheses"
        for h in hyps:
            assert eos not in h[:-1] and (h[-1] == eos or len(h) == N)

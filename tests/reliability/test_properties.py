"""Property tests (hypothesis): tokenizer round trips, mask builders against a brute-force loop,
packing never lets a token attend across a segment boundary."""

import unicodedata

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer_jax.data import ByteTokenizer, CharTokenizer, SentencePieceSettings, rows, train_tokenizer
from transformer_jax.ops.masks import AttentionMask

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,  # CI sees the same examples every run
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@SETTINGS
@given(st.text())
def test_byte_tokenizer_round_trips_any_unicode(text):
    tok = ByteTokenizer()
    assert tok.decode(tok.encode(text)) == text


@SETTINGS
@given(
    st.text(
        alphabet=st.sampled_from(sorted(set("To be, or not to be: that is the question.\nÆsir ß ü ☃"))), max_size=200
    )
)
def test_char_tokenizer_round_trips_text_over_its_vocabulary(text):
    tok = CharTokenizer("".join(sorted(set("To be, or not to be: that is the question.\nÆsir ß ü ☃"))))
    assert tok.decode(tok.encode(text)) == text


@pytest.fixture(scope="module")
def sentencepiece():
    corpus = [
        f"the {w} sat on the {v} while {u} sang über café"
        for w in ("cat", "dog", "bird")
        for v in ("mat", "hat", "log")
        for u in ("Anna", "Björn", "Zoë")
    ] * 20
    return train_tokenizer(SentencePieceSettings(vocab_size=300, model_type="bpe"), corpus)


@SETTINGS
@given(st.text(alphabet=st.characters(whitelist_categories=("Lu", "Ll", "Nd", "Po", "Zs")), max_size=80))
def test_sentencepiece_round_trips_within_its_normalisation(sentencepiece, text):
    # nmt_nfkc keeps every non-space character (after NFKC) and every word boundary; how many
    # spaces it leaves depends on which Unicode space it saw (SentencePiece collapses and trims
    # ASCII spaces, but maps U+2004..U+3000 to " " afterwards), so spacing is compared as words.
    assert sentencepiece.decode(sentencepiece.encode(text)).split() == unicodedata.normalize("NFKC", text).split()


@st.composite
def mask_cases(draw):
    B, T, S = draw(st.integers(1, 2)), draw(st.integers(1, 9)), draw(st.integers(1, 9))
    causal = draw(st.booleans())
    window = draw(st.one_of(st.none(), st.integers(1, 6)))
    q_pos = np.asarray(draw(st.lists(st.integers(0, 12), min_size=B * T, max_size=B * T))).reshape(B, T)
    kv_pos = np.asarray(draw(st.lists(st.integers(0, 12), min_size=B * S, max_size=B * S))).reshape(B, S)
    q_seg = np.asarray(draw(st.lists(st.integers(0, 2), min_size=B * T, max_size=B * T))).reshape(B, T)
    kv_seg = np.asarray(draw(st.lists(st.integers(0, 2), min_size=B * S, max_size=B * S))).reshape(B, S)
    valid = np.asarray(draw(st.lists(st.booleans(), min_size=B * S, max_size=B * S))).reshape(B, S)
    return causal, window, q_pos, kv_pos, q_seg, kv_seg, valid


@SETTINGS
@given(mask_cases())
def test_attention_mask_matches_a_brute_force_loop(case):
    causal, window, q_pos, kv_pos, q_seg, kv_seg, valid = case
    mask = AttentionMask(
        causal=causal,
        window=window,
        q_positions=q_pos,
        kv_positions=kv_pos,
        q_segment_ids=q_seg,
        kv_segment_ids=kv_seg,
        kv_valid=valid,
    )
    B, T = q_pos.shape
    S = kv_pos.shape[1]
    got = np.broadcast_to(np.asarray(mask.materialize(T, S)), (B, 1, T, S))[:, 0]
    for b in range(B):
        for i in range(T):
            for j in range(S):
                d = q_pos[b, i] - kv_pos[b, j]
                ok = valid[b, j] and q_seg[b, i] == kv_seg[b, j]
                ok = ok and (d >= 0 if causal else True)
                if window is not None:
                    ok = ok and (d < window if causal else abs(d) < window)
                assert got[b, i, j] == ok, (b, i, j)


def _packed_rows(docs, T, packer):
    if packer == "eval":
        return list(rows.pack_first_fit(iter(docs), T))
    import grain

    it = grain.MapDataset.source(docs).to_iter_dataset()
    it = grain.experimental.FirstFitPackIterDataset(
        it, length_struct={"inputs": T, "targets": T}, num_packing_bins=3, seed=0, shuffle_bins=False
    )
    return [rows.packed_to_lm(p) for p in it.map(lambda x: x)]


def _doc_of(token: int):
    return (int(token) - 5) // 100 if token >= 5 else None  # None: BOS/EOS/padding


@SETTINGS
@given(st.lists(st.integers(1, 20), min_size=1, max_size=12), st.integers(4, 16), st.sampled_from(["eval", "grain"]))
def test_packing_never_mixes_segments_across_an_attention_boundary(lengths, T, packer):
    docs = [rows.document_example(list(range(100 * k + 5, 100 * k + 5 + n)), T) for k, n in enumerate(lengths)]
    for row in _packed_rows(docs, T, packer):
        seg, inputs, targets, weights, pos = (
            np.asarray(row[k]) for k in ("segment_ids", "inputs", "targets", "weights", "positions")
        )
        mask = np.asarray(
            AttentionMask(causal=True, q_segment_ids=seg[None], kv_segment_ids=seg[None]).materialize(T, T)
        )[0, 0]
        for i in range(T):
            for j in range(T):
                if mask[i, j] and seg[i] > 0:  # a real token sees only earlier tokens of its own segment
                    assert seg[i] == seg[j] and j <= i
        for s in set(seg[seg > 0].tolist()):
            in_seg = seg == s
            owners = {_doc_of(t) for t in np.concatenate([inputs[in_seg], targets[in_seg & (weights > 0)]])} - {None}
            assert len(owners) <= 1, owners  # one document per segment, targets included
            assert pos[in_seg].tolist() == list(range(int(in_seg.sum())))  # positions restart per document
        assert np.all(weights[seg == 0] == 0)

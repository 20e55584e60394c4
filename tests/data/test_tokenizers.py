"""Tokenizers: round trips, specials, unknown characters, serialisation."""

import gzip
import json
import pickle
import unicodedata
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_jax.data import (
    ByteTokenizer,
    CharTokenizer,
    SentencePieceSettings,
    SentencePieceTokenizer,
    SymbolTokenizer,
    load_tokenizer,
    tokenizer_from_json,
    train_tokenizer,
)

CHAR_TRAIN = "To be, or not to be: that is the question.\nÆsop’s fable — ü\n"
CHAR = CharTokenizer.train(None, [CHAR_TRAIN])


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_byte_round_trip_any_unicode(text):
    tok = ByteTokenizer()
    ids = tok.encode(text)
    assert len(ids) == len(text.encode("utf-8"))
    assert all(4 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=sorted(set(CHAR_TRAIN))))
def test_char_round_trip_on_vocab_text(text):
    ids = CHAR.encode(text)
    assert len(ids) == len(text) and CHAR.unk_id not in ids
    assert CHAR.decode(ids) == text


def test_char_vocab_is_sorted_training_chars_after_specials():
    assert CHAR.chars == "".join(sorted(set(CHAR_TRAIN)))
    assert CHAR.vocab_size == 4 + len(set(CHAR_TRAIN))
    assert (CHAR.pad_id, CHAR.bos_id, CHAR.eos_id, CHAR.unk_id) == (0, 1, 2, 3)
    assert CHAR.encode(CHAR.chars) == list(range(4, CHAR.vocab_size))


def test_decode_skips_pad_bos_eos_and_stops_nowhere():
    ids = CHAR.encode("to be")
    assert CHAR.decode([1, *ids, 2, 0, 0, *ids]) == "to beto be"
    assert ByteTokenizer().decode([1, 4 + ord("a"), 2, 4 + ord("b"), 0]) == "ab"


def test_char_unknown_maps_to_unk_with_one_warning():
    tok = CharTokenizer("abc")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert tok.encode("axb") == [4, 3, 5]
        assert tok.encode("zzz") == [3, 3, 3]
    assert len([w for w in caught if "unk_id" in str(w.message)]) == 1
    assert tok.decode(tok.encode("axb")) == "a\ufffdb"


def test_out_of_vocab_id_is_an_error():
    with pytest.raises(ValueError, match="outside the vocabulary"):
        CHAR.decode([CHAR.vocab_size])


def _lines(root, split):
    """Both sides of a split of a corpus in Multi30k's format (``{split}.{de,en}.gz``)."""
    out = []
    for lang in ("de", "en"):
        with gzip.open(root / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
            out += f.read().splitlines()
    return out


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def sp_tok(request, captions_dir):
    """SentencePiece trained on the local caption corpus (tests/data/conftest.py), both model types."""
    settings = SentencePieceSettings(model_type=request.param, vocab_size=400)
    return train_tokenizer(settings, _lines(captions_dir, "train"))


def test_sentencepiece_round_trip_on_captions(sp_tok, captions_dir):
    assert isinstance(sp_tok, SentencePieceTokenizer) and sp_tok.vocab_size == 400
    sp = sp_tok._sp
    assert (sp.pad_id(), sp.bos_id(), sp.eos_id(), sp.unk_id()) == (0, 1, 2, 3)
    lines = _lines(captions_dir, "val")
    assert any("\ufb01" in line for line in lines)  # NFKC has something to rewrite
    for line in lines:
        ids = sp_tok.encode(line)
        assert all(4 <= i < sp_tok.vocab_size for i in ids)
        assert sp_tok.decode([sp_tok.bos_id, *ids, sp_tok.eos_id]) == unicodedata.normalize("NFKC", line)
    # the text is merged into pieces (BPE: 1.8 characters each), not spelled out character by character
    assert sum(len(sp_tok.encode(line)) for line in lines) < 0.7 * sum(len(line) for line in lines)
    # newlines survive (LM text) and unseen characters fall back to bytes, not unk
    text = "Ein Mann ☃\nzwei"
    assert sp_tok.decode(sp_tok.encode(text)) == text
    assert sp_tok.unk_id not in sp_tok.encode(text)


def test_sentencepiece_save_load_equality(sp_tok, tmp_path):
    sp_tok.save(tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert isinstance(loaded, SentencePieceTokenizer)
    assert loaded == sp_tok and loaded.model_proto == sp_tok.model_proto
    for line in ("Zwei Hunde spielen im Schnee.", "Ein Koch wartet an der Bushaltestelle", "unbekannte Wörter ☃"):
        assert loaded.encode(line) == sp_tok.encode(line)
        assert loaded.decode(sp_tok.encode(line)) == sp_tok.decode(sp_tok.encode(line))
    assert pickle.loads(pickle.dumps(sp_tok)).encode(line) == sp_tok.encode(line)


@pytest.mark.parametrize("tok", [CHAR, ByteTokenizer(), SymbolTokenizer(7)], ids=repr)
def test_json_round_trip(tok, tmp_path):
    d = json.loads(json.dumps(tok.to_json()))
    assert tokenizer_from_json(d) == tok
    tok.save(tmp_path)
    assert load_tokenizer(tmp_path) == tok


def test_symbol_tokenizer_round_trip():
    tok = SymbolTokenizer(10)
    assert tok.encode("3 1 | 9") == [8, 6, 4, 14]
    assert tok.decode(tok.encode("3 1 | 9")) == "3 1 | 9"
    assert tok.vocab_size == 15


def test_tokenizer_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="unknown tokenizer 'chr'.*char"):
        tokenizer_from_json({"type": "chr"})
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{oops")
    with pytest.raises(ValueError, match="corrupt"):
        load_tokenizer(tmp_path)

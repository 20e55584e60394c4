"""``HFTokenizer`` (tokenizer.json through the ``tokenizers`` library) against ``transformers``'
``AutoTokenizer`` on the same files: two tokenizers trained here offline on a small multilingual
text (a GPT-2-style byte-level BPE, and a Llama-style metaspace BPE with byte fallback and a
BOS-adding post-processor) encode and decode a multilingual test text (with characters never seen in
training) identically, with and without special tokens; saved with a run and exported back to
Hugging Face files they stay the same tokenizer. Needs the ``interop`` extra."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

from transformer_jax.data import HFTokenizer, load_tokenizer  # noqa: E402
from transformer_jax.models import ModelConfig, ModelDims, build_model  # noqa: E402
from transformer_jax.models.hf import save_pretrained  # noqa: E402
from transformer_jax.nn.embed import EmbeddingsConfig  # noqa: E402

pytestmark = pytest.mark.interop

TRAIN = [
    "The quick brown fox jumps over the lazy dog. It's a dog's life, isn't it?",
    "Größe, Straße und Übermaß: naïve Café-Besucher zählen 1234 Äpfel.",
    "東京タワーは高いです。日本語の文章を少し書きます。",
    "Привет, мир! Как дела? Всё хорошо.",
    "مرحبا بالعالم، كيف حالك اليوم؟",
    "नमस्ते दुनिया, आप कैसे हैं?",
    "Emoji: 🙂👍🏽🎉 and symbols € £ ¥ — “quotes” ‘single’.",
] * 20
TEXT = (
    "Hello, world! Größe naïve café — 東京タワーは高い。 Привет, мир! مرحبا 🙂👍🏽 नमस्ते "
    "e\u0301 ψ 𝔘 Ω\ttabs  and   spaces\nnew line 3.14 isn't it ?"
)


def _byte_level(directory):
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|pad|>", "<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(TRAIN, trainer)
    tok.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|pad|>",
        "clean_up_tokenization_spaces": False,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config))


def _metaspace_byte_fallback(directory):
    tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(TRAIN, trainer)
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    for b in range(256):  # byte-fallback pieces, as in Llama's vocabulary
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    spec["model"]["byte_fallback"] = True
    tok = tokenizers.Tokenizer.from_str(json.dumps(spec))
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    tok.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "add_bos_token": False,  # ignored when tokenizer.json exists (transformers 5): its post-processor decides
        "add_eos_token": True,
        "clean_up_tokenization_spaces": False,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config))


BUILDERS = {"byte_level": _byte_level, "metaspace_byte_fallback": _metaspace_byte_fallback}


@pytest.fixture(params=list(BUILDERS))
def pair(request, tmp_path):
    BUILDERS[request.param](tmp_path)
    return HFTokenizer.from_pretrained(tmp_path), transformers.AutoTokenizer.from_pretrained(tmp_path), tmp_path


def _same(ours: HFTokenizer, theirs, text: str = TEXT) -> None:
    ids = theirs.encode(text, add_special_tokens=False)
    assert ours.encode(text) == ids
    assert ours.encode(text, add_special_tokens=True) == theirs.encode(text)
    with_specials = [ours.bos_id, *ids, ours.eos_id, ours.pad_id]
    assert ours.decode(with_specials) == theirs.decode(with_specials, skip_special_tokens=True)
    assert ours.decode(with_specials, skip_special_tokens=False) == theirs.decode(with_specials)


def test_encodes_and_decodes_like_transformers(pair):
    ours, theirs, _ = pair
    _same(ours, theirs)
    for line in TEXT.split():
        _same(ours, theirs, line)
    assert ours.vocab_size == len(theirs)
    assert (ours.bos_id, ours.eos_id) == (theirs.bos_token_id, theirs.eos_token_id)
    assert ours.pad_id == (theirs.pad_token_id if theirs.pad_token_id is not None else theirs.eos_token_id)
    assert ours.unk_id == (theirs.unk_token_id if theirs.unk_token_id is not None else -1)
    assert ours.decode(ours.encode(TEXT)) == TEXT
    assert ours.unrepresentable(TEXT) == []
    if ours.unk_id != -1:  # the metaspace one: its post-processor adds BOS, unseen characters fall back to bytes
        assert ours.encode(TEXT, add_special_tokens=True)[0] == ours.bos_id
        assert any(t.startswith("<0x") for t in theirs.convert_ids_to_tokens(ours.encode(TEXT)))
    np.testing.assert_array_equal(ours.encode_np(TEXT), ours.encode(TEXT))


def test_saved_with_a_run_and_exported_back(pair, tmp_path):
    ours, theirs, _ = pair
    ours.save(tmp_path / "run")
    again = load_tokenizer(tmp_path / "run")
    assert isinstance(again, HFTokenizer) and again == ours
    assert pickle.loads(pickle.dumps(ours)) == ours
    ours.save_pretrained(tmp_path / "export")
    _same(
        HFTokenizer.from_pretrained(tmp_path / "export"),
        transformers.AutoTokenizer.from_pretrained(tmp_path / "export"),
    )
    _same(again, theirs)


def test_written_beside_an_exported_model(pair, tmp_path):
    ours, _, _ = pair
    cfg = ModelConfig(dims=ModelDims(vocab_size=ours.vocab_size, d_model=32, n_heads=2, n_layers=1), norm="rmsnorm",
                      position="rope", ffn="swiglu", use_bias=False,
                      embeddings=EmbeddingsConfig(tie=False))  # fmt: skip
    save_pretrained(build_model(cfg), tmp_path, tokenizer=ours)
    assert HFTokenizer.from_pretrained(tmp_path) == ours
    _same(ours, transformers.AutoTokenizer.from_pretrained(tmp_path))


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer.json does not exist"):
        HFTokenizer.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="is not trained here"):
        HFTokenizer.train(None, [])  # type: ignore[arg-type]
    _byte_level(tmp_path)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        HFTokenizer.from_pretrained(tmp_path).decode([10**6])
    (tmp_path / "tokenizer_config.json").write_text("{}")
    with pytest.raises(ValueError, match="neither bos_token nor eos_token"):
        HFTokenizer.from_pretrained(tmp_path)

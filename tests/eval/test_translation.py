"""Corpus translation: batching/bucketing does not change the output; validation BLEU plumbing."""

import types

import numpy as np
import pytest
from flax import nnx

from tests.variant_reads import unread_fields
from transformer_jax.core.configlib import ConfigError
from transformer_jax.data import CopyTask, DataConfig, build_data
from transformer_jax.decode import TopK, translate_beam
from transformer_jax.eval import (
    Beam,
    Sampled,
    TranslateConfig,
    TranslateSearch,
    reference_pairs,
    translate_ids,
    validation_bleu,
)
from transformer_jax.models import build_model, get_preset


@pytest.fixture(scope="module")
def model():
    return build_model(get_preset("original_tiny", vocab_size=40, dropout=0.0, n_layers=1, n_encoder_layers=1))


def test_batched_translation_equals_one_at_a_time(model):
    graphdef, state = nnx.split(model)
    rng = np.random.default_rng(0)
    sources = [rng.integers(4, 40, n).tolist() for n in (3, 9, 1, 6, 12)]
    beam = Beam(size=2)
    cfg = TranslateConfig(search=beam, batch_size=4, length_bucket=16, max_new_tokens=8, max_src_len=16)
    batched = translate_ids(graphdef, state, sources, cfg)
    for src, got in zip(sources, batched):
        alone = np.zeros((1, 16), np.int32)  # right-padded like the batches, one compiled shape
        alone[0, : len(src) + 1] = src + [2]
        out = translate_beam(model, src_BS=alone, max_new_tokens=8, beam_size=2, alpha=beam.alpha)
        want = [int(t) for t in np.asarray(out.tokens[0, 0, : int(out.lengths[0, 0])]) if t not in (0, 1, 2)]
        assert got == want


def test_validation_bleu_on_a_synthetic_task(model):
    cfg = DataConfig(
        dataset=CopyTask(format="seq2seq", vocab=8, min_len=2, max_len=4, val_size=6, max_src_len=8), seq_len=8
    )
    data = build_data(cfg, batch_size=4)
    sources, refs = reference_pairs(data, "val")
    assert len(sources) == 6 and all(r.split() for r in refs)  # symbols as space-separated words
    tiny = build_model(
        get_preset("original_tiny", vocab_size=data.vocab_size, dropout=0.0, n_layers=1, n_encoder_layers=1)
    )
    graphdef, params, rest = nnx.split(tiny, nnx.Param, ...)
    run = types.SimpleNamespace(
        graphdef=graphdef,
        data=data,
        cfg=types.SimpleNamespace(data=cfg, model=tiny.cfg, train=types.SimpleNamespace(batch_size=4)),
    )
    state = types.SimpleNamespace(params=nnx.to_pure_dict(params), model_state=nnx.to_pure_dict(rest))
    out = validation_bleu(run, state, "val", max_batches=1)
    assert set(out) == {"bleu"} and 0.0 <= out["bleu"] <= 100.0


def test_sampled_translation_is_seeded_and_top_k_1_is_greedy(model):
    from transformer_jax.decode import Sample

    graphdef, state = nnx.split(model)
    rng = np.random.default_rng(1)
    sources = [rng.integers(4, 40, n).tolist() for n in (3, 9, 5, 7)]
    base = dict(batch_size=4, length_bucket=16, max_new_tokens=8, max_src_len=16)
    greedy = translate_ids(graphdef, state, sources, TranslateConfig(**base, search=Sampled()))
    top1 = translate_ids(graphdef, state, sources, TranslateConfig(**base, search=Sampled(TopK(k=1))))
    assert top1 == greedy
    hot = Sample(temperature=5.0)
    a, b, c = (
        translate_ids(graphdef, state, sources, TranslateConfig(**base, search=Sampled(hot, seed=s))) for s in (0, 0, 1)
    )
    assert a == b and a != c


@pytest.mark.parametrize("kind", TranslateSearch.VARIANTS.names())
def test_every_search_reads_all_its_settings(model, kind):
    """Beam search has no sampling settings and sampling no beam width: each search reads what it has."""
    graphdef, state = nnx.split(model)
    search = TranslateSearch.VARIANTS.get(kind)()
    cfg = TranslateConfig(search=search, batch_size=2, length_bucket=8, max_new_tokens=4, max_src_len=8, len_b=3)
    assert unread_fields(lambda: translate_ids(graphdef, state, [[5, 6], [7]], cfg), search) == []
    assert unread_fields(lambda: translate_ids(graphdef, state, [[5, 6], [7]], cfg), cfg) == []


def test_a_seed_under_greedy_is_refused_it_is_never_read():
    with pytest.raises(ConfigError, match=r"translate.search.seed=5: greedy decoding draws nothing"):
        Sampled(seed=5)
    assert Sampled(TopK(k=2), seed=5).seed == 5

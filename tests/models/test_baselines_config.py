"""``model.baseline``: one settings class per baseline kind (issue 43). Every baseline variant, n-gram
smoothing and RNN cell (enumerated from their families, so a new one is covered by registering it)
has no field its model does not read; the baseline must be the one of ``model.kind``; the flat
layout of the committed runs maps to the variants and back exactly; old ``--set`` keys name the new."""

from __future__ import annotations

import random

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from tests.variant_reads import unread_fields
from transformer_jax.core import configlib, migration
from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.migration.baseline import _OLD_BASELINE_DEFAULTS
from transformer_jax.core.overrides import apply_overrides
from transformer_jax.data import DataConfig, TextData
from transformer_jax.models import (
    AddKSmoothing,
    BaselineConfig,
    GRUCellConfig,
    KneserNeySmoothing,
    LSTMCellConfig,
    ModelConfig,
    NgramConfig,
    RNNCellConfig,
    RNNLMConfig,
    SmoothingConfig,
    WindowLMConfig,
    baseline_model_config,
    build_model,
)
from transformer_jax.train.config import Config, TrainConfig
from transformer_jax.train.loop import train

TINY = dict(vocab_size=11, d_model=8, d_ff=16, n_layers=2)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("text") / "corpus.txt"
    path.write_text("\n\n".join(" ".join(rng.choice(["ab", "ba", "abc"]) for _ in range(6)) for _ in range(40)))
    return str(path), str(tmp_path_factory.mktemp("cache"))


def _use_neural(model_cfg: ModelConfig) -> None:
    """Build, the gradient of a loss with dropout (what a training step reads), a cached decode step."""
    model = build_model(model_cfg)
    tokens_BT = jnp.arange(12).reshape(2, 6) % model_cfg.dims.vocab_size
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss(params):
        logits, _ = nnx.merge(graphdef, params, rest)(tokens_BT, dropout_key=jax.random.key(0))
        return jnp.mean(logits.astype(jnp.float32) ** 2)

    jax.grad(loss)(params)
    _, aux = model(tokens_BT[:, :3], cache=model.init_cache(2, 8))
    model(tokens_BT[:, 3:4], cache=aux["cache"])


def _consumer(model_cfg: ModelConfig, corpus, tmp_path):
    """What a run of the model does with its settings: the n-gram is fitted and scored by ``train``
    (its entry point), a neural baseline is built, trained for a gradient and decoded."""
    if model_cfg.kind != "ngram":
        return lambda: _use_neural(model_cfg)
    path, cache = corpus
    cfg = Config(
        model=model_cfg,
        data=DataConfig(dataset=TextData(path=path, cache_dir=cache), seq_len=8),
        train=TrainConfig(batch_size=2),
    )
    return lambda: train(cfg, str(tmp_path))


def _model(baseline: BaselineConfig) -> ModelConfig:
    fields = dict(TINY, dropout=0.1) if baseline.kind != "ngram" else {"vocab_size": 11}
    return baseline_model_config(baseline.kind, baseline, **fields)


@pytest.mark.parametrize("kind", BaselineConfig.VARIANTS.names())
def test_every_baseline_setting_is_read(kind, corpus, tmp_path):
    baseline = BaselineConfig.VARIANTS.get(kind)()
    assert unread_fields(_consumer(_model(baseline), corpus, tmp_path), baseline) == []


@pytest.mark.parametrize("kind", SmoothingConfig.VARIANTS.names())
def test_every_smoothing_setting_is_read(kind, corpus, tmp_path):
    smoothing = SmoothingConfig.VARIANTS.get(kind)()
    model_cfg = _model(NgramConfig(ngram_order=2, smoothing=smoothing))
    assert unread_fields(_consumer(model_cfg, corpus, tmp_path), smoothing) == []


@pytest.mark.parametrize("kind", RNNCellConfig.VARIANTS.names())
def test_every_rnn_cell_setting_is_read(kind, corpus, tmp_path):
    cell = RNNCellConfig.VARIANTS.get(kind)()
    model_cfg = _model(RNNLMConfig(cell=cell))
    assert unread_fields(_consumer(model_cfg, corpus, tmp_path), cell) == []


def test_the_baseline_must_be_the_one_of_the_model_kind():
    with pytest.raises(ConfigError, match=r"model.baseline='rnn_lm': holds the settings of 'rnn_lm', but "
                       r"model.kind='window_lm'; set --set model.baseline=window_lm"):  # fmt: skip
        baseline_model_config("window_lm", RNNLMConfig())
    with pytest.raises(ConfigError, match=r"model.kind='rnn_lm' needs its settings in model.baseline; set --set "
                       r"model.baseline=rnn_lm"):  # fmt: skip
        ModelConfig(kind="rnn_lm", position="none")
    with pytest.raises(ConfigError, match=r"model.baseline='ngram': holds the settings of model.kind='ngram', and "
                       r"model.kind='decoder_lm' reads none; set model.baseline=none"):  # fmt: skip
        ModelConfig(baseline=NgramConfig())
    assert baseline_model_config("rnn_lm").baseline == RNNLMConfig()  # the kind's defaults
    assert ModelConfig(kind="ngram", position="none", baseline="ngram").baseline == NgramConfig()


def test_set_chooses_the_baseline_and_its_nested_choices():
    cfg = Config(model=baseline_model_config("ngram", vocab_size=11))
    cfg = apply_overrides(cfg, ["model.baseline.smoothing=add_k", "model.baseline.smoothing.k=0.5"])
    assert cfg.model.baseline == NgramConfig(smoothing=AddKSmoothing(k=0.5))
    rnn = ["model.kind=rnn_lm", "model.baseline=rnn_lm", "model.baseline.cell=gru", "model.baseline.tbptt=4"]
    assert apply_overrides(cfg, rnn).model.baseline == RNNLMConfig(cell=GRUCellConfig(), tbptt=4)
    with pytest.raises(ConfigError, match=r"the baseline 'ngram' has no setting 'window' \(its settings: "
                       r"ngram_order, smoothing\); 'window' is a setting of 'window_lm'"):  # fmt: skip
        apply_overrides(cfg, ["model.baseline.window=4"])
    with pytest.raises(ConfigError, match=r"the RNN cell 'gru' has no setting 'forget_bias' \(its settings: none\)"):
        apply_overrides(cfg, [*rnn, "model.baseline.cell.forget_bias=0.5"])
    with pytest.raises(ConfigError, match="model.baseline='ngram': holds the settings of 'ngram', but model.kind"):
        apply_overrides(cfg, ["model.kind=window_lm"])


_OLD = [
    ("ngram", {"ngram_order": 5, "smoothing": "kneser_ney", "discount": 0.75},
     NgramConfig(ngram_order=5, smoothing=KneserNeySmoothing(discount=0.75))),
    ("ngram", {"ngram_order": 1, "smoothing": "add_k", "add_k": 0.1}, NgramConfig(1, AddKSmoothing(k=0.1))),
    ("window_lm", {"window": 16, "direct": True}, WindowLMConfig(window=16, direct=True)),
    ("rnn_lm", {"cell": "lstm", "tbptt": 8, "forget_bias": 0.5}, RNNLMConfig(LSTMCellConfig(0.5), tbptt=8)),
    ("rnn_lm", {"cell": "gru"}, RNNLMConfig(GRUCellConfig())),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "flat", "baseline"), _OLD, ids=lambda v: str(v) if isinstance(v, str) else "")
def test_old_baseline_fields_become_the_kinds_settings_and_map_back_exactly(kind, flat, baseline):
    old = {"kind": kind, "position": "none", "tie_embeddings": False, "baseline": {**_OLD_BASELINE_DEFAULTS, **flat}}
    cfg = configlib.from_dict(ModelConfig, migration.upgrade(old, whole=False))
    assert cfg.baseline == baseline
    assert migration.legacy(configlib.to_dict(cfg), whole=False)["baseline"] == {**_OLD_BASELINE_DEFAULTS, **flat}


def test_an_old_baseline_field_its_kind_did_not_read_is_refused_by_name():
    old = {"kind": "rnn_lm", "position": "none", "baseline": {"cell": "gru", "forget_bias": 0.5, "window": 4}}
    with pytest.raises(ConfigError, match=r"unknown RNNLMConfig field\(s\) \['forget_bias', 'window'\]"):
        configlib.from_dict(ModelConfig, migration.upgrade(old, whole=False))
    old = {"kind": "ngram", "position": "none", "baseline": {"smoothing": "add_k", "discount": 0.5}}
    with pytest.raises(ConfigError, match=r"unknown NgramConfig field\(s\) \['discount'\]"):
        configlib.from_dict(ModelConfig, migration.upgrade(old, whole=False))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("model.baseline.add_k=0.5", "model.baseline.smoothing.k"),
        ("model.baseline.discount=0.5", "model.baseline.smoothing.discount"),
        ("model.baseline.forget_bias=0", "model.baseline.cell.forget_bias"),
    ],
)
def test_an_old_baseline_set_key_names_its_new_key(old, new):
    cfg = Config(model=baseline_model_config("ngram", vocab_size=11))
    with pytest.raises(ConfigError, match=rf"'{old.split('=')[0]}' was renamed: {new} \(with "):
        apply_overrides(cfg, [old])

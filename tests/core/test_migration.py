"""`core.migration` over every committed run summary: each old config loads in today's layout, and
today's layout maps back to the saved one exactly (the layout the ablation store hashes)."""

from __future__ import annotations

import json
import pathlib

import pytest

from transformer_jax.core import configlib, migration
from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.overrides import apply_overrides
from transformer_jax.models import (
    EmbeddingsConfig,
    ExecutionConfig,
    InitConfig,
    LinearAttention,
    LocalGlobalAttention,
    ModelConfig,
    ModelDims,
    RelativeBiasPositions,
    RopePositions,
    SlidingWindowAttention,
    SoftmaxAttention,
    YarnScaling,
)
from transformer_jax.train.config import Config
from transformer_jax.train.experiment import config_from_dict

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "experiments" / "results"
SUMMARIES = sorted(RESULTS.glob("*/runs/*.json"))


def _configs():
    for path in SUMMARIES:
        config = json.loads(path.read_text()).get("config")
        if config is not None:
            yield path, config


def _as_saved(today, saved):
    """``today`` restricted to the keys ``saved`` has (fields added since are `ablation.store`'s concern)."""
    if isinstance(today, dict) and isinstance(saved, dict):
        return {k: _as_saved(today.get(k), v) for k, v in saved.items()}
    return today


def test_there_are_committed_configs_to_check():
    assert len(list(_configs())) > 200


def test_every_committed_config_loads_and_maps_back_exactly():
    positions, layouts = set(), set()
    for path, saved in _configs():
        cfg = config_from_dict(saved)
        positions.add(cfg.model.position.kind)
        today = json.loads(json.dumps(configlib.to_dict(cfg)))
        current = migration.upgrade(saved) == saved  # a run saved since the nesting keeps today's layout
        layouts.add(current)
        back = today if current else migration.legacy(today)
        assert _as_saved(back, saved) == saved, path.name
    assert {"none", "learned", "rope", "relative_bias", "alibi", "sinusoidal"} <= positions
    assert layouts == {False, True}, "both the committed runs' old layout and today's are checked"


@pytest.mark.parametrize(
    "flat,position",
    [
        ({"position": "learned", "rope_theta": 10000.0}, "learned"),
        ({"position": "rope", "rope_theta": 5e5, "rope_pairing": "adjacent"}, RopePositions(5e5, "adjacent")),
        (
            {"position": "rope", "rope_scaling": "yarn", "rope_scaling_factor": 4.0, "rope_original_max_len": 512},
            RopePositions(scaling=YarnScaling(4.0, 512)),
        ),
        ({"position": "relative_bias", "relative_buckets": 16}, RelativeBiasPositions(buckets=16)),
    ],
)
def test_old_position_fields_become_the_encodings_settings(flat, position):
    cfg = configlib.from_dict(ModelConfig, migration.upgrade(flat, whole=False))
    assert cfg.position == ModelConfig(position=position).position
    assert configlib.from_dict(ModelConfig, migration.upgrade(configlib.to_dict(cfg), whole=False)) == cfg


@pytest.mark.parametrize(
    "old,new",
    [
        ("model.rope_scaling_factor=4", "model.position.scaling.factor"),
        ("model.scan_layers=true", "model.execution.scan_layers"),
        ("model.dtype=bfloat16", "model.execution.dtype"),
        ("model.norm_eps=1e-6", "model.norm.eps"),
    ],
)
def test_an_old_set_key_names_its_new_key(old, new):
    with pytest.raises(ConfigError, match=rf"'{old.split('=')[0]}' was renamed: {new}"):
        apply_overrides(Config(), [old])


def test_old_execution_fields_become_the_group():
    flat = {"kind": "decoder_lm", "dtype": "bfloat16", "scan_layers": True, "remat": "full"}
    cfg = configlib.from_dict(ModelConfig, migration.upgrade(flat, whole=False))
    assert (cfg.execution.dtype, cfg.execution.scan_layers, cfg.execution.remat) == ("bfloat16", True, "full")
    assert cfg.execution.attention_impl == ExecutionConfig().attention_impl


_OLD_DATA = [
    {"dataset": "text", "path": "a.txt", "val_path": "b.txt", "tokenizer": "sentencepiece", "vocab_size": 500,
     "sp_model_type": "unigram", "sp_byte_fallback": False, "packing": "documents", "document_split": "line",
     "decode_errors": "replace", "chunk_chars": 100, "cache_dir": "/c", "tokenizer_max_records": 9, "seq_len": 32},
    {"dataset": "parallel", "dir": "d", "src_lang": "fr", "tokenizer": "byte", "max_src_len": 20, "val_fraction": 0.2},
    {"dataset": "tfds", "tfds_name": "lm1b", "tfds_download": True, "packing": "documents", "max_records_in_memory": 5},
    {"dataset": "prepared", "path": "p", "packing": "documents", "prefetch": 0, "worker_count": 2},
    {"dataset": "mixture", "mixture": "a=/a:1,b=/b:1", "mixture_schedule": "5:a=0,b=1", "seed": 3},
    {"dataset": "associative_recall", "task_format": "seq2seq", "synthetic_vocab": 12, "synthetic_max_len": 6,
     "synthetic_train_size": 7, "max_src_len": 20, "seq_len": 8},
]  # fmt: skip


@pytest.mark.parametrize("old", _OLD_DATA, ids=lambda d: d["dataset"])
def test_old_data_fields_become_the_datasets_settings_and_map_back_exactly(old):
    from transformer_jax.core.migration.data import _OLD_DEFAULTS
    from transformer_jax.data import DataConfig, DatasetConfig

    cfg = configlib.from_dict(DataConfig, migration.upgrade({"data": old})["data"])
    assert isinstance(cfg.dataset, DatasetConfig.VARIANTS.get(old["dataset"]))
    assert migration.legacy({"data": configlib.to_dict(cfg)})["data"] == {**_OLD_DEFAULTS, **old}


def test_an_old_data_field_its_dataset_did_not_read_is_refused_by_name():
    from transformer_jax.data import DataConfig

    with pytest.raises(ConfigError, match=r"unknown ShakespeareData field\(s\) \['path'\]"):
        configlib.from_dict(DataConfig, migration.upgrade({"data": {"dataset": "shakespeare", "path": "x"}})["data"])


@pytest.mark.parametrize(
    "old,new",
    [
        ("data.path=a.txt", "data.dataset.path"),
        ("data.vocab_size=500", "data.dataset.tokenizer.vocab_size"),
        ("data.synthetic_vocab=8", "data.dataset.vocab"),
        ("data.mixture_schedule=5:a=1", "data.dataset.schedule"),
        ("data.tfds_name=lm1b", "data.dataset.name"),
    ],
)
def test_an_old_data_key_names_its_new_key(old, new):
    with pytest.raises(ConfigError, match=rf"'{old.split('=')[0]}' was renamed: {new} \(with "):
        apply_overrides(Config(), [old])


@pytest.mark.parametrize(
    "flat,attention",
    [
        ({"attention_kind": "softmax", "attention_scale": 1.0, "causal": False}, SoftmaxAttention(1.0, causal=False)),
        ({"attention_kind": "sliding_window", "attention_window": 8}, SlidingWindowAttention(window=8)),
        (
            {"attention_pattern": "local_global", "attention_local_window": 4, "attn_softcap": 50.0, "qk_norm": True},
            LocalGlobalAttention(local_window=4, softcap=50.0, qk_norm=True),
        ),
        ({"attention_kind": "linear", "qkv_bias": True}, LinearAttention(qkv_bias=True)),
    ],
)
def test_old_attention_fields_become_the_kinds_settings_and_map_back(flat, attention):
    cfg = configlib.from_dict(ModelConfig, migration.upgrade(flat, whole=False))
    assert cfg.attention == attention
    back = migration.legacy(configlib.to_dict(cfg), whole=False)
    assert {k: back[k] for k in flat} == flat
    assert configlib.from_dict(ModelConfig, migration.upgrade(back, whole=False)) == cfg


def test_an_old_attention_set_key_names_its_new_key():
    with pytest.raises(ConfigError, match=r"'model.attention_window' was renamed: model.attention.window"):
        apply_overrides(Config(), ["model.attention_window=16"])


def test_old_init_fields_become_the_group_and_map_back():
    flat = {"init": "xavier", "init_std": 0.5, "zero_init_out": True}
    cfg = configlib.from_dict(ModelConfig, migration.upgrade(flat, whole=False))
    assert cfg.init == InitConfig(scheme="xavier", std=0.5, zero_out=True)
    back = migration.legacy(configlib.to_dict(cfg), whole=False)
    assert {k: back[k] for k in flat} == flat
    with pytest.raises(ConfigError, match=r"'model.init_std' was renamed: model.init.std"):
        apply_overrides(Config(), ["model.init_std=0.1"])


def test_old_embedding_fields_become_the_group_and_map_back():
    flat = {"tie_embeddings": False, "scale_embeddings": True, "share_embeddings": False}
    cfg = configlib.from_dict(ModelConfig, migration.upgrade(flat, whole=False))
    assert cfg.embeddings == EmbeddingsConfig(tie=False, scale=True, share=False)
    assert {k: v for k, v in migration.legacy(configlib.to_dict(cfg), whole=False).items() if k in flat} == flat
    with pytest.raises(ConfigError, match=r"'model.tie_embeddings' was renamed: model.embeddings.tie"):
        apply_overrides(Config(), ["model.tie_embeddings=false"])


@pytest.mark.parametrize(
    "flat",
    [
        {"vocab_size": 65, "d_model": 64, "n_heads": 2, "n_layers": 3, "max_len": 32, "final_softcap": 15.0},
        {"kind": "encoder_decoder", "n_encoder_layers": 2, "d_ff": 96, "tie_embeddings": False, "final_softcap": None},
    ],
)
def test_old_size_fields_become_the_dims_group_final_softcap_the_embeddings_and_map_back(flat):
    cfg = configlib.from_dict(ModelConfig, migration.upgrade(flat, whole=False))
    sizes = {k: v for k, v in flat.items() if k in ModelDims.__dataclass_fields__}
    assert cfg.dims == ModelDims(**sizes)
    assert cfg.embeddings.final_softcap == flat["final_softcap"]
    back = migration.legacy(configlib.to_dict(cfg), whole=False)
    assert {k: back[k] for k in flat} == flat and "dims" not in back
    assert (
        "final_softcap" not in configlib.to_dict(cfg)
        and configlib.from_dict(ModelConfig, migration.upgrade(back, whole=False)) == cfg
    )


@pytest.mark.parametrize(
    "old,new",
    [("model.d_model=64", "model.dims.d_model"), ("model.n_layers=2", "model.dims.n_layers"),
     ("model.final_softcap=15", "model.embeddings.final_softcap")],
)  # fmt: skip
def test_an_old_size_or_softcap_key_names_its_new_key(old, new):
    with pytest.raises(ConfigError, match=rf"'{old.split('=')[0]}' was renamed: {new}"):
        apply_overrides(Config(), [old])

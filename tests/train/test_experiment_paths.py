"""`absolute_paths`: the config a run stores names its files absolutely (each of a comma-separated
list), leaves URLs and absolute paths alone, and makes a local ``train.init_from`` absolute."""

import dataclasses

from transformer_jax.data import DataConfig, TextData
from transformer_jax.train.config import Config, TrainConfig
from transformer_jax.train.experiment import absolute_paths


def test_relative_paths_become_absolute_and_urls_stay(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base").mkdir()
    data = DataConfig(dataset=TextData(path="a.txt, sub/b.txt", val_path="gs://bucket/val.txt", cache_dir="/abs/cache"))
    cfg = absolute_paths(Config(data=data, train=TrainConfig(init_from="base")))
    dataset = cfg.data.dataset
    assert isinstance(dataset, TextData) and dataset.path == f"{tmp_path}/a.txt,{tmp_path}/sub/b.txt"
    assert dataset.val_path == "gs://bucket/val.txt" and dataset.cache_dir == "/abs/cache"
    assert cfg.train.init_from == str(tmp_path / "base")
    assert absolute_paths(cfg) == cfg
    missing = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, init_from="no/such/dir"))
    assert absolute_paths(missing).train.init_from == "no/such/dir"  # not a local path: its error names it as typed

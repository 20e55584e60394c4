"""Loggers by name (``train.log.loggers``) and wandb with its settings (``train.log.wandb``): the
registry, validation of the config fields, a missing
package as an error naming the extra (exit 2 from the command line), and the JSON-lines logger alone."""

import json
import subprocess
import sys

import pytest

from tests.cli_helpers import TINY, child_env, cli
from transformer_jax.core import configlib
from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.overrides import apply_overrides
from transformer_jax.train import loggers
from transformer_jax.train.config import Config, LogConfig, TrainConfig
from transformer_jax.train.loggers import WandbConfig
from transformer_jax.train.metrics import MetricsWriter, read_metrics


def test_the_registry_holds_the_three_loggers_and_the_default_writes_both_files():
    assert set(loggers.LOGGERS.names()) == {"jsonl", "tensorboard", "wandb"}
    assert TrainConfig().log.loggers == ("jsonl", "tensorboard") and TrainConfig().log.wandb is None
    assert loggers.LOGGERS.get("wandb").extra == "wandb"
    assert loggers.LOGGERS.get("tensorboard").extra is None  # tensorboardX writes; the extra is the viewer


@pytest.mark.parametrize(
    ("cls", "kwargs", "needles"),
    [
        (LogConfig, {"loggers": ("jsonl", "tensorbord")}, ["train.log.loggers='tensorbord'", "mean 'tensorboard'"]),
        (LogConfig, {"loggers": ("jsonl", "jsonl")}, ["train.log.loggers=('jsonl', 'jsonl')", "a logger twice"]),
        (LogConfig, {"loggers": "jsonl"}, ["train.log.loggers='jsonl'", "must be a tuple of logger names"]),
        (LogConfig, {"loggers": ("jsonl", "wandb")}, ["train.log.loggers=('jsonl', 'wandb')", "train.log.wandb=on"]),
        (WandbConfig, {"project": " "}, ["train.log.wandb.project=' '", "non-empty"]),
        (WandbConfig, {"entity": ""}, ["train.log.wandb.entity=''", "team or user"]),
    ],
)
def test_bad_values_are_refused_on_construction_naming_field_and_fix(cls, kwargs, needles):
    with pytest.raises(ConfigError) as err:
        cls(**kwargs)
    for needle in needles:
        assert needle in str(err.value)


def test_choices_listed_for_an_unknown_logger():
    with pytest.raises(ConfigError, match="choose one of: jsonl, tensorboard$"):
        LogConfig(loggers=("csv",))


def test_wandb_settings_exist_only_with_the_wandb_logger():
    with pytest.raises(ConfigError, match=r"train.log.wandb is None \(off\).*--set train.log.wandb=on"):
        apply_overrides(Config(), ["train.log.wandb.project=mine"])
    cfg = apply_overrides(Config(), ["train.log.wandb=on", "train.log.wandb.project=mine"])
    assert cfg.train.log.wandb == WandbConfig(project="mine")
    assert cfg.train.log.logger_names() == ("jsonl", "tensorboard", "wandb")


def test_config_round_trip_keeps_the_tuple_and_the_wandb_settings():
    cfg = Config(train=TrainConfig(log=LogConfig(loggers=("jsonl",), wandb=WandbConfig(entity="team"))))
    back = configlib.from_dict(Config, json.loads(configlib.to_json(cfg)))
    assert back == cfg and back.train.log.loggers == ("jsonl",)


def test_a_missing_package_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setattr(loggers, "_installed", lambda module: module != "wandb")
    with pytest.raises(ConfigError) as err:
        MetricsWriter(tmp_path / "run", loggers=("jsonl", "wandb"))
    message = str(err.value)
    assert "'wandb' logger needs the 'wandb' package" in message
    assert "pip install -c constraints.txt 'transformer-jax[wandb]'" in message
    assert "set train.log.wandb=none" in message
    loggers.check_installed(("jsonl", "tensorboard"))  # the dependencies are always there


def test_jsonl_alone_writes_no_tensorboard_files(tmp_path):
    with MetricsWriter(tmp_path, loggers=("jsonl",)) as writer:
        writer.write(1, {"loss": 2.0, "v": [1.0, 2.0]})
    assert [{k: v for k, v in r.items() if k != "time"} for r in read_metrics(tmp_path)] == [
        {"step": 1, "loss": 2.0, "v": [1.0, 2.0]}
    ]
    assert not (tmp_path / loggers.TB_DIR).exists()


def test_no_loggers_writes_nothing(tmp_path):
    with MetricsWriter(tmp_path, loggers=()) as writer:
        writer.write(1, {"loss": 2.0})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_cli_unknown_logger_exits_2_naming_field_and_choices(tmp_path):
    proc = cli("train", "--config", TINY, "--workdir", str(tmp_path / "w"), "--set", "train.log.loggers=jsonl,tb",
               check=False)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "train.log.loggers='tb': unknown logger" in proc.stderr and "jsonl, tensorboard" in proc.stderr


@pytest.mark.slow
def test_cli_missing_logger_package_exits_2_before_training(tmp_path):
    workdir = tmp_path / "w"
    script = (
        "import sys; from transformer_jax.train import loggers\n"
        "loggers._installed = lambda module: module != 'wandb'  # as if the extra were not installed\n"
        "from transformer_jax.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    args = ["train", "--config", TINY, "--workdir", str(workdir), "--set", "train.log.wandb=on"]
    proc = subprocess.run([sys.executable, "-c", script, *args], env=child_env(), capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "pip install -c constraints.txt 'transformer-jax[wandb]'" in proc.stderr
    assert not (workdir / "checkpoints").exists() and not (workdir / "metrics.jsonl").exists()

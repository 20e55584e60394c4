"""Loggers by name (``train.loggers``): the registry, validation of the config fields, a missing
package as an error naming the extra (exit 2 from the command line), and the JSON-lines logger alone."""

import json
import subprocess
import sys

import pytest

from tests.cli_helpers import TINY, child_env, cli
from transformer_jax.core import configlib
from transformer_jax.core.configlib import ConfigError
from transformer_jax.train import loggers
from transformer_jax.train.config import Config, TrainConfig
from transformer_jax.train.metrics import MetricsWriter, read_metrics


def test_the_registry_holds_the_three_loggers_and_the_default_writes_both_files():
    assert set(loggers.LOGGERS.names()) == {"jsonl", "tensorboard", "wandb"}
    assert TrainConfig().loggers == ("jsonl", "tensorboard")
    assert loggers.LOGGERS.get("wandb").extra == "wandb"
    assert loggers.LOGGERS.get("tensorboard").extra is None  # tensorboardX writes; the extra is the viewer


@pytest.mark.parametrize(
    ("kwargs", "needles"),
    [
        ({"loggers": ("jsonl", "tensorbord")}, ["train.loggers='tensorbord'", "did you mean 'tensorboard'", "wandb"]),
        ({"loggers": ("jsonl", "jsonl")}, ["train.loggers=('jsonl', 'jsonl')", "names a logger twice"]),
        ({"loggers": "jsonl"}, ["train.loggers='jsonl'", "must be a tuple of logger names"]),
        ({"wandb_project": " "}, ["train.wandb_project=' '", "non-empty"]),
        ({"wandb_entity": ""}, ["train.wandb_entity=''", "team or user"]),
    ],
)
def test_bad_values_are_refused_on_construction_naming_field_and_fix(kwargs, needles):
    with pytest.raises(ConfigError) as err:
        TrainConfig(**kwargs)
    for needle in needles:
        assert needle in str(err.value)


def test_choices_listed_for_an_unknown_logger():
    with pytest.raises(ConfigError, match="choose one of: jsonl, tensorboard, wandb"):
        TrainConfig(loggers=("csv",))


def test_wandb_settings_without_the_wandb_logger_are_unread():
    cfg = Config(train=TrainConfig(wandb_project="mine"))
    with pytest.raises(ConfigError, match=r"train.wandb_project='mine' is not read with train.loggers=\("):
        configlib.check_reads(cfg)
    configlib.check_reads(Config(train=TrainConfig(loggers=("jsonl", "wandb"), wandb_project="mine")))


def test_config_round_trip_keeps_the_tuple():
    cfg = Config(train=TrainConfig(loggers=("jsonl",)))
    back = configlib.from_dict(Config, json.loads(configlib.to_json(cfg)))
    assert back == cfg and back.train.loggers == ("jsonl",)


def test_a_missing_package_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setattr(loggers, "_installed", lambda module: module != "wandb")
    with pytest.raises(ConfigError) as err:
        MetricsWriter(tmp_path / "run", loggers=("jsonl", "wandb"))
    message = str(err.value)
    assert "'wandb' logger needs the 'wandb' package" in message
    assert "pip install -c constraints.txt 'transformer-jax[wandb]'" in message
    assert "remove 'wandb' from train.loggers" in message
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
    proc = cli("train", "--config", TINY, "--workdir", str(tmp_path / "w"), "--set", "train.loggers=jsonl,tb",
               check=False)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "train.loggers='tb': unknown logger" in proc.stderr and "jsonl, tensorboard, wandb" in proc.stderr


@pytest.mark.slow
def test_cli_missing_logger_package_exits_2_before_training(tmp_path):
    workdir = tmp_path / "w"
    script = (
        "import sys; from transformer_jax.train import loggers\n"
        "loggers._installed = lambda module: module != 'wandb'  # as if the extra were not installed\n"
        "from transformer_jax.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    args = ["train", "--config", TINY, "--workdir", str(workdir), "--set", "train.loggers=jsonl,wandb"]
    proc = subprocess.run([sys.executable, "-c", script, *args], env=child_env(), capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "pip install -c constraints.txt 'transformer-jax[wandb]'" in proc.stderr
    assert not (workdir / "checkpoints").exists() and not (workdir / "metrics.jsonl").exists()

"""The loggers of the extras, offline: TensorBoard's own reader sees the events (the ``tensorboard``
extra), and a Weights & Biases run in offline mode holds the logged metrics (the ``wandb`` extra)."""

import json
import struct
import time

import pytest

from tests.cli_helpers import child_env, train_cmd
from transformer_jax.train.metrics import MetricsWriter, read_metrics

event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator", reason="the tensorboard extra is not installed"
)
wandb_pb = pytest.importorskip("wandb.proto.wandb_internal_pb2", reason="the wandb extra is not installed")


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """wandb with no network and nothing outside ``tmp_path``."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb_cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wandb_dir").mkdir()
    return tmp_path / "wandb_dir"


def wandb_records(folder) -> tuple[list[dict], dict]:
    """(history rows, config) of the one offline run under ``folder``: its ``.wandb`` file is a
    LevelDB-style log (a 7-byte header, 32 KiB blocks of checksum/length/type-framed chunks) of
    protobuf ``Record``s."""
    (path,) = folder.glob("wandb/offline-run-*/run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, chunks, records = 32768, 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # the block's tail is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunks += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            records.append(wandb_pb.Record.FromString(chunks))
            chunks = b""
    rows = []
    for r in records:
        if r.WhichOneof("record_type") == "history":
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
            rows.append({k: v for k, v in row.items() if k == "_step" or not k.startswith("_")})
    config = {}
    for r in records:
        kind = r.WhichOneof("record_type")
        updates = r.run.config.update if kind == "run" else r.config.update if kind == "config" else ()
        config.update({item.key: json.loads(item.value_json) for item in updates})
    return rows, config


def test_tensorboard_reads_the_events(tmp_path):
    with MetricsWriter(tmp_path, loggers=("tensorboard",)) as writer:
        writer.write(10, {"train/loss": 2.5, "layer_rms": [0.5, 1.5], "note": "text"})
        writer.write(20, {"train/loss": 1.25})
    acc = event_accumulator.EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert sorted(acc.Tags()["scalars"]) == ["layer_rms/0", "layer_rms/1", "train/loss"]
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(10, 2.5), (20, 1.25)]
    assert not (tmp_path / "metrics.jsonl").exists()


def test_wandb_offline_run_holds_the_metrics_and_config(offline, tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_DIR")  # then the run's files go to the workdir
    workdir = tmp_path / "run"
    with MetricsWriter(workdir, loggers=("wandb",), run_config={"train": {"steps": 2}}, name="unit") as writer:
        writer.write(1, {"train/loss": 2.5, "layer_rms": [0.5, 1.5], "sample": "to be"})
        writer.write(2, {"train/loss": 1.25, "val": {"loss": 1.5}})
    rows, config = wandb_records(workdir)
    for _ in range(60):  # wandb's service may still be appending the history after finish() under load
        if len(rows) >= 2:
            break
        time.sleep(0.5)
        rows, config = wandb_records(workdir)
    assert rows == [
        {"_step": 1, "train/loss": 2.5, "layer_rms/0": 0.5, "layer_rms/1": 1.5, "sample": "to be"},
        {"_step": 2, "train/loss": 1.25, "val/loss": 1.5},
    ]
    assert config["train"] == {"steps": 2}
    assert not (workdir / "metrics.jsonl").exists()


@pytest.mark.slow
def test_training_logs_to_wandb_offline_the_steps_of_the_json_lines(offline, tmp_path):
    import subprocess

    workdir = tmp_path / "run"
    cmd = train_cmd(workdir, "train.log.loggers=jsonl", "train.log.wandb=on", "train.log.wandb.project=unit-tests")
    proc = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    json.loads(proc.stdout.strip().splitlines()[-1])  # the summary is still the last line of stdout
    rows, config = wandb_records(offline)
    logged = [r for r in read_metrics(workdir) if "train/loss" in r]
    assert logged and [(r["_step"], r["train/loss"]) for r in rows if "train/loss" in r] == [
        (r["step"], r["train/loss"]) for r in logged
    ]
    log = config["train"]["log"]
    assert log["loggers"] == ["jsonl"] and log["wandb"]["project"] == "unit-tests"
    assert not (workdir / "tb").exists()

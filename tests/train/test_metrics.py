"""MetricsWriter (JSON lines + TensorBoard), ProgressBar, and FLOP/MFU helpers."""

import io
import json
import math
import pathlib
import struct
import time
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.train import flops
from transformer_jax.train.metrics import MetricsWriter, ProgressBar, read_metrics


def _read_events(tb_dir: pathlib.Path) -> list[tuple[int, str, float]]:
    """(step, tag, value) of every scalar in the TFRecord event files, without TensorFlow."""
    from tensorboardX.proto import event_pb2

    files = sorted(tb_dir.glob("events.out.tfevents.*"))
    assert files and all(f.stat().st_size > 0 for f in files)
    scalars = []
    for path in files:
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos : pos + 8])
            record = data[pos + 12 : pos + 12 + length]  # skip the length's crc
            pos += 12 + length + 4  # and the data's crc
            event = event_pb2.Event.FromString(record)
            for value in event.summary.value:
                scalars.append((event.step, value.tag, value.simple_value))
    return scalars


def test_write_then_read_back(tmp_path):
    before = time.time()
    with MetricsWriter(tmp_path) as writer:
        writer.write(1, {"loss": jnp.float32(2.5), "lr": np.float64(1e-3), "tokens": np.int64(4096)})
        writer.write(2, {"loss": 2.0, "layer_rms": jnp.array([1.0, 2.0, 3.0]), "eval": {"loss": 3.0}})
        writer.write(3, {"loss": float("nan"), "grad_norm": jnp.inf, "neg": -math.inf, "note": "spike"})
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3
    for line in lines:  # strict JSON: no bare NaN/Infinity
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    records = read_metrics(tmp_path)
    stamps = [r.pop("time") for r in records]
    assert before <= stamps[0] <= stamps[1] <= stamps[2] <= time.time()
    assert records[0] == {"step": 1, "loss": 2.5, "lr": 1e-3, "tokens": 4096}
    assert isinstance(records[0]["tokens"], int)
    assert records[1] == {"step": 2, "loss": 2.0, "layer_rms": [1.0, 2.0, 3.0], "eval/loss": 3.0}
    assert math.isnan(records[2]["loss"]) and records[2]["grad_norm"] == math.inf
    assert records[2]["neg"] == -math.inf and records[2]["note"] == "spike"


def test_tensorboard_events_are_readable(tmp_path):
    with MetricsWriter(tmp_path) as writer:
        writer.write(10, {"loss": 2.5, "layer_rms": np.array([0.5, 1.5])})
        writer.write(20, {"loss": 1.25})
    got = sorted(_read_events(tmp_path / "tb"))
    assert got == [(10, "layer_rms/0", 0.5), (10, "layer_rms/1", 1.5), (10, "loss", 2.5), (20, "loss", 1.25)]


def test_disabled_writes_nothing(tmp_path):
    workdir = tmp_path / "run"
    with MetricsWriter(workdir, enabled=False) as writer:
        writer.write(1, {"loss": 1.0})
        writer.flush()
    assert not workdir.exists()
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        read_metrics(workdir)


def test_resume_drops_later_steps(tmp_path):
    with MetricsWriter(tmp_path) as writer:
        for step in (1, 2, 3, 4):
            writer.write(step, {"loss": float(step)})
    with MetricsWriter(tmp_path, resume_step=2) as writer:
        writer.write(3, {"loss": 30.0})
    assert [(r["step"], r["loss"]) for r in read_metrics(tmp_path)] == [(1, 1.0), (2, 2.0), (3, 30.0)]


def test_bad_values_and_truncated_line(tmp_path):
    with MetricsWriter(tmp_path) as writer:
        with pytest.raises(ValueError, match="'step'"):
            writer.write(1, {"step": 3})
        with pytest.raises(ValueError, match="'time'"):
            writer.write(1, {"time": 3.0})
        with pytest.raises(TypeError, match="metric 'obj'"):
            writer.write(1, {"obj": object()})
        writer.write(1, {"loss": 1.0})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 2, "lo')  # a crash mid-write
    assert [{k: v for k, v in r.items() if k != "time"} for r in read_metrics(tmp_path)] == [{"step": 1, "loss": 1.0}]


def test_progress_bar_prints_lines_when_not_a_tty():
    out = io.StringIO()
    with ProgressBar(10, initial=2, file=out, mininterval=0) as bar:
        for step in range(3, 11):
            bar.update(step, loss=jnp.float32(2.34567), tok_s=123456.0)
    text = out.getvalue()
    assert "\r" not in text and text.endswith("\n")
    last = text.strip().splitlines()[-1]
    assert "10/10" in last and "loss=2.346" in last and "tok_s=123k" in last
    quiet = io.StringIO()
    with ProgressBar(10, file=quiet, enabled=False) as bar:
        bar.update(5, loss=1.0)
    assert quiet.getvalue() == ""


# ---------------------------------------------------------------------------- FLOPs / MFU


def test_decoder_flops_per_token_hand_example():
    # N = 85M non-embedding params, 12 layers, d = 768, T = 1024 (GPT-2 small-like).
    expected = 6 * 85_000_000 + 12 * 12 * 768 * 1024  # 510e6 + 113_246_208
    assert flops.decoder_flops_per_token(85_000_000, 12, 768, 1024) == expected == 623_246_208


def test_mfu():
    assert flops.mfu(tokens_per_s=1000.0, flops_per_token=6e9, peak=12e12) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="peak"):
        flops.mfu(1.0, 1.0, 0.0)


@pytest.mark.parametrize(
    "kind, bf16, fp32",
    [
        ("NVIDIA H100 80GB HBM3", 989e12, 67e12),
        ("NVIDIA H100 PCIe", 756e12, 51e12),
        ("NVIDIA H200", 989e12, 67e12),
        ("NVIDIA A100-SXM4-80GB", 312e12, 19.5e12),
        ("NVIDIA L4", 121e12, 30.3e12),
        ("NVIDIA L40S", None, None),
        ("Tesla T4", 65e12, 8.1e12),
        ("TPU v4", 275e12, None),
        ("TPU v5 lite", 197e12, None),
        ("TPU v5", 459e12, None),
        ("TPU v6 lite", 918e12, None),
        ("cpu", None, None),
    ],
)
def test_known_peak_flops(kind, bf16, fp32):
    device = types.SimpleNamespace(device_kind=kind)
    assert flops.known_peak_flops(device) == bf16
    assert flops.known_peak_flops(device, jnp.float32) == fp32


def test_known_peak_flops_of_this_cpu_is_none():
    assert flops.known_peak_flops(jax.devices()[0]) is None


def test_gemm_peak_flops_measures_and_caches():
    peak = flops.gemm_peak_flops(n=128, repeats=2)
    assert 1e6 < peak < 1e16
    assert flops.gemm_peak_flops(n=128, repeats=2) == peak  # cached: the same number

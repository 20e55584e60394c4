"""Profiler traces of chosen steps, and FLOPs: MoE counts only the experts a token uses, and the
formula agrees with XLA's cost analysis of the compiled train step on a small dense model."""

import dataclasses
import os
import pathlib

import jax
import pytest

from transformer_jax.benchmarks.train import CONFIGS, bench_train, gpt_config
from transformer_jax.core.configlib import ConfigError
from transformer_jax.models import count_active_params, count_params
from transformer_jax.models.moe_config import MoEConfig
from transformer_jax.models.mtp_config import MTPConfig
from transformer_jax.train.config import TrainConfig
from transformer_jax.train.experiment import load_experiment
from transformer_jax.train.flops import decoder_flops_per_token, model_flops_per_token
from transformer_jax.train.loop import train

TINY = os.path.join(os.path.dirname(__file__), "tiny_experiment.py")


def _trace_files(directory):
    return [pathlib.Path(d, f) for d, _, fs in os.walk(directory) for f in fs if f.endswith(".xplane.pb")]


def test_train_profile_writes_a_trace_naming_the_train_step(tmp_path):
    cfg = load_experiment(TINY, ["train.steps=4", "train.profile=2:3"])
    summary = train(cfg, str(tmp_path / "run"), devices=jax.devices()[:1])
    traces = _trace_files(tmp_path / "run" / "profile")
    assert summary["step"] == 4 and len(traces) == 1, traces
    assert b"train_step" in traces[0].read_bytes()


@pytest.mark.parametrize("bad", ["3", "0:2", "5:4", "a:b"])
def test_profile_steps_are_validated(bad):
    with pytest.raises(ConfigError, match=f"train.profile='{bad}': expected START:STOP"):
        TrainConfig(profile=bad)
    with pytest.raises(ConfigError, match=r"train.profile='11:12': starts after the last step \(train.steps=10\)"):
        TrainConfig(steps=10, profile="11:12")


def test_bench_train_profile_and_flops_cross_check(tmp_path):
    out = bench_train("small", steps=2, warmup=1, profile=str(tmp_path / "trace"))
    traces = _trace_files(tmp_path / "trace")
    assert traces and b"train_step" in traces[0].read_bytes()
    assert out["xla_flops_per_token"] is not None and out["flops_per_token"] > 0


def test_moe_flops_count_only_the_active_experts():
    dense = gpt_config("small")  # d_ff 512
    moe = dataclasses.replace(dense, moe=MoEConfig(n_experts=8, top_k=2, d_expert=256))
    router = sum(dense.dims.d_model * 8 for _ in range(dense.dims.n_layers))  # no biases in this preset
    assert count_params(moe) > 2.5 * count_params(dense)  # 8 experts of 256 against one FFN of 512
    assert count_active_params(moe) == count_params(dense) + router  # 2 x 256 active = the dense 512
    seq = CONFIGS["small"]["seq_len"]
    assert model_flops_per_token(moe, seq) == pytest.approx(model_flops_per_token(dense, seq) + 6 * router)
    assert count_active_params(dense) == count_params(dense)


def test_mtp_flops_agree_with_cost_analysis():
    """What D MTP modules add to the train step: their blocks, attention and D more passes through
    the shared head, by the formula and by XLA (which adds elementwise work: within 5%; leaving out
    the head and attention terms reads 12% low)."""
    base = bench_train("small", steps=1, warmup=1)
    mtp = bench_train("small", steps=1, warmup=1, mtp=MTPConfig(depth=2))
    added_formula = mtp["flops_per_token"] - base["flops_per_token"]
    added_xla = mtp["xla_flops_per_token"] - base["xla_flops_per_token"]
    assert 0.95 <= added_formula / added_xla <= 1.05, (added_formula, added_xla)


def test_formula_and_cost_analysis_agree_on_a_small_dense_model():
    """6 N + 12 L d T against XLA's FLOPs of the whole compiled train step (no scan, so every layer
    is counted; forward, backward and the AdamW update); the formula ignores elementwise work."""
    out = bench_train("small", steps=1, warmup=1)
    ratio = out["xla_flops_per_token"] / out["flops_per_token"]
    assert 0.9 <= ratio <= 1.1, (ratio, out["xla_flops_per_token"], out["flops_per_token"])
    c = CONFIGS["small"]
    cfg = gpt_config("small")
    n = count_params(cfg) - cfg.dims.max_len * cfg.dims.d_model
    assert out["flops_per_token"] == decoder_flops_per_token(n, c["n_layers"], c["d_model"], c["seq_len"])

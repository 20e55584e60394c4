"""Experiment-level configuration: JSON round trip, cross-section checks, errors naming fields."""

import dataclasses

import pytest

from transformer_jax.core import configlib
from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.overrides import apply_overrides
from transformer_jax.data import CopyTask, DataConfig, TextData
from transformer_jax.models import get_preset
from transformer_jax.parallel import MeshConfig
from transformer_jax.train.config import Config, LossConfig, TrainConfig, resolve
from transformer_jax.train.optim import AdamW, InverseSqrtSchedule, OptimConfig


def test_json_round_trip_is_identity():
    cfg = Config(
        model=get_preset("llama_tiny"),
        data=DataConfig(seq_len=32),
        train=TrainConfig(optim=OptimConfig(AdamW(decay_exclude=("bias",)))),
    )
    again = configlib.from_dict(Config, __import__("json").loads(configlib.to_json(cfg)))
    assert again == cfg


@pytest.mark.parametrize(
    "make,field",
    [
        (lambda: Config(model=get_preset("gpt2_tiny", max_len=32), data=DataConfig(seq_len=64)), "data.seq_len"),
        (
            lambda: Config(
                model=get_preset("gpt2_tiny"),
                data=DataConfig(dataset=CopyTask(format="seq2seq", max_src_len=40), seq_len=40),
            ),
            "model.kind",
        ),
        (lambda: TrainConfig(batch_size=12, grad_accum=5), "train.grad_accum"),
        (lambda: TrainConfig(steps=0), "train.steps"),
        (lambda: TrainConfig(loss=LossConfig(label_smoothing=1.0)), "train.loss.label_smoothing"),
        (lambda: TrainConfig(nonfinite="ignore"), "train.nonfinite"),
        (lambda: TrainConfig(max_minutes=-1.0), "train.max_minutes"),
        (lambda: MeshConfig(data=-1, fsdp=-1), "mesh"),
        (lambda: MeshConfig(tensor=0), "mesh.tensor"),
    ],
)
def test_invalid_experiment_configs_name_the_field(make, field):
    with pytest.raises(ConfigError) as err:
        make()
    assert str(err.value).startswith(field), str(err.value)


def test_mesh_resolves_the_rest_and_rejects_bad_products():
    assert MeshConfig(data=-1, fsdp=4).resolve(8) == {"data": 2, "fsdp": 4, "context": 1, "tensor": 1, "expert": 1}
    assert MeshConfig(data=-1, context=4).resolve(8)["data"] == 2
    with pytest.raises(ConfigError, match="divide"):
        MeshConfig(data=-1, fsdp=3).resolve(8)
    with pytest.raises(ConfigError, match="multiply to 4"):
        MeshConfig(data=2, fsdp=2).resolve(8)


def test_inverse_sqrt_gets_d_model_from_the_model():
    cfg = Config(
        model=get_preset("gpt2_tiny"),
        data=DataConfig(seq_len=64),
        train=TrainConfig(optim=OptimConfig(schedule="inverse_sqrt", lr=1.0, warmup_steps=10)),
    )
    assert resolve(cfg).train.optim.schedule == InverseSqrtSchedule(d_model=64)


def test_overrides_of_one_section_are_validated_together():
    cfg = apply_overrides(Config(), ["data.dataset=text", "data.dataset.path=/some/file.txt"])
    assert cfg.data.dataset == TextData(path="/some/file.txt")
    cfg = apply_overrides(cfg, ["train.optim.lr=3e-4", "mesh.fsdp=2", "train.optim.lr=1e-4"])
    assert cfg.train.optim.lr == 1e-4 and cfg.mesh.fsdp == 2
    with pytest.raises(ConfigError, match="did you mean train.optim.warmup_steps"):
        apply_overrides(cfg, ["train.optim.warmup=5"])
    assert dataclasses.is_dataclass(cfg)

"""A seconds-sized experiment for end-to-end training tests (offline Shakespeare, char level)."""

from transformer_jax.data import CharSettings, DataConfig, ShakespeareData
from transformer_jax.models import get_preset
from transformer_jax.train.config import CheckpointConfig, Config, EvalConfig, LogConfig, TrainConfig
from transformer_jax.train.optim import CosineSchedule, OptimConfig


def get_config() -> Config:
    return Config(
        name="tiny",
        model=get_preset("nanogpt_char", d_model=32, n_heads=2, d_ff=64, n_layers=2, max_len=32),
        data=DataConfig(dataset=ShakespeareData(tokenizer=CharSettings()), seq_len=32),
        train=TrainConfig(
            steps=6,
            batch_size=4,
            eval=EvalConfig(every=3, batches=2),
            log=LogConfig(every=1),
            checkpoint=CheckpointConfig(every=2),
            optim=OptimConfig(lr=3e-3, warmup_steps=2, schedule=CosineSchedule(min_lr=1e-4, decay_steps=6)),
        ),
    )

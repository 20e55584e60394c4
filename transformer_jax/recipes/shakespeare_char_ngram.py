"""A character 6-gram with interpolated Kneser-Ney on shakespeare_char: the count-based baseline of
``shakespeare_char.py`` (same corpus, tokenizer, 64-token validation rows and perplexity).

``transformer-jax train`` fits it in seconds (``model.kind="ngram"`` dispatches to
``transformer_jax.train.ngram.train_ngram``); ``--set model.baseline.ngram_order=3`` or
``model.baseline.smoothing=add_k model.baseline.smoothing.k=0.1`` compare variants.
"""

from transformer_jax.data import CharSettings, DataConfig, ShakespeareData
from transformer_jax.models import KneserNeySmoothing, NgramConfig, baseline_model_config
from transformer_jax.train.config import Config, TrainConfig


def get_config() -> Config:
    return Config(
        name="shakespeare_char_ngram",
        model=baseline_model_config("ngram", NgramConfig(ngram_order=6, smoothing=KneserNeySmoothing()), vocab_size=65),
        data=DataConfig(dataset=ShakespeareData(tokenizer=CharSettings()), seq_len=64),
        train=TrainConfig(steps=1, batch_size=12),
    )

"""Bengio et al. (2003) fixed-window neural LM on shakespeare_char at the Transformer baseline's
budget (``shakespeare_char.py``: batch 12, context 64, 2000 steps, the same AdamW recipe except
the peak learning rate, 3e-3) and about its parameter count (0.81M): the embeddings (48-dim,
N(0, 1)) of the last 16 characters concatenated, one tanh layer of 960 units, softmax. Every
position of a 64-token row is a training example; its window never reaches before the row."""

import dataclasses

from transformer_jax.models import InitConfig, WindowLMConfig, baseline_model_config
from transformer_jax.nn.embed import EmbeddingsConfig
from transformer_jax.recipes.shakespeare_char import get_config as transformer_config
from transformer_jax.train.config import Config


def get_config() -> Config:
    base = transformer_config()
    model = baseline_model_config(
        "window_lm",
        WindowLMConfig(window=16, direct=False),
        vocab_size=65,
        d_model=48,
        d_ff=960,
        n_layers=1,
        embeddings=EmbeddingsConfig(tie=False),
        dropout=0.0,
        init=InitConfig(std=1.0),
    )
    train = dataclasses.replace(base.train, optim=dataclasses.replace(base.train.optim, lr=3e-3))
    return Config(name="shakespeare_char_window", model=model, data=base.data, train=train, mesh=base.mesh)

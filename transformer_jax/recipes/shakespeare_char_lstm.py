"""A 2-layer LSTM LM on shakespeare_char at the Transformer baseline's budget
(``shakespeare_char.py``: batch 12, context 64, 2000 steps, the same AdamW recipe except the
peak learning rate, 3e-3) and parameter count (0.81M: hidden 222, tied N(0, 1) embeddings).
Truncated BPTT: each 64-token row is one window whose state starts at zero (rows are random
windows of the text, so no state is carried between batches). ``--set model.baseline.cell=gru``
trains a GRU instead."""

import dataclasses

from transformer_jax.models import InitConfig, LSTMCellConfig, RNNLMConfig, baseline_model_config
from transformer_jax.nn.embed import EmbeddingsConfig
from transformer_jax.recipes.shakespeare_char import get_config as transformer_config
from transformer_jax.train.config import Config


def get_config() -> Config:
    base = transformer_config()
    model = baseline_model_config(
        "rnn_lm",
        RNNLMConfig(cell=LSTMCellConfig()),
        vocab_size=65,
        d_model=222,
        n_layers=2,
        embeddings=EmbeddingsConfig(tie=True),
        dropout=0.0,
        init=InitConfig(std=1.0),
    )
    train = dataclasses.replace(base.train, optim=dataclasses.replace(base.train.optim, lr=3e-3))
    return Config(name="shakespeare_char_lstm", model=model, data=base.data, train=train, mesh=base.mesh)

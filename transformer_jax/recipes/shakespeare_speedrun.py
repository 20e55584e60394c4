"""Time to quality on 2 CPU cores: validation loss on the offline Shakespeare corpus within 10
minutes for the whole command (start-up, compile and evaluations included).

Same tokenizer (characters) and split as the quickstart (``shakespeare_char.py``); validation over
every character of the split. A pure Transformer with the modded-nanogpt ingredients: Muon for the
hidden matrices (AdamW for embeddings, head and norms), RoPE, RMSNorm, QK-norm, ReLU^2,
zero-initialised output projections, a final logit soft-cap, untied embeddings, a linear decay to
zero. 850 steps of 32 x 128 tokens is what fits at about 1.6 steps/s; ``train.max_minutes`` stops a
slower machine earlier. Measured by ``experiments/speedrun_sweep.py``: see
``experiments/results/speedrun/`` (table.md, curves.png, exploration.md).
"""

import dataclasses

from transformer_jax.models import ModelConfig, ModelDims
from transformer_jax.nn.attention_config import SoftmaxAttention
from transformer_jax.nn.embed import EmbeddingsConfig
from transformer_jax.nn.init import InitConfig
from transformer_jax.nn.norm_config import RMSNormConfig
from transformer_jax.nn.position_config import RopePositions
from transformer_jax.recipes.shakespeare_char import get_config as base_config
from transformer_jax.train.optim import LinearSchedule, Muon, OptimConfig

SEQ_LEN = 128
STEPS = 850  # what fits the budget at ~1.6 steps/s with five evaluations (measured on 2 cores)


def model_config(vocab_size: int) -> ModelConfig:
    return ModelConfig(
        kind="decoder_lm",
        dims=ModelDims(vocab_size=vocab_size, d_model=192, n_heads=6, d_ff=768, n_layers=4, max_len=SEQ_LEN),
        placement="pre",
        norm=RMSNormConfig(),
        position=RopePositions(),
        ffn="relu2",
        use_bias=False,
        embeddings=EmbeddingsConfig(tie=False, final_softcap=15.0),
        attention=SoftmaxAttention(qk_norm=True),
        init=InitConfig(zero_out=True),
        dropout=0.0,
    )


def get_config():
    cfg = base_config()
    optim = OptimConfig(
        optimizer=Muon(adam_lr=3e-3, b1=0.9, b2=0.95, weight_decay=0.0, rms=None),
        lr=0.02,
        schedule=LinearSchedule(min_lr=0.0),
        warmup_steps=50,
        grad_clip=None,
    )
    train = dataclasses.replace(
        cfg.train,
        steps=STEPS,
        batch_size=32,
        eval=dataclasses.replace(cfg.train.eval, every=STEPS // 5),
        checkpoint=dataclasses.replace(cfg.train.checkpoint, every=STEPS),
        log=dataclasses.replace(cfg.train.log, every=50),
        max_minutes=9.2,
        optim=optim,
    )
    return dataclasses.replace(
        cfg,
        name="shakespeare_speedrun",
        model=model_config(cfg.model.dims.vocab_size),
        data=dataclasses.replace(cfg.data, seq_len=SEQ_LEN),
        train=train,
    )

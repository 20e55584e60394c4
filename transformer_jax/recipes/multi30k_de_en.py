"""Multi30k German -> English with the original encoder-decoder Transformer sized for a CPU.

Vaswani et al. 2017 at a small size (preset ``original_small``: 3+3 layers, d_model 256, 8
heads, d_ff 1024, dropout 0.1, Post-LN, sinusoidal positions, ReLU, one shared SentencePiece
vocabulary of 8000 pieces trained on the training side, tied embeddings), label smoothing 0.1,
Adam(0.9, 0.98, 1e-9) with the paper's inverse-sqrt warm-up schedule (``lr`` is the multiplier).
Validation computes greedy BLEU (sacrebleu) on the val split (``train.eval.batches`` limits it)
and keeps the best checkpoint by it; ``transformer-jax eval`` then reports beam-4 and greedy BLEU.

Data: ``--set data.dataset.dir=DIR data.dataset.src_lang=de data.dataset.tgt_lang=en`` (files
``{train,val}.{de,en}[.gz]``); default ``../shared/data/multi30k`` beside the repository, else
``/work/shared/data/multi30k``.
"""

from pathlib import Path

from transformer_jax.data import DataConfig, ParallelData, SentencePieceSettings
from transformer_jax.models import get_preset
from transformer_jax.train.action_config import BestCheckpoint, CheckpointConfig, EvalConfig, LogConfig
from transformer_jax.train.config import Config, LossConfig, TrainConfig
from transformer_jax.train.optim import Adam, InverseSqrtSchedule, OptimConfig


def default_data_dir() -> str:
    beside = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "multi30k"
    return str(beside) if beside.is_dir() else "/work/shared/data/multi30k"


def get_config() -> Config:
    return Config(
        name="multi30k_de_en",
        model=get_preset("original_small", dropout=0.1),
        # Pieces per sentence: mean ~15, 99th percentile 33 (de) / 29 (en); rows are padded to these
        # lengths, so they are kept short (about 1% of the training pairs lose a few pieces).
        data=DataConfig(
            dataset=ParallelData(
                dir=default_data_dir(),
                src_lang="de",
                tgt_lang="en",
                tokenizer=SentencePieceSettings(vocab_size=8000),
                max_src_len=32,
            ),
            seq_len=32,
        ),
        train=TrainConfig(
            steps=4000,
            batch_size=64,
            loss=LossConfig(label_smoothing=0.1),
            eval=EvalConfig(every=500),
            log=LogConfig(every=50),
            checkpoint=CheckpointConfig(every=500, best=BestCheckpoint(metric="bleu", mode="max")),
            max_minutes=115,
            # peak lr = 0.7 * 256**-0.5 * 1000**-0.5 = 1.4e-3 at step 1000, then 1/sqrt(step)
            optim=OptimConfig(
                optimizer=Adam(b1=0.9, b2=0.98, eps=1e-9),  # Adam never decays weights: no weight_decay
                lr=0.7,
                schedule=InverseSqrtSchedule(),
                warmup_steps=1000,
                grad_clip=1.0,
            ),
        ),
    )

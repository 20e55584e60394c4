"""The 336M LLaMA-like model (``llama_like``: 24 layers, d_model 1024, 16 heads / 4 KV heads, SwiGLU
2816) at sequence 2048 in bfloat16 activations with float32 parameters and AdamW, layers scanned:
the recipe that ``transformer-jax compile`` plans pod runs with (docs/scaling.md, "Plan a run on TPUs or
GPUs") and the GPU benchmark measures. Global batch 32 x 2048 tokens; set ``mesh.*`` and
``train.batch_size`` for the slice (``--set mesh.fsdp=4 train.batch_size=8`` on a v5p-8).

Attention is ``xla`` (the T x T scores in memory), the same program on every platform; the compile
report shows what ``--set model.execution.attention_impl=splash`` (TPU), ``pallas_gpu`` or ``cudnn`` (GPU), or
``auto`` (the fastest exact kernel of the platform) saves.

The default data is the offline Shakespeare corpus with a 32,000-piece SentencePiece BPE
tokenizer, enough to start the run anywhere; for a real pod run train on your corpus
(``--set data.dataset=text data.dataset.path=...``: text files or a directory; with
``data.dataset.tokenizer=sentencepiece data.dataset.tokenizer.vocab_size=32000``)."""

from transformer_jax.data import DataConfig, SentencePieceSettings, ShakespeareData
from transformer_jax.models import get_preset
from transformer_jax.train.action_config import CheckpointConfig, EvalConfig, LogConfig
from transformer_jax.train.config import Config, TrainConfig
from transformer_jax.train.optim import AdamW, CosineSchedule, OptimConfig

SEQ_LEN = 2048


def get_config() -> Config:
    return Config(
        name="pod_llama_350m",
        model=get_preset(
            "llama_like",
            max_len=SEQ_LEN,
            dtype="bfloat16",
            param_dtype="float32",
            scan_layers=True,
            attention_impl="xla",
            decode_impl="auto",
            dropout=0.0,
        ),
        data=DataConfig(dataset=ShakespeareData(tokenizer=SentencePieceSettings(vocab_size=32000)), seq_len=SEQ_LEN),
        train=TrainConfig(
            steps=20000,
            batch_size=32,
            eval=EvalConfig(every=1000, batches=20),
            log=LogConfig(every=50),
            checkpoint=CheckpointConfig(every=1000),
            optim=OptimConfig(
                optimizer=AdamW(b1=0.9, b2=0.95, weight_decay=0.1),
                lr=3e-4,
                schedule=CosineSchedule(min_lr=3e-5),
                warmup_steps=1000,
                grad_clip=1.0,
            ),
        ),
    )

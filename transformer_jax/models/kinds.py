"""The model kinds: ``MODELS`` maps ``model.kind`` to its model class (each registers itself with
the ``ModelConfig`` fields it reads, so a setting its kind ignores is an error, not a no-op)."""

from __future__ import annotations

from transformer_jax.core.registry import Registry

MODELS: Registry = Registry("model kind")
TRANSFORMER_KINDS = ("decoder_lm", "encoder_decoder")

ENCODER_DECODER_READS = (
    "vocab_size", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "n_layers", "n_encoder_layers", "max_len",
    "placement", "norm", "position", "ffn", "use_bias", "embeddings.tie", "embeddings.scale",
    "embeddings.share", "dropout", "attention", "execution.attention_impl",
    "execution.attention_block_size", "execution.decode_impl", "execution.decode_block_size",
    "init.scheme", "init.std", "init.zero_out", "execution.scan_layers", "execution.remat", "execution.dtype",
    "execution.param_dtype", "moe", "final_softcap", "mla",
)  # fmt: skip
DECODER_LM_READS = (
    *(f for f in ENCODER_DECODER_READS if f not in ("n_encoder_layers", "embeddings.share")),
    "mtp",  # multi-token prediction: decoder-only
)
_NEURAL_BASELINE = (
    "vocab_size", "d_model", "d_ff", "n_layers", "dropout", "init.std", "embeddings.tie", "execution.dtype",
    "execution.param_dtype",
    "position", "baseline",
)  # fmt: skip
WINDOW_LM_READS = (*_NEURAL_BASELINE, "baseline.window", "baseline.direct")
RNN_LM_READS = (*_NEURAL_BASELINE, "baseline.cell", "baseline.tbptt", "baseline.forget_bias")
NGRAM_READS = ("vocab_size", "position", "baseline", "baseline.ngram_order", "baseline.smoothing",
               "baseline.discount", "baseline.add_k")  # fmt: skip

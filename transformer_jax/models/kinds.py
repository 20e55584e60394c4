"""The model kinds: ``MODELS`` maps ``model.kind`` to its model class (each registers itself with
the ``ModelConfig`` fields it reads, so a setting its kind ignores is an error, not a no-op)."""

from __future__ import annotations

import dataclasses

from transformer_jax.core.registry import Registry
from transformer_jax.nn.execution_config import ExecutionConfig
from transformer_jax.nn.init import InitConfig

MODELS: Registry = Registry("model kind")
TRANSFORMER_KINDS = ("decoder_lm", "encoder_decoder")


def _all_of(group: type, name: str) -> tuple[str, ...]:
    """Every field of the settings group ``group`` at ``model.<name>``, as dotted names."""
    return tuple(f"{name}.{f.name}" for f in dataclasses.fields(group))


# What both Transformer kinds read: the settings groups whole (attention, norm, position, MoE, MLA),
# or field by field where a baseline reads a part (dims, execution, init, embeddings).
_TRANSFORMER = (
    "dims.vocab_size", "dims.d_model", "dims.n_heads", "dims.n_kv_heads", "dims.head_dim", "dims.d_ff",
    "dims.n_layers", "dims.max_len", "placement", "norm", "position", "attention", "ffn", "use_bias", "dropout",
    "moe", "mla", *_all_of(ExecutionConfig, "execution"), *_all_of(InitConfig, "init"), "embeddings.tie",
    "embeddings.scale", "embeddings.final_softcap",
)  # fmt: skip
ENCODER_DECODER_READS = (*_TRANSFORMER, "dims.n_encoder_layers", "embeddings.share")
DECODER_LM_READS = (*_TRANSFORMER, "mtp")  # multi-token prediction: decoder-only
_NEURAL_BASELINE = (
    "dims.vocab_size", "dims.d_model", "dims.n_layers", "dropout", "init.std", "embeddings.tie",
    "execution.dtype", "execution.param_dtype", "position", "baseline",
)  # fmt: skip
WINDOW_LM_READS = (*_NEURAL_BASELINE, "dims.d_ff")  # the RNN has no d_ff; model.baseline holds the kind's own
RNN_LM_READS = _NEURAL_BASELINE
NGRAM_READS = ("dims.vocab_size", "position", "baseline")

"""Pure ``jax.numpy`` building blocks: no parameters, no Flax.

Each submodule documents the shapes and the formula (or paper) it implements:

- ``attention``: ``attention(q_BTHD, k_BSKD, v_BSKD, mask=..., bias=..., kind=..., impl=...)``
  with implementations ``xla``/``cudnn``/``chunked``/``splash`` (TPU)/``pallas_gpu`` (``auto``: chosen by
  backend and mask) and kinds ``softmax``/``sliding_window``/``linear``
- ``masks``: ``AttentionMask`` (causal, padding, segments, sliding window) and dense builders
- ``chunked_attention``, ``linear_attention``: O(T * block) and O(T) attention
- ``positions``: sinusoidal, T5 relative-position buckets and bias, ALiBi
- ``rope``: rotary embeddings (both pairings) with linear / NTK / YaRN scaling
- ``norms``, ``residual``: LayerNorm, RMSNorm; post / pre / DeepNorm placements and constants
- ``activations``: ReLU, GELU, SwiGLU, ... and the feed-forward formula
- ``losses``: cross-entropy with padding, label smoothing and z-loss; perplexity
- ``dropout``, ``kv_cache``
"""

from transformer_jax.ops import (
    activations,
    attention,
    chunked_attention,
    dropout,
    kv_cache,
    linear_attention,
    losses,
    masks,
    norms,
    positions,
    residual,
    rope,
)

__all__ = [
    "activations",
    "attention",
    "chunked_attention",
    "dropout",
    "kv_cache",
    "linear_attention",
    "losses",
    "masks",
    "norms",
    "positions",
    "residual",
    "rope",
]

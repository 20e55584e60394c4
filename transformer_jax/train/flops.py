"""FLOP counts and model-FLOPs utilisation (MFU).

``mfu = tokens_per_s * flops_per_token / peak``, with `decoder_flops_per_token` for the model
and a peak from `known_peak_flops` (published numbers) or `gemm_peak_flops` (measured here).
"""

from __future__ import annotations

import functools
import re
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.models.config import ModelConfig
from transformer_jax.models.util import count_active_params

# Published dense (no sparsity) peaks per chip, FLOP/s: (pattern on device_kind, half, fp32).
# "half" is bfloat16, except T4 (no bf16): float16. TPU fp32 is not published (None).
_PEAKS: tuple[tuple[str, float, float | None], ...] = (
    (r"tpu v4", 275e12, None),
    (r"tpu v5 ?(lite|e)\b", 197e12, None),  # v5e reports "TPU v5 lite"
    (r"tpu v5", 459e12, None),  # v5p
    (r"tpu v6", 918e12, None),  # v6e (Trillium) reports "TPU v6 lite"
    (r"\bh100\b.*\b(pcie)\b", 756e12, 51e12),
    (r"\bh100\b.*\bnvl\b", 835e12, 60e12),
    (r"\bh100\b", 989e12, 67e12),  # SXM ("NVIDIA H100 80GB HBM3")
    (r"\bh200\b.*\bnvl\b", 835e12, 60e12),
    (r"\bh200\b", 989e12, 67e12),
    (r"\ba100\b", 312e12, 19.5e12),
    (r"\bl4\b", 121e12, 30.3e12),
    (r"\bt4\b", 65e12, 8.1e12),
)


def known_peak_flops(device: Any = None, dtype: Any = jnp.bfloat16) -> float | None:
    """The published dense peak FLOP/s of one ``device`` (default: ``jax.devices()[0]``).

    Matched on ``device.device_kind`` (TPU v4/v5e/v5p/v6e, A100, H100 SXM/PCIe/NVL, H200, L4,
    T4). ``dtype``: bfloat16/float16 (tensor-core peak) or float32 (non-tensor-core peak on
    GPUs; not published for TPUs). None for unknown devices, CPUs and unpublished dtypes.
    """
    device = jax.devices()[0] if device is None else device
    kind = str(getattr(device, "device_kind", "")).lower()
    column = {"bfloat16": 1, "float16": 1, "float32": 2}.get(jnp.dtype(dtype).name)
    if column is None:
        raise ValueError(f"dtype={jnp.dtype(dtype).name} has no peak table; use bfloat16 or float32")
    for pattern, *peaks in _PEAKS:
        if re.search(pattern, kind):
            return peaks[column - 1]
    return None


@functools.cache
def _measure(n: int, dtype_name: str, repeats: int, device: jax.Device) -> float:  # pyright: ignore[reportInvalidTypeForm]  # jax re-exports Device as a plain variable, not a type alias
    dtype = jnp.dtype(dtype_name)
    inner = 8  # matmuls per timed call, so dispatch overhead does not dominate on accelerators
    key_a, key_b = jax.random.split(jax.random.key(0))
    a = jax.device_put(jax.random.normal(key_a, (n, n), dtype), device)
    b = jax.device_put(jax.random.normal(key_b, (n, n), dtype) * n**-0.5, device)

    @jax.jit
    def chain(x, w):
        return jax.lax.fori_loop(0, inner, lambda _, y: jnp.dot(y, w), x)

    chain(a, b).block_until_ready()  # compile
    chain(a, b).block_until_ready()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        chain(a, b).block_until_ready()
        times.append(time.perf_counter() - start)
    return 2.0 * n**3 * inner / float(np.median(times))


def gemm_peak_flops(n: int = 1024, dtype: Any = jnp.float32, repeats: int = 5) -> float:
    """Measured FLOP/s of an ``n x n`` GEMM (``jnp.dot`` at default precision) on the default
    device: the median of ``repeats`` timed calls after compile and warm-up. Cached per process
    (per ``n``, dtype, repeats and device). On GPUs default precision may use TF32 for float32.
    """
    if n < 1 or repeats < 1:
        raise ValueError(f"n={n} and repeats={repeats} must be >= 1")
    return _measure(int(n), jnp.dtype(dtype).name, int(repeats), jax.devices()[0])


def decoder_flops_per_token(n_params_non_embedding: int, n_layers: int, d_model: float, seq_len: int) -> float:
    """Training FLOPs (forward + backward) per token of a decoder: ``6 N + 12 L d T``.

    ``6 N``: 2 FLOPs per multiply-add per weight in the forward pass, twice that backward
    (Kaplan et al. 2020, eq. 2.1). ``12 L d T``: the attention scores and weighted sum,
    ``2 * 2 * T * d`` per layer forward, times 3 (PaLM, Chowdhery et al. 2022, appendix B;
    nanoGPT's ``estimate_mfu``); counted for the full T x T score matrix even with a causal mask.
    ``N`` counts the weights that take part in matmuls, i.e. all parameters minus token and
    position lookup tables; a tied output projection counts once (as in nanoGPT).
    """
    return 6.0 * n_params_non_embedding + 12.0 * n_layers * d_model * seq_len


def model_flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """`decoder_flops_per_token` of a model: ``N`` counts the weights one token uses (an MoE layer
    contributes its router, shared experts and only ``top_k`` of its routed experts:
    `count_active_params`), without a learned position table. With MLA the attention term's d is
    H (qk_head_dim + v_head_dim) / 2, the width its scores and weighted sum run at. With
    ``model.mtp`` (depth D) each token also passes D MTP blocks (their weights are in N; their
    attention adds ``12 D d T``) and the shared output head D more times (``6 D d V``)."""
    positions = cfg.dims.max_len * cfg.dims.d_model if cfg.position.kind == "learned" else 0
    width = cfg.dims.d_model if cfg.mla is None else cfg.dims.n_heads * (cfg.mla.qk_head_dim + cfg.mla.v_head_dim) / 2
    main = decoder_flops_per_token(count_active_params(cfg) - positions, cfg.dims.n_layers, width, seq_len)
    if cfg.mtp is None:
        return main
    head = cfg.dims.d_model * cfg.dims.vocab_size
    return main + cfg.mtp.depth * (6.0 * head + 12.0 * width * seq_len)


def compiled_flops(jitted: Any, *args: Any) -> float | None:
    """XLA's ``cost_analysis()["flops"]`` of ``jitted`` compiled for ``args`` (None where the
    backend reports none). These are the compiled program's FLOPs, a cross-check of the formula and
    not a replacement: a ``lax.scan`` body is counted once (not per trip), custom calls (cuDNN,
    Pallas kernels) count zero, rematerialised forward passes count again, and elementwise work
    (norms, softmax, the optimizer update) is included."""
    cost = jitted.lower(*args).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    flops = (cost or {}).get("flops")
    return None if flops is None or flops < 0 else float(flops)


def mfu(tokens_per_s: float, flops_per_token: float, peak: float) -> float:
    """Model-FLOPs utilisation ``tokens_per_s * flops_per_token / peak``, in [0, 1].

    ``peak`` must cover the same devices as ``tokens_per_s``: per-chip peak times the number of
    chips for a global throughput.
    """
    if peak <= 0:
        raise ValueError(f"peak={peak} must be > 0 FLOP/s")
    return tokens_per_s * flops_per_token / peak

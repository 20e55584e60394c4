"""Multi-head attention entry point: `attention(q, k, v, mask=..., kind=..., impl=...)`.

softmax attention (Vaswani et al. 2017): out = softmax(Q K^T * scale + bias, masked) V, with
K key/value heads shared by groups of G = H // K query heads (GQA, Ainslie et al. 2023; MQA when
K = 1). Query rows with no visible key give 0 (and zero gradients) in every implementation.

Variants are looked up by name:
  ATTENTION_KINDS: what is computed   -- softmax | sliding_window | linear
  ATTENTION_IMPLS: how softmax is run -- xla | cudnn | chunked | splash | pallas_gpu | auto
`auto` runs `resolve_impl(platform, ...)`: the fastest implementation that computes the given mask
exactly on the platform compiled for (`core.targets.platform()`: the running backend, or the
target of `compile`); never a kernel that platform cannot run.
Under a mesh with a ``context`` axis of n > 1 devices (context parallelism) the sequence is split
over it in zigzag order and softmax kinds run as `ops.context_parallel.context_attention`: a ring
for impl chunked / auto, the impl itself over all-gathered K/V otherwise.
A new variant is one function with the same keyword signature plus one `register` line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from transformer_jax.core import targets
from transformer_jax.core.registry import Registry
from transformer_jax.ops.chunked_attention import _check_qkv, chunked_attention
from transformer_jax.ops.context_parallel import context_attention, context_impl_for, context_size
from transformer_jax.ops.linear_attention import linear_attention
from transformer_jax.ops.masks import AttentionMask, as_mask
from transformer_jax.ops.pallas_attention import (
    PALLAS_GPU_TAKES,
    SPLASH_TAKES,
    pallas_gpu_attention,
    pallas_gpu_problems,
    refuse_problems,
    splash_attention,
    splash_problems,
)
from transformer_jax.ops.softcap import check_cap
from transformer_jax.ops.softcap import softcap as _softcap

# impl(q, k, v, *, mask, bias, scale, block_size, softcap) -> out
ATTENTION_IMPLS: Registry[Callable[..., Array]] = Registry("attention implementation")
# kind(q, k, v, *, mask, bias, scale, impl, window, block_size, softcap) -> out
ATTENTION_KINDS: Registry[Callable[..., Array]] = Registry("attention kind")


def attention(
    q_BTHD: Float[Array, "B T H D"],
    k_BSKD: Float[Array, "B S K D"],
    v_BSKD: Float[Array, "B S K D"],
    *,
    mask: AttentionMask | Bool[Array, "B|1 H|1 T S"] | None = None,
    bias: Float[Array, "B|1 H|1 T S"] | None = None,
    scale: float | None = None,
    kind: str = "softmax",
    impl: str = "xla",
    window: int | None = None,
    block_size: int = 512,
    softcap: float | None = None,
) -> Float[Array, "B T H D"]:
    """Attention of T queries over S keys; returns [B, T, H, D].

    mask: which keys each query sees (None = all; an `AttentionMask`, or a boolean array such as
    ``causal_mask(T)``, True = visible, broadcastable to [B|1, H|1, T, S]). bias: additive, added to the scaled logits
    (differentiable). scale defaults to 1/sqrt(D). kind: ATTENTION_KINDS name; impl:
    ATTENTION_IMPLS name (ignored by kind="linear"; "auto" picks one per backend and mask);
    window: required by kind="sliding_window"; block_size: query/key tile size of the blockwise
    impls (chunked, splash, pallas_gpu); softcap: logits -> softcap * tanh(logits / softcap) after
    the scale, before bias and mask (Gemma 2; None: off).
    """
    _check_qkv(q_BTHD, k_BSKD, v_BSKD)
    B, T, H, _ = q_BTHD.shape
    mask = as_mask(mask)
    if mask is not None:
        mask.validate(T, k_BSKD.shape[1], B, H)
    kind_fn = ATTENTION_KINDS.get(kind)
    ATTENTION_IMPLS.get(impl)
    check_cap(softcap)
    if context_size() > 1:
        return _context_parallel(
            q_BTHD, k_BSKD, v_BSKD, mask, bias, scale, kind, impl, window, block_size=block_size, softcap=softcap
        )
    return kind_fn(
        q_BTHD,
        k_BSKD,
        v_BSKD,
        mask=mask,
        bias=bias,
        scale=scale,
        impl=impl,
        window=window,
        block_size=block_size,
        softcap=softcap,
    )


def _context_parallel(q, k, v, mask, bias, scale, kind, impl, window, *, block_size, softcap):
    """`attention` of a sequence split over the mesh's ``context`` axis (ops.context_parallel)."""
    if kind not in ("softmax", "sliding_window") or bias is not None:
        what = f"kind={kind!r}" if bias is None else "an additive bias (relative_bias / ALiBi positions)"
        raise ValueError(
            f"context parallelism (mesh.context={context_size()}) has no {what}; "
            "use kind softmax or sliding_window without a bias, or mesh.context=1"
        )
    if kind == "sliding_window":
        if window is None:
            raise ValueError("kind='sliding_window' needs window=<int>, the number of visible positions")
        mask = (AttentionMask() if mask is None else mask).with_window(window)
    elif window is not None:
        raise ValueError(f"window={window} is only used by kind='sliding_window'")

    def attend(q, k, v, *, mask):
        return ATTENTION_IMPLS.get(impl)(q, k, v, mask=mask, scale=scale, block_size=block_size, softcap=softcap)

    return context_attention(
        q,
        k,
        v,
        mask=mask,
        context_impl=context_impl_for(impl),
        attend=attend,
        scale=scale,
        softcap=softcap,
        block_size=block_size,
    )


def _zero_empty_rows(out_BTHD: Array, mask_BHTS: Bool[Array, "B H T S"] | None) -> Array:
    """Set rows with no visible key to 0 (jax's xla path would average all values there)."""
    if mask_BHTS is None:
        return out_BTHD
    seen = jnp.any(mask_BHTS, axis=-1)  # [B|1, H|1, T]
    return out_BTHD * jnp.swapaxes(seen, 1, 2)[..., None].astype(out_BTHD.dtype)


def _dense_bias(bias: Array | None) -> Array | None:
    if bias is None:
        return None
    return jnp.reshape(bias, (1,) * (4 - jnp.ndim(bias)) + jnp.shape(bias))


_MASK_ARRAYS = ("q_positions", "kv_positions", "q_segment_ids", "kv_segment_ids", "kv_valid", "dense")


def _static_dpa_kwargs(mask: AttentionMask | None, T: int, S: int) -> dict | None:
    """is_causal / local_window_size that express `mask` for cuDNN without a T x S mask, or None
    (a mask with arrays, T != S, or a two-sided window, which cuDNN has only with causal)."""
    if mask is None:
        return {}
    if T != S or any(getattr(mask, f) is not None for f in _MASK_ARRAYS):
        return None
    if mask.window is None:
        return {"is_causal": mask.causal}
    if not mask.causal:
        return None
    return {"is_causal": True, "local_window_size": (mask.window - 1, 0)}


def _xla_softcapped(q_BTHD, k_BSKD, v_BSKD, *, mask, bias, scale, softcap: float):
    """softmax(softcap(q k^T * scale) + bias, masked) v in float32 (jax.nn.dot_product_attention
    has no soft cap); query head h reads key/value head h // G."""
    B, T, H, D = q_BTHD.shape
    S, K = k_BSKD.shape[1], k_BSKD.shape[2]
    scale = float(D**-0.5) if scale is None else scale
    q_BTKGD = q_BTHD.reshape(B, T, K, H // K, D)
    s = jnp.einsum("btkgd,bskd->bkgts", q_BTKGD, k_BSKD, preferred_element_type=jnp.float32) * scale
    s = _softcap(s, softcap).reshape(B, H, T, S)
    bias = _dense_bias(bias)
    if bias is not None:
        s = s + bias.astype(jnp.float32)
    dense = None if mask is None else mask.materialize(T, S)
    if dense is not None:
        s = jnp.where(dense, s, jnp.finfo(jnp.float32).min)
    p_BKGTS = jax.nn.softmax(s, axis=-1).reshape(B, K, H // K, T, S).astype(v_BSKD.dtype)
    out = jnp.einsum("bkgts,bskd->btkgd", p_BKGTS, v_BSKD).reshape(B, T, H, D)
    return _zero_empty_rows(out, dense)


def _jax_dpa(q, k, v, *, mask, bias, scale, implementation: Literal["xla", "cudnn"]):
    static = _static_dpa_kwargs(mask, q.shape[1], k.shape[1]) if implementation == "cudnn" else None
    if static is not None:  # cuDNN's own causal / sliding-window mask: no T x S mask in memory
        return jax.nn.dot_product_attention(
            q, k, v, bias=_dense_bias(bias), scale=scale, implementation=implementation, **static
        )
    dense = None if mask is None else mask.materialize(q.shape[1], k.shape[1])
    out = jax.nn.dot_product_attention(
        q, k, v, bias=_dense_bias(bias), mask=dense, scale=scale, implementation=implementation
    )
    return _zero_empty_rows(out, dense)


@ATTENTION_IMPLS.register("xla")
def xla_attention(q, k, v, *, mask=None, bias=None, scale=None, block_size=512, softcap=None):
    """jax.nn.dot_product_attention(implementation='xla') on the materialised T x S mask (with a
    soft cap: the same computation written out in jnp)."""
    if softcap is not None:
        return _xla_softcapped(q, k, v, mask=mask, bias=bias, scale=scale, softcap=softcap)
    return _jax_dpa(q, k, v, mask=mask, bias=bias, scale=scale, implementation="xla")


def _refuse_softcap(impl: str, softcap: float | None) -> None:
    if softcap is not None:
        raise ValueError(
            f"impl={impl!r} has no logit soft cap (softcap={softcap}); use impl='xla', 'chunked' or 'auto'"
        )


@ATTENTION_IMPLS.register("cudnn")
def cudnn_attention(q, k, v, *, mask=None, bias=None, scale=None, block_size=512, softcap=None):
    """jax.nn.dot_product_attention(implementation='cudnn'): cuDNN flash attention, GPU only."""
    _refuse_softcap("cudnn", softcap)
    _need_backend("cudnn", "gpu")
    return _jax_dpa(q, k, v, mask=mask, bias=bias, scale=scale, implementation="cudnn")


@ATTENTION_IMPLS.register("chunked", reads=("block_size",))
def _chunked_impl(q, k, v, *, mask=None, bias=None, scale=None, block_size=512, softcap=None):
    return chunked_attention(q, k, v, mask=mask, bias=bias, scale=scale, block_size=block_size, softcap=softcap)


def _need_backend(impl: str, backend: str) -> None:
    if targets.platform() != backend:
        raise ValueError(
            f"impl={impl!r} needs a {backend.upper()}, but the program is compiled for "
            f"{targets.platform()!r}; use impl='auto', impl='xla' or impl='chunked'"
        )


@ATTENTION_IMPLS.register("splash", reads=("block_size",))
def _splash_impl(q, k, v, *, mask=None, bias=None, scale=None, block_size=512, softcap=None):
    """TPU splash attention (ops.pallas_attention.splash_attention); static masks only."""
    _refuse_softcap("splash", softcap)
    refuse_problems("splash", splash_problems(mask, bias is not None, q.shape, k.shape, block_size), SPLASH_TAKES)
    _need_backend("splash", "tpu")
    return splash_attention(q, k, v, mask=mask, bias=bias, scale=scale, block_size=block_size)


@ATTENTION_IMPLS.register("pallas_gpu", reads=("block_size",))
def _pallas_gpu_impl(q, k, v, *, mask=None, bias=None, scale=None, block_size=512, softcap=None):
    """Pallas/Triton GPU flash attention (ops.pallas_attention.pallas_gpu_attention)."""
    _refuse_softcap("pallas_gpu", softcap)
    problems = pallas_gpu_problems(mask, bias is not None, q.shape, k.shape, block_size)
    refuse_problems("pallas_gpu", problems, PALLAS_GPU_TAKES)
    _need_backend("pallas_gpu", "gpu")
    return pallas_gpu_attention(q, k, v, mask=mask, bias=bias, scale=scale, block_size=block_size)


CHUNKED_MIN_LEN = 2048  # from this key length on, `auto` prefers chunked over xla (O(T * block) memory)
_CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)


def resolve_impl(
    backend: str,
    q_shape: tuple[int, ...],
    k_shape: tuple[int, ...],
    *,
    mask: AttentionMask | None = None,
    bias: Array | None = None,
    dtype=jnp.float32,
    block_size: int = 512,
    softcap: float | None = None,
) -> str:
    """The ATTENTION_IMPLS name `auto` runs for these inputs on `backend` ("cpu" | "gpu" | "tpu").

    tpu: splash when the mask is static (splash_problems), else chunked. gpu: cudnn for
    half-precision inputs whose mask cuDNN expresses itself (no bias, head dim <= 128, multiple of
    8), else pallas_gpu when it fits (pallas_gpu_problems), else as on cpu. cpu (and anything
    else): xla, or chunked once S >= CHUNKED_MIN_LEN. A soft cap rules the kernels out (the
    fallback everywhere)."""
    T, S, D = q_shape[1], k_shape[1], q_shape[-1]
    fallback = "chunked" if S >= CHUNKED_MIN_LEN else "xla"
    has_bias = bias is not None
    if softcap is not None:
        return "chunked" if backend == "tpu" else fallback
    if backend == "tpu":
        return "chunked" if splash_problems(mask, has_bias, q_shape, k_shape, block_size) else "splash"
    if backend == "gpu":
        cudnn_ok = (
            jnp.dtype(dtype) in _CUDNN_DTYPES and not has_bias and D <= 128 and D % 8 == 0
        ) and _static_dpa_kwargs(mask, T, S) is not None
        if cudnn_ok:
            return "cudnn"
        if not pallas_gpu_problems(mask, has_bias, q_shape, k_shape, block_size):
            return "pallas_gpu"
    return fallback


@ATTENTION_IMPLS.register("auto", reads=("block_size",))
def auto_attention(q, k, v, *, mask=None, bias=None, scale=None, block_size=512, softcap=None):
    """ATTENTION_IMPLS[resolve_impl(core.targets.platform(), ...)]."""
    name = resolve_impl(
        targets.platform(),
        q.shape,
        k.shape,
        mask=mask,
        bias=bias,
        dtype=q.dtype,
        block_size=block_size,
        softcap=softcap,
    )
    return ATTENTION_IMPLS.get(name)(q, k, v, mask=mask, bias=bias, scale=scale, block_size=block_size, softcap=softcap)


@ATTENTION_KINDS.register("softmax")
def softmax_attention(
    q, k, v, *, mask=None, bias=None, scale=None, impl="xla", window=None, block_size=512, softcap=None
):
    """Full softmax attention run by ATTENTION_IMPLS[impl]."""
    if window is not None:
        raise ValueError(
            f"window={window} is only used by kind='sliding_window'; pass kind='sliding_window' or window=None"
        )
    return ATTENTION_IMPLS.get(impl)(q, k, v, mask=mask, bias=bias, scale=scale, block_size=block_size, softcap=softcap)


@ATTENTION_KINDS.register("sliding_window")
def sliding_window_attention(
    q, k, v, *, mask=None, bias=None, scale=None, impl="xla", window=None, block_size=512, softcap=None
):
    """Softmax attention restricted to `mask.with_window(window)` (Beltagy et al. 2020, Longformer;
    Mistral). Without a mask the window is two-sided: |q_pos - kv_pos| < window."""
    if window is None:
        raise ValueError("kind='sliding_window' needs window=<int>, the number of visible positions")
    mask = (AttentionMask() if mask is None else mask).with_window(window)
    return ATTENTION_IMPLS.get(impl)(q, k, v, mask=mask, bias=bias, scale=scale, block_size=block_size, softcap=softcap)


@ATTENTION_KINDS.register("linear")
def _linear_kind(q, k, v, *, mask=None, bias=None, scale=None, impl="xla", window=None, block_size=512, softcap=None):
    """Linear attention (ops.linear_attention); honours mask.causal and mask.kv_valid only.
    scale, impl, block_size and softcap do not apply (a model config that sets them is refused)."""
    unsupported = [] if bias is None else ["bias"]
    if softcap is not None:
        unsupported.append("softcap")
    if window is not None:
        unsupported.append("window")
    if mask is not None:
        unsupported += [
            f"mask.{f}" for f in ("window", "q_segment_ids", "kv_segment_ids", "dense") if getattr(mask, f) is not None
        ]
        if mask.causal:
            unsupported += [f"mask.{f}" for f in ("q_positions", "kv_positions") if getattr(mask, f) is not None]
    if unsupported:
        raise ValueError(
            f"kind='linear' cannot honour {', '.join(unsupported)}; it supports only "
            "mask.causal and mask.kv_valid. Use kind='softmax' for these"
        )
    causal = mask is not None and mask.causal
    kv_valid = None if mask is None else mask.kv_valid
    return linear_attention(q, k, v, causal=causal, kv_valid=kv_valid)

"""Probes of a ``DecoderLM`` at initialisation or from a trained run (norm_placement, attention_scaling).

- `hidden_grad_norms`: ||dL/dx_l|| with respect to the residual stream x_l entering each layer
  (and leaving the last), not the parameters: the loss is differentiated with respect to an
  additive zero tensor d_l in ``x_l + d_l``, injected before each block.
- `sublayers`: each block's (F, norm, post-norm) triples, as ``Block.__call__`` applies them; with
  `blocks_of`, `stream_start` and `head_logits` they rebuild the forward pass (also for `norm_probes`).
- `sublayer_variances`: Var(x) of the residual stream entering each sublayer (attention, FFN) and
  Var(F) of what the sublayer adds to it (F(x) for post-LN / DeepNorm, F(Norm(x)) for pre-LN): the
  notes' Post-LN derivation assumes Var(F(x)) = Var(x).
- `relative_change`: ||x_{l+1} - x_l|| / ||x_l|| per layer, from ``aux["hidden"]``;
  `trained_relative_change` reads it from a run's last checkpoint on validation rows.
- `attention_stats`: per layer, the std of the attention logits, the largest softmax weight and the
  softmax Jacobian's norm, of the model's own q and k on real tokens, the weights checked against the
  library's attention op; `trained_attention_stats` reads them at a run's initialisation and last
  checkpoint.

The probes run the model's own modules (embedding, position encoding, blocks, output head) in
the order ``DecoderLM.__call__`` does, one block at a time: the stack must not be scanned
(``model.execution.scan_layers=False``), without MoE, cache, segments or dropout. A test checks that the
logits equal the model's own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jaxtyping import Array, Float, Int

from transformer_jax.models.common import output_logits
from transformer_jax.nn.attention import Attention
from transformer_jax.nn.block import Block, BlockInputs
from transformer_jax.nn.mlp import FeedForward
from transformer_jax.ops import attention as attention_ops
from transformer_jax.ops.masks import AttentionMask


def blocks_of(model: Any) -> list[Block]:
    """The blocks of a ``DecoderLM`` built unscanned, without MoE (what the probes can run one at a time)."""
    cfg = model.cfg
    if cfg.kind != "decoder_lm":
        raise ValueError(f"the probes take a DecoderLM (model.kind='decoder_lm'), got model.kind={cfg.kind!r}")
    if cfg.execution.scan_layers:
        raise ValueError("the probes run one block at a time: build the model with model.execution.scan_layers=False")
    if cfg.moe is not None:
        raise ValueError("the probes do not support MoE layers (model.moe must be None)")
    return list(model.layers.layers)


def stream_start(model: Any, tokens_BT: Int[Array, "B T"]) -> tuple[Float[Array, "B T D"], BlockInputs]:
    """x_0 (token embeddings plus positions) and the block inputs, as ``DecoderLM.__call__`` builds them."""
    B, T = tokens_BT.shape
    positions_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    x_BTD = model.positions.embed(model.embed(tokens_BT), positions_BT)
    mask = AttentionMask(causal=model.cfg.attention.causal)
    bias = model.positions.attention_bias(positions_BT, positions_BT)
    return x_BTD, BlockInputs(mask=mask, positions=positions_BT, bias=bias)


def head_logits(model: Any, x_BTD: Float[Array, "B T D"]) -> Float[Array, "B T V"]:
    """The logits of the stream leaving the last block (final norm, if any, then the output head)."""
    return output_logits(x_BTD, model.final_norm, model.lm_head, model.embed, model.cfg.embeddings.final_softcap)


def perturbed_logits(
    model: Any, tokens_BT: Int[Array, "B T"], deltas_LBTD: Float[Array, "L1 B T D"] | None = None
) -> tuple[Float[Array, "B T V"], Float[Array, "L1 B T D"]]:
    """(logits, hidden): the forward pass with ``deltas[l]`` added to the residual stream entering
    layer l (l = 0..L-1) and ``deltas[L]`` to the one leaving the last layer; ``hidden[l]`` is the
    stream there (after adding). With no deltas, the logits and ``aux["hidden"]`` of the model."""
    blocks = blocks_of(model)
    x_BTD, inputs = stream_start(model, tokens_BT)
    hidden = []
    for l, block in enumerate([*blocks, None]):
        if deltas_LBTD is not None:
            x_BTD = x_BTD + deltas_LBTD[l]
        hidden.append(x_BTD)
        if block is not None:
            x_BTD = block(x_BTD, inputs)[0]
    return head_logits(model, x_BTD), jnp.stack(hidden)


def next_token_loss(logits_BTV: Float[Array, "B T V"], tokens_BT: Int[Array, "B T"]) -> Array:
    """Mean cross-entropy of predicting ``tokens[:, t + 1]`` from position t."""
    return optax.softmax_cross_entropy_with_integer_labels(logits_BTV[:, :-1], tokens_BT[:, 1:]).mean()


@functools.partial(jax.jit, static_argnums=0)
def _loss_and_hidden_grads(graphdef, state, tokens_BT):
    model = nnx.merge(graphdef, state)
    B, T = tokens_BT.shape
    zeros = jnp.zeros((len(model.layers.layers) + 1, B, T, model.cfg.dims.d_model), model.cfg.compute_dtype)
    loss_fn = lambda d: next_token_loss(perturbed_logits(model, tokens_BT, d)[0], tokens_BT)
    return jax.value_and_grad(loss_fn)(zeros)


def hidden_grads(model: Any, tokens_BT: Int[Array, "B T"]) -> tuple[float, Float[Array, "L1 B T D"]]:
    """(loss, dL/dx_l for l = 0..L): the gradient of `next_token_loss` with respect to the
    residual stream entering each layer and leaving the last, i.e. with respect to zero deltas of
    `perturbed_logits` (jitted once per model structure: other seeds reuse the compilation)."""
    blocks_of(model)
    graphdef, state = nnx.split(model)
    loss, g = _loss_and_hidden_grads(graphdef, state, jnp.asarray(tokens_BT))
    return float(loss), g


def frobenius_norms(g_L: Array) -> Array:
    """[L] Frobenius norm of each ``g_L[l]`` over all its other axes, in float32."""
    return jnp.sqrt(jnp.sum(jnp.square(g_L.astype(jnp.float32)), axis=tuple(range(1, g_L.ndim))))


def hidden_grad_norms(model: Any, tokens_BT: Int[Array, "B T"]) -> np.ndarray:
    """[L + 1] Frobenius norms ||dL/dx_l|| over the batch (`hidden_grads`), l = 0 at the input."""
    _, g = hidden_grads(model, tokens_BT)
    return np.asarray(frobenius_norms(g))


def sublayers(block: Block, inputs: BlockInputs) -> tuple[tuple[Callable[[Array], Array], Any, Any], ...]:
    """``(F, norm, post_norm)`` of the self-attention and FFN sublayers of ``block``, in order:
    ``block.placement.apply(x, F, norm, alpha)`` (F through ``post_norm`` when it is not None)
    is the sublayer as ``Block.__call__`` applies it without dropout or cache."""
    if block.cross_attn is not None:
        raise ValueError("the sublayer probes cover self-attention and FFN layers only")

    def attn(h: Array) -> Array:
        return block.self_attn(h, mask=inputs.mask, positions_BT=inputs.positions, bias=inputs.bias)[0]

    return (
        (attn, block.self_attn_norm, block.self_attn_post_norm),
        (cast(FeedForward, block.ffn), block.ffn_norm, block.ffn_post_norm),
    )


def sublayer_trace(model: Any, tokens_BT: Int[Array, "B T"]) -> list[dict[str, Array]]:
    """Per sublayer (attention, then FFN, of each layer in order): ``x`` the residual stream
    entering it, ``h`` what F reads (x for post-LN and DeepNorm, Norm(x) for pre-LN), ``f`` what
    it adds (F(h), through the sublayer norm for sandwich) and ``out`` the stream after it. Each
    block is applied through its placement rule exactly as ``Block.__call__`` does for a dense
    self-attention layer without dropout."""
    blocks = blocks_of(model)
    x_BTD, inputs = stream_start(model, tokens_BT)
    trace: list[dict[str, Array]] = []
    for block in blocks:
        for fn, norm, post_norm in sublayers(block, inputs):
            seen: dict[str, Array] = {}

            def recorded(h: Array, fn: Callable[[Array], Array] = fn, post_norm=post_norm, seen=seen) -> Array:
                y = fn(h) if post_norm is None else post_norm(fn(h))
                seen.update(h=h, f=y)
                return y

            out = block.placement.apply(x_BTD, recorded, norm, block.cfg.residual.alpha)
            trace.append({"x": x_BTD, **seen, "out": out})
            x_BTD = out
    return trace


def sublayer_variances(model: Any, tokens_BT: Int[Array, "B T"]) -> dict[str, np.ndarray]:
    """``{"x": [L, 2], "f": [L, 2], "ratio": [L, 2]}``: Var(x) entering each sublayer, Var(F)
    of its branch, and Var(F) / Var(x) (variances over batch, positions and features; columns:
    attention, FFN)."""
    trace = sublayer_trace(model, tokens_BT)
    var_x = np.asarray([float(jnp.var(t["x"])) for t in trace]).reshape(-1, 2)
    var_f = np.asarray([float(jnp.var(t["f"])) for t in trace]).reshape(-1, 2)
    return {"x": var_x, "f": var_f, "ratio": var_f / var_x}


def relative_change(hidden_LBTD: Float[Array, "L1 B T D"] | np.ndarray) -> np.ndarray:
    """[L] the mean over rows and positions of ||x_{l+1} - x_l|| / ||x_l|| (``aux["hidden"]``)."""
    h = jnp.asarray(hidden_LBTD, jnp.float32)
    ratio = jnp.linalg.norm(h[1:] - h[:-1], axis=-1) / jnp.linalg.norm(h[:-1], axis=-1)
    return np.asarray(jnp.mean(ratio, axis=(1, 2)))


def trained_relative_change(workdir: str, max_batches: int = 1) -> np.ndarray:
    """`relative_change` of the last checkpoint of the training run in ``workdir``, on its first
    ``max_batches`` validation batches (averaged); scanned or not."""
    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.run import setup

    run, _ = setup(workdir_config(workdir), workdir)
    run.checkpoints.close()
    if run.restored_step is None:
        raise FileNotFoundError(f"{workdir} holds no checkpoint to probe")
    model = nnx.merge(run.graphdef, run.state.params, run.state.model_state)
    changes = [
        relative_change(model(jnp.asarray(b["inputs"]), return_hidden=True)[1]["hidden"])
        for b in run.data.eval_batches("val", max_batches)
    ]
    return np.mean(changes, axis=0)


def _softmax_layer(block: Block) -> Attention:
    attn = block.self_attn
    if not isinstance(attn, Attention) or attn.cross:
        raise ValueError(f"the attention probe reads separate q and k projections; {type(attn).__name__} has none")
    layer = attn.layer
    if layer.kind != "softmax" or layer.window is not None or layer.softcap is not None:
        raise ValueError("the attention probe covers full softmax attention without window or soft cap")
    return attn


def attention_stats(model: Any, tokens_BT: Int[Array, "B T"]) -> dict[str, np.ndarray]:
    """Per layer [L], its self-attention as the forward pass runs it on ``tokens_BT``: q, k and v come
    from the layer's own projections (with q/k norms and RoPE) of what its attention sublayer reads
    (`sublayer_trace`); the logits are q.k times the model's scale plus any position bias. Returns
    ``q_var`` and ``k_var`` (entry variances), ``logit_std`` and ``logit_std_unscaled`` (q.k alone),
    both over visible pairs, batch and heads, and over rows that see more than one key (t >= 1 when
    causal) the mean ``max_weight`` (largest softmax weight) and ``jacobian``, the Frobenius norm of
    the softmax Jacobian diag(p) - p p^T, sqrt(sum p^2 - 2 sum p^3 + (sum p^2)^2). The weights are
    checked against the library: weights @ v must equal `ops.attention.attention` on the same q, k, v."""
    blocks = blocks_of(model)
    _, inputs = stream_start(model, tokens_BT)
    traces = sublayer_trace(model, tokens_BT)[0::2]
    B, T = tokens_BT.shape
    visible_TS = jnp.tril(jnp.ones((T, T), bool)) if model.cfg.attention.causal else jnp.ones((T, T), bool)
    rows = slice(1, None) if model.cfg.attention.causal else slice(None)
    names = ("q_var", "k_var", "logit_std", "logit_std_unscaled", "max_weight", "jacobian")
    stats: dict[str, list[float]] = {k: [] for k in names}
    for block, trace in zip(blocks, traces):
        attn = _softmax_layer(block)
        h_BTD = trace["h"]
        q_BTHD = attn.q(h_BTD) if attn.q_norm is None else attn.q_norm(attn.q(h_BTD))
        k_BTKD, v_BTKD = attn._keys(h_BTD), attn.v(h_BTD)
        if attn.rope is not None:
            q_BTHD, k_BTKD = attn.rope(q_BTHD, inputs.positions), attn.rope(k_BTKD, inputs.positions)
        group = q_BTHD.shape[2] // k_BTKD.shape[2]
        k_BTHD, v_BTHD = jnp.repeat(k_BTKD, group, axis=2), jnp.repeat(v_BTKD, group, axis=2)
        raw_BHTS = jnp.einsum("bthd,bshd->bhts", q_BTHD, k_BTHD, preferred_element_type=jnp.float32)
        scale = attn.layer.scale if attn.layer.scale is not None else q_BTHD.shape[-1] ** -0.5
        logits_BHTS = scale * raw_BHTS + (0.0 if inputs.bias is None else inputs.bias)
        p_BHTS = jax.nn.softmax(jnp.where(visible_TS, logits_BHTS, -jnp.inf), axis=-1)
        library_BTHD = attention_ops.attention(
            q_BTHD, k_BTKD, v_BTKD, mask=inputs.mask, bias=inputs.bias, scale=attn.layer.scale, impl="xla"
        )
        mine_BTHD = jnp.einsum("bhts,bshd->bthd", p_BHTS, v_BTHD.astype(jnp.float32))
        gap = float(jnp.max(jnp.abs(mine_BTHD - library_BTHD)) / (jnp.max(jnp.abs(library_BTHD)) + 1e-30))
        if gap > 1e-3:
            raise AssertionError(
                f"the probe's weights do not reproduce the library's attention (relative gap {gap:.2g})"
            )
        where = jnp.broadcast_to(visible_TS, logits_BHTS.shape)
        sq, cube = jnp.sum(p_BHTS**2, axis=-1), jnp.sum(p_BHTS**3, axis=-1)
        jac_BHT = jnp.sqrt(jnp.maximum(sq - 2 * cube + sq**2, 0.0))
        stats["q_var"].append(float(jnp.var(q_BTHD)))
        stats["k_var"].append(float(jnp.var(k_BTKD)))
        stats["logit_std"].append(float(jnp.std(logits_BHTS, where=where)))
        stats["logit_std_unscaled"].append(float(jnp.std(raw_BHTS, where=where)))
        stats["max_weight"].append(float(jnp.mean(jnp.max(p_BHTS, axis=-1)[..., rows])))
        stats["jacobian"].append(float(jnp.mean(jac_BHT[..., rows])))
    return {k: np.asarray(v) for k, v in stats.items()}


def trained_attention_stats(workdir: str, max_batches: int = 1) -> dict[str, dict[str, list[float]]]:
    """``{"init": ..., "trained": ...}``: `attention_stats` (per layer, averaged over the first
    ``max_batches`` validation batches) of the run in ``workdir`` as training started (the model its
    config builds with its ``train.seed``, as `train.state.init_state` does) and at its last checkpoint."""
    from transformer_jax.models import build_model
    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.run import setup

    cfg = workdir_config(workdir)
    run, _ = setup(cfg, workdir)
    run.checkpoints.close()
    if run.restored_step is None:
        raise FileNotFoundError(f"{workdir} holds no checkpoint to probe")
    models = {
        "init": build_model(cfg.model, seed=cfg.train.seed),
        "trained": nnx.merge(run.graphdef, run.state.params, run.state.model_state),
    }
    batches = [jnp.asarray(b["inputs"]) for b in run.data.eval_batches("val", max_batches)]
    return {
        when: {k: np.mean(v, axis=0).tolist() for k, v in _stack([attention_stats(m, b) for b in batches]).items()}
        for when, m in models.items()
    }


def _stack(per_batch: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: np.stack([d[k] for d in per_batch]) for k in per_batch[0]}

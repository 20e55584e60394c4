"""Init-time probes of the residual stream's identity path (notebooks/norm_placement.py).

The notes (``000``, the Post-Norm derivation) take x and F(x) independent, of unit variance, so
that at init Post-Norm is x_{t+1} = Norm(x_t + F_t(x_t)) = (x_t + F_t(x_t)) / sqrt(2), and x_0
enters x_l with the coefficient 2^(-l/2): the identity path shrinks by 2^(-1/2) per sublayer.
With v_t = Var(x_t) and r_t = Var(F_t) / v_t the norm divides by sqrt(v_t (1 + r_t)) instead, and
for DeepNorm, Norm(alpha x + F(x)), the coefficient is alpha / sqrt(v_t (alpha^2 + r_t))
(`predicted_identity_path`). Pre-Norm, x_{t+1} = x_t + F_t(Norm(x_t)), keeps coefficient 1.

The identity path is measured as the gradient that reaches each sublayer's input when nothing
flows back into the branches (`sublayer_streams` with ``identity_path``: F reads
``stop_gradient(h)``), relative to the gradient leaving the last layer. `init_probe` also keeps the
total gradient (through the branches too) and Xiong et al. (2020)'s quantity: the gradient of the
last layer's FFN output matrix, bounded by O(d sqrt(ln d)) for Post-LN and O(d sqrt(ln d / L)) for
Pre-LN (their Theorem 1), a ratio of sqrt(L).

Sublayer k = 0..2L-1 is layer k // 2's attention (even k) or FFN (odd k); "streams" have 2L + 1
entries, the last one leaving the stack (before the final norm, if any).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float, Int

from transformer_jax.ablation.probes import (
    blocks_of,
    frobenius_norms,
    head_logits,
    next_token_loss,
    stream_start,
    sublayer_variances,
    sublayers,
)
from transformer_jax.ablation.stats import linear_fit, t_interval
from transformer_jax.models import build_model, with_changes


def sublayer_streams(
    model: Any,
    tokens_BT: Int[Array, "B T"],
    deltas_KBTD: Float[Array, "K B T D"] | None = None,
    *,
    identity_path: bool = False,
) -> tuple[Float[Array, "B T V"], Float[Array, "K B T D"]]:
    """(logits, streams), K = 2L + 1: ``streams[k]`` is the residual stream entering sublayer k
    (``streams[2L]``: leaving the last), after adding ``deltas[k]``. With ``identity_path`` every
    branch F reads ``stop_gradient`` of its input, so gradients with respect to the deltas flow
    along the residual and the norms only (the forward values are unchanged)."""
    x_BTD, inputs = stream_start(model, tokens_BT)
    streams = []
    for block in blocks_of(model):
        for fn, norm, post_norm in sublayers(block, inputs):

            def branch(h: Array, fn=fn, post_norm=post_norm) -> Array:
                h = jax.lax.stop_gradient(h) if identity_path else h
                return fn(h) if post_norm is None else post_norm(fn(h))

            if deltas_KBTD is not None:
                x_BTD = x_BTD + deltas_KBTD[len(streams)]
            streams.append(x_BTD)
            x_BTD = block.placement.apply(x_BTD, branch, norm, block.cfg.residual.alpha)
    if deltas_KBTD is not None:
        x_BTD = x_BTD + deltas_KBTD[len(streams)]
    streams.append(x_BTD)
    return head_logits(model, x_BTD), jnp.stack(streams)


@functools.partial(jax.jit, static_argnums=0)
def _gradient_norms(graphdef, params, rest, tokens_BT):
    model = nnx.merge(graphdef, params, rest)
    B, T = tokens_BT.shape
    K = 2 * len(model.layers.layers) + 1
    zeros_KBTD = jnp.zeros((K, B, T, model.cfg.dims.d_model), model.cfg.compute_dtype)

    def loss(p, d, identity_path):
        m = nnx.merge(graphdef, p, rest)
        return next_token_loss(sublayer_streams(m, tokens_BT, d, identity_path=identity_path)[0], tokens_BT)

    g_params, g_total = jax.grad(loss, argnums=(0, 1))(params, zeros_KBTD, False)
    g_identity = jax.grad(loss, argnums=1)(params, zeros_KBTD, True)
    w_out = nnx.merge(graphdef, g_params, rest).layers.layers[-1].ffn.w_out.kernel[...]
    return frobenius_norms(g_total), frobenius_norms(g_identity), jnp.linalg.norm(w_out.astype(jnp.float32))


def gradient_norms(model: Any, tokens_BT: Int[Array, "B T"]) -> dict[str, np.ndarray]:
    """``{"total": [2L + 1], "identity": [2L + 1], "last_ffn": []}``: ||dL/dx_k|| (Frobenius over
    the batch) at each sublayer's input, through everything and along the identity path only
    (`sublayer_streams`), and ||dL/dW_out|| of the last layer's FFN output matrix; L is
    `probes.next_token_loss` (jitted once per model structure)."""
    blocks_of(model)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    total, identity, last_ffn = _gradient_norms(graphdef, params, rest, jnp.asarray(tokens_BT))
    return {"total": np.asarray(total), "identity": np.asarray(identity), "last_ffn": np.asarray(last_ffn)}


def predicted_identity_path(var_x: np.ndarray, ratio: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """[2L + 1] c_k = prod_{j=k}^{2L-1} alpha / sqrt(v_j (alpha^2 + r_j)) (c_{2L} = 1), from
    ``var_x`` v_j = Var(x_j) and ``ratio`` r_j = Var(F_j) / v_j per sublayer (any shape, in
    sublayer order): the notes' Post-Norm coefficient, 2^(-(2L-k)/2) when v = r = alpha = 1."""
    v, r = np.ravel(var_x).astype(np.float64), np.ravel(ratio).astype(np.float64)
    factors = alpha / np.sqrt(v * (alpha**2 + r))
    return np.append(np.cumprod(factors[::-1])[::-1], 1.0)


def decay_per_layer(coefficient_K: np.ndarray) -> float:
    """-log2(c_0 / c_{2L}) / L: how many halvings per layer from the output to the input."""
    c = np.asarray(coefficient_K, dtype=np.float64)
    return float(-np.log2(c[0] / c[-1]) / ((c.size - 1) / 2))


def init_probe(model_cfg: Any, seeds: tuple[int, ...] | list[int], tokens_BT: Int[Array, "B T"]) -> dict[str, list]:
    """The probes of one freshly initialised model per seed (``model_cfg`` built unscanned), as
    lists over seeds: ``total`` [L + 1] ||dL/dx_l|| at the layers' inputs and the output;
    ``identity`` and ``predicted`` [2L + 1] the identity path's coefficient measured
    (||dL/dx_k|| along it over ||dL/dx_{2L}||) and `predicted_identity_path` (ones for Pre-LN);
    ``var_x``, ``ratio`` [L, 2] (`probes.sublayer_variances`); and per seed the numbers
    ``identity_decay``, ``predicted_decay`` (`decay_per_layer`), ``total_slope`` (log2 slope of
    ``total`` per layer, positive when it shrinks towards the input), ``log2_var`` (the mean of
    log2 ``ratio``) and ``last_ffn`` (Xiong et al.'s gradient norm)."""
    out: dict[str, list] = {}
    for seed in seeds:
        model: Any = build_model(with_changes(model_cfg, scan_layers=False), seed=seed)
        g, v = gradient_norms(model, tokens_BT), sublayer_variances(model, tokens_BT)
        placement = model.layers.layers[0].placement
        identity = g["identity"] / g["identity"][-1]
        if placement.final_norm:  # x + F(Norm(x)): the identity path has coefficient 1
            predicted = np.ones_like(identity)
        else:
            predicted = predicted_identity_path(v["x"], v["ratio"], model.layers.layers[0].cfg.residual.alpha)
        total = g["total"][::2]
        record = {
            "total": total,
            "identity": identity,
            "predicted": predicted,
            "var_x": v["x"],
            "ratio": v["ratio"],
            "identity_decay": decay_per_layer(identity),
            "predicted_decay": decay_per_layer(predicted),
            "total_slope": linear_fit(np.arange(total.size), np.log2(total))[0],
            "log2_var": float(np.mean(np.log2(v["ratio"]))),
            "last_ffn": float(g["last_ffn"]),
        }
        for k, value in record.items():
            out.setdefault(k, []).append(value)
    return out


def xiong_ratios(init: dict, depths: tuple[int, ...] | list[int]) -> dict[str, Any]:
    """Xiong et al.'s ratio ||dL/dW_out|| Post-LN / Pre-LN of the last layer, paired by seed, from
    `init_probe` records ``init[placement, depth]``: per depth the per-seed ratios, their mean with
    a 95% t interval and sqrt(L); and the log-log slope of the ratio against L over the depths
    (Xiong et al.'s bounds give 1/2)."""
    by_depth = {}
    for d in depths:
        r = np.divide(init["post", d]["last_ffn"], init["pre", d]["last_ffn"])
        by_depth[d] = {"ratios": r.tolist(), "t_interval": t_interval(r), "sqrt_L": float(np.sqrt(d))}
    fit = linear_fit(np.log(depths), np.log([by_depth[d]["ratios"] for d in depths])) if len(depths) > 1 else None
    return {
        "by_depth": by_depth,
        "loglog_slope": None if fit is None else dict(zip(("slope", "low", "high", "df"), fit)),
    }


def init_table(init: dict, depths: tuple[int, ...] | list[int]) -> str:
    """A markdown table of the `init_probe` numbers by depth (means over seeds): the identity path's
    halvings per layer measured and predicted for Post-LN and DeepNorm, the total gradient's log2
    slope per layer, and Xiong et al.'s ratio against sqrt(L)."""
    mean = lambda p, d, k: float(np.mean(init[p, d][k])) if (p, d) in init else math.nan
    xiong = xiong_ratios(init, depths)["by_depth"]
    lines = [
        "| L | Post-LN identity path: measured / predicted | DeepNorm: measured / predicted "
        "| total gradient, log2 slope: post / pre | last FFN grad post/pre [95%] | sqrt(L) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for d in depths:
        m, lo, hi = xiong[d]["t_interval"]
        ident = lambda p, d=d: f"{mean(p, d, 'identity_decay'):+.3f} / {mean(p, d, 'predicted_decay'):+.3f}"
        lines.append(
            f"| {d} | {ident('post')} | {ident('deepnorm')} | {mean('post', d, 'total_slope'):+.3f} / "
            f"{mean('pre', d, 'total_slope'):+.3f} | {m:.2f} [{lo:.2f}, {hi:.2f}] | {np.sqrt(d):.2f} |"
        )
    return "\n".join(lines)


def init_figure(init: dict, depths: tuple[int, ...] | list[int], placements: tuple[str, ...]) -> Any:
    """One panel per depth: log2 of the identity path's coefficient measured (solid) and predicted
    (dotted), of the total gradient relative to the one leaving the stack (dashed), and the notes'
    2^(-1/2) per sublayer; a last panel: Var(F) / Var(x) per sublayer at the deepest depth (means
    over seeds, of log2 for the gradients)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(depths) + 1, figsize=(5 * (len(depths) + 1), 4))
    log2_mean = lambda p, d, k: np.mean(np.log2(init[p, d][k]), axis=0)
    for ax, d in zip(axes, depths):
        layer = np.arange(2 * d + 1) / 2
        for i, p in enumerate(placements):
            ax.plot(layer, log2_mean(p, d, "identity"), color=f"C{i}", label=f"{p}: identity path")
            ax.plot(layer, log2_mean(p, d, "predicted"), ":", color=f"C{i}", lw=2, label=f"{p}: predicted")
            total = log2_mean(p, d, "total")
            ax.plot(np.arange(d + 1), total - total[-1], "--", color=f"C{i}", alpha=0.5, label=f"{p}: total gradient")
        ax.plot(layer, layer - d, "k:", alpha=0.5, label="the notes' 2^(-1/2) per sublayer")
        ax.set(xlabel="layer (0: the embeddings)", ylabel="log2 gradient / gradient leaving the stack", title=f"L={d}")
        ax.legend(fontsize=6)
    for i, p in enumerate(placements):
        r = np.mean(init[p, depths[-1]]["ratio"], axis=0)
        axes[-1].semilogy(np.arange(1, len(r) + 1), r[:, 0], "o-", ms=3, color=f"C{i}", label=f"{p}, attention")
        axes[-1].semilogy(np.arange(1, len(r) + 1), r[:, 1], "s--", ms=3, color=f"C{i}", label=f"{p}, FFN")
    axes[-1].axhline(1.0, color="k", ls=":", label="the notes' Var(F) = Var(x)")
    axes[-1].set(xlabel="layer", ylabel="Var(F) / Var(x)", title=f"Sublayers at init, {depths[-1]} layers")
    axes[-1].legend(fontsize=7)
    return fig

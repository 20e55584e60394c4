"""Fixed-window neural language model (Bengio, Ducharme, Vincent & Jauvin 2003).

    x_t = [C(w_{t-N+1}); ...; C(w_t)]                  concatenated embeddings of the last N tokens
    h_t = tanh(H x_t + d)                              (``model.dims.n_layers`` such layers, width d_ff)
    y_t = b + U h_t (+ W x_t with ``model.baseline.direct``)  logits of token t + 1

Positions before the start of the sequence (or of the token's segment in a packed row) take a
learned ``boundary_embed`` vector, so every window has N entries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.nn import initializers
from jaxtyping import Array, Bool, Float, Int

from transformer_jax.models.baselines.common import OutputLayer, make_embed
from transformer_jax.models.baselines.config import WindowLMConfig
from transformer_jax.models.kinds import MODELS, WINDOW_LM_READS
from transformer_jax.nn.linear import DenseGeneral
from transformer_jax.ops.dropout import dropout

if TYPE_CHECKING:
    from transformer_jax.models.config import ModelConfig


def window_stack(
    x_BSD: Float[Array, "B S D"],
    valid_BS: Bool[Array, "B S"],
    seg_BS: Int[Array, "B S"],
    boundary_D: Float[Array, " D"],
    N: int,
    T: int,
) -> Float[Array, "B T N D"]:
    """The N-token windows ending at each of the last T of S = N - 1 + T positions, oldest first;
    entries that are invalid or in another segment than the window's last token are ``boundary_D``."""
    seg_BT = seg_BS[:, N - 1 :]
    cols = []
    for i in range(N):  # i = N - 1 - (distance back from t)
        x_BTD = x_BSD[:, i : i + T]
        ok_BT = valid_BS[:, i : i + T] & (seg_BS[:, i : i + T] == seg_BT)
        cols.append(jnp.where(ok_BT[..., None], x_BTD, boundary_D.astype(x_BTD.dtype)))
    return jnp.stack(cols, axis=2)


@MODELS.register("window_lm", reads=WINDOW_LM_READS)
class WindowLM(nnx.Module):
    """``__call__(tokens_BT, ...) -> (logits_BTV, aux)``; decoding cache = the embeddings of the
    last N - 1 tokens (``init_cache``), so ``transformer_jax.decode.generate`` drives it."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        if cfg.kind != "window_lm":
            raise ValueError(f"WindowLM needs model.kind='window_lm', got {cfg.kind!r}")
        self.cfg = cfg
        assert isinstance(cfg.baseline, WindowLMConfig)  # ModelConfig requires it for this kind
        self.window = N = cfg.baseline.window
        D, F = cfg.dims.d_model, cfg.dims.resolved_d_ff
        self.embed = make_embed(cfg, rngs)
        self.boundary_embed = nnx.Param(
            initializers.normal(cfg.init.std)(rngs.params(), (D,), cfg.params_dtype),
            logical_axes=("embed",),
            role="embedding",
        )
        dense: dict[str, Any] = dict(use_bias=True, dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype, rngs=rngs)
        self.hidden = nnx.List(
            [DenseGeneral((N, D), F, axes=(None, "embed", "mlp"), **dense)]
            + [DenseGeneral(F, F, axes=(None, "mlp"), **dense) for _ in range(cfg.dims.n_layers - 1)]
        )
        self.direct = (
            DenseGeneral(
                (N, D),
                cfg.dims.vocab_size,
                axes=(None, "embed", "vocab"),
                use_bias=False,
                kernel_init=initializers.zeros,
                dtype=cfg.compute_dtype,
                param_dtype=cfg.params_dtype,
                rngs=rngs,
            )
            if cfg.baseline.direct
            else None
        )
        self.head = OutputLayer(cfg, F, self.embed, tie=cfg.embeddings.tie, rngs=rngs)

    def init_cache(self, batch: int, max_len: int | None = None, dtype=None) -> dict:
        """Empty window (``max_len`` is ignored: the cache holds N - 1 tokens whatever the length)."""
        dtype = dtype or self.cfg.compute_dtype
        n = self.window - 1
        return {"x": jnp.zeros((batch, n, self.cfg.dims.d_model), dtype), "valid": jnp.zeros((batch, n), bool)}

    def __call__(
        self,
        tokens_BT: Int[Array, "B T"],
        *,
        positions_BT: Int[Array, "B T"] | None = None,
        segment_ids_BT: Int[Array, "B T"] | None = None,
        dropout_key: jax.Array | None = None,
        cache: dict | None = None,
        embeddings_BTD: Float[Array, "B T D"] | None = None,
    ) -> tuple[Float[Array, "B T V"], dict]:
        """Logits of the next token at every position. ``positions_BT`` is accepted and unused;
        ``segment_ids_BT`` keep windows inside their segment; ``cache`` (from ``init_cache``)
        supplies the tokens before ``tokens_BT``; ``embeddings_BTD`` replaces the lookup."""
        cfg, N = self.cfg, self.window
        B, T = tokens_BT.shape
        x_BTD = self.embed(tokens_BT) if embeddings_BTD is None else embeddings_BTD.astype(cfg.compute_dtype)
        given = cache is not None
        if not given:
            cache = self.init_cache(B, dtype=x_BTD.dtype)
        elif segment_ids_BT is not None:
            raise ValueError("segment_ids_BT is not supported together with a cache")
        x_BSD = jnp.concatenate([cache["x"].astype(x_BTD.dtype), x_BTD], axis=1)
        valid_BS = jnp.concatenate([cache["valid"], jnp.ones((B, T), bool)], axis=1)
        seg_BT = jnp.ones((B, T), jnp.int32) if segment_ids_BT is None else segment_ids_BT.astype(jnp.int32)
        seg_BS = jnp.concatenate([jnp.broadcast_to(seg_BT[:, :1], (B, N - 1)), seg_BT], axis=1)
        x_BTND = window_stack(x_BSD, valid_BS, seg_BS, self.boundary_embed[...], N, T)
        n = len(self.hidden)
        keys = [None] * n if dropout_key is None else list(jax.random.split(dropout_key, n))
        h = x_BTND
        for layer, key in zip(self.hidden, keys):
            h = dropout(jnp.tanh(layer(h)), cfg.dropout, key)
        logits_BTV = self.head(h)
        if self.direct is not None:
            logits_BTV = logits_BTV + self.direct(x_BTND).astype(jnp.float32)
        aux = {}
        if given:
            aux["cache"] = {"x": x_BSD[:, T:], "valid": valid_BS[:, T:]}
        return logits_BTV, aux

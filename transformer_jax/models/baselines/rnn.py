"""Recurrent language model with LSTM or GRU cells, ``jax.lax.scan`` over time.

Each cell splits into ``project`` (the input half of every gate for all T steps: one large
matmul outside the loop) and ``step`` (the recurrent half, inside the scan). Layers are stacked;
dropout sits on the non-recurrent connections only (embedding -> layer 1 -> ... -> output;
Zaremba, Sutskever & Vinyals 2014).

Truncated backpropagation through time: a training row of ``data.seq_len`` tokens is one
truncation window; the state starts at zero at the row's start and at every segment start
(``segment_ids_BT`` changes), and is not carried between batches (the ``stream`` pipeline draws
random windows, nanoGPT style). ``model.baseline.tbptt = k`` further cuts the gradient every k steps
inside a row (the forward state still flows through).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
from flax import nnx
from jax.nn import initializers
from jaxtyping import Array, Float, Int

from transformer_jax.core.registry import Registry
from transformer_jax.models.baselines.common import OutputLayer, make_embed
from transformer_jax.models.baselines.config import RNNLMConfig
from transformer_jax.models.kinds import MODELS, RNN_LM_READS
from transformer_jax.ops.dropout import dropout

if TYPE_CHECKING:
    from transformer_jax.models.config import ModelConfig

CELLS: Registry = Registry("RNN cell")


class _Cell(nnx.Module):
    """Gate kernels ``w_x`` [D, G, H], ``w_h`` [H, G, H] and biases [G, H] for G gates,
    initialised U(-1/sqrt(H), 1/sqrt(H)) as in PyTorch."""

    n_gates: int
    carry_names: tuple[str, ...]

    def __init__(self, d_in: int, hidden: int, *, dtype, param_dtype, rngs: nnx.Rngs):
        G, H = self.n_gates, hidden
        init = initializers.uniform(2.0 / math.sqrt(H))
        shift = 1.0 / math.sqrt(H)
        self.hidden, self.dtype = H, dtype
        self.w_x = nnx.Param(
            init(rngs.params(), (d_in, G, H), param_dtype) - shift, logical_axes=("embed", None, "mlp")
        )
        self.w_h = nnx.Param(init(rngs.params(), (H, G, H), param_dtype) - shift, logical_axes=(None, None, "mlp"))
        self.b_x = nnx.Param(jnp.zeros((G, H), param_dtype), logical_axes=(None, "mlp"), role="bias")

    def init_carry(self, batch: int) -> dict[str, Float[Array, "B H"]]:
        return {name: jnp.zeros((batch, self.hidden), jnp.float32) for name in self.carry_names}

    def project(self, x_BTD: Float[Array, "B T D"]) -> Float[Array, "B T G H"]:
        """The input contribution to every gate: ``x W_x + b_x``."""
        xw = jnp.einsum("btd,dgh->btgh", x_BTD.astype(self.dtype), self.w_x[...].astype(self.dtype))
        return xw.astype(jnp.float32) + self.b_x[...].astype(jnp.float32)

    def weights(self) -> dict:
        return {"w_h": self.w_h[...].astype(self.dtype)}

    if TYPE_CHECKING:  # each cell defines it

        @staticmethod
        def step(w: dict, carry: dict, xg_BGH: Float[Array, "B G H"]) -> tuple[dict, Float[Array, "B H"]]: ...

    def __call__(self, carry: dict, x_BD: Float[Array, "B D"]) -> tuple[dict, Float[Array, "B H"]]:
        """One time step from raw inputs (``project`` + ``step``)."""
        return self.step(self.weights(), carry, self.project(x_BD[:, None])[:, 0])


@CELLS.register("lstm")
class LSTMCell(_Cell):
    """Hochreiter & Schmidhuber 1997 with a forget gate (Gers et al. 2000), gates (i, f, g, o):

        i, f, o = sigmoid(x W_x + h W_h + b), g = tanh(x W_x + h W_h + b)
        c' = f * c + i * g,  h' = o * tanh(c')

    ``forget_bias`` starts the forget gate open (Jozefowicz et al. 2015)."""

    n_gates = 4
    carry_names = ("h", "c")

    def __init__(self, d_in: int, hidden: int, *, forget_bias: float = 1.0, **kw):
        super().__init__(d_in, hidden, **kw)
        self.b_x[...] = self.b_x[...].at[1].set(forget_bias)

    @staticmethod
    def step(w: dict, carry: dict, xg_BGH: Float[Array, "B 4 H"]) -> tuple[dict, Float[Array, "B H"]]:
        hw = jnp.einsum("bh,hgk->bgk", carry["h"].astype(w["w_h"].dtype), w["w_h"]).astype(jnp.float32)
        z = xg_BGH + hw
        i, f, o = jax.nn.sigmoid(z[:, 0]), jax.nn.sigmoid(z[:, 1]), jax.nn.sigmoid(z[:, 3])
        c = f * carry["c"] + i * jnp.tanh(z[:, 2])
        h = o * jnp.tanh(c)
        return {"h": h, "c": c}, h


@CELLS.register("gru")
class GRUCell(_Cell):
    """Cho et al. 2014, gates (r, z, n), with the reset gate applied after the recurrent matmul
    (as in cuDNN and PyTorch, so ``h W_h`` is one matmul):

        r = sigmoid(x W_xr + b_xr + h W_hr + b_hr),  z = sigmoid(x W_xz + b_xz + h W_hz + b_hz)
        n = tanh(x W_xn + b_xn + r * (h W_hn + b_hn)),  h' = (1 - z) * n + z * h
    """

    n_gates = 3
    carry_names = ("h",)

    def __init__(self, d_in: int, hidden: int, **kw):
        super().__init__(d_in, hidden, **kw)
        self.b_h = nnx.Param(jnp.zeros((3, hidden), self.b_x[...].dtype), logical_axes=(None, "mlp"), role="bias")

    def weights(self) -> dict:
        return {"w_h": self.w_h[...].astype(self.dtype), "b_h": self.b_h[...].astype(jnp.float32)}

    @staticmethod
    def step(w: dict, carry: dict, xg_BGH: Float[Array, "B 3 H"]) -> tuple[dict, Float[Array, "B H"]]:
        h = carry["h"]
        hw = jnp.einsum("bh,hgk->bgk", h.astype(w["w_h"].dtype), w["w_h"]).astype(jnp.float32) + w["b_h"]
        r = jax.nn.sigmoid(xg_BGH[:, 0] + hw[:, 0])
        z = jax.nn.sigmoid(xg_BGH[:, 1] + hw[:, 1])
        n = jnp.tanh(xg_BGH[:, 2] + r * hw[:, 2])
        h = (1.0 - z) * n + z * h
        return {"h": h}, h


def scan_cell(step, w: dict, xg_BTGH: Float[Array, "B T G H"], carry: dict, reset_BT, cut_T):
    """Runs ``step`` over time: the carry is zeroed where ``reset_BT`` and its gradient is
    stopped where ``cut_T`` (before the step). Returns (final carry, h_BTH)."""

    def body(carry, inputs):
        xg_BGH, reset_B, cut = inputs
        carry = {k: jnp.where(reset_B[:, None], 0.0, v) for k, v in carry.items()}
        carry = {k: jnp.where(cut, jax.lax.stop_gradient(v), v) for k, v in carry.items()}
        return step(w, carry, xg_BGH)

    carry, h_TBH = jax.lax.scan(body, carry, (jnp.swapaxes(xg_BTGH, 0, 1), jnp.swapaxes(reset_BT, 0, 1), cut_T))
    return carry, jnp.swapaxes(h_TBH, 0, 1)


@MODELS.register("rnn_lm", reads=RNN_LM_READS)
class RNNLM(nnx.Module):
    """tokens -> embed -> ``n_layers`` LSTM/GRU layers (hidden size d_model) -> logits.

    ``__call__`` returns ``(logits_BTV, aux)``; with a ``cache`` (``init_cache``: each layer's
    state) it continues from that state and returns the new one in ``aux["cache"]``, which is the
    interface ``transformer_jax.decode.generate`` drives.
    """

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        if cfg.kind != "rnn_lm":
            raise ValueError(f"RNNLM needs model.kind='rnn_lm', got {cfg.kind!r}")
        self.cfg = cfg
        settings = cfg.baseline
        assert isinstance(settings, RNNLMConfig)  # ModelConfig requires it for this kind
        cell_cls = CELLS.get(settings.cell.kind)
        D = cfg.dims.d_model
        self.embed = make_embed(cfg, rngs)
        self.layers = nnx.List(
            [
                cell_cls(
                    D,
                    D,
                    **settings.cell.cell_kwargs(),
                    dtype=cfg.compute_dtype,
                    param_dtype=cfg.params_dtype,
                    rngs=rngs,
                )
                for _ in range(cfg.dims.n_layers)
            ]
        )
        self.head = OutputLayer(cfg, D, self.embed, tie=cfg.embeddings.tie, rngs=rngs)

    def init_cache(self, batch: int, max_len: int | None = None, dtype=None) -> list[dict]:
        """Zero state of every layer (``max_len`` is ignored: the state has a fixed size)."""
        return [layer.init_carry(batch) for layer in self.layers]

    def __call__(
        self,
        tokens_BT: Int[Array, "B T"],
        *,
        positions_BT: Int[Array, "B T"] | None = None,
        segment_ids_BT: Int[Array, "B T"] | None = None,
        dropout_key: jax.Array | None = None,
        cache: list[dict] | None = None,
        embeddings_BTD: Float[Array, "B T D"] | None = None,
    ) -> tuple[Float[Array, "B T V"], dict]:
        """Logits of the next token at every position. ``positions_BT`` is accepted and unused;
        the state resets where ``segment_ids_BT`` changes; ``embeddings_BTD`` replaces the lookup."""
        cfg = self.cfg
        B, T = tokens_BT.shape
        x_BTD = self.embed(tokens_BT) if embeddings_BTD is None else embeddings_BTD.astype(cfg.compute_dtype)
        if cache is not None and segment_ids_BT is not None:
            raise ValueError("segment_ids_BT is not supported together with a cache")
        carries = self.init_cache(B) if cache is None else cache
        reset_BT = jnp.zeros((B, T), bool)
        if segment_ids_BT is not None:
            reset_BT = reset_BT.at[:, 1:].set(segment_ids_BT[:, 1:] != segment_ids_BT[:, :-1])
        assert isinstance(cfg.baseline, RNNLMConfig)  # ModelConfig requires it for this kind
        tbptt = cfg.baseline.tbptt
        t = jnp.arange(T)
        cut_T = jnp.zeros((T,), bool) if tbptt is None else (t > 0) & (t % tbptt == 0)
        keys = (
            [None] * (len(self.layers) + 1)
            if dropout_key is None
            else list(jax.random.split(dropout_key, len(self.layers) + 1))
        )
        h = dropout(x_BTD, cfg.dropout, keys[0])
        new_cache = []
        for layer, carry, key in zip(self.layers, carries, keys[1:]):
            carry, h = scan_cell(layer.step, layer.weights(), layer.project(h), carry, reset_BT, cut_T)
            h = dropout(h.astype(cfg.compute_dtype), cfg.dropout, key)
            new_cache.append(carry)
        logits_BTV = self.head(h)
        return logits_BTV, ({} if cache is None else {"cache": new_cache})

"""Multi-token prediction modules (DeepSeek-V3, section 2.2) composed from ``nn`` blocks.

``MTP`` holds D = ``model.mtp.depth`` sequential `MTPLayer`s. Layer k (1-based) maps the previous
depth's hidden states h^{k-1} [B, T, D] (h^0: the main model's last block, before its final
norm) and the embeddings of the tokens k places ahead, e_k[:, i] = Emb(t_{i+k}), to

    h'^k = [RMSNorm(h^{k-1}); RMSNorm(e_k)] M_k          M_k: [2D, D] (``proj``)
    h^k  = Block_k(h'^k)                                  one causal layer (the model's block, dense)
    logits^k = Head(FinalNorm_k(h^k))                     predicts t_{i+k+1}

Embedding and head are the main model's (passed in, not owned). Parameters carry logical axes
(``proj``: (None, "embed"), a hidden matrix 2D -> D), so ``models.model_roles`` classifies them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from transformer_jax.models.common import make_final_norm, make_self_caches
from transformer_jax.models.config import ModelConfig, with_changes
from transformer_jax.nn.attention import RopeSpec
from transformer_jax.nn.block import Block, BlockInputs
from transformer_jax.nn.linear import DenseGeneral
from transformer_jax.nn.norm import Norm


def shift_left(x_BT: Int[Array, "B T"], k: int, fill: int = 0) -> Int[Array, "B T"]:
    """``out[:, i] = x[:, i + k]`` for i + k < T, ``fill`` after."""
    if k == 0:
        return x_BT
    return jnp.pad(x_BT[:, k:], ((0, 0), (0, min(k, x_BT.shape[1]))), constant_values=fill)[:, : x_BT.shape[1]]


class MTPLayer(nnx.Module):
    """One depth: norms, the 2D -> D projection, one Transformer block, its own final norm."""

    def __init__(self, cfg: ModelConfig, rope: RopeSpec | None, *, rngs: nnx.Rngs):
        d = cfg.dims.d_model
        self.hidden_norm = Norm(d, kind="rmsnorm", eps=cfg.norm.eps, param_dtype=cfg.params_dtype)
        self.token_norm = Norm(d, kind="rmsnorm", eps=cfg.norm.eps, param_dtype=cfg.params_dtype)
        self.proj = DenseGeneral(
            2 * d,
            d,
            axes=(None, "embed"),
            kernel_init=cfg.init_scheme().kernel(0, 1),
            dtype=cfg.compute_dtype,
            param_dtype=cfg.params_dtype,
            rngs=rngs,
        )
        self.block = Block(dataclasses.replace(cfg.block_config(side="decoder", rope=rope), moe=None), rngs=rngs)
        self.final_norm = make_final_norm(cfg, rngs)

    def __call__(
        self,
        h_BTD: Float[Array, "B T D"],
        e_BTD: Float[Array, "B T D"],
        inputs: BlockInputs,
        *,
        cache: dict | None = None,
        dropout_key: jax.Array | None = None,
    ) -> tuple[Float[Array, "B T D"], dict | None]:
        """(h^k, the block's updated cache or None) from h^{k-1} and the embeddings e_k."""
        x_BT2D = jnp.concatenate([self.hidden_norm(h_BTD), self.token_norm(e_BTD.astype(h_BTD.dtype))], axis=-1)
        y_BTD, cache, _ = self.block(self.proj(x_BT2D), inputs, cache=cache, dropout_key=dropout_key)
        return y_BTD, cache


class MTP(nnx.Module):
    """``depth`` sequential `MTPLayer`s and the loss weight lambda (``model.mtp``)."""

    def __init__(self, cfg: ModelConfig, rope: RopeSpec | None, *, rngs: nnx.Rngs):
        assert cfg.mtp is not None
        self.loss_weight = cfg.mtp.loss_weight
        self.layers = nnx.List([MTPLayer(cfg, rope, rngs=rngs) for _ in range(cfg.mtp.depth)])
        self._cache_cfg = with_changes(cfg, scan_layers=False)  # one cache per depth, as the main layers'

    @property
    def depth(self) -> int:
        return len(self.layers)

    def init_cache(self, batch: int, max_len: int, dtype=None) -> list[dict]:
        """One empty ``{"self": cache}`` per depth (the blocks' caches for speculative drafting), of
        the main layers' kind."""
        return make_self_caches(self._cache_cfg, self.depth, batch, max_len, dtype)

    def logits(
        self,
        h0_BTD: Float[Array, "B T D"],
        tokens_BT: Int[Array, "B T"],
        inputs: BlockInputs,
        *,
        embed: Callable[[Array], Array],
        head: Callable[[Array, Norm | None], Array],
        dropout_key: jax.Array | None = None,
    ) -> tuple[Float[Array, "B T V"], ...]:
        """Training / scoring pass: ``out[k-1][:, i]`` are the logits of t_{i+k+1} (the model's
        targets shifted left by k: ``targets[:, i + k]``), from the input tokens shifted left by k
        (positions whose token lies past the end see token 0; their targets do not exist)."""
        out, h_BTD = [], h0_BTD
        keys = [None] * self.depth if dropout_key is None else list(jax.random.split(dropout_key, self.depth))
        for k, layer in enumerate(self.layers, start=1):
            h_BTD, _ = layer(h_BTD, embed(shift_left(tokens_BT, k)), inputs, dropout_key=keys[k - 1])
            out.append(head(h_BTD, layer.final_norm))
        return tuple(out)

"""Decoder-only language model (GPT-2, LLaMA and relatives)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from transformer_jax.models.common import (
    cache_index,
    make_embed,
    make_final_norm,
    make_lm_head,
    make_self_caches,
    output_logits,
)
from transformer_jax.models.config import ModelConfig
from transformer_jax.models.kinds import DECODER_LM_READS, MODELS
from transformer_jax.models.mtp import MTP
from transformer_jax.nn.block import BlockInputs
from transformer_jax.nn.moe import collect_moe_aux
from transformer_jax.nn.positions import build_positions
from transformer_jax.nn.stack import Stack
from transformer_jax.ops.context_parallel import context_size, sequence_index
from transformer_jax.ops.dropout import dropout
from transformer_jax.ops.masks import AttentionMask


@MODELS.register("decoder_lm", reads=DECODER_LM_READS)
class DecoderLM(nnx.Module):
    """tokens -> embed (+ positions) -> N causal blocks -> [final norm] -> logits.

    ``__call__`` returns ``(logits_BTV, aux)``; aux may hold ``hidden`` [L+1, B, T, D],
    ``cache`` (when a cache was given) and, with MoE layers, ``losses`` (balance / z-losses
    summed over layers) and ``metrics`` (per MoE layer: expert load [L, E], max/mean load,
    dropped fraction). With ``model.mtp``: ``last_hidden`` [B, T, D] (h^0, the last block's
    output) and, without a cache, ``mtp`` = ``{"logits": D arrays [B, T, V], "loss_weight": lambda}``
    (``models.mtp``; ``logits[k-1][:, i]`` predicts ``targets[:, i + k]``).
    """

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        if cfg.kind != "decoder_lm":
            raise ValueError(f"DecoderLM needs model.kind='decoder_lm', got {cfg.kind!r}")
        self.cfg = cfg
        self.embed = make_embed(cfg, rngs)
        self.positions = build_positions(cfg.position, cfg.position_dims(bidirectional=False), rngs=rngs)
        self.layers = Stack(
            cfg.block_configs(side="decoder", rope=self.positions.rope),
            cfg.dims.n_layers,
            scan=cfg.execution.scan_layers,
            remat=cfg.execution.remat,
            rngs=rngs,
        )
        self.final_norm = make_final_norm(cfg, rngs)
        self.lm_head = make_lm_head(cfg, rngs)
        self.mtp = None if cfg.mtp is None else MTP(cfg, self.positions.rope, rngs=rngs)

    def init_cache(self, batch: int, max_len: int, dtype=None):
        """Empty KV caches for decoding up to ``max_len`` positions."""
        return make_self_caches(self.cfg, self.cfg.dims.n_layers, batch, max_len, dtype)

    def __call__(
        self,
        tokens_BT: Int[Array, "B T"],
        *,
        positions_BT: Int[Array, "B T"] | None = None,
        segment_ids_BT: Int[Array, "B T"] | None = None,
        dropout_key: jax.Array | None = None,
        cache=None,
        return_hidden: bool = False,
        embeddings_BTD: Float[Array, "B T D"] | None = None,
    ) -> tuple[Float[Array, "B T V"], dict]:
        """Logits for every position.

        ``segment_ids_BT`` (packed sequences, 0 = padding) restrict attention to the same segment;
        ``positions_BT`` (default: index in the sequence, offset by the cache fill) feed the
        position encoding. With ``cache`` (from ``init_cache``), the T tokens are appended at the
        cache index and attend to everything written so far. ``embeddings_BTD`` replaces the
        token lookup (soft prompts, probing, gradients with respect to inputs).
        """
        cfg = self.cfg
        B, T = tokens_BT.shape
        start = 0 if cache is None else cache_index(cache)
        inputs = self.block_inputs(B, T, start, cache, positions_BT, segment_ids_BT)
        positions_BT = inputs.positions
        assert positions_BT is not None
        k_embed, k_layers = (None, None) if dropout_key is None else jax.random.split(dropout_key)
        tok_BTD = self.embed(tokens_BT) if embeddings_BTD is None else embeddings_BTD.astype(cfg.compute_dtype)
        x_BTD = self.positions.embed(tok_BTD, positions_BT)
        x_BTD = dropout(x_BTD, cfg.dropout, k_embed)
        x_BTD, cache, aux = self.layers(x_BTD, inputs, caches=cache, dropout_key=k_layers, return_hidden=return_hidden)
        logits_BTV = self.head(x_BTD, self.final_norm)
        aux = {**{k: v for k, v in aux.items() if k != "moe"}, **collect_moe_aux(aux)}
        if self.mtp is not None:
            aux["last_hidden"] = x_BTD
            if cache is None and context_size() > 1:
                raise ValueError("model.mtp shifts tokens along the sequence, which mesh.context > 1 splits; use 1")
            if cache is None:
                key = None if dropout_key is None else jax.random.fold_in(dropout_key, 1)
                logits = self.mtp.logits(x_BTD, tokens_BT, inputs, embed=self.embed, head=self.head, dropout_key=key)
                aux["mtp"] = {"logits": logits, "loss_weight": self.mtp.loss_weight}
        if cache is not None:
            aux["cache"] = cache
        return logits_BTV, aux

    def head(self, x_BTD: Float[Array, "B T D"], final_norm) -> Float[Array, "B T V"]:
        """The output head (shared with the MTP modules, each with its own final norm)."""
        return output_logits(x_BTD, final_norm, self.lm_head, self.embed, self.cfg.embeddings.final_softcap)

    def block_inputs(self, B: int, T: int, start, cache, positions_BT=None, segment_ids_BT=None) -> BlockInputs:
        """Mask, positions and position bias for T tokens written at cache slot ``start``
        (``cache`` None: a full sequence from 0). Positions default to the slot indices (under a
        context mesh axis, to the global positions of the zigzag layout: ``parallel.context``)."""
        laid_out = sequence_index(T) if cache is None else None
        index_T = jnp.arange(T, dtype=jnp.int32) if laid_out is None else jnp.asarray(laid_out)
        index_BT = jnp.broadcast_to(start + index_T, (B, T))
        if cache is None:
            kv_index_BS = index_BT
        else:
            if segment_ids_BT is not None:
                raise ValueError("segment_ids_BT is not supported together with a KV cache")
            S = (cache[0] if isinstance(cache, list) else cache)["self"].max_len
            kv_index_BS = jnp.broadcast_to(jnp.arange(S, dtype=jnp.int32), (B, S))
        positions_BT = index_BT if positions_BT is None else positions_BT
        mask = AttentionMask(
            causal=self.cfg.attention.causal,
            q_segment_ids=segment_ids_BT,
            kv_segment_ids=segment_ids_BT,
            q_positions=None if cache is None else index_BT,
            kv_positions=None,  # slot s holds position s: the default, so decode kernels can rely on it
        )
        bias = self.positions.attention_bias(positions_BT, positions_BT if cache is None else kv_index_BS)
        return BlockInputs(mask=mask, positions=positions_BT, bias=bias)

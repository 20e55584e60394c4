"""The original encoder-decoder Transformer (Vaswani et al. 2017) and its variants."""

from __future__ import annotations

from typing import cast

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
from transformer_jax.models.kinds import ENCODER_DECODER_READS, MODELS
from transformer_jax.nn.block import Block, BlockInputs
from transformer_jax.nn.moe import collect_moe_aux, merge_moe_aux
from transformer_jax.nn.positions import build_positions
from transformer_jax.nn.stack import Stack
from transformer_jax.ops.dropout import dropout
from transformer_jax.ops.masks import AttentionMask


def _index(B: int, T: int, start: int | jax.Array = 0):
    return jnp.broadcast_to(start + jnp.arange(T, dtype=jnp.int32), (B, T))


def _cross_kv(block: Block, memory_BSD: Float[Array, "B S D"]):
    """A decoder block's cross-attention keys/values of the memory."""
    assert block.cross_attn is not None  # decoder blocks are built with cross=True
    return block.cross_attn.project_kv(memory_BSD)


@MODELS.register("encoder_decoder", reads=ENCODER_DECODER_READS)
class EncoderDecoder(nnx.Module):
    """src -> encoder (bidirectional self-attention) -> memory;
    tgt -> decoder (causal self-attention, cross-attention to memory) -> logits.

    Source/target embeddings are one table when ``embeddings.share`` (the paper's shared BPE
    vocabulary), and the output projection is tied to the target embedding when ``embeddings.tie``.
    """

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        if cfg.kind != "encoder_decoder":
            raise ValueError(f"EncoderDecoder needs model.kind='encoder_decoder', got {cfg.kind!r}")
        self.cfg = cfg
        self.tgt_embed = make_embed(cfg, rngs)
        self.src_embed = None if cfg.embeddings.share else make_embed(cfg, rngs)
        self.src_positions = build_positions(cfg.position, cfg.position_dims(bidirectional=True), rngs=rngs)
        self.tgt_positions = build_positions(cfg.position, cfg.position_dims(bidirectional=False), rngs=rngs)
        self.encoder = Stack(
            cfg.block_configs(side="encoder", rope=self.src_positions.rope),
            cfg.dims.n_encoder_layers,
            scan=cfg.execution.scan_layers,
            remat=cfg.execution.remat,
            rngs=rngs,
        )
        self.encoder_norm = make_final_norm(cfg, rngs)
        self.decoder = Stack(
            cfg.block_configs(side="decoder", rope=self.tgt_positions.rope),
            cfg.dims.n_layers,
            scan=cfg.execution.scan_layers,
            remat=cfg.execution.remat,
            rngs=rngs,
        )
        self.decoder_norm = make_final_norm(cfg, rngs)
        self.lm_head = make_lm_head(cfg, rngs)

    def encode(
        self,
        src_BS: Int[Array, "B S"],
        *,
        src_segment_ids_BS: Int[Array, "B S"] | None = None,
        src_positions_BS: Int[Array, "B S"] | None = None,
        dropout_key: jax.Array | None = None,
        return_hidden: bool = False,
    ) -> tuple[Float[Array, "B S D"], dict]:
        """Encoder output (the memory), normalised when the placement needs a final norm."""
        cfg = self.cfg
        B, S = src_BS.shape
        index_BS = _index(B, S)
        positions_BS = index_BS if src_positions_BS is None else src_positions_BS
        mask = AttentionMask(causal=False, q_segment_ids=src_segment_ids_BS, kv_segment_ids=src_segment_ids_BS)
        k_embed, k_layers = (None, None) if dropout_key is None else jax.random.split(dropout_key)
        embed = self.src_embed or self.tgt_embed
        x_BSD = dropout(self.src_positions.embed(embed(src_BS), positions_BS), cfg.dropout, k_embed)
        inputs = BlockInputs(
            mask=mask, positions=positions_BS, bias=self.src_positions.attention_bias(positions_BS, positions_BS)
        )
        x_BSD, _, aux = self.encoder(x_BSD, inputs, dropout_key=k_layers, return_hidden=return_hidden)
        if self.encoder_norm is not None:
            x_BSD = self.encoder_norm(x_BSD)
        return x_BSD, aux

    def init_cache(self, memory_BSD: Float[Array, "B S D"], max_len: int, dtype=None):
        """Decoder caches: empty self-attention caches plus cross-attention keys/values of the
        memory, computed once here and reused at every decoding step."""
        caches = make_self_caches(self.cfg, self.cfg.dims.n_layers, memory_BSD.shape[0], max_len, dtype)
        if self.cfg.execution.scan_layers:
            graphdef, states = nnx.split(self.decoder.layers)
            project = jax.vmap(lambda s: _cross_kv(cast(Block, nnx.merge(graphdef, s)), memory_BSD))
            return {**cast(dict, caches), "cross": project(states)}  # a scanned stack's caches: one stacked dict
        return [
            {**c, "cross": _cross_kv(block, memory_BSD)}
            for c, block in zip(caches, cast("nnx.List[Block]", self.decoder.layers))
        ]

    def decode(
        self,
        tgt_BT: Int[Array, "B T"],
        memory_BSD: Float[Array, "B S D"] | None,
        *,
        src_segment_ids_BS: Int[Array, "B S"] | None = None,
        tgt_segment_ids_BT: Int[Array, "B T"] | None = None,
        tgt_positions_BT: Int[Array, "B T"] | None = None,
        dropout_key: jax.Array | None = None,
        cache=None,
        return_hidden: bool = False,
        tgt_embeddings_BTD: Float[Array, "B T D"] | None = None,
    ) -> tuple[Float[Array, "B T V"], dict]:
        """Decoder logits for target inputs ``tgt_BT`` (BOS + y) given the memory.

        Cross-attention sees source token j from target token i when their segment ids match
        (``tgt_segment_ids`` default: all ones) and source j is not padding (segment id 0).
        ``tgt_embeddings_BTD`` replaces the target token lookup.
        """
        cfg = self.cfg
        B, T = tgt_BT.shape
        start = 0 if cache is None else cache_index(cache)
        index_BT = _index(B, T, start)
        if cache is None:
            kv_index = index_BT
        else:
            if tgt_segment_ids_BT is not None:
                raise ValueError("tgt_segment_ids_BT is not supported together with a KV cache")
            S_max = (cache[0] if isinstance(cache, list) else cache)["self"].max_len
            kv_index = _index(B, S_max)
        positions_BT = index_BT if tgt_positions_BT is None else tgt_positions_BT
        self_mask = AttentionMask(
            causal=cfg.attention.causal,
            q_segment_ids=tgt_segment_ids_BT,
            kv_segment_ids=tgt_segment_ids_BT,
            q_positions=None if cache is None else index_BT,
            kv_positions=None,  # slot s holds position s: the default, so decode kernels can rely on it
        )
        cross_mask = None
        if src_segment_ids_BS is not None:
            q_seg = jnp.ones((B, T), jnp.int32) if tgt_segment_ids_BT is None else tgt_segment_ids_BT
            cross_mask = AttentionMask(
                q_segment_ids=q_seg, kv_segment_ids=src_segment_ids_BS, kv_valid=src_segment_ids_BS != 0
            )
        k_embed, k_layers = (None, None) if dropout_key is None else jax.random.split(dropout_key)
        tok_BTD = self.tgt_embed(tgt_BT) if tgt_embeddings_BTD is None else tgt_embeddings_BTD.astype(cfg.compute_dtype)
        x_BTD = dropout(self.tgt_positions.embed(tok_BTD, positions_BT), cfg.dropout, k_embed)
        inputs = BlockInputs(
            mask=self_mask,
            positions=positions_BT,
            bias=self.tgt_positions.attention_bias(positions_BT, positions_BT if cache is None else kv_index),
            memory=memory_BSD,
            cross_mask=cross_mask,
        )
        x_BTD, cache, aux = self.decoder(x_BTD, inputs, caches=cache, dropout_key=k_layers, return_hidden=return_hidden)
        logits = output_logits(x_BTD, self.decoder_norm, self.lm_head, self.tgt_embed, cfg.embeddings.final_softcap)
        if cache is not None:
            aux["cache"] = cache
        return logits, aux

    def __call__(
        self,
        src_BS: Int[Array, "B S"],
        tgt_BT: Int[Array, "B T"],
        *,
        src_segment_ids_BS: Int[Array, "B S"] | None = None,
        tgt_segment_ids_BT: Int[Array, "B T"] | None = None,
        src_positions_BS: Int[Array, "B S"] | None = None,
        tgt_positions_BT: Int[Array, "B T"] | None = None,
        dropout_key: jax.Array | None = None,
        return_hidden: bool = False,
    ) -> tuple[Float[Array, "B T V"], dict]:
        """Teacher-forced logits [B, T, V]; aux holds ``encoder``/``decoder`` diagnostics and,
        with MoE layers, ``losses``/``metrics`` named ``encoder/...`` and ``decoder/...``."""
        k_enc, k_dec = (None, None) if dropout_key is None else jax.random.split(dropout_key)
        memory, enc_aux = self.encode(
            src_BS,
            src_segment_ids_BS=src_segment_ids_BS,
            src_positions_BS=src_positions_BS,
            dropout_key=k_enc,
            return_hidden=return_hidden,
        )
        logits, dec_aux = self.decode(
            tgt_BT,
            memory,
            src_segment_ids_BS=src_segment_ids_BS,
            tgt_segment_ids_BT=tgt_segment_ids_BT,
            tgt_positions_BT=tgt_positions_BT,
            dropout_key=k_dec,
            return_hidden=return_hidden,
        )
        aux = merge_moe_aux(collect_moe_aux(enc_aux, "encoder/"), collect_moe_aux(dec_aux, "decoder/"))
        enc_aux, dec_aux = ({k: v for k, v in a.items() if k != "moe"} for a in (enc_aux, dec_aux))
        if enc_aux:
            aux["encoder"] = enc_aux
        if dec_aux:
            aux["decoder"] = dec_aux
        return logits, aux

"""Mixtral (``model_type="mixtral"``): Mistral's attention with a sparse MoE in every layer.

Routing as Hugging Face: softmax over the experts (float32), the top ``num_experts_per_tok``,
their weights renormalised to sum to 1, no capacity limit (dropless). Checkpoints name the experts
``block_sparse_moe.experts.{e}.w1/w2/w3`` (gate, down, up; the layout of published checkpoints and
of transformers' own ``save_pretrained``); transformers >= 5 holds them fused in memory as
``mlp.experts.gate_up_proj`` [E, 2F, D] / ``down_proj`` [E, D, F], which we read as well.
``router_aux_loss_coef`` maps to our balance-loss coefficient (``moe.balance``, training only; 0: None);
``output_router_logits`` only asks for extra outputs.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np

from transformer_jax.models.config import ModelConfig
from transformer_jax.models.hf.llama import (
    attention_links,
    decoder_fields,
    decoder_hf,
    ends_links,
    layer,
    rotary_buffer,
)
from transformer_jax.models.hf.mistral import window_fields, window_hf
from transformer_jax.models.hf.spec import ConfigReader, Family, Link, copy, linear, register, stacked_linear
from transformer_jax.models.moe_config import MoEConfig, balance_coef, balance_loss
from transformer_jax.nn.moe_config import SoftmaxRouter


def _config(r: ConfigReader) -> dict[str, Any]:
    r.expect("router_jitter_noise", (0.0, 0), "training-time router noise is not implemented")
    r.ignore("output_router_logits")
    moe = MoEConfig(
        n_experts=r.need("num_local_experts"),
        top_k=r.need("num_experts_per_tok"),
        router=SoftmaxRouter(renormalize=True),
        capacity=None,
        balance=balance_loss("switch", float(r.get("router_aux_loss_coef", 0.001))),
    )
    return {**decoder_fields(r), **window_fields(r), "use_bias": False, "moe": moe}


def _hf(cfg: ModelConfig) -> dict[str, Any]:
    if cfg.moe is None:
        raise ValueError("model.moe is None: a Mixtral checkpoint needs a MoE model")
    moe = cfg.moe
    return {
        **decoder_hf(cfg),
        **window_hf(cfg),
        "num_local_experts": moe.n_experts,
        "num_experts_per_tok": moe.top_k,
        "router_aux_loss_coef": balance_coef(moe),
        "router_jitter_noise": 0.0,
    }


def _fused_gate_up(hf: str, ours: str) -> Link:
    """transformers 5's in-memory layout: gate|up stacked [E, 2F, D] -> w_gate, w_in [E, D, F]."""

    def to_ours(w):
        gate, up = np.split(w, 2, axis=1)
        return np.ascontiguousarray(gate.transpose(0, 2, 1)), np.ascontiguousarray(up.transpose(0, 2, 1))

    def to_hf(gate, up):
        return (np.concatenate([gate.transpose(0, 2, 1), up.transpose(0, 2, 1)], axis=1),)

    return Link((hf,), (f"{ours}.w_gate", f"{ours}.w_in"), to_ours, to_hf)


def _fused_down(hf: str, ours: str) -> Link:
    return Link(
        (hf,),
        (ours,),
        lambda w: (np.ascontiguousarray(w.transpose(0, 2, 1)),),
        lambda k: (np.ascontiguousarray(k.transpose(0, 2, 1)),),
    )


def expert_links(
    cfg: ModelConfig,
    ffn: str,
    router: str,
    experts: str,
    names: AbstractSet[str] | None,
    projections: tuple[str, ...],
    n_experts: int | None = None,
) -> list[Link]:
    """One MoE layer's router [D, E] and experts: from transformers 5's fused in-memory layout
    (``{experts}.gate_up_proj`` [E, 2F, D], ``{experts}.down_proj``) when ``names`` has it, else one
    tensor per expert, ``{experts}.{e}.{name}.weight`` for the gate, up and down ``projections``.
    ``n_experts``: the routed experts E (default ``model.moe.n_experts``, no shared ones)."""
    assert cfg.moe is not None
    E = cfg.moe.n_experts if n_experts is None else n_experts
    links = [linear(f"{router}.weight", f"{ffn}.router.kernel", (cfg.dims.d_model,), (E,))]
    if names is not None and f"{experts}.gate_up_proj" in names:
        fused = [_fused_gate_up(f"{experts}.gate_up_proj", ffn), _fused_down(f"{experts}.down_proj", f"{ffn}.w_out")]
        return links + fused
    for theirs, ours in zip(projections, ("w_gate", "w_in", "w_out"), strict=True):
        links.append(stacked_linear([f"{experts}.{e}.{theirs}.weight" for e in range(E)], f"{ffn}.{ours}"))
    return links


def _links(cfg: ModelConfig, names: AbstractSet[str] | None) -> list[Link]:
    fused = names is not None and "model.layers.0.mlp.experts.gate_up_proj" in names
    links = ends_links(cfg, names)
    for i in range(cfg.dims.n_layers):
        p, ffn = f"model.layers.{i}", f"{layer(i)}.ffn"
        links += attention_links(cfg, i, f"{p}.self_attn")
        links += [
            copy(f"{p}.input_layernorm.weight", f"{layer(i)}.self_attn_norm.scale"),
            copy(f"{p}.post_attention_layernorm.weight", f"{layer(i)}.ffn_norm.scale"),
        ]
        m = f"{p}.mlp" if fused else f"{p}.block_sparse_moe"
        links += expert_links(cfg, ffn, f"{m}.gate", f"{m}.experts", names, ("w1", "w3", "w2"))
    return links


MIXTRAL = register(
    Family(
        name="mixtral",
        architectures=("MixtralForCausalLM",),
        to_config=_config,
        to_hf=_hf,
        links=_links,
        derived=rotary_buffer,
    )
)

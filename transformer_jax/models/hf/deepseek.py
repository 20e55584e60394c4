"""The layout DeepSeek-V2 and DeepSeek-V3 share: Multi-head Latent Attention, the first
``first_k_dense_replace`` layers with a dense MLP of width ``intermediate_size``, the others with
DeepSeekMoE (``n_shared_experts`` shared experts as one MLP of width n_shared x
``moe_intermediate_size``, plus ``num_experts_per_tok`` of ``n_routed_experts`` routed ones).

Attention maps 1:1 onto ``nn.mla`` (the latent norms' epsilon is DeepseekV*RMSNorm's default 1e-6,
as in transformers). Our MoEConfig counts shared experts among its experts, so ``n_experts =
n_routed + n_shared`` and ``top_k = num_experts_per_tok + n_shared``. ``aux_loss_alpha`` /
``seq_aux`` (DeepSeek's own keys) map to ``moe.balance`` (training only; alpha 0: None). What
differs, the router, lives in ``deepseek_v2`` and ``deepseek_v3``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Any

from transformer_jax.models.config import ModelConfig
from transformer_jax.models.hf.llama import decoder_fields, decoder_hf, ends_links, layer, mlp_links
from transformer_jax.models.hf.mixtral import expert_links
from transformer_jax.models.hf.spec import ConfigReader, Link, copy, linear
from transformer_jax.models.mla_config import MLAConfig
from transformer_jax.models.moe_config import MoEConfig, balance_loss
from transformer_jax.nn.moe_config import ExpertGroupsConfig, RouterConfig

MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def mla_of(r: ConfigReader) -> MLAConfig:
    """``model.mla`` of a DeepSeek config.json."""
    rope, nope = r.need("qk_rope_head_dim"), r.need("qk_nope_head_dim")
    r.expect("head_dim", (rope,), "transformers sets it to qk_rope_head_dim")
    r.expect("qk_head_dim", (nope + rope,), "transformers sets it to qk_nope_head_dim + qk_rope_head_dim")
    return MLAConfig(
        q_lora_rank=r.get("q_lora_rank"),
        kv_lora_rank=r.need("kv_lora_rank"),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=r.need("v_head_dim"),
    )


def moe_of(r: ConfigReader, router: RouterConfig) -> MoEConfig:
    """``model.moe`` of a DeepSeek config.json, routed by ``router`` (the family's)."""
    r.expect("moe_layer_freq", (1,), "transformers' DeepSeek models have experts in every layer after the dense ones")
    shared = r.need("n_shared_experts")
    if shared <= 0:
        raise r.unsupported("n_shared_experts", "transformers' DeepSeek models always have a shared-experts MLP")
    return MoEConfig(
        n_experts=r.need("n_routed_experts") + shared,
        top_k=r.need("num_experts_per_tok") + shared,
        n_shared=shared,
        first_dense=r.need("first_k_dense_replace"),
        d_expert=r.need("moe_intermediate_size"),
        router=router,
        capacity=None,
        balance=balance_loss("sequence" if r.get("seq_aux", True) else "expert", float(r.get("aux_loss_alpha", 0.0))),
    )


def groups_of(r: ConfigReader, score: str) -> ExpertGroupsConfig | None:
    """Group-limited routing: the best ``topk_group`` of ``n_group`` groups by ``score``."""
    n, keep = r.need("n_group"), r.need("topk_group")
    if n == 1 and keep == 1:
        return None
    return ExpertGroupsConfig(n_groups=n, topk_groups=keep, score=score)


def fields(r: ConfigReader, moe: MoEConfig, *, interleave: bool) -> dict[str, Any]:
    """The ModelConfig fields of a DeepSeek config.json (``moe`` from the family's router)."""
    r.ignore("ep_size", "auto_map", "output_router_logits")
    r.expect("attention_bias", (False,), "its biases sit on attention only; our use_bias puts them on the MLPs too")
    h = r.need("num_attention_heads")
    r.expect("num_key_value_heads", (h,), "MLA shares one latent; transformers repeats keys heads // kv_heads times")
    kw = decoder_fields(r)
    return {
        **kw,
        "n_kv_heads": None,
        "head_dim": None,
        "position": dataclasses.replace(kw["position"], pairing="adjacent" if interleave else "split"),
        "use_bias": False,
        "mla": mla_of(r),
        "moe": moe,
    }


def hf_fields(cfg: ModelConfig, family: str) -> dict[str, Any]:
    """The config.json entries both families share (the inverse of `fields` and `moe_of`)."""
    if cfg.mla is None or cfg.moe is None:
        raise ValueError(f"a {family} checkpoint needs model.mla and model.moe")
    mla, moe = cfg.mla, cfg.moe
    groups, balance = moe.router.groups, moe.balance
    return {
        **decoder_hf(cfg),
        "num_key_value_heads": cfg.dims.n_heads,
        "head_dim": mla.qk_rope_head_dim,
        "qk_head_dim": mla.qk_head_dim,
        "attention_bias": False,
        **{key: getattr(mla, key) for key in MLA_KEYS},
        "n_routed_experts": moe.n_routed,
        "n_shared_experts": moe.n_shared,
        "num_experts_per_tok": moe.routed_k,
        "moe_intermediate_size": (moe.d_expert or cfg.dims.resolved_d_ff) // moe.segments,
        "first_k_dense_replace": moe.first_dense,
        "n_group": 1 if groups is None else groups.n_groups,
        "topk_group": 1 if groups is None else groups.topk_groups,
        "norm_topk_prob": moe.router.renormalize,
        "routed_scaling_factor": moe.router.scaling_factor,
        "aux_loss_alpha": 0.0 if balance is None else balance.coef,
        "seq_aux": balance is None or balance.loss == "sequence",
    }


def attention_links(cfg: ModelConfig, i: int, hf: str) -> list[Link]:
    """MLA's projections and latent norms (``nn.mla.MultiHeadLatentAttention``) of layer i."""
    assert cfg.mla is not None
    m, D, H = cfg.mla, cfg.dims.d_model, cfg.dims.n_heads
    N, R, V, C = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank
    ours = f"{layer(i)}.self_attn"
    if m.q_lora_rank is None:
        links = [linear(f"{hf}.q_proj.weight", f"{ours}.q.kernel", (D,), (H, N + R))]
    else:
        links = [
            linear(f"{hf}.q_a_proj.weight", f"{ours}.q_a.kernel", (D,), (m.q_lora_rank,)),
            copy(f"{hf}.q_a_layernorm.weight", f"{ours}.q_a_norm.scale"),
            linear(f"{hf}.q_b_proj.weight", f"{ours}.q_b.kernel", (m.q_lora_rank,), (H, N + R)),
        ]
    return links + [
        linear(f"{hf}.kv_a_proj_with_mqa.weight", f"{ours}.kv_a.kernel", (D,), (C + R,)),
        copy(f"{hf}.kv_a_layernorm.weight", f"{ours}.kv_a_norm.scale"),
        linear(f"{hf}.kv_b_proj.weight", f"{ours}.kv_b.kernel", (C,), (H, N + V)),
        linear(f"{hf}.o_proj.weight", f"{ours}.o.kernel", (H, V), (D,)),
    ]


PROJECTIONS = ("gate_proj", "up_proj", "down_proj")


def moe_links(cfg: ModelConfig, i: int, hf: str, names: AbstractSet[str] | None) -> list[Link]:
    """Router, routed experts and the shared-experts MLP of MoE layer i (``hf``: ``...mlp``)."""
    assert cfg.moe is not None
    spec = cfg.moe.spec(cfg.dims.resolved_d_ff, cfg.ffn)
    ffn, D, F = f"{layer(i)}.ffn", cfg.dims.d_model, spec.n_shared * (spec.d_shared or spec.d_expert)
    links = expert_links(cfg, ffn, f"{hf}.gate", f"{hf}.experts", names, PROJECTIONS, n_experts=spec.n_experts)
    shared = (("gate_proj", "w_gate", (D,), (F,)), ("up_proj", "w_in", (D,), (F,)), ("down_proj", "w_out", (F,), (D,)))
    links += [linear(f"{hf}.shared_experts.{t}.weight", f"{ffn}.shared.{w}.kernel", a, b) for t, w, a, b in shared]
    return links


MoELinks = Callable[[ModelConfig, int, str, "AbstractSet[str] | None"], list[Link]]


def links(cfg: ModelConfig, names: AbstractSet[str] | None, moe: MoELinks = moe_links) -> list[Link]:
    """Every tensor of a DeepSeek checkpoint (``moe``: one MoE layer's links, the family's)."""
    assert cfg.moe is not None
    out = ends_links(cfg, names)
    for i in range(cfg.dims.n_layers):
        p = f"model.layers.{i}"
        out += attention_links(cfg, i, f"{p}.self_attn")
        out += [
            copy(f"{p}.input_layernorm.weight", f"{layer(i)}.self_attn_norm.scale"),
            copy(f"{p}.post_attention_layernorm.weight", f"{layer(i)}.ffn_norm.scale"),
        ]
        if i >= cfg.moe.first_dense and (i + 1) % cfg.moe.every == 0:
            out += moe(cfg, i, f"{p}.mlp", names)
        else:
            out += mlp_links(cfg, i, f"{p}.mlp")
    return out

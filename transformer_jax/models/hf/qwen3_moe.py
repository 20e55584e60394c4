"""Qwen3-MoE (``model_type="qwen3_moe"``): Qwen3's attention (QK-norm, no biases) with routed
experts of width ``moe_intermediate_size`` in place of the MLP.

Routing as Hugging Face: softmax over the ``num_experts`` experts (float32), the top
``num_experts_per_tok``, renormalised to sum to 1 when ``norm_topk_prob`` (both settings map), no
capacity limit (dropless), no shared expert. Layer i has experts when it is not in
``mlp_only_layers`` and (i + 1) % ``decoder_sparse_step`` == 0; the others keep a dense MLP of
width ``intermediate_size``. Our ``moe.every`` expresses every such set that is "every n-th layer";
any other (e.g. ``mlp_only_layers=[3]`` of 8 layers) is refused naming the key. Checkpoints name the
experts ``mlp.experts.{e}.gate_proj/up_proj/down_proj`` (published checkpoints and transformers'
``save_pretrained``); transformers >= 5 holds them fused in memory (``mlp.experts.gate_up_proj``
[E, 2F, D], ``down_proj`` [E, D, F]), read as well. ``num_local_experts`` (what transformers 5
writes for ``num_experts``) is accepted too. ``router_aux_loss_coef`` maps to our balance-loss
coefficient (training only); ``output_router_logits`` only asks for extra outputs.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

from transformer_jax.models.config import ModelConfig
from transformer_jax.models.hf.llama import attention_links, ends_links, layer, mlp_links, rotary_buffer
from transformer_jax.models.hf.mixtral import expert_links
from transformer_jax.models.hf.qwen3 import qwen3_fields, qwen3_hf
from transformer_jax.models.hf.spec import ConfigReader, Family, Link, copy, register
from transformer_jax.models.moe_config import MoEConfig, balance_coef, balance_loss
from transformer_jax.nn.moe_config import SoftmaxRouter


def _n_experts(r: ConfigReader) -> int:
    named, local = r.get("num_experts"), r.get("num_local_experts")
    if named is not None and local is not None and named != local:
        raise r.unsupported("num_local_experts", f"differs from num_experts={named}")
    key, n = ("num_experts", named) if named is not None else ("num_local_experts", local)
    if n is None:
        raise ValueError(f"{r.family} config.json key 'num_experts' is missing; it is required to build the model")
    if n <= 0:
        raise r.unsupported(key, "a model without experts is a qwen3 checkpoint")
    return int(n)


def _moe_every(r: ConfigReader, n_layers: int) -> int:
    """``moe.every`` of ``decoder_sparse_step`` and ``mlp_only_layers`` (see the module docstring)."""
    step = int(r.get("decoder_sparse_step", 1))
    only = set(r.get("mlp_only_layers", []))
    key = "mlp_only_layers" if only else "decoder_sparse_step"
    if step <= 0:
        raise r.unsupported("decoder_sparse_step", "must be a positive number of layers")
    sparse = [i for i in range(n_layers) if i not in only and (i + 1) % step == 0]
    if not sparse:
        raise r.unsupported(key, "leaves no layer with experts; a dense model is a qwen3 checkpoint")
    every = sparse[0] + 1
    if sparse != [i for i in range(n_layers) if (i + 1) % every == 0]:
        raise r.unsupported(
            key,
            f"experts in layers {sparse}: model.moe.every expresses only every n-th layer "
            "(layers i with (i + 1) % n == 0)",
        )
    return every


def _config(r: ConfigReader) -> dict[str, Any]:
    r.ignore("output_router_logits")
    kw = qwen3_fields(r)
    moe = MoEConfig(
        n_experts=_n_experts(r),
        top_k=r.need("num_experts_per_tok"),
        every=_moe_every(r, kw["n_layers"]),
        d_expert=r.need("moe_intermediate_size"),
        router=SoftmaxRouter(renormalize=bool(r.get("norm_topk_prob", False))),
        capacity=None,
        balance=balance_loss("switch", float(r.get("router_aux_loss_coef", 0.001))),
    )
    return {**kw, "moe": moe}


def _hf(cfg: ModelConfig) -> dict[str, Any]:
    if cfg.moe is None:
        raise ValueError("model.moe is None: a Qwen3-MoE checkpoint needs a MoE model")
    moe = cfg.moe
    return {
        **qwen3_hf(cfg),
        "num_experts": moe.n_experts,
        "num_experts_per_tok": moe.top_k,
        "moe_intermediate_size": moe.d_expert or cfg.dims.resolved_d_ff,
        "norm_topk_prob": moe.router.renormalize,
        "decoder_sparse_step": moe.every,
        "mlp_only_layers": [],
        "router_aux_loss_coef": balance_coef(moe),
    }


PROJECTIONS = ("gate_proj", "up_proj", "down_proj")


def _links(cfg: ModelConfig, names: AbstractSet[str] | None) -> list[Link]:
    assert cfg.moe is not None
    links = ends_links(cfg, names)
    for i in range(cfg.dims.n_layers):
        p, ffn = f"model.layers.{i}", f"{layer(i)}.ffn"
        links += attention_links(cfg, i, f"{p}.self_attn")
        links += [
            copy(f"{p}.input_layernorm.weight", f"{layer(i)}.self_attn_norm.scale"),
            copy(f"{p}.post_attention_layernorm.weight", f"{layer(i)}.ffn_norm.scale"),
        ]
        if (i + 1) % cfg.moe.every:
            links += mlp_links(cfg, i, f"{p}.mlp")
            continue
        links += expert_links(cfg, ffn, f"{p}.mlp.gate", f"{p}.mlp.experts", names, PROJECTIONS)
    return links


QWEN3_MOE = register(
    Family(
        name="qwen3_moe",
        architectures=("Qwen3MoeForCausalLM",),
        to_config=_config,
        to_hf=_hf,
        links=_links,
        derived=rotary_buffer,
    )
)

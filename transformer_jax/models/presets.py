"""Named model configurations. ``get_preset("gpt2_small", n_layers=6)`` returns a ModelConfig."""

from __future__ import annotations

import dataclasses

from transformer_jax.core.registry import Registry
from transformer_jax.models.baselines.config import BaselineConfig
from transformer_jax.models.config import ModelConfig, with_changes
from transformer_jax.models.dims_config import DIMS_NAMES, ModelDims
from transformer_jax.models.mla_config import MLAConfig
from transformer_jax.models.moe_config import MoEConfig
from transformer_jax.nn.embed import EmbeddingsConfig
from transformer_jax.nn.init import InitConfig
from transformer_jax.nn.moe_config import (
    BalanceLossConfig,
    CapacityConfig,
    ExpertGroupsConfig,
    SigmoidRouter,
    SoftmaxRouter,
)
from transformer_jax.nn.norm_config import LayerNormConfig, RMSNormConfig
from transformer_jax.nn.position_config import LearnedPositions, NoPositions, RopePositions, SinusoidalPositions
from transformer_jax.ops.rope import ROPE_THETA

PRESETS: Registry[ModelConfig] = Registry("model preset")


def get_preset(name: str, **overrides) -> ModelConfig:
    """The preset ``name`` with fields replaced by ``overrides`` (validated again); the names of
    ``ExecutionConfig``'s fields (``dtype``, ``scan_layers``, ``attention_impl``...) set
    ``model.execution``'s."""
    return with_changes(PRESETS.get(name), **overrides)


def baseline_model_config(kind: str, baseline: BaselineConfig | None = None, **model_fields):
    """A ``ModelConfig`` of a baseline ``kind`` with its ``baseline`` settings (None: the kind's
    defaults), ``position="none"`` (and, for ``window_lm``, an untied output layer unless
    ``d_ff == d_model``); ``model_fields`` set the rest."""
    fields = {"position": NoPositions(), **model_fields}
    dims = ModelDims(**{name: fields.pop(name) for name in DIMS_NAMES if name in fields})
    if kind == "window_lm" and "embeddings" not in fields:
        fields["embeddings"] = EmbeddingsConfig(tie=dims.d_ff == dims.d_model)
    if baseline is None and kind in BaselineConfig.VARIANTS:
        baseline = BaselineConfig.VARIANTS.get(kind)()
    return ModelConfig(kind=kind, dims=dims, baseline=baseline, **fields)


# The original Transformer (Vaswani et al. 2017, Table 3 "base"): 6+6 layers, d_model 512,
# 8 heads, d_ff 2048, dropout 0.1, Post-LN, sinusoidal positions, ReLU, a shared source/target
# BPE vocabulary of about 37,000 tokens tied to the output projection, embeddings x sqrt(d).
PRESETS.register(
    "original_base",
    ModelConfig(
        kind="encoder_decoder",
        dims=ModelDims(
            vocab_size=37000,
            d_model=512,
            n_heads=8,
            d_ff=2048,
            n_layers=6,
            n_encoder_layers=6,
            max_len=512,
        ),
        placement="post",
        norm=LayerNormConfig(),
        position=SinusoidalPositions(),
        ffn="relu",
        use_bias=True,
        embeddings=EmbeddingsConfig(tie=True, scale=True, share=True),
        dropout=0.1,
        init=InitConfig(scheme="xavier"),
    ),
)
PRESETS.register(
    "original_big", with_changes(PRESETS.get("original_base"), d_model=1024, n_heads=16, d_ff=4096, dropout=0.3)
)
PRESETS.register(
    "original_tiny",
    with_changes(
        PRESETS.get("original_base"),
        vocab_size=512,
        d_model=64,
        n_heads=4,
        d_ff=128,
        n_layers=2,
        n_encoder_layers=2,
        max_len=128,
    ),
)
# A CPU-sized translation model (3+3 layers, d 256) for Multi30k.
PRESETS.register(
    "original_small",
    with_changes(
        PRESETS.get("original_base"),
        vocab_size=8000,
        d_model=256,
        n_heads=8,
        d_ff=1024,
        n_layers=3,
        n_encoder_layers=3,
        max_len=256,
    ),
)

# GPT-2 small (Radford et al. 2019): exactly Hugging Face's GPT2LMHeadModel layout, 124,439,808
# parameters with tied embeddings.
PRESETS.register(
    "gpt2_small",
    ModelConfig(
        kind="decoder_lm",
        dims=ModelDims(
            vocab_size=50257,
            d_model=768,
            n_heads=12,
            d_ff=3072,
            n_layers=12,
            max_len=1024,
        ),
        placement="pre",
        norm=LayerNormConfig(eps=1e-5),
        position=LearnedPositions(),
        ffn="gelu_tanh",
        use_bias=True,
        embeddings=EmbeddingsConfig(tie=True),
        init=InitConfig(scheme="normal", std=0.02),
    ),
)
PRESETS.register(
    "gpt2_tiny",
    with_changes(PRESETS.get("gpt2_small"), vocab_size=256, d_model=64, n_heads=4, d_ff=256, n_layers=2, max_len=128),
)
# nanoGPT's shakespeare_char model / ../shared/bench/torch_gpt.py: no biases, exact GELU.
PRESETS.register(
    "nanogpt_char",
    ModelConfig(
        kind="decoder_lm",
        dims=ModelDims(
            vocab_size=65,
            d_model=128,
            n_heads=4,
            d_ff=512,
            n_layers=4,
            max_len=64,
        ),
        placement="pre",
        norm=LayerNormConfig(bias=False),
        position=LearnedPositions(),
        ffn="gelu",
        use_bias=False,
        embeddings=EmbeddingsConfig(tie=True),
        init=InitConfig(scheme="normal", std=0.02),
    ),
)

# LLaMA-like (Touvron et al. 2023): RMSNorm, RoPE, SwiGLU, grouped-query attention, no biases,
# untied output head.
PRESETS.register(
    "llama_like",
    ModelConfig(
        kind="decoder_lm",
        dims=ModelDims(
            vocab_size=32000,
            d_model=1024,
            n_heads=16,
            n_kv_heads=4,
            d_ff=2816,
            n_layers=24,
            max_len=2048,
        ),
        placement="pre",
        norm=RMSNormConfig(eps=1e-5),
        position=RopePositions(theta=ROPE_THETA),
        ffn="swiglu",
        use_bias=False,
        embeddings=EmbeddingsConfig(tie=False),
        init=InitConfig(scheme="normal", std=0.02),
    ),
)
PRESETS.register(
    "llama_tiny",
    with_changes(
        PRESETS.get("llama_like"),
        vocab_size=256,
        d_model=64,
        n_heads=4,
        n_kv_heads=2,
        d_ff=176,
        n_layers=2,
        max_len=128,
    ),
)

# Mixture-of-Experts (model.moe). Tiny decoders for tests and CPU runs, plus a Mixtral-like recipe
# at llama_like's size.
# Switch Transformer (Fedus et al. 2021): top-1, capacity factor 1.25, MoE in every other layer.
PRESETS.register(
    "switch_tiny",
    dataclasses.replace(
        PRESETS.get("gpt2_tiny"),
        moe=MoEConfig(n_experts=8, top_k=1, every=2, capacity=CapacityConfig(factor=1.25), balance=BalanceLossConfig()),
    ),
)
# GShard (Lepikhin et al. 2020): top-2 with normalised gates, capacity 2 T / E, every other layer.
PRESETS.register(
    "gshard_tiny",
    dataclasses.replace(
        PRESETS.get("gpt2_tiny"),
        moe=MoEConfig(
            n_experts=8,
            top_k=2,
            every=2,
            router=SoftmaxRouter(renormalize=True),
            capacity=CapacityConfig(factor=2.0),
            balance=BalanceLossConfig(loss="switch", coef=0.01),
        ),
    ),
)
# DeepSeekMoE (Dai et al. 2024) scaled down: 4 experts top-2, each split in 4 (16 experts of width
# d_expert / 4, 8 active), one of them shared: 1 shared + top-7 of 15 routed, as the paper's "1+7".
PRESETS.register(
    "deepseek_moe_tiny",
    dataclasses.replace(
        PRESETS.get("llama_tiny"),
        moe=MoEConfig(
            n_experts=4,
            top_k=2,
            segments=4,
            n_shared=1,
            d_expert=128,
            balance=BalanceLossConfig(loss="expert", coef=0.01),
        ),
    ),
)
# DeepSeek-V3 style: Multi-head Latent Attention (a 32-dim latent and an 8-dim shared RoPE key
# cached per token, queries through a 32-dim latent, RoPE on interleaved pairs); sigmoid scores,
# renormalised top-k, group-limited routing, auxiliary-loss-free bias balancing plus a tiny
# sequence-wise balance loss; 1 shared + top-2 of 8 routed.
PRESETS.register(
    "deepseek_v3_tiny",
    with_changes(
        PRESETS.get("llama_tiny"),
        n_kv_heads=None,
        position=RopePositions(pairing="adjacent"),
        mla=MLAConfig(q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16),
        moe=MoEConfig(
            n_experts=9,
            top_k=3,
            n_shared=1,
            d_expert=64,
            router=SigmoidRouter(
                renormalize=True,
                groups=ExpertGroupsConfig(n_groups=4, topk_groups=2, score="top2_sum"),
                bias_update_rate=1e-3,
            ),
            balance=BalanceLossConfig(loss="sequence", coef=1e-4),
        ),
    ),
)
# Mixtral (Jiang et al. 2024): 8 SwiGLU experts, top-2 with softmax over the chosen two, dropless.
PRESETS.register(
    "mixtral_like",
    dataclasses.replace(
        PRESETS.get("llama_like"),
        moe=MoEConfig(
            n_experts=8,
            top_k=2,
            router=SoftmaxRouter(renormalize=True),
            balance=BalanceLossConfig(loss="expert", coef=0.002),
        ),
    ),
)
PRESETS.register("mixtral_tiny", dataclasses.replace(PRESETS.get("llama_tiny"), moe=PRESETS.get("mixtral_like").moe))

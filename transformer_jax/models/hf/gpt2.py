"""GPT-2 (``model_type="gpt2"``): learned positions, pre-LayerNorm, biases everywhere, a plain
GELU MLP, tied output head. Its ``Conv1D`` weights are stored [in, out] and q|k|v are fused in
``c_attn``. Published checkpoints name tensors without the ``transformer.`` prefix that
transformers writes; both load. ``h.{i}.attn.bias`` / ``masked_bias`` (causal-mask buffers of old
files) hold nothing to load. The ``*_pdrop`` dropout rates are training-time regularisation (a
loaded model has dropout 0); ``summary_*`` configure the double-heads classifier, which has no
weights in a causal LM; ``reorder_and_upcast_attn`` only upcasts attention to float32.
"""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet
from typing import Any

from transformer_jax.models.config import ModelConfig
from transformer_jax.models.hf.spec import (
    ConfigReader,
    Family,
    Link,
    conv1d,
    copy,
    equal_to,
    linear,
    register,
    split_last,
)
from transformer_jax.nn.embed import EmbeddingsConfig
from transformer_jax.nn.norm_config import LayerNormConfig
from transformer_jax.nn.position_config import LearnedPositions

_ACTS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
_ACT_NAMES = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}
_MASK_BUFFER = re.compile(r"^(transformer\.)?h\.\d+\.attn\.(masked_)?bias$")


def _config(r: ConfigReader) -> dict[str, Any]:
    r.ignore("attn_pdrop", "resid_pdrop", "embd_pdrop", "reorder_and_upcast_attn", "n_ctx")
    r.ignore(*(k for k in r.d if k.startswith("summary_")))
    r.expect("scale_attn_weights", (True,), "attention is always scaled by 1/sqrt(head_dim)")
    r.expect("scale_attn_by_inverse_layer_idx", (False,), "no per-layer attention scaling")
    act = r.get("activation_function", "gelu_new")
    if act not in _ACTS:
        raise r.unsupported("activation_function", f"known: {', '.join(_ACTS)}")
    d = r.need("n_embd")
    return dict(
        kind="decoder_lm",
        vocab_size=r.need("vocab_size"),
        d_model=d,
        n_heads=r.need("n_head"),
        d_ff=r.get("n_inner", 4 * d),
        n_layers=r.need("n_layer"),
        max_len=r.need("n_positions"),
        placement="pre",
        norm=LayerNormConfig(eps=float(r.get("layer_norm_epsilon", 1e-5))),
        position=LearnedPositions(),
        ffn=_ACTS[act],
        use_bias=True,
        embeddings=EmbeddingsConfig(tie=bool(r.get("tie_word_embeddings", True))),
    )


def _hf(cfg: ModelConfig) -> dict[str, Any]:
    if cfg.ffn not in _ACT_NAMES:
        raise ValueError(f"model.ffn={cfg.ffn!r} has no GPT-2 equivalent (known: {', '.join(_ACT_NAMES)})")
    return {
        "vocab_size": cfg.dims.vocab_size,
        "n_embd": cfg.dims.d_model,
        "n_head": cfg.dims.n_heads,
        "n_inner": cfg.dims.resolved_d_ff,
        "n_layer": cfg.dims.n_layers,
        "n_positions": cfg.dims.max_len,
        "layer_norm_epsilon": cfg.norm.eps,
        "activation_function": _ACT_NAMES[cfg.ffn],
        "tie_word_embeddings": cfg.embeddings.tie,
        "attn_pdrop": 0.0,
        "resid_pdrop": cfg.dropout,
        "embd_pdrop": cfg.dropout,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
    }


def _links(cfg: ModelConfig, names: AbstractSet[str] | None) -> list[Link]:
    D, H, Dh, F = cfg.dims.d_model, cfg.dims.n_heads, cfg.dims.resolved_head_dim, cfg.dims.resolved_d_ff
    p = "transformer." if names is None or "transformer.wte.weight" in names else ""
    links = [
        copy(f"{p}wte.weight", "embed.embedding"),
        copy(f"{p}wpe.weight", "positions.table"),
        copy(f"{p}ln_f.weight", "final_norm.scale"),
        copy(f"{p}ln_f.bias", "final_norm.bias"),
    ]
    if not cfg.embeddings.tie:
        links.append(linear("lm_head.weight", "lm_head.kernel", (D,), (cfg.dims.vocab_size,)))
    elif names is not None and "lm_head.weight" in names:
        links.append(equal_to("lm_head.weight", f"{p}wte.weight", "tie_word_embeddings is true"))
    for i in range(cfg.dims.n_layers):
        h, ours = f"{p}h.{i}", f"layers.layers.{i}"
        att = f"{ours}.self_attn"
        qkv = [f"{att}.{x}" for x in "qkv"]
        links += [
            split_last(f"{h}.attn.c_attn.weight", [q + ".kernel" for q in qkv], [(D, H, Dh)] * 3, lead=1),
            split_last(f"{h}.attn.c_attn.bias", [q + ".bias" for q in qkv], [(H, Dh)] * 3, lead=0),
            conv1d(f"{h}.attn.c_proj.weight", f"{att}.o.kernel", (H, Dh), (D,)),
            copy(f"{h}.attn.c_proj.bias", f"{att}.o.bias"),
            conv1d(f"{h}.mlp.c_fc.weight", f"{ours}.ffn.w_in.kernel", (D,), (F,)),
            copy(f"{h}.mlp.c_fc.bias", f"{ours}.ffn.w_in.bias"),
            conv1d(f"{h}.mlp.c_proj.weight", f"{ours}.ffn.w_out.kernel", (F,), (D,)),
            copy(f"{h}.mlp.c_proj.bias", f"{ours}.ffn.w_out.bias"),
        ]
        for norm, name in (("self_attn_norm", "ln_1"), ("ffn_norm", "ln_2")):
            links += [
                copy(f"{h}.{name}.weight", f"{ours}.{norm}.scale"),
                copy(f"{h}.{name}.bias", f"{ours}.{norm}.bias"),
            ]
    return links


GPT2 = register(
    Family(
        name="gpt2",
        architectures=("GPT2LMHeadModel",),
        to_config=_config,
        to_hf=_hf,
        links=_links,
        derived=lambda name: bool(_MASK_BUFFER.match(name)),
    )
)

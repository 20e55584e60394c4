"""Parameter shardings of a small decoder LM under the default logical-axis rules, written out
by hand (not derived from ``LOGICAL_RULES`` / ``logical_to_spec``), on the 8 host CPU devices of
tests/conftest.py. A changed rule, a wrong ``logical_axes`` annotation on a parameter or a broken
divisibility fallback changes one of these literal specs."""

import jax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from transformer_jax.models import build_model, get_preset
from transformer_jax.models.moe_config import MoEConfig
from transformer_jax.parallel import MeshConfig, make_mesh, state_shardings

# llama_tiny: vocab 256, d_model 64, 4 heads of 16, 2 KV heads, d_ff 176, SwiGLU, RMSNorm; with
# biases, and layer 1 (every=2) an MoE of 4 experts (d_expert = d_ff = 176).
MOE_LM = dict(n_layers=2, use_bias=True, moe=MoEConfig(n_experts=4, top_k=2, every=2))
DENSE = "layers.layers.0."
MOE = "layers.layers.1."

# Mesh fsdp=2 x tensor=2 x expert=2: "embed" -> fsdp, vocab/heads/kv_heads/mlp -> tensor,
# "experts" -> expert; norms, head_dim and the router's expert axis replicated.
ATTENTION_FSDP_TENSOR = {  # the same in both layers
    "self_attn_norm.scale": P(None),
    "ffn_norm.scale": P(None),
    "self_attn.q.kernel": P("fsdp", "tensor", None),  # [embed, heads, head_dim]
    "self_attn.k.kernel": P("fsdp", "tensor", None),  # [embed, kv_heads, head_dim]
    "self_attn.v.kernel": P("fsdp", "tensor", None),
    "self_attn.o.kernel": P("tensor", None, "fsdp"),  # [heads, head_dim, embed]
    "self_attn.q.bias": P("tensor", None),  # [heads, head_dim]
    "self_attn.k.bias": P("tensor", None),
    "self_attn.v.bias": P("tensor", None),
    "self_attn.o.bias": P("fsdp"),  # [embed]
}
FSDP_TENSOR_EXPERT = {
    "embed.embedding": P("tensor", "fsdp"),  # [vocab, embed]
    "lm_head.kernel": P("fsdp", "tensor"),  # [embed, vocab]
    "final_norm.scale": P(None),
    **{DENSE + name: spec for name, spec in ATTENTION_FSDP_TENSOR.items()},
    **{MOE + name: spec for name, spec in ATTENTION_FSDP_TENSOR.items()},
    DENSE + "ffn.w_in.kernel": P("fsdp", "tensor"),  # [embed, mlp]
    DENSE + "ffn.w_gate.kernel": P("fsdp", "tensor"),
    DENSE + "ffn.w_out.kernel": P("tensor", "fsdp"),  # [mlp, embed]
    DENSE + "ffn.w_in.bias": P("tensor"),  # [mlp]
    DENSE + "ffn.w_gate.bias": P("tensor"),
    DENSE + "ffn.w_out.bias": P("fsdp"),  # [embed]
    MOE + "ffn.router.kernel": P("fsdp", None),  # [embed, experts (router output: replicated)]
    MOE + "ffn.w_in": P("expert", "fsdp", "tensor"),  # [experts, embed, mlp]
    MOE + "ffn.w_gate": P("expert", "fsdp", "tensor"),
    MOE + "ffn.w_out": P("expert", "tensor", "fsdp"),  # [experts, mlp, embed]
    MOE + "ffn.b_in": P("expert", "tensor"),  # [experts, mlp]
    MOE + "ffn.b_out": P("expert", "fsdp"),  # [experts, embed]
}
# Per-device shard shapes on that mesh (each named mesh axis of size 2 halves its dimension).
FSDP_TENSOR_EXPERT_SHARDS = {
    "embed.embedding": (128, 32),
    "lm_head.kernel": (32, 128),
    DENSE + "self_attn.q.kernel": (32, 2, 16),
    DENSE + "self_attn.k.kernel": (32, 1, 16),
    DENSE + "self_attn.o.kernel": (2, 16, 32),
    DENSE + "ffn.w_out.kernel": (88, 32),
    MOE + "ffn.w_in": (2, 32, 88),
    MOE + "ffn.b_out": (2, 32),
}

# Mesh data=2 x tensor=4: fsdp and expert have size 1, so "embed" and "experts" stay replicated;
# the 2 KV heads cannot be split 4 ways and stay replicated while the 4 query heads, the vocab
# (256) and d_ff (176 = 4 * 44) are split over tensor.
DATA_TENSOR4 = {
    "embed.embedding": P("tensor", None),
    "lm_head.kernel": P(None, "tensor"),
    "final_norm.scale": P(None),
    DENSE + "self_attn.q.kernel": P(None, "tensor", None),
    DENSE + "self_attn.k.kernel": P(None, None, None),
    DENSE + "self_attn.v.kernel": P(None, None, None),
    DENSE + "self_attn.k.bias": P(None, None),
    DENSE + "self_attn.o.kernel": P("tensor", None, None),
    DENSE + "ffn.w_in.kernel": P(None, "tensor"),
    DENSE + "ffn.w_out.kernel": P("tensor", None),
    MOE + "ffn.router.kernel": P(None, None),
    MOE + "ffn.w_in": P(None, None, "tensor"),
    MOE + "ffn.w_out": P(None, "tensor", None),
    MOE + "ffn.b_in": P(None, "tensor"),
}

# A dense llama_tiny with scanned layers: every layer parameter gains a leading "layers" axis
# [2, ...], never sharded; the rest shifts right by one. Mesh fsdp=2 x tensor=4.
SCANNED = "layers.layers."
SCANNED_FSDP2_TENSOR4 = {
    "embed.embedding": P("tensor", "fsdp"),
    SCANNED + "self_attn_norm.scale": P(None, None),  # [layers, norm]
    SCANNED + "self_attn.q.kernel": P(None, "fsdp", "tensor", None),  # [layers, embed, heads, head_dim]
    SCANNED + "self_attn.k.kernel": P(None, "fsdp", None, None),  # 2 KV heads over tensor=4: replicated
    SCANNED + "self_attn.o.kernel": P(None, "tensor", None, "fsdp"),
    SCANNED + "ffn.w_in.kernel": P(None, "fsdp", "tensor"),
    SCANNED + "ffn.w_out.kernel": P(None, "tensor", "fsdp"),
}


def _specs(model_fields, mesh_cfg):
    """{dotted parameter path: (PartitionSpec padded with None to the rank, shard shape)} of
    ``state_shardings`` on the 8-device mesh ``mesh_cfg``, without materialising the model."""
    cfg = get_preset("llama_tiny", **model_fields)
    params = nnx.state(nnx.eval_shape(lambda: build_model(cfg)), nnx.Param)
    mesh = make_mesh(mesh_cfg)
    is_var = lambda x: isinstance(x, nnx.Variable)
    out = {}
    for (path, var), (_, sh) in zip(
        jax.tree_util.tree_flatten_with_path(params, is_leaf=is_var)[0],
        jax.tree_util.tree_flatten_with_path(state_shardings(params, mesh), is_leaf=is_var)[0],
    ):
        sharding = sh.get_value() if is_var(sh) else sh
        assert isinstance(sharding, NamedSharding) and sharding.mesh.shape == mesh.shape
        name = ".".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
        spec = tuple(sharding.spec) + (None,) * (len(var.shape) - len(sharding.spec))
        out[name] = (P(*spec), sharding.shard_shape(var.shape))
    return out


def _check(got, expected):
    missing = sorted(set(expected) - set(got))
    assert not missing, f"no such parameters: {missing}; have {sorted(got)}"
    wrong = {name: (got[name][0], spec) for name, spec in expected.items() if got[name][0] != spec}
    assert not wrong, "name: (got, expected) " + repr(wrong)


def test_moe_lm_on_fsdp_tensor_expert_mesh():
    """Every parameter of the MoE LM on fsdp=2 x tensor=2 x expert=2, and the shard shapes."""
    got = _specs(MOE_LM, MeshConfig(data=1, fsdp=2, tensor=2, expert=2))
    assert set(got) == set(FSDP_TENSOR_EXPERT), sorted(set(got) ^ set(FSDP_TENSOR_EXPERT))
    _check(got, FSDP_TENSOR_EXPERT)
    shards = {name: got[name][1] for name in FSDP_TENSOR_EXPERT_SHARDS}
    assert shards == FSDP_TENSOR_EXPERT_SHARDS


def test_moe_lm_on_data_tensor_mesh_replicates_indivisible_axes():
    """Size-1 mesh axes shard nothing; 2 KV heads over tensor=4 fall back to replication."""
    _check(_specs(MOE_LM, MeshConfig(data=2, tensor=4)), DATA_TENSOR4)


def test_scanned_layers_axis_is_replicated():
    _check(_specs(dict(n_layers=2, scan_layers=True), MeshConfig(data=1, fsdp=2, tensor=4)), SCANNED_FSDP2_TENSOR4)

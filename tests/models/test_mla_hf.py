"""MLA's layer equals Hugging Face's ``DeepseekV3Attention`` (float32, eager, causal) with the
weights mapped 1:1 (kernels transposed, heads unflattened), with and without the query latent and
with interleaved (``rope_interleave``) and split RoPE pairs: the mapping a DeepSeek-V3 checkpoint
loader relies on."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from transformer_jax.models.mla_config import MLAConfig
from transformer_jax.nn.attention import RopeSpec
from transformer_jax.nn.mla import MultiHeadLatentAttention
from transformer_jax.ops.masks import AttentionMask

torch = pytest.importorskip("torch")
deepseek = pytest.importorskip("transformers.models.deepseek_v3.modeling_deepseek_v3")
pytestmark = pytest.mark.interop

D, H, C, N, R, V, T = 16, 3, 10, 6, 4, 8, 7


def _load(ours: MultiHeadLatentAttention, sd: dict, q_lora: int | None) -> None:
    """HF [out, in] weights into our [in, out...] kernels."""

    def put(module, name, array):
        getattr(module, name)[...] = jnp.asarray(array)

    if q_lora is None:
        put(ours.q, "kernel", sd["q_proj.weight"].T.reshape(D, H, N + R))
    else:
        put(ours.q_a, "kernel", sd["q_a_proj.weight"].T)
        put(ours.q_a, "bias", sd["q_a_proj.bias"])
        put(ours.q_a_norm, "scale", sd["q_a_layernorm.weight"])
        put(ours.q_b, "kernel", sd["q_b_proj.weight"].T.reshape(q_lora, H, N + R))
    put(ours.kv_a, "kernel", sd["kv_a_proj_with_mqa.weight"].T)
    put(ours.kv_a, "bias", sd["kv_a_proj_with_mqa.bias"])
    put(ours.kv_a_norm, "scale", sd["kv_a_layernorm.weight"])
    put(ours.kv_b, "kernel", sd["kv_b_proj.weight"].T.reshape(C, H, N + V))
    put(ours.o, "kernel", sd["o_proj.weight"].T.reshape(H, V, D))
    put(ours.o, "bias", sd["o_proj.bias"])


@pytest.mark.parametrize(("q_lora", "interleave"), [(12, True), (None, False)])
def test_layer_equals_hugging_face_deepseek_v3_attention(q_lora, interleave):
    from transformers import DeepseekV3Config

    torch.manual_seed(0)
    hf_cfg = DeepseekV3Config(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=H, q_lora_rank=q_lora, kv_lora_rank=C,
        qk_nope_head_dim=N, qk_rope_head_dim=R, v_head_dim=V, rope_interleave=interleave, attention_bias=True,
    )  # fmt: skip
    hf_cfg._attn_implementation = "eager"
    theirs = deepseek.DeepseekV3Attention(hf_cfg, 0).eval()
    for p in theirs.parameters():
        torch.nn.init.normal_(p, std=0.5)
    x = torch.randn(2, T, D)
    pos = torch.arange(T)[None].expand(2, T)
    cos_sin = deepseek.DeepseekV3RotaryEmbedding(hf_cfg)(x, pos)
    causal = torch.full((T, T), float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        want = theirs(x, cos_sin, causal)[0].numpy()
    dims = MLAConfig(q_lora_rank=q_lora, kv_lora_rank=C, qk_nope_head_dim=N, qk_rope_head_dim=R, v_head_dim=V)
    rope = RopeSpec(pairing="adjacent" if interleave else "split")
    ours = MultiHeadLatentAttention(D, H, dims, use_bias=True, rope=rope, rngs=nnx.Rngs(0))
    _load(ours, {k: v.numpy() for k, v in theirs.state_dict().items()}, q_lora)
    got, _ = ours(jnp.asarray(x.numpy()), mask=AttentionMask(causal=True), positions_BT=jnp.asarray(pos.numpy()))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)

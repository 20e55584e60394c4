"""Against Hugging Face transformers (float32): tiny random GPT-2 and LLaMA (with GQA) models,
weights copied into ours, give the same logits within 1e-4. Needs the ``interop`` extra."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformer_jax.models import build_model  # noqa: E402
from transformer_jax.models.convert import gpt2_config, llama_config, load_gpt2, load_llama  # noqa: E402

pytestmark = pytest.mark.interop


def _state_dict(hf):
    return {k: v.detach().cpu().numpy() for k, v in hf.state_dict().items()}


def _tokens(vocab, shape=(2, 12), seed=0):
    return np.random.default_rng(seed).integers(0, vocab, shape)


def test_gpt2_logits_match_hugging_face():
    torch.manual_seed(0)
    hf_cfg = transformers.GPT2Config(
        vocab_size=101, n_positions=32, n_embd=48, n_layer=3, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0
    )
    hf = transformers.GPT2LMHeadModel(hf_cfg).eval()
    model = build_model(gpt2_config(hf_cfg.to_dict()))
    load_gpt2(model, _state_dict(hf))
    tokens = _tokens(101)
    with torch.no_grad():
        expected = hf(torch.from_numpy(tokens)).logits.numpy()
    ours, _ = model(tokens)
    np.testing.assert_allclose(np.asarray(ours), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("n_kv_heads", [2, 1])
def test_llama_gqa_logits_match_hugging_face(n_kv_heads):
    torch.manual_seed(0)
    hf_cfg = transformers.LlamaConfig(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=n_kv_heads,
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        attention_bias=False,
    )
    hf = transformers.LlamaForCausalLM(hf_cfg).eval()
    model = build_model(llama_config(hf_cfg.to_dict()))
    load_llama(model, _state_dict(hf))
    tokens = _tokens(97, (2, 16))
    with torch.no_grad():
        expected = hf(torch.from_numpy(tokens)).logits.numpy()
    ours, _ = model(tokens)
    np.testing.assert_allclose(np.asarray(ours), expected, atol=1e-4, rtol=1e-4)

"""Every Hugging Face family against ``transformers`` (float32): a tiny random model written with
``save_pretrained`` loads through ``from_pretrained`` with torch blocked from import, gives the
same logits within 1e-4 on sequences longer than the sliding window, the same 20 greedy tokens
(top-2 margins checked wide), KV-cache logits equal to recomputation; and ours -> save_pretrained
-> transformers gives our logits, -> from_pretrained our parameters exactly.
Needs the ``interop`` extra."""

from __future__ import annotations

import contextlib
import dataclasses
import sys

import jax
import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from flax import nnx  # noqa: E402

from transformer_jax.decode import generate  # noqa: E402
from transformer_jax.models import build_model  # noqa: E402
from transformer_jax.models.hf import from_pretrained, save_pretrained  # noqa: E402
from transformer_jax.nn.init import InitConfig  # noqa: E402

pytestmark = pytest.mark.interop

VOCAB, WINDOW, SEQ, PROMPT, NEW = 97, 5, 24, 4, 20
_LLAMA = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    initializer_range=0.25,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
_GEMMA = dict(
    _LLAMA,
    head_dim=16,
    sliding_window=WINDOW,
    query_pre_attn_scalar=24,
    layer_types=["sliding_attention", "full_attention"],
)
_QWEN3_MOE = dict(_LLAMA, head_dim=24, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
# MLA (query latent, interleaved RoPE), a dense first layer, then 1 shared + top-2 of 8 routed experts in
# 4 groups (best 2), weights renormalised and scaled by 2.5
_DEEPSEEK_V3 = dict(
    _LLAMA, num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
    v_head_dim=16, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, moe_intermediate_size=32,
    n_group=4, topk_group=2, first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True,
)  # fmt: skip
# DeepSeek-V2: MLA (plain q), a dense first layer, then 2 shared + top-2 of 8 softmax-routed experts from the best
# 2 of 4 groups by their best score, weights not renormalised, times 2.5; the greedy router with a q latent and
# V2's published YaRN magnitudes (mscale = mscale_all_dim: cos/sin unscaled, softmax x m(0.707)^2)
_DEEPSEEK_V2 = dict(
    _LLAMA, num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
    v_head_dim=16, n_routed_experts=8, n_shared_experts=2, num_experts_per_tok=2, moe_intermediate_size=32,
    n_group=4, topk_group=2, topk_method="group_limited_greedy", first_k_dense_replace=1, routed_scaling_factor=2.5,
)  # fmt: skip
_DEEPSEEK_V2_YARN = dict(
    _DEEPSEEK_V2, q_lora_rank=24, topk_method="greedy", n_group=None, topk_group=None, rope_parameters={
        "rope_type": "yarn", "rope_theta": 500.0, "factor": 4.0, "original_max_position_embeddings": 16,
        "mscale": 0.707, "mscale_all_dim": 0.707,
    },
)  # fmt: skip
# model_type -> config.json arguments of a tiny model (2 layers, d 64, large init so top-2 margins are wide)
CASES = {
    "gpt2": dict(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64, initializer_range=0.25),
    "llama": dict(_LLAMA, rope_parameters={"rope_type": "default", "rope_theta": 500.0}),
    "llama3": dict(
        _LLAMA,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8,
        },
    ),
    "mistral": dict(_LLAMA, sliding_window=WINDOW),
    "qwen2": dict(_LLAMA),
    "mixtral": dict(_LLAMA, sliding_window=WINDOW, num_local_experts=4, num_experts_per_tok=2),
    "qwen3": dict(_LLAMA, head_dim=24),
    # a dense first layer (mlp_only_layers), weights renormalised / all layers routed, raw softmax weights
    "qwen3_moe": dict(_QWEN3_MOE, mlp_only_layers=[0], norm_topk_prob=True),
    "qwen3_moe_all": dict(_QWEN3_MOE, norm_topk_prob=False),
    "deepseek_v2": _DEEPSEEK_V2,
    "deepseek_v2_yarn": _DEEPSEEK_V2_YARN,
    "deepseek_v3": _DEEPSEEK_V3,
    # YaRN on the RoPE head part, DeepSeek's magnitudes: cos/sin x m(0.707) / m(1), softmax x m(1)^2
    "deepseek_v3_yarn": dict(_DEEPSEEK_V3, rope_parameters={
        "rope_type": "yarn", "rope_theta": 500.0, "factor": 4.0, "original_max_position_embeddings": 16,
        "mscale": 0.707, "mscale_all_dim": 1.0,
    }),
    # YaRN's ramp unrounded between other rotation counts, an explicit attention factor
    "qwen2_yarn": dict(_LLAMA, rope_parameters={
        "rope_type": "yarn", "rope_theta": 500.0, "factor": 4.0, "original_max_position_embeddings": 16,
        "beta_fast": 4.0, "beta_slow": 0.5, "attention_factor": 0.8, "truncate": False,
    }),
    "gemma2": dict(_GEMMA, attn_logit_softcapping=20.0, final_logit_softcapping=15.0),
    "gemma3_text": dict(_GEMMA, rope_parameters={
        "full_attention": {"rope_type": "linear", "rope_theta": 1000.0, "factor": 2.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
    }),
}  # fmt: skip
MODEL_TYPE = {
    "llama3": "llama",
    "qwen3_moe_all": "qwen3_moe",
    "deepseek_v3_yarn": "deepseek_v3",
    "qwen2_yarn": "qwen2",
    "deepseek_v2_yarn": "deepseek_v2",
}


@contextlib.contextmanager
def torch_blocked():
    """``import torch`` / ``import transformers`` (and their submodules) fail inside the block."""
    roots = ("torch", "transformers")
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k.split(".")[0] in roots}
    for root in roots:
        sys.modules[root] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for k in [k for k in sys.modules if k.split(".")[0] in roots]:
            del sys.modules[k]
        sys.modules.update(saved)


def hf_model(case: str, seed: int = 0):
    torch.manual_seed(seed)
    cfg = transformers.AutoConfig.for_model(MODEL_TYPE.get(case, case), **CASES[case])
    hf = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():  # biases start at 0 and norm scales at 1 (or 0): random, so their mapping is tested
        for name, p in hf.named_parameters():
            if name.endswith("bias") or "norm" in name or ".ln_" in name:  # GPT-2: h.N.ln_1, ln_2, ln_f
                p.uniform_(-0.5 if name.endswith("bias") else 0.5, 0.5 if name.endswith("bias") else 1.5)
        for name, b in hf.named_buffers():  # DeepSeek-V3's routing bias, a buffer that starts at 0
            if name.endswith("e_score_correction_bias"):
                b.uniform_(-0.3, 0.3)
    return hf


def hf_logits(hf, tokens: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return hf(torch.from_numpy(tokens)).logits.float().numpy()


def tokens(shape, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(3, VOCAB, shape)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """case -> (hf model, checkpoint dir, our config, our model), built once per module."""
    cache = {}

    def get(case):
        if case not in cache:
            hf = hf_model(case)
            path = tmp_path_factory.mktemp(case)
            hf.save_pretrained(path)
            with torch_blocked():
                cfg, model = from_pretrained(path)
            cache[case] = (hf, path, cfg, model)
        return cache[case]

    return get


def check_bfloat16_round_trip(tmp_path, **save_kw) -> None:
    """The bfloat16 checkpoint in ``tmp_path/in``: loaded in float32 it gives transformers' float32
    logits (bf16 -> f32 is exact); loaded in bfloat16 and saved (``save_kw``) to ``tmp_path/out``,
    every stored tensor keeps its bits."""
    from tests.models.test_hf_checkpoints import _tensors

    x = tokens((2, SEQ))
    with torch_blocked():
        _, model = from_pretrained(tmp_path / "in")
        ours = np.asarray(model(x)[0])
        cfg, half = from_pretrained(tmp_path / "in", dtype="bfloat16")
        save_pretrained(half, tmp_path / "out", **save_kw)
    upcast = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "in", dtype=torch.float32).eval()
    np.testing.assert_allclose(ours, hf_logits(upcast, x), atol=1e-4, rtol=0)
    assert cfg.execution.param_dtype == "bfloat16"
    a, b = _tensors(tmp_path / "in"), _tensors(tmp_path / "out")
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype == ml_dtypes.bfloat16, k
        np.testing.assert_array_equal(a[k].view(np.uint16), b[k].view(np.uint16), err_msg=k)


@pytest.mark.parametrize("case", list(CASES))
def test_logits_match_transformers(loaded, case):
    hf, _, cfg, model = loaded(case)
    window = getattr(cfg.attention, "window", None) or getattr(cfg.attention, "local_window", None)
    if window is not None:
        assert 3 * window < SEQ
    x = tokens((2, SEQ))
    ours, _ = model(x)
    np.testing.assert_allclose(np.asarray(ours), hf_logits(hf, x), atol=1e-4, rtol=0)


@pytest.mark.parametrize("case", ["mistral", "gemma2"])
def test_chunked_attention_implementation_matches_too(loaded, case):
    hf, path, _, _ = loaded(case)
    with torch_blocked():
        _, model = from_pretrained(path, attention_impl="chunked", attention_block_size=8)
    x = tokens((2, SEQ))
    np.testing.assert_allclose(np.asarray(model(x)[0]), hf_logits(hf, x), atol=1e-4, rtol=0)


@pytest.mark.parametrize("case", list(CASES))
def test_greedy_generation_and_cache_match(loaded, case):
    hf, _, _, model = loaded(case)
    prompt = tokens((2, PROMPT), seed=1)
    with torch.no_grad():
        out = hf.generate(
            torch.from_numpy(prompt),
            max_new_tokens=NEW,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            output_scores=True,
            return_dict_in_generate=True,
        )
    expected = out.sequences.numpy()[:, PROMPT:]
    scores = np.stack([s.numpy() for s in out.scores], 1)
    top2 = np.sort(scores, axis=-1)[..., -2:]
    assert (top2[..., 1] - top2[..., 0]).min() > 1e-3, "greedy top-2 margin too narrow for a reliable comparison"
    gen = generate(model, prompt_BP=prompt, max_new_tokens=NEW, return_logits=True)
    np.testing.assert_array_equal(np.asarray(gen.tokens), expected)
    full, _ = model(np.asarray(gen.sequences))
    cached = np.asarray(gen.logits)[:, PROMPT:]
    np.testing.assert_allclose(cached, np.asarray(full)[:, PROMPT - 1 : -1], atol=1e-4, rtol=0)


def _params(model) -> dict:
    return {k: np.asarray(v[...]) for k, v in nnx.to_flat_state(nnx.state(model))}


@pytest.mark.parametrize("case", list(CASES))
def test_round_trip_ours_to_transformers_and_back(loaded, case, tmp_path):
    _, _, cfg, _ = loaded(case)
    ours = build_model(dataclasses.replace(cfg, init=InitConfig(std=0.25)), seed=3)
    _randomise_norms_and_biases(ours)
    save_pretrained(ours, tmp_path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    x = tokens((2, SEQ), seed=2)
    logits, _ = ours(x)
    np.testing.assert_allclose(hf_logits(hf, x), np.asarray(logits), atol=1e-4, rtol=0)
    with torch_blocked():
        _, back = from_pretrained(tmp_path)
    a, b = _params(ours), _params(back)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=str(k))


def _randomise_norms_and_biases(model) -> None:
    """Norm scales start at 1 (or 0) and biases at 0: make them random so their mapping is tested."""
    rng = np.random.default_rng(4)
    for path, var in nnx.to_flat_state(nnx.state(model)):
        if "norm" in str(path[-2]) or path[-1] == "bias":
            lo = -0.5 if path[-1] == "bias" else 0.5
            var[...] = jax.numpy.asarray(rng.uniform(lo, lo + 1.0, var.shape).astype(np.float32))

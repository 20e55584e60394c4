"""Multi-head Latent Attention (``model.mla``): the layer against a float64 numpy transcription of
DeepSeek-V2 section 2.1 / Hugging Face ``DeepseekV3Attention``; cached (absorbed, latent-only)
decoding equals the full forward step by step and greedy; causality by gradient; chunked ==
xla; the cache holds kv_lora_rank + qk_rope_head_dim numbers per token; the config's refusals
name the field; ``--set model.mla=on`` from the command line."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from transformer_jax.core.configlib import ConfigError
from transformer_jax.decode import generate
from transformer_jax.models import (
    ExecutionConfig,
    RopePositions,
    SlidingWindowAttention,
    SoftmaxAttention,
    YarnScaling,
    build_model,
    get_preset,
)
from transformer_jax.models.mla_config import MLAConfig
from transformer_jax.nn.attention import RopeSpec
from transformer_jax.nn.mla import MultiHeadLatentAttention
from transformer_jax.ops.masks import AttentionMask

from .helpers import build_lm

DIMS = MLAConfig(q_lora_rank=12, kv_lora_rank=10, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=8)
PLAIN_Q = MLAConfig(q_lora_rank=None, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=20)


def _np_rope(x, pos, pairing, theta=10000.0):
    """x [T, ..., R] rotated at positions pos [T]: pairs (i, i + R/2) (split) or (2i, 2i+1) (adjacent)."""
    R = x.shape[-1]
    inv = theta ** (-np.arange(0, R, 2) / R)
    ang = pos[:, None] * inv  # [T, R/2]
    cos, sin = (f(ang).reshape(ang.shape[0], *([1] * (x.ndim - 2)), -1) for f in (np.cos, np.sin))
    a, b = (x[..., : R // 2], x[..., R // 2 :]) if pairing == "split" else (x[..., 0::2], x[..., 1::2])
    ra, rb = a * cos - b * sin, b * cos + a * sin
    if pairing == "split":
        return np.concatenate([ra, rb], -1)
    return np.stack([ra, rb], -1).reshape(x.shape)


def _np_rms(x, w, eps):
    return x / np.sqrt(np.mean(x**2, -1, keepdims=True) + eps) * w


def _np_mla(p, x, dims: MLAConfig, pairing):
    """One sequence x [T, D] through MLA, causal, float64: the paper's equations written out."""
    N, R, C = dims.qk_nope_head_dim, dims.qk_rope_head_dim, dims.kv_lora_rank
    T = x.shape[0]
    pos = np.arange(T, dtype=np.float64)
    if dims.q_lora_rank is None:
        q = np.einsum("td,dhe->the", x, p["q"]["kernel"])
    else:
        cq = _np_rms(x @ p["q_a"]["kernel"] + p["q_a"]["bias"], p["q_a_norm"]["scale"], dims.norm_eps)
        q = np.einsum("tc,che->the", cq, p["q_b"]["kernel"])
    ckr = x @ p["kv_a"]["kernel"] + p["kv_a"]["bias"]
    c = _np_rms(ckr[:, :C], p["kv_a_norm"]["scale"], dims.norm_eps)  # the latent: all a cache keeps
    k_pe = _np_rope(ckr[:, C:], pos, pairing)  # [T, R], shared by every head
    q_nope, q_pe = q[..., :N], _np_rope(q[..., N:], pos, pairing)
    kv = np.einsum("sc,chf->shf", c, p["kv_b"]["kernel"])
    k_nope, v = kv[..., :N], kv[..., N:]
    logits = np.einsum("thn,shn->hts", q_nope, k_nope) + np.einsum("thr,sr->hts", q_pe, k_pe)
    logits = logits / np.sqrt(N + R)
    logits = np.where(np.tril(np.ones((T, T), bool)), logits, -np.inf)
    prob = np.exp(logits - logits.max(-1, keepdims=True))
    prob /= prob.sum(-1, keepdims=True)
    out = np.einsum("hts,shv->thv", prob, v)
    return np.einsum("thv,hvd->td", out, p["o"]["kernel"]) + p["o"]["bias"]


def _layer(dims, pairing, **execution):
    layer = MultiHeadLatentAttention(
        16,
        3,
        dims,
        use_bias=True,
        rope=RopeSpec(pairing=pairing),
        execution=ExecutionConfig(**execution),
        rngs=nnx.Rngs(0),
    )
    state = nnx.state(layer, nnx.Param)
    leaves, treedef = jax.tree.flatten(state)
    keys = jax.random.split(jax.random.key(1), len(leaves))
    nnx.update(layer, jax.tree.unflatten(treedef, [0.5 * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)]))
    return layer


def _apply(layer, x_BTD, mask, positions_BT):
    """The layer's output, jitted (one compile instead of many small eager ones)."""
    graphdef, state = nnx.split(layer)
    run = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x, mask=mask, positions_BT=positions_BT)[0])
    return run(state, x_BTD)


@pytest.mark.parametrize("dims", [DIMS, PLAIN_Q], ids=["q_lora", "plain_q"])
@pytest.mark.parametrize("pairing", ["adjacent", "split"])
def test_layer_equals_numpy_reference(dims, pairing):
    layer = _layer(dims, pairing)
    x_BTD = jax.random.normal(jax.random.key(2), (2, 7, 16))
    positions = jnp.broadcast_to(jnp.arange(7), (2, 7))
    y = _apply(layer, x_BTD, AttentionMask(causal=True), positions)
    params = jax.tree.map(lambda v: np.asarray(v, np.float64), nnx.to_pure_dict(nnx.state(layer, nnx.Param)))
    for b in range(2):
        want = _np_mla(params, np.asarray(x_BTD[b], np.float64), dims, pairing)
        np.testing.assert_allclose(np.asarray(y[b]), want, rtol=2e-5, atol=2e-5)


_TILES = {"xla": {}, "chunked": {"attention_block_size": 4}}  # a block size only where it is read


def test_chunked_equals_xla_and_causal_by_gradient():
    x_BTD = jax.random.normal(jax.random.key(3), (1, 9, 16))
    positions = jnp.arange(9)[None]
    mask = AttentionMask(causal=True)
    ys = {
        impl: _apply(_layer(DIMS, "split", attention_impl=impl, **_TILES[impl]), x_BTD, mask, positions)
        for impl in ("xla", "chunked")
    }
    np.testing.assert_allclose(np.asarray(ys["chunked"]), np.asarray(ys["xla"]), rtol=1e-5, atol=1e-5)
    t = 4
    grad = jax.grad(lambda x: _apply(_layer(DIMS, "split"), x, mask, positions)[0, t].sum())(x_BTD)
    norms = np.asarray(jnp.abs(grad[0]).sum(-1))
    assert np.all(norms[t + 1 :] == 0) and np.all(norms[: t + 1] > 0), norms


MODELS = {
    # DeepSeek-V3's layout: q latent, interleaved RoPE pairs, sigmoid-routed MoE with balancing bias
    "deepseek_v3_tiny": dict(preset="deepseek_v3_tiny"),
    # DeepSeek-V3's YaRN: the softmax scale times mscale(mscale_all_dim)^2 on both paths
    "deepseek_v3_yarn": dict(
        preset="deepseek_v3_tiny",
        position=RopePositions(
            pairing="adjacent", scaling=YarnScaling(factor=4.0, original_max_len=8, mscale=0.707, mscale_all_dim=1.0)
        ),
    ),
    # plain q, values wider than q/k heads, scanned, windowed, soft-capped, 3-slot decode blocks
    "plain_q_scan_window": dict(
        preset="llama_tiny",
        n_kv_heads=None,
        mla=PLAIN_Q,
        scan_layers=True,
        attention=SlidingWindowAttention(window=3, softcap=2.0),
    ),
}
PROMPT = np.array([[5, 6, 7, 8, 9], [11, 12, 13, 0, 0]])
LENGTHS = np.array([5, 3])


_DECODE_TILES = {"dense": {}, "blocked": {"decode_block_size": 3}}


@functools.cache
def _lm(case, decode_impl):
    kw = dict(MODELS[case])
    return build_model(get_preset(kw.pop("preset"), decode_impl=decode_impl, **_DECODE_TILES[decode_impl], **kw))


@pytest.mark.parametrize(
    ("case", "decode_impl"),
    [("deepseek_v3_tiny", "dense"), ("deepseek_v3_yarn", "dense"), ("plain_q_scan_window", "blocked")],
)
def test_cached_decoding_equals_the_full_forward(case, decode_impl):
    """Every step's logits (ragged prompts prefilled, then one token at a time, attention over the
    latent cache with kv_b absorbed) equal a full forward over the sequence; greedy too."""
    model = _lm(case, decode_impl)
    out = generate(model, prompt_BP=PROMPT, prompt_lengths_B=LENGTHS, max_new_tokens=5, return_logits=True)
    assert out.logits is not None
    seq = np.asarray(out.sequences)
    full, _ = model(jnp.asarray(seq))
    for b in range(len(PROMPT)):
        for t in range(LENGTHS.min(), LENGTHS[b] + 5):
            np.testing.assert_allclose(
                np.asarray(out.logits[b, t]), np.asarray(full[b, t - 1]), atol=1e-5, rtol=1e-5, err_msg=f"{b},{t}"
            )
        new = seq[b, LENGTHS[b] : LENGTHS[b] + 5]  # greedy: each token the argmax of the full forward before it
        np.testing.assert_array_equal(new, np.argmax(np.asarray(full[b, LENGTHS[b] - 1 : LENGTHS[b] + 4]), -1))


def test_the_cache_holds_the_latent_and_the_rope_key_only():
    cfg = get_preset("deepseek_v3_tiny")
    cache = build_lm(cfg).init_cache(2, 16)
    assert cfg.mla is not None
    layer = cache[0]["self"]
    assert layer.k_BKDS.shape == (2, 1, cfg.mla.qk_rope_head_dim, 16)
    assert layer.v_BKDS.shape == (2, 1, cfg.mla.kv_lora_rank, 16)
    per_token = sum(x.size * x.dtype.itemsize for c in cache for x in (c["self"].k_BKDS, c["self"].v_BKDS)) / 32
    assert per_token == cfg.dims.n_layers * (32 + 8) * 4  # (C + R) float32 numbers per layer


@pytest.mark.parametrize(
    "change, field",
    [
        (dict(attention="linear"), "model.attention"),
        (dict(position="learned"), "model.position"),
        (dict(head_dim=16), "model.dims.head_dim"),
        (dict(n_kv_heads=2), "model.dims.n_kv_heads"),
        (dict(attention=SoftmaxAttention(qk_norm=True)), "model.attention.qk_norm"),
        (dict(attention=SoftmaxAttention(qkv_bias=True)), "model.attention.qkv_bias"),
        (dict(decode_impl="pallas_gpu"), "model.execution.decode_impl"),
        (
            dict(
                attention=SoftmaxAttention(scale=0.1),
                position=RopePositions(scaling=YarnScaling(factor=4.0, mscale_all_dim=1.0)),
            ),
            "model.attention.scale",
        ),
    ],
)
def test_incompatible_settings_are_refused_by_name(change, field):
    with pytest.raises(ConfigError, match=rf"^{field}="):
        get_preset("deepseek_v3_tiny", **change)


@pytest.mark.parametrize(
    "change, field",
    [
        (dict(qk_rope_head_dim=5), "qk_rope_head_dim"),
        (dict(kv_lora_rank=0), "kv_lora_rank"),
        (dict(q_lora_rank=0), "q_lora_rank"),
        (dict(norm_eps=float("nan")), "norm_eps"),
    ],
)
def test_bad_sizes_are_refused_by_name(change, field):
    with pytest.raises(ConfigError, match=rf"^model\.mla\.{field}="):
        dataclasses.replace(MLAConfig(), **change)


def test_set_from_the_command_line():
    from transformer_jax.core.overrides import apply_overrides
    from transformer_jax.train.experiment import load_experiment

    tiny = "tests/train/tiny_experiment.py"
    cfg = load_experiment(tiny, ["model.position=rope", "model.mla=on", "model.mla.kv_lora_rank=8"])
    assert cfg.model.mla == MLAConfig(kv_lora_rank=8)
    assert apply_overrides(cfg, ["model.mla=none"]).model.mla is None
    with pytest.raises(ConfigError, match=r"model.position"):
        load_experiment(tiny, ["model.mla=on"])  # nanogpt_char's learned positions


def test_bench_decode_reports_deepseek_v3_cache_bytes():
    from transformer_jax.benchmarks.decode import bench_model, cache_bytes_report

    v3 = cache_bytes_report(bench_model())["d_model=7168 (DeepSeek-V3) bfloat16"]
    assert list(v3.values()) == [2 * 128 * 128 * 2, 2 * 8 * 128 * 2, (512 + 64) * 2]  # MHA, GQA, MLA


def test_a_lora_adapter_on_kv_b_is_absorbed_too():
    """Decoding uses kv_b's weight directly (absorbed); an adapter on it must be folded in exactly."""
    from transformer_jax.models.lora import LoraConfig, apply_lora

    model = build_lm(get_preset("deepseek_v3_tiny", moe=None, n_layers=1, decode_impl="dense"))
    apply_lora(model, LoraConfig(rank=2, targets=("kv_b",)))
    adapters = nnx.state(model, lambda path, _: "lora" in path)
    nnx.update(model, jax.tree.map(lambda x: 0.3 * jax.random.normal(jax.random.key(5), x.shape), adapters))
    out = generate(model, prompt_BP=PROMPT[:1], max_new_tokens=3, return_logits=True)
    assert out.logits is not None
    full, _ = model(jnp.asarray(out.sequences))
    np.testing.assert_allclose(np.asarray(out.logits[0, 5:8]), np.asarray(full[0, 4:7]), atol=1e-5, rtol=1e-5)


def test_the_flops_formula_counts_attention_at_mla_width():
    """Scores over H (qk_nope + qk_rope) dims and the weighted sum over H v_head_dim, not d_model."""
    from transformer_jax.models import count_active_params
    from transformer_jax.train.flops import model_flops_per_token

    cfg = get_preset("deepseek_v3_tiny", moe=None)
    assert cfg.mla is not None
    width = cfg.dims.n_heads * (cfg.mla.qk_head_dim + cfg.mla.v_head_dim) / 2  # 4 * (24 + 16) / 2 = 80, d_model 64
    assert model_flops_per_token(cfg, 32) == 6 * count_active_params(cfg) + 12 * cfg.dims.n_layers * width * 32


def test_cached_decoding_refuses_a_context_axis():
    from transformer_jax.parallel import MeshConfig, make_mesh, sharding_context

    model = build_lm(get_preset("deepseek_v3_tiny", moe=None, n_layers=1))
    cache = model.init_cache(2, 8)
    tokens = jnp.ones((2, 1), jnp.int32)
    with sharding_context(make_mesh(MeshConfig(data=2, context=4))), pytest.raises(ValueError, match="mesh.context=1"):
        model(tokens, cache=cache)

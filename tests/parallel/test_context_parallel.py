"""Context parallelism: attention over a sequence split on the ``context`` mesh axis (zigzag layout,
ring or all-gather) equals single-device attention in values and gradients, with packed segments,
sliding windows and grouped heads; the layout helpers; the errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.ops.attention import attention
from transformer_jax.ops.context_parallel import context_impl_for, context_size, sequence_index
from transformer_jax.ops.masks import AttentionMask
from transformer_jax.ops.ring_attention import layout_index, zigzag_perm
from transformer_jax.parallel import MeshConfig, make_mesh, sharding_context

B, T, H, K, D = 2, 32, 4, 2, 8
SEGMENTS = np.array([[1] * 11 + [2] * 13 + [3] * 6 + [0] * 2, [1] * 32])


def _inputs(seed=0):
    ks = jax.random.split(jax.random.key(seed), 4)
    q = jax.random.normal(ks[0], (B, T, H, D))
    k = jax.random.normal(ks[1], (B, T, K, D))
    v = jax.random.normal(ks[2], (B, T, K, D))
    w = jax.random.normal(ks[3], (B, T, H, D))  # a random cotangent: loss = sum(out * w)
    return q, k, v, w


def _loss_and_grads(q, k, v, w, mask, **kw):
    def loss(q, k, v):
        return jnp.sum(attention(q, k, v, mask=mask, **kw) * w)

    return jax.jit(
        jax.value_and_grad(lambda *a: (loss(*a), attention(*a, mask=mask, **kw)), argnums=(0, 1, 2), has_aux=True)
    )(q, k, v)


def test_zigzag_layout_puts_chunks_i_and_2n_minus_1_minus_i_on_device_i():
    perm = zigzag_perm(16, 4)
    np.testing.assert_array_equal(perm.reshape(4, 4), [[0, 1, 14, 15], [2, 3, 12, 13], [4, 5, 10, 11], [6, 7, 8, 9]])
    for i in range(4):
        np.testing.assert_array_equal(layout_index(4, 4, i), perm[4 * i : 4 * i + 4])
    np.testing.assert_array_equal(layout_index(4, 4, 1, "contiguous"), [4, 5, 6, 7])
    with pytest.raises(ValueError, match="divisible by 2 x 4"):
        zigzag_perm(12, 4)


def test_zigzag_balances_causal_work_where_contiguous_does_not():
    """Visible (query, key) pairs per device under the causal mask: equal in zigzag order."""

    def work(layout):
        return [
            int((np.arange(64)[None, :] <= np.asarray(layout_index(16, 4, i, layout))[:, None]).sum()) for i in range(4)
        ]

    assert len(set(work("zigzag"))) == 1
    assert work("contiguous")[-1] > 6 * work("contiguous")[0]


@pytest.mark.parametrize(
    "impl, kind, window, segments",
    [
        ("chunked", "sliding_window", 7, True),  # ring, window across shard boundaries
        ("xla", "softmax", None, False),  # all-gather
    ],
)
def test_sharded_equals_single_device_values_and_gradients(impl, kind, window, segments):
    q, k, v, w = _inputs()
    seg = jnp.asarray(SEGMENTS) if segments else None
    kw = dict(kind=kind, window=window, block_size=4, softcap=5.0 if impl == "chunked" else None)
    (ref_loss, ref_out), ref_grads = _loss_and_grads(
        q, k, v, w, AttentionMask(causal=True, q_segment_ids=seg), impl="xla", **kw
    )

    mesh = make_mesh(MeshConfig(data=2, context=4))
    perm = zigzag_perm(T, 4)
    lay = lambda x: x[:, perm]
    mask = AttentionMask(causal=True, q_segment_ids=None if seg is None else lay(seg))
    with sharding_context(mesh):
        assert context_size() == 4
        np.testing.assert_array_equal(sequence_index(T), perm)
        (loss, out), grads = _loss_and_grads(lay(q), lay(k), lay(v), lay(w), mask, impl=impl, **kw)
    undo = np.argsort(perm)
    np.testing.assert_allclose(out[:, undo], ref_out, atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    for g, ref in zip(grads, ref_grads):
        np.testing.assert_allclose(g[:, undo], ref, atol=5e-5, rtol=5e-5)
    assert context_impl_for(impl) == ("ring" if impl == "chunked" else "all_gather")


def test_context_parallel_refuses_what_it_cannot_split():
    q, k, v, _ = _inputs()
    with sharding_context(make_mesh(MeshConfig(data=2, context=4))):
        with pytest.raises(ValueError, match="additive bias"):
            attention(q, k, v, mask=AttentionMask(causal=True), bias=jnp.zeros((1, 1, T, T)))
        with pytest.raises(ValueError, match="divisible by 8"):
            attention(q[:, :12], k[:, :12], v[:, :12], mask=AttentionMask(causal=True))


def _lm_batch():
    """Two rows of 32 tokens: three packed documents (positions restart at each) and one whole one."""
    rng = np.random.default_rng(0)
    seg = SEGMENTS
    pos = np.zeros_like(seg)
    for b in range(B):
        for s in np.unique(seg[b]):
            idx = np.nonzero(seg[b] == s)[0]
            pos[b, idx] = np.arange(idx.size)
    tokens = rng.integers(1, 64, (B, T)).astype(np.int32)
    return {"inputs": tokens, "targets": np.roll(tokens, -1, 1), "positions": pos.astype(np.int32), "segment_ids": seg}


@pytest.mark.parametrize(
    "impl, window", [("chunked", None), ("xla", 6)]
)  # ring with RoPE positions of packed segments; all-gather with a sliding window and default positions
def test_llama_loss_and_parameter_gradients_equal_single_device(impl, window):
    from flax import nnx

    from transformer_jax.models import SlidingWindowAttention, build_model, get_preset
    from transformer_jax.ops.losses import cross_entropy
    from transformer_jax.parallel import batch_sharding
    from transformer_jax.parallel.context import lay_out

    kind = {} if window is None else dict(attention=SlidingWindowAttention(window=window))
    cfg = get_preset(
        "llama_tiny",
        vocab_size=64,
        d_model=32,
        d_ff=64,
        n_layers=1,
        max_len=T,
        attention_impl=impl,
        **({} if impl == "xla" else {"attention_block_size": 4}),
        **kind,
    )
    graphdef, params, rest = nnx.split(build_model(cfg, seed=0), nnx.Param, ...)

    @jax.jit
    def loss_and_grads(params, batch):
        def loss(params):
            model = nnx.merge(graphdef, params, rest)
            positions = batch.get("positions")  # None: the model's default, the layout's global positions
            logits, _ = model(batch["inputs"], positions_BT=positions, segment_ids_BT=batch["segment_ids"])
            return cross_entropy(logits, batch["targets"], weights_BT=(batch["segment_ids"] > 0).astype(jnp.float32))[
                "loss_sum"
            ]

        return jax.value_and_grad(loss)(params)

    batch = _lm_batch()
    if impl == "xla":
        del batch["positions"]
    ref_loss, ref_grads = loss_and_grads(params, {k: jnp.asarray(v) for k, v in batch.items()})
    mesh = make_mesh(MeshConfig(data=2, context=4))
    placed = {k: jax.device_put(v, batch_sharding(mesh)) for k, v in lay_out(batch, 4).items()}
    with sharding_context(mesh):
        compiled = loss_and_grads.lower(params, placed).compile()
    loss, grads = compiled(params, placed)
    hlo = compiled.as_text() or ""
    assert ("collective-permute" if impl == "chunked" else "all-gather") in hlo
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    for g, ref in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads)):
        np.testing.assert_allclose(g, ref, atol=1e-5, rtol=1e-4)


def test_decoding_with_a_cache_refuses_a_context_axis():
    from flax import nnx

    from transformer_jax.models import get_preset
    from transformer_jax.models.decoder_lm import DecoderLM

    cfg = get_preset("llama_tiny", vocab_size=64, d_model=32, d_ff=64, n_layers=1, max_len=T)
    model = DecoderLM(cfg, rngs=nnx.Rngs(0))
    cache = model.init_cache(B, T)
    tokens = jnp.ones((B, 1), jnp.int32)
    model(tokens, cache=cache)  # context axis of 1: decoding as before
    with sharding_context(make_mesh(MeshConfig(data=2, context=4))), pytest.raises(ValueError, match="mesh.context=1"):
        model(tokens, cache=cache)

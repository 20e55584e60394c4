"""`ops.per_shard` (each device runs a kernel on its own slice) and the kernel wrappers that use it.

The wrappers (`attention(impl="splash" | "pallas_gpu")`, `decode_attention(impl="pallas_gpu")`)
refuse to run off their platform, so here they run with the platform patched and their kernels in
the Pallas interpreter, on an 8-device mesh with a non-default scale, against xla / dense: a
wrapper that dropped the scale, the mask or a row would fail. (Compiled for real, with the kernels
lowered, in tests/train/test_aot_*.py.)"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from transformer_jax.core import targets
from transformer_jax.ops import attention as attention_mod
from transformer_jax.ops import decode_attention as decode_mod
from transformer_jax.ops import pallas_attention
from transformer_jax.ops.attention import attention
from transformer_jax.ops.decode_attention import decode_attention
from transformer_jax.ops.kv_cache import init_kv_cache, update_kv_cache
from transformer_jax.ops.masks import AttentionMask
from transformer_jax.ops.per_shard import per_shard
from transformer_jax.parallel import MeshConfig, make_mesh

BTHD = ("batch", None, "heads", None)


def _mesh(**sizes):
    return make_mesh(MeshConfig(**sizes))


def _local_shapes(mesh, x, dims):
    seen = []

    def kernel(x):
        seen.append(x.shape)
        return x * 2

    with jax.set_mesh(mesh):
        out = jax.jit(lambda x: per_shard(kernel, (x,), (dims,), dims))(x)
    np.testing.assert_array_equal(out, np.asarray(x) * 2)
    return seen[-1]


def test_each_device_sees_its_rows_and_heads():
    x = jnp.ones((8, 4, 6, 2))
    assert _local_shapes(_mesh(data=2, fsdp=2, tensor=2), x, BTHD) == (2, 4, 3, 2)
    assert _local_shapes(_mesh(data=8), x, BTHD) == (1, 4, 6, 2)


def test_an_axis_that_does_not_divide_stays_whole():
    """6 rows over data 2 x fsdp 2: the leading axis that divides (data) is kept, fsdp dropped; 3 heads
    over tensor 2: whole."""
    x = jnp.ones((6, 4, 3, 2))
    assert _local_shapes(_mesh(data=2, fsdp=2, tensor=2), x, BTHD) == (3, 4, 3, 2)


def test_without_a_mesh_the_kernel_sees_everything():
    seen = []
    out = per_shard(lambda x: seen.append(x.shape) or x, (jnp.ones((8, 3)),), (("batch", None),), ("batch", None))
    assert seen == [(8, 3)] and out.shape == (8, 3)


@pytest.fixture
def on_gpu(monkeypatch):
    monkeypatch.setattr(targets, "platform", lambda: "gpu")


def _interpreted(monkeypatch, module, name):
    monkeypatch.setattr(module, name, functools.partial(getattr(module, name), interpret=True))


def _sharded(mesh, *arrays):
    return [jax.device_put(a, NamedSharding(mesh, P(("data", "fsdp")))) for a in arrays]


def _qkv(B=4, T=32, H=4, K=2, D=16, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, T, H, D)).astype(np.float32)
    k, v = (rng.standard_normal((B, T, K, D)).astype(np.float32) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("impl, platform", [("pallas_gpu", "gpu"), ("splash", "tpu")])
def test_attention_wrappers_per_device_match_xla(monkeypatch, impl, platform):
    monkeypatch.setattr(targets, "platform", lambda: platform)
    kernel = "pallas_gpu_attention" if impl == "pallas_gpu" else "splash_attention"
    _interpreted(monkeypatch, attention_mod, kernel)
    T = 32 if impl == "pallas_gpu" else 128
    q, k, v = _qkv(T=T)
    seg = np.ones((4, T), np.int32)
    seg[1, T // 2 :] = 2
    seg = jnp.asarray(seg)
    mask = AttentionMask(causal=True, q_segment_ids=seg, kv_segment_ids=seg)
    w = np.random.default_rng(1).standard_normal(q.shape).astype(np.float32)
    mesh = _mesh(data=2, fsdp=2, tensor=2)

    def loss(name):
        def f(q, k, v):
            return jnp.sum(attention(q, k, v, mask=mask, scale=0.3, impl=name, block_size=128) * w)

        return jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2)))

    with jax.set_mesh(mesh):
        value, grads = loss(impl)(*_sharded(mesh, q, k, v))
    ref, ref_grads = loss("xla")(q, k, v)
    np.testing.assert_allclose(value, ref, rtol=2e-5)
    for g, r in zip(grads, ref_grads):
        np.testing.assert_allclose(g, r, atol=3e-5, rtol=3e-5)


def test_flash_decode_wrapper_per_device_matches_dense(monkeypatch, on_gpu):
    _interpreted(monkeypatch, decode_mod, "flash_decode_attention")
    q, k, v = _qkv(B=4, T=48, H=4, K=2, D=16)
    cache = update_kv_cache(init_kv_cache(4, 64, 2, 16), jnp.asarray(k), jnp.asarray(v))
    positions = jnp.asarray([[47], [40], [30], [47]], jnp.int32)
    mask = AttentionMask(causal=True, q_positions=positions, window=20)
    q1 = jnp.asarray(q[:, :1])
    mesh = _mesh(data=2, fsdp=2, tensor=2)
    with jax.set_mesh(mesh):
        out = jax.jit(lambda q: decode_attention(q, cache, mask=mask, scale=0.3, impl="pallas_gpu"))(q1)
    ref = decode_attention(q1, cache, mask=mask, scale=0.3, impl="dense")
    np.testing.assert_allclose(out, ref, atol=2e-5, rtol=2e-5)
    assert not np.allclose(ref, decode_attention(q1, cache, mask=mask, impl="dense")), "the scale matters here"


def test_the_kernels_are_refused_off_their_platform():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="needs a GPU"):
        attention(q, k, v, mask=AttentionMask(causal=True), impl="pallas_gpu")
    with targets.compiling_for(targets.get_target("h100x1")):
        assert targets.platform() == "gpu"
    assert pallas_attention.SPLASH_LANES == 128

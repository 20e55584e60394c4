"""Activation sharding constraints at block boundaries: present under a mesh, absent without."""

import jax
import jax.numpy as jnp
from flax import nnx

from transformer_jax.nn.block import Block, BlockConfig, BlockInputs, LayerDims
from transformer_jax.parallel import MeshConfig, make_mesh, sharding_context


def _lowered_text(block, x):
    graphdef, state = nnx.split(block)
    f = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x, BlockInputs())[0])
    return f.lower(state, x).as_text()


def test_block_constrains_residual_stream_to_batch_axes():
    cfg = BlockConfig(LayerDims(d_model=16, n_heads=2, n_kv_heads=2, head_dim=8, d_ff=32))
    block = Block(cfg, rngs=nnx.Rngs(0))
    x = jnp.ones((8, 4, 16))
    assert "sharding_constraint" not in _lowered_text(block, x)
    with sharding_context(make_mesh(MeshConfig(data=8))):
        text = _lowered_text(block, x)
    constraints = [line for line in text.splitlines() if "sharding_constraint" in line]
    assert len(constraints) >= 2, text[:2000]
    assert all('"data"' in line for line in constraints[:2]), constraints

"""The same train step on any mesh: losses equal the single-device run, parameters sharded as the
logical-axis rules say; checkpoints restore onto a different mesh."""

import os

import jax
import numpy as np
import pytest
from flax import nnx

from transformer_jax.models.forward import FORWARDS
from transformer_jax.parallel import LOGICAL_RULES, logical_to_spec, sharding_context
from transformer_jax.train.experiment import load_experiment
from transformer_jax.train.run import setup
from transformer_jax.train.state import model_graph
from transformer_jax.train.step import make_train_step

EXPERIMENT = os.path.join(os.path.dirname(__file__), "..", "train", "tiny_experiment.py")
MODEL = ["model.dims.d_model=64", "model.dims.n_heads=8", "model.dims.d_ff=128", "train.batch_size=8"]


def _steps(tmp_path, name, mesh_sets, devices, n=3, extra=()):
    """Losses of n train steps and the final state, on ``devices`` arranged by ``mesh_sets``."""
    cfg = load_experiment(EXPERIMENT, MODEL + list(mesh_sets) + list(extra))
    run, _ = setup(cfg, str(tmp_path / name), devices=devices)
    step = jax.jit(
        make_train_step(
            run.graphdef,
            run.tx,
            FORWARDS.get("lm"),
            run.cfg.train,
            run.schedule,
        )
    )
    losses, state = [], run.state
    with sharding_context(run.mesh), run.data.train_iterator() as it:
        for _ in range(n):
            state, metrics = step(state, run.put_batch(next(it)), jax.random.key(0))
            losses.append(float(metrics["loss_sum"]) / float(metrics["weight_sum"]))
    run.checkpoints.close()
    return losses, state, run


MESHES = {
    "data8": ["mesh.data=8"],
    "data2_fsdp4": ["mesh.data=2", "mesh.fsdp=4"],
    "data2_fsdp2_tensor2": ["mesh.data=2", "mesh.fsdp=2", "mesh.tensor=2"],
    "tensor8": ["mesh.data=1", "mesh.tensor=8"],
    "data2_context4": ["mesh.data=2", "mesh.context=4"],  # the sequence split, batches laid out zigzag
}


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return _steps(tmp_path_factory.mktemp("single"), "one", ["mesh.data=1"], jax.devices()[:1])


@pytest.mark.parametrize("mesh", sorted(MESHES))
def test_sharded_steps_equal_single_device(tmp_path, single, mesh):
    losses, state, run = _steps(tmp_path, mesh, MESHES[mesh], jax.devices())
    np.testing.assert_allclose(losses, single[0], rtol=1e-5, atol=1e-5)
    for a, b in zip(jax.tree.leaves(jax.device_get(state.params)), jax.tree.leaves(jax.device_get(single[1].params))):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    _, abstract, _ = model_graph(run.cfg.model)
    axes = jax.tree.map(
        lambda v: v.get_metadata().get("logical_axes"), abstract, is_leaf=lambda x: isinstance(x, nnx.Variable)
    )
    flat_axes = dict(
        jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(axes), is_leaf=lambda x: isinstance(x, tuple))[0]
    )
    sharded = 0
    for path, leaf in jax.tree_util.tree_flatten_with_path(state.params)[0]:
        want = logical_to_spec(flat_axes[path], leaf.shape, dict(run.mesh.shape), LOGICAL_RULES)
        got = leaf.sharding.spec
        pad = lambda spec, n=leaf.ndim: tuple(spec) + (None,) * (n - len(spec))
        assert pad(got) == pad(want), (jax.tree_util.keystr(path), got, want)
        sharded += any(s is not None for s in pad(got))
    assert sharded > 0 or mesh == "data8"

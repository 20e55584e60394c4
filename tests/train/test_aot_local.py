"""The compile report and the fit check on this machine's own devices (no extra compiler needed)."""

import jax
import pytest

from tests.train.aot_helpers import no_persistent_cache, tiny_config
from transformer_jax.models.forward import FORWARDS
from transformer_jax.parallel import MeshConfig, make_mesh, sharding_context
from transformer_jax.train import aot
from transformer_jax.train.config import resolve
from transformer_jax.train.optim import make_optimizer
from transformer_jax.train.state import abstract_state, init_state
from transformer_jax.train.step import jit_train_step

pytestmark = pytest.mark.usefixtures(no_persistent_cache.__name__)


def _step_and_state(cfg, mesh):
    tx, schedule = make_optimizer(cfg.train.optim, cfg.train.steps)
    with sharding_context(mesh):
        state = init_state(cfg.model, tx, seed=0, mesh=mesh)
    graphdef = aot.abstract_model(cfg.model, mesh=mesh)[0]
    return jit_train_step(graphdef, tx, FORWARDS.get("lm"), cfg.train, schedule, state), state


def test_the_local_report_measures_the_running_devices():
    cfg = tiny_config(seq_len=32, dtype="float32", mesh=MeshConfig(data=2, fsdp=4))
    report = aot.compile_train(cfg)
    assert report["target"] == "local cpu" and report["chips"] == 8 and report["fits"]
    assert report["estimated_step_s"] is None, "no published figures for a CPU: no roofline"
    assert report["collectives"]["all-reduce"]["count"] + report["collectives"]["reduce-scatter"]["count"] > 0


def test_the_fit_check_names_the_bytes_and_what_to_change():
    cfg = resolve(tiny_config(seq_len=32, dtype="float32", mesh=MeshConfig(data=1, fsdp=1)))
    mesh = make_mesh(cfg.mesh, jax.devices()[:1])
    step, state = _step_and_state(cfg, mesh)
    need = aot.check_fits(step, state, cfg, mesh)["total"]
    named = rf"needs .* \({need} bytes\).* has .*\(1000 bytes\).*model.execution.remat=full"
    with pytest.raises(aot.DoesNotFitError, match=named):
        aot.check_fits(step, state, cfg, mesh, limit=1000)


def test_optimizer_state_restore_target_has_the_parameters_shardings():
    """What a checkpoint restores onto (abstract_state) and what a fresh run holds (init_state) agree,
    and Adam's moments are sharded like their parameters over fsdp."""
    cfg = resolve(tiny_config(seq_len=32, dtype="float32", mesh=MeshConfig(data=1, fsdp=4)))
    mesh = make_mesh(cfg.mesh, jax.devices()[:4])
    tx, _ = make_optimizer(cfg.train.optim, cfg.train.steps)
    with sharding_context(mesh):
        state = init_state(cfg.model, tx, seed=0, mesh=mesh)
        target = abstract_state(cfg.model, tx, mesh=mesh)
    fresh, restored = jax.tree.leaves(state.opt_state), jax.tree.leaves(target.opt_state)
    assert [a.sharding for a in fresh] == [b.sharding for b in restored]
    params = {tuple(p.shape): p.sharding for p in jax.tree.leaves(state.params) if p.ndim == 2}
    moments = [m for m in fresh if m.ndim == 2 and tuple(m.shape) in params]
    assert moments and all(m.sharding.is_equivalent_to(params[tuple(m.shape)], 2) for m in moments)
    assert any("fsdp" in str(m.sharding.spec) for m in moments)

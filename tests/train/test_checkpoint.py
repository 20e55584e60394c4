"""``Checkpoints`` keeps at most one asynchronous save in flight across its two Orbax managers
(``checkpoints/`` and ``best/``): in a multi-process run, two at once ran Orbax's barriers side by
side under the same names and hung or failed (tests/parallel/test_multiprocess.py runs that case)."""

import types
from unittest import mock

import numpy as np
import pytest

from tests.fake_remote import fake_gs
from transformer_jax.core.paths import user_path
from transformer_jax.train.checkpoint import CheckpointError, Checkpoints


def test_latest_and_best_saves_never_overlap(tmp_path, monkeypatch):
    ckpts = Checkpoints(str(tmp_path))
    in_flight: set[str] = set()
    overlaps = []

    def record(mgr, name):
        def save(step, args=None, force=False):
            if in_flight:
                overlaps.append((name, step, sorted(in_flight)))
            in_flight.add(name)
            return True

        monkeypatch.setattr(mgr, "save", save)
        monkeypatch.setattr(mgr, "wait_until_finished", lambda: in_flight.discard(name))

    assert ckpts.best is not None
    record(ckpts.last, "checkpoints")
    record(ckpts.best, "best")
    state = types.SimpleNamespace(params={"w": np.ones(2)}, model_state={})
    for step, val_loss in [(1, 3.0), (2, 2.0), (3, 2.5), (4, 1.0), (5, None)]:  # best/ saved at steps 1, 2, 4
        assert ckpts.save(step, state, {}, {}, best_value=val_loss)  # pyright: ignore[reportArgumentType]
    ckpts.wait()
    assert overlaps == [] and not in_flight


def test_workdirs_are_epath_paths_local_ones_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert str(user_path("gs://bucket/run")) == "gs://bucket/run"
    assert str(user_path("run")) == str(tmp_path / "run")
    ckpts = Checkpoints("run")  # a relative workdir: both managers under its absolute path
    assert ckpts.best is not None
    assert str(ckpts.last.directory) == str(tmp_path / "run" / "checkpoints")
    assert str(ckpts.best.directory) == str(tmp_path / "run" / "best")
    ckpts.close()


def test_a_gs_workdir_reaches_orbax_as_a_url(tmp_path, monkeypatch):
    """Orbax gets ``gs://bucket/run/...`` (made through epath, here a fake gs:// kept under
    ``tmp_path/store``), never a path relative to the current directory."""
    from orbax.checkpoint._src.path import gcs_utils

    monkeypatch.chdir(tmp_path)
    with (
        fake_gs(tmp_path / "store", cwd=tmp_path),
        mock.patch.object(gcs_utils, "is_hierarchical_namespace_enabled", lambda path: False),
    ):
        ckpts = Checkpoints("gs://bucket/run")
        assert ckpts.best is not None
        assert [str(m.directory) for m in (ckpts.last, ckpts.best)] == [
            "gs://bucket/run/checkpoints",
            "gs://bucket/run/best",
        ]
        assert ckpts.latest_step() is None
        ckpts.close()
    assert sorted(p.name for p in (tmp_path / "store" / "bucket" / "run").iterdir()) == ["best", "checkpoints"]


def test_a_gs_workdir_that_orbax_cannot_open_is_a_checkpoint_error(tmp_path, monkeypatch):
    from orbax.checkpoint._src.path import gcs_utils

    def no_storage(path):
        raise ImportError("cannot import name 'storage' from 'google.cloud'")

    monkeypatch.setattr(gcs_utils, "is_hierarchical_namespace_enabled", no_storage)
    with fake_gs(tmp_path), pytest.raises(CheckpointError, match=r"--workdir gs://bucket/run: .*google-cloud-storage"):
        Checkpoints("gs://bucket/run")


def test_data_positions_of_another_process_count_are_refused_naming_both():
    import pytest

    from transformer_jax.train.checkpoint import CheckpointError
    from transformer_jax.train.loop import _own_data_state

    assert _own_data_state({"processes": [{"grain": 1}]}) == {"grain": 1}
    with pytest.raises(CheckpointError, match="data position of 2 processes but 1 are running.*resume with 2"):
        _own_data_state({"processes": [{"grain": 1}, {"grain": 2}]})

"""User paths through ``etils.epath``: local ones absolute, ``gs://`` kept as given and opened
through epath (a fake ``gs://`` here, `tests.fake_remote`), what must be local refused by name."""

import gzip
import json
from pathlib import Path

import pytest

from tests.fake_remote import fake_gs, no_gs_backend
from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.paths import (
    check_reachable,
    local_copy,
    local_output,
    require_local,
    upload_tree,
    user_path,
)


def test_local_paths_become_absolute_and_urls_stay_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert str(user_path("run")) == str(tmp_path / "run")
    assert str(user_path("~/run")) == str(tmp_path / "home" / "run")
    assert str(user_path("gs://bucket/a/run")) == "gs://bucket/a/run"
    assert str(user_path("gs://bucket/a") / "config.json") == "gs://bucket/a/config.json"
    assert require_local("x.py", "--config", "why") == str(tmp_path / "x.py")
    with pytest.raises(ConfigError, match=r"--config='gs://b/x.py': an experiment file .*must be a local path"):
        require_local("gs://b/x.py", "--config", "an experiment file is imported")
    with pytest.raises(ConfigError, match=r"--workdir='file:///tmp/x': the scheme file:// is not supported"):
        user_path("file:///tmp/x", "--workdir")


def test_a_scheme_without_its_backend_is_an_error_naming_the_setting(tmp_path):
    check_reachable(user_path(tmp_path / "local"), "--workdir")  # local: not checked
    with no_gs_backend(), pytest.raises(ConfigError, match=r"--workdir='gs://b/run': .*install gcsfs"):
        check_reachable(user_path("gs://b/run"), "--workdir")


def test_copies_to_and_from_a_url(tmp_path):
    with fake_gs(tmp_path / "store", cwd=tmp_path):
        remote = user_path("gs://bucket/dir/model.npz")
        remote.parent.mkdir(parents=True)
        with local_output(remote) as name:
            assert not name.startswith("gs:")
            with open(name, "wb") as f:
                f.write(b"weights")
        with local_copy(remote) as name:
            assert Path(name).read_bytes() == b"weights"
        (tmp_path / "trace" / "plugins").mkdir(parents=True)
        (tmp_path / "trace" / "plugins" / "x.pb").write_bytes(b"pb")
        upload_tree(str(tmp_path / "trace"), user_path("gs://bucket/dir/profile"))
    assert (tmp_path / "store/bucket/dir/model.npz").read_bytes() == b"weights"
    assert (tmp_path / "store/bucket/dir/profile/plugins/x.pb").read_bytes() == b"pb"


def test_text_corpora_read_from_a_url(tmp_path):
    from transformer_jax.data import textio

    store = tmp_path / "store" / "bucket" / "corpus"
    (store / "sub").mkdir(parents=True)
    (store / "a.txt").write_text("alpha\n")
    (store / "sub" / "b.txt.gz").write_bytes(gzip.compress(b"beta\n"))
    (store / ".hidden").write_text("no\n")
    with fake_gs(tmp_path / "store", cwd=tmp_path):
        files = textio.expand_paths("gs://bucket/corpus")
        assert [str(f) for f in files] == ["gs://bucket/corpus/a.txt", "gs://bucket/corpus/sub/b.txt.gz"]
        assert textio.read_texts(files) == "alpha\nbeta\n"
        assert textio.fingerprint(files) != textio.fingerprint(files[:1])
        with pytest.raises(FileNotFoundError, match="data.dataset.path: gs://bucket/nothing does not exist"):
            textio.expand_paths("gs://bucket/nothing")


def test_metrics_and_lock_in_a_gs_workdir(tmp_path, monkeypatch):
    """metrics.jsonl cannot be appended to in gs:// (the fake refuses "a" as Cloud Storage does):
    it is rewritten, keeps the records up to a resumed step, and reads back; the lock refuses a
    second trainer and is gone after release."""
    from transformer_jax.train import loggers
    from transformer_jax.train.lock import WorkdirLock, WorkdirLockedError
    from transformer_jax.train.metrics import MetricsWriter, read_metrics

    monkeypatch.setattr(loggers, "REMOTE_FLUSH_S", 0.0)
    with fake_gs(tmp_path / "store", cwd=tmp_path):
        with MetricsWriter("gs://bucket/run", loggers=("jsonl",)) as writer:
            for step in (1, 2, 3):
                writer.write(step, {"loss": float(step)})
        with MetricsWriter("gs://bucket/run", loggers=("jsonl",), resume_step=2) as writer:
            writer.write(3, {"loss": 0.5})
        assert [(r["step"], r["loss"]) for r in read_metrics("gs://bucket/run")] == [(1, 1.0), (2, 2.0), (3, 0.5)]
        with WorkdirLock("gs://bucket/run"):
            holder = json.loads((tmp_path / "store/bucket/run/train.lock").read_text())
            assert holder["pid"] > 0
            with pytest.raises(WorkdirLockedError, match="held by a running trainer"):
                WorkdirLock("gs://bucket/run").acquire()
        assert not (tmp_path / "store/bucket/run/train.lock").exists()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # tensorboardX's writer __del__
def test_tensorboard_names_the_setting_when_it_cannot_write_the_workdir(tmp_path, monkeypatch):
    import tensorboardX.record_writer

    from transformer_jax.train.metrics import MetricsWriter

    monkeypatch.setattr(tensorboardX.record_writer, "GCS_ENABLED", False)  # google-cloud-storage missing
    with fake_gs(tmp_path / "store", cwd=tmp_path), pytest.raises(ConfigError, match=r"train.log.loggers: .*gs://"):
        MetricsWriter("gs://bucket/run", loggers=("tensorboard",))


def test_stored_configs_keep_urls_and_make_mixture_paths_absolute(tmp_path, monkeypatch):
    from transformer_jax.data import DataConfig, MixtureData
    from transformer_jax.train.config import Config
    from transformer_jax.train.experiment import absolute_paths

    monkeypatch.chdir(tmp_path)
    data = DataConfig(dataset=MixtureData(mixture="web=gs://b/web:0.7, code=shards/code:0.3"))
    cfg = absolute_paths(Config(data=data))
    assert cfg.data.dataset.mixture == f"web=gs://b/web:0.7,code={tmp_path}/shards/code:0.3"
    assert absolute_paths(cfg) == cfg

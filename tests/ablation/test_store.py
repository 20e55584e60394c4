"""Run summaries (``ablation.store``) and tuning helpers (``ablation.tuning``): keys, round trips,
reuse, the dev split carved from the training text, the learning-rate sweep and time budgets."""

import dataclasses
import json
import math
import pathlib
import shutil
import subprocess

import pytest

from transformer_jax import ablation
from transformer_jax.ablation import paths, runs, store, tuning
from transformer_jax.data import TextData
from transformer_jax.models import with_changes
from transformer_jax.train.actions import UNFINISHED_STOPS


@pytest.fixture
def smoke(monkeypatch, tmp_path):
    monkeypatch.setenv(ablation.SMOKE_ENV, "1")
    monkeypatch.setattr(paths, "_SMOKE_DIR", tmp_path / "results")
    monkeypatch.setenv("TRANSFORMER_JAX_RUNS", str(tmp_path / "runs"))
    monkeypatch.delenv(store.RETRAIN_ENV, raising=False)
    return tmp_path


def cfg(lr=1e-3):
    return tuning.with_lr(ablation.shakespeare_config("store_test", steps=3), lr)


def test_config_hash_follows_the_numbers_not_the_name(tmp_path):
    base = cfg()
    assert store.config_hash(base) == store.config_hash(dataclasses.replace(base, name="other"))
    assert store.config_hash(base) == store.config_hash(
        dataclasses.replace(base, model=with_changes(base.model, vocab_size=99))
    )
    assert store.config_hash(base) != store.config_hash(cfg(3e-3))
    assert store.config_hash(base) != store.config_hash(ablation.with_seed(base, 1))
    # local text files stand for their contents: the same text anywhere gives the same hash
    texts = {}
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
        texts[name] = tmp_path / name / "t.txt"
        texts[name].write_text("to be or not to be" if name != "c" else "something else")
    on = lambda p: dataclasses.replace(base, data=dataclasses.replace(base.data, dataset=TextData(path=str(p))))
    assert store.config_hash(on(texts["a"])) == store.config_hash(on(texts["b"]))
    assert store.config_hash(on(texts["a"])) != store.config_hash(on(texts["c"]))
    key = store.run_key("post, 6 layers / no warmup", 2, base)
    assert key == f"post_6_layers_no_warmup__s2__{store.config_hash(base)}"


def fake_curves(val=(1.5, 1.2), train=(2.0, 1.9), **summary):
    return runs.Curves("x", [1, 2], list(train), [1, 2], list(val), {"tokens_per_s": 100.0, **summary}, "/tmp/x")


def test_smoke_summaries_go_to_a_temporary_folder_and_read_back(smoke):
    path = store.save_run(
        "nb", "arm", 1, cfg(), fake_curves(train=(2.0, math.nan)), measured={"rel": [0.5, float("nan")]}
    )
    assert path.parent == smoke / "results" / "nb" / "runs" and ablation.repo_root() not in path.parents
    record = json.loads(path.read_text())  # strict JSON: no NaN
    assert record["curves"]["train_loss"] == [2.0, None] and record["measured"] == {"rel": [0.5, None]}
    assert record["arm"] == "arm" and record["seed"] == 1 and record["config"]["train"]["optim"]["lr"] == 1e-3
    back = store.load_run("nb", "arm", 1, cfg())
    assert back is not None and back.val_loss == [1.5, 1.2] and math.isnan(back.train_loss[1])
    assert back.summary["measured"] == {"rel": [0.5, None]} and path.name in back.summary["reused_from"]
    assert store.load_run("nb", "arm", 2, cfg()) is None and store.load_run("nb", "arm", 1, cfg(3e-3)) is None


def test_full_summaries_go_under_experiments_results(monkeypatch, tmp_path):
    monkeypatch.setenv(ablation.SMOKE_ENV, "0")
    monkeypatch.setattr(paths, "repo_root", lambda: tmp_path)
    monkeypatch.delenv(paths.RESULTS_ENV, raising=False)
    (tmp_path / "experiments" / "results").mkdir(parents=True)  # a checkout has it
    assert store.runs_store("nb") == tmp_path / "experiments" / "results" / "nb" / "runs"


def test_run_arm_trains_once_then_reuses_and_measures(smoke, monkeypatch):
    trained = []

    def train_curves(c, name, notebook):
        trained.append((c.train.seed, c.data.seed, name, notebook))
        return fake_curves(val=(1.5, 1.0 + c.train.seed))

    monkeypatch.setattr(runs, "train_curves", train_curves)
    measured = []
    measure = lambda c: measured.append(c.workdir) or {"seen": c.final_val}
    first = ablation.run_arm(cfg(), "pre", 3, "nb", measure=measure)
    assert trained == [(3, 3, store.run_key("pre", 3, ablation.with_seed(cfg(), 3)), "nb")]
    assert first.summary["measured"] == {"seen": 4.0} and measured == ["/tmp/x"]
    again = ablation.run_arm(cfg(), "pre", 3, "nb", measure=measure)
    assert len(trained) == 1 and len(measured) == 1 and again.final_val == 4.0
    assert again.summary["measured"] == {"seen": 4.0} and "reused_from" in again.summary
    assert "pre s3" in runs._REUSED
    ablation.run_arm(cfg(), "post", 3, "nb")  # saved without a measurement ...
    ablation.run_arm(cfg(), "post", 3, "nb", measure=measure)  # ... so trained again to measure it
    assert len(trained) == 3 and len(measured) == 2
    monkeypatch.setenv(store.RETRAIN_ENV, "1")
    ablation.run_arm(cfg(), "pre", 3, "nb")
    assert len(trained) == 4


def test_run_arm_does_not_measure_a_diverged_run(smoke, monkeypatch):
    monkeypatch.setattr(runs, "train_curves", lambda c, name, nb: fake_curves(val=(math.nan,) * 2, halted=True))
    c = ablation.run_arm(cfg(), "post", 0, "nb", measure=lambda c: pytest.fail("measured a diverged run"))
    assert c.diverged and c.summary["measured"] is None


def test_dev_split_carves_the_end_of_the_training_text(smoke, tmp_path):
    text = "".join(f"line {i}: the quick brown fox\n" for i in range(400))
    (tmp_path / "corpus.txt").write_text(text)
    base = cfg()
    base = dataclasses.replace(
        base, data=dataclasses.replace(base.data, dataset=TextData(path=str(tmp_path / "corpus.txt")))
    )
    dev = tuning.dev_split(base, 0.1)
    train_text = text[: int(len(text) * 0.9)]  # the corpus's own 90/10 split
    cut = int(len(train_text) * 0.9)
    assert (dev.data.dataset.kind, dev.model, dev.train) == ("text", base.model, base.train)
    read = lambda p: pathlib.Path(p).read_text()
    assert read(dev.data.dataset.path) == train_text[:cut] and read(dev.data.dataset.val_path) == train_text[cut:]
    assert tuning.dev_split(base, 0.1).data == dev.data  # written once, same files
    with pytest.raises(ValueError, match="fraction"):
        tuning.dev_split(base, 1.0)


def test_sweep_lr_scores_each_rate_on_the_dev_split(smoke, monkeypatch):
    seen = []

    def run_arm(c, arm, seed, notebook):
        seen.append((arm, seed, c.data.dataset.kind, c.train.optim.lr, c.train.optim.schedule.min_lr))
        loss = {1e-3: 1.4, 3e-3: 1.3, 1e-2: math.nan}[c.train.optim.lr]
        return fake_curves(val=(2.0, loss), halted=math.isnan(loss))

    monkeypatch.setattr(tuning, "run_arm", run_arm)
    monkeypatch.setattr(
        tuning,
        "dev_split",
        lambda c, f: dataclasses.replace(c, data=dataclasses.replace(c.data, dataset=TextData(path="x"))),
    )
    rec = tuning.sweep_lr(cfg(), "post", [1e-3, 3e-3, 1e-2], "nb", seeds=(0, 1))
    assert rec["lr"] == 3e-3 and rec["dev_loss"] == [1.4, 1.3, math.inf] and not rec["at_edge"]
    assert rec["arm"] == "post" and rec["seeds"] == [0, 1] and len(seen) == 6
    assert seen[0] == ("post lr=0.001 dev", 0, "text", 1e-3, 1e-4)


def test_sweep_lr_on_a_synthetic_task_scores_the_dev_seeds_own_examples(smoke, monkeypatch):
    """A synthetic task's examples come from ``data.seed``: the sweep trains the config as is on
    seeds from DEV_SEED up (no text to carve a dev split from), and refuses a scored seed."""
    seen = []
    monkeypatch.setattr(tuning, "run_arm", lambda c, arm, seed, nb: seen.append((c, seed)) or fake_curves())
    task = ablation.reorder_config("reverse", "none", steps=3)
    rec = tuning.sweep_lr(task, "none", [1e-3, 3e-3], "nb", seeds=(ablation.DEV_SEED,))
    assert rec["seeds"] == [ablation.DEV_SEED] and [s for _, s in seen] == [ablation.DEV_SEED] * 2
    assert all(c.data == task.data for c, _ in seen)
    with pytest.raises(ValueError, match="seeds >= 1000"):
        tuning.sweep_lr(task, "none", [1e-3, 3e-3], "nb")


def test_tuned_runs_score_the_seeds_at_the_swept_rate(smoke, monkeypatch):
    seen = []

    def run_arm(c, arm, seed, nb, measure=None):
        seen.append((arm, seed, c.train.optim.lr))
        return fake_curves(val=(2.0, abs(c.train.optim.lr - 3e-3)))

    monkeypatch.setattr(tuning, "run_arm", run_arm)
    task = ablation.reorder_config("sort", "none", steps=3)
    sweep, tuned, trained = tuning.tuned_runs(task, "a", [1e-3, 3e-3, 9e-3], "nb", (0, 1), sweep_seeds=(1000,))
    assert sweep["lr"] == tuned.train.optim.lr == 3e-3 and len(trained) == 2
    assert seen[3:] == [("a", 0, 3e-3), ("a", 1, 3e-3)] and {s for _, s, _ in seen[:3]} == {1000}


GRID = [1e-3, 3e-3, 9e-3]


@pytest.mark.parametrize(
    "best, extend, tried, pick, at_edge",
    [
        (1e-3 / 3, 2, [1e-3 / 9, 1e-3 / 3, *GRID], 1e-3 / 3, False),  # down one step: edge again, then bracketed
        (2.7e-2, 2, [*GRID, 2.7e-2, 8.1e-2], 2.7e-2, False),  # up two steps, then bracketed
        (1.0, 2, [*GRID, 2.7e-2, 8.1e-2], 8.1e-2, True),  # still at the edge after 2 steps
        (1.0, 0, GRID, 9e-3, True),  # extend=0: the plain grid
        (3e-3, 2, GRID, 3e-3, False),  # bracketed from the start: nothing added
    ],
)
def test_sweep_lr_grows_the_grid_past_an_edge(smoke, monkeypatch, best, extend, tried, pick, at_edge):
    """Dev loss (log10 lr - log10 best)^2 + 1: the sweep extends the grid by the grid's own ratio
    while its best rate is an outermost one."""
    seen = []

    def run_arm(c, arm, seed, notebook):
        lr = c.train.optim.lr
        seen.append(lr)
        return fake_curves(val=(2.0, (math.log10(lr) - math.log10(best)) ** 2 + 1.0))

    monkeypatch.setattr(tuning, "run_arm", run_arm)
    monkeypatch.setattr(tuning, "dev_split", lambda c, f: c)
    rec = tuning.sweep_lr(cfg(), "a", GRID, "nb", extend=extend)
    assert sorted(seen) == pytest.approx(sorted(tried)) and rec["grid"] == pytest.approx(sorted(tried))
    assert rec["lr"] == pytest.approx(pick) and rec["at_edge"] == at_edge


@pytest.mark.parametrize("stable_below, pick", [(1e-3 / 3, 1e-3 / 3), (1e-6, None)])
def test_sweep_lr_grows_a_grid_that_diverged_everywhere_downwards(smoke, monkeypatch, stable_below, pick):
    """Every rate of the grid diverges (SGD too hot): the sweep steps below it instead of failing at
    once (then brackets its best, at ``stable_below``); still diverged after ``extend`` steps,
    `pick_lr` says to widen the grid."""
    seen = []

    def run_arm(c, arm, seed, notebook):
        lr = c.train.optim.lr
        seen.append(lr)
        loss = 1.0 + (math.log10(lr) - math.log10(stable_below)) ** 2
        return fake_curves(val=(2.0, loss)) if lr <= stable_below * 1.001 else fake_curves(val=(2.0, math.nan))

    monkeypatch.setattr(tuning, "run_arm", run_arm)
    monkeypatch.setattr(tuning, "dev_split", lambda c, f: c)
    if pick is None:
        with pytest.raises(ValueError, match="diverged: widen the grid downwards"):
            tuning.sweep_lr(cfg(), "a", GRID, "nb", extend=2)
    else:
        rec = tuning.sweep_lr(cfg(), "a", GRID, "nb", extend=2)
        assert rec["lr"] == pytest.approx(pick) and not rec["at_edge"]
    assert sorted(seen) == pytest.approx([1e-3 / 9, 1e-3 / 3, *GRID])


def test_sweep_lr_extends_by_default_in_full_mode_only(smoke, monkeypatch):
    """SMOKE mode (the ``smoke`` fixture) only checks that a notebook runs: no extension by default;
    FULL mode extends up to twice."""
    seen = []
    monkeypatch.setattr(tuning, "run_arm", lambda c, *a: seen.append(c) or fake_curves(val=(2.0, -c.train.optim.lr)))
    monkeypatch.setattr(tuning, "dev_split", lambda c, f: c)
    assert len(seen) == 0 and tuning.sweep_lr(cfg(), "a", GRID, "nb")["at_edge"] and len(seen) == 3
    monkeypatch.setenv(ablation.SMOKE_ENV, "0")
    assert tuning.sweep_lr(cfg(), "b", GRID, "nb")["lr"] == pytest.approx(8.1e-2) and len(seen) == 3 + 5
    with pytest.raises(ValueError, match="extend=-1"):
        tuning.sweep_lr(cfg(), "c", GRID, "nb", extend=-1)


def test_time_budgets():
    assert tuning.steps_for_seconds(100.0, 0.768) == 130 and tuning.steps_for_seconds(0.1, 1.0) == 1
    assert tuning.steps_for_seconds(100.0, 0.768, minimum=200) == 200
    with pytest.raises(ValueError, match="must be positive"):
        tuning.steps_for_seconds(100.0, 0.0)


def test_time_steps_are_kept_with_the_runs_and_read_back(smoke, monkeypatch):
    """One timing per set of configs, kept beside the run summaries; a later sitting reads it
    back instead of timing again, unless asked to retrain (or to time other rounds)."""
    from transformer_jax.train import timing

    timed = []

    def by_round(configs, *, rounds, steps, warmup):
        timed.append(list(configs))
        return {n: [0.1 * (i + 1) + 0.01 * r for r in range(rounds)] for i, n in enumerate(configs)}

    monkeypatch.setattr(timing, "step_seconds_by_round", by_round)
    configs = {"a": cfg(), "b": cfg(3e-3)}
    first = tuning.time_steps(configs, "nb", rounds=3, steps=5)
    assert first["seconds_per_step"] == pytest.approx({"a": 0.11, "b": 0.21}) and first["rounds"]["b"][0] == 0.2
    assert first["machine"] == store.machine() | {"load_1m": first["machine"]["load_1m"]}
    assert len(list(store.runs_store("nb").glob("timing__*.json"))) == 1
    again = tuning.time_steps(configs, "nb", rounds=3, steps=5)
    assert again["rounds"] == first["rounds"] and "timing__" in again["reused_from"] and len(timed) == 1
    tuning.time_steps({"a": cfg()}, "nb", rounds=3, steps=5)  # other configs: timed
    tuning.time_steps(configs, "nb", rounds=4, steps=5)  # other rounds: timed
    assert len(timed) == 3
    monkeypatch.setenv(store.RETRAIN_ENV, "1")
    tuning.time_steps(configs, "nb", rounds=3, steps=5)
    assert len(timed) == 4


def test_committed_run_summaries_are_not_ignored_by_git():
    """The FULL run summaries live in ``experiments/results/<notebook>/runs/``, which the repository's
    catch-all ``runs/`` (training folders) must not swallow: ``git add`` would skip them silently."""
    root = paths.repo_root()
    git = shutil.which("git")
    assert git is not None and (root / ".git").exists(), "the test runs in a git checkout, as CI's clean clone"
    check = lambda rel: subprocess.run([git, "check-ignore", "--no-index", "-q", rel], cwd=root).returncode == 0
    assert not check("experiments/results/causal_mask/runs/masked__s0__0123456789ab.json")
    assert check("runs/mt/checkpoints")  # the training folders stay ignored


def test_a_trained_run_records_its_machine_and_reads_it_back(smoke, monkeypatch):
    monkeypatch.setattr(store.runs, "train_curves", lambda c, key, nb: fake_curves())
    trained = store.run_arm(cfg(), "arm", 0, "nb")
    back = store.load_run("nb", "arm", 0, cfg())
    assert back is not None and trained.summary["machine"] == back.summary["machine"] == {
        **store.machine(),
        "load_1m": trained.summary["machine"]["load_1m"],
    }


def test_results_record_the_wall_clock_of_the_runs_they_use(smoke, monkeypatch):
    """Trained and read-back runs both count, once each, with the wall-clock they trained in."""
    monkeypatch.setattr(runs, "_WALL_S", {})
    monkeypatch.setattr(runs, "train_curves", lambda c, name, notebook: fake_curves(wall_s=100.0 + c.train.seed))
    for seed in (0, 1):
        ablation.run_arm(cfg(), "arm", seed, "nb")
    ablation.run_arm(cfg(), "arm", 1, "nb")  # read back: the same run, counted once
    out = ablation.save_results("nb", {"verdicts": ""})
    wall = json.loads((out / "results.json").read_text())["wall_clock"]
    assert wall["runs"] == 2 and wall["run_training_s"] == 201.0 and wall["sitting_s"] > 0
    record = json.loads((out / "results.json").read_text())
    record["mode"] = "full"
    assert "2 training runs, 3 min summed over the runs" in ablation.results._wall_clock_text(record)


def test_kept_measurements_are_json_alike_when_taken_and_when_read_back(smoke):
    """The first sitting returns what a later one reads back (keys as strings, numpy as numbers),
    so a notebook cannot work only on the sitting that measured."""
    import numpy as np

    calls = []
    measure = lambda: calls.append(1) or {"ms": {64: np.float32(1.5), 128: 3.0}}
    first = store.kept_measurement("nb", "kv cache", {"positions": (64, 128)}, measure)
    again = store.kept_measurement("nb", "kv cache", {"positions": (64, 128)}, measure)
    assert first["ms"] == again["ms"] == {"64": 1.5, "128": 3.0} and len(calls) == 1
    assert "reused_from" in again and "reused_from" not in first and again["machine"] == first["machine"]
    store.kept_measurement("nb", "kv cache", {"positions": (64, 256)}, measure)  # another key: measured
    assert len(calls) == 2


@pytest.mark.parametrize("reason", UNFINISHED_STOPS)
def test_an_interrupted_run_is_not_recorded_as_finished(monkeypatch, tmp_path, reason):
    """A signal ends the trainer cleanly; the notebook must stop too, not save a short run as done."""
    import types

    from transformer_jax.train import loop

    monkeypatch.setenv("TRANSFORMER_JAX_RUNS", str(tmp_path))
    monkeypatch.setattr(loop, "train", lambda cfg, workdir: {"stopped": reason, "step": 3})
    cfg = types.SimpleNamespace(train=types.SimpleNamespace(steps=10))
    with pytest.raises(SystemExit, match=f"{reason} at step 3 of 10"):
        runs.train_curves(cfg, "arm", "nb")  # pyright: ignore[reportArgumentType]
    assert not (paths.runs_dir("nb") / "arm" / runs.SUMMARY_FILE).exists()


def test_a_kept_summary_of_an_interrupted_run_is_trained_again(smoke):
    store.save_run("nb", "arm", 0, cfg(), fake_curves(stopped="SIGTERM"))
    with pytest.warns(UserWarning, match="stopped early"):
        assert store.load_run("nb", "arm", 0, cfg()) is None
    store.save_run("nb", "arm", 1, cfg(), fake_curves(stopped="steps"))
    assert store.load_run("nb", "arm", 1, cfg()) is not None


def test_a_model_group_added_later_and_left_off_keeps_the_hash_of_older_runs():
    from transformer_jax.core.configlib import to_dict
    from transformer_jax.models.mla_config import MLAConfig

    base = cfg()
    assert not {"mla", "mtp"} & set(store.hashed_config(base)["model"])  # as in runs committed before them
    on = dataclasses.replace(base, model=dataclasses.replace(base.model, position="rope", mla=MLAConfig()))
    assert store.hashed_config(on)["model"]["mla"] == to_dict(MLAConfig())
    assert store.config_hash(on) != store.config_hash(base)


def test_moe_fields_added_later_at_their_defaults_keep_the_hash_of_older_runs():
    from transformer_jax.models.moe_config import MoEConfig
    from transformer_jax.nn.moe_config import SoftmaxRouter

    base = cfg()
    moe = dataclasses.replace(base, model=dataclasses.replace(base.model, moe=MoEConfig()))
    hashed = store.hashed_config(moe)["model"]["moe"]
    assert not {"first_dense", "routed_scaling_factor"} & set(hashed)  # as in runs committed before them
    scaled_moe = MoEConfig(router=SoftmaxRouter(scaling_factor=2.5))
    scaled = dataclasses.replace(moe, model=dataclasses.replace(moe.model, moe=scaled_moe))
    assert store.hashed_config(scaled)["model"]["moe"]["routed_scaling_factor"] == 2.5
    assert store.config_hash(scaled) != store.config_hash(moe)


def test_a_run_stopped_early_resumes_to_the_uninterrupted_run(smoke, monkeypatch):
    """With reuse on, a run stopped by a signal at step 2 of 4 resumes from its checkpoint and ends
    where the uninterrupted run does; its summary keeps the commit it began from."""
    from transformer_jax.train import actions

    monkeypatch.setenv(ablation.REUSE_ENV, "1")
    monkeypatch.setattr(runs, "START_COMMIT", "a" * 40)  # committed; the library at "a" is HEAD's
    monkeypatch.setattr(runs, "same_library", lambda commit, now: commit == "a" * 40 and now == "b" * 40)
    c = ablation.shakespeare_config("resume", steps=4, batch_size=8, checkpoint={"every": 2}, log={"every": 1})
    whole = runs.train_curves(c, "whole", "nb")
    signal_at_2 = lambda self, ctl, view: ctl.stop("SIGTERM") if view.step == 2 else None
    with monkeypatch.context() as m:
        m.setattr(actions.StopSignal, "run", signal_at_2)
        with pytest.raises(SystemExit, match="SIGTERM at step 2 of 4.*resumes from its last checkpoint"):
            runs.train_curves(c, "split", "nb")
    monkeypatch.setattr(runs, "START_COMMIT", "b" * 40)
    split = runs.train_curves(c, "split", "nb")
    assert split.steps == whole.steps and split.train_loss == whole.train_loss and split.val_loss == whole.val_loss
    assert split.summary["resumed"]["from_step"] == 2 and split.summary["resumed"]["begun_commit"] == "a" * 40
    assert json.loads((paths.runs_dir("nb") / "split" / runs.SUMMARY_FILE).read_text())["git_commit"] == "a" * 40
    path = store.save_run("nb", "split", 0, c, split)
    assert json.loads(path.read_text())["git_commit"] == "a" * 40
    monkeypatch.setattr(runs, "START_COMMIT", "c" * 40)  # a later process reads the finished run back
    again = runs.train_curves(c, "split", "nb")
    assert "reused_from" in again.summary and again.summary["git_commit"] == "a" * 40
    assert json.loads(store.save_run("nb", "split", 1, c, again).read_text())["git_commit"] == "a" * 40


@pytest.mark.parametrize(
    "why, change",
    [
        ("another config", lambda m, c: dataclasses.replace(c, name="other")),
        ("the library changed since", lambda m, c: m.setattr(runs, "same_library", lambda commit, now: False) or c),
        ("begun from a dirty tree", lambda m, c: m.setattr(runs, "START_COMMIT", "a" * 40 + "-dirty") or c),
        ("reuse off", lambda m, c: m.delenv(ablation.REUSE_ENV) or c),
    ],
)
def test_a_stopped_run_starts_over_unless_config_and_library_are_the_same(smoke, monkeypatch, why, change):
    from transformer_jax.train import actions

    monkeypatch.setenv(ablation.REUSE_ENV, "1")
    monkeypatch.setattr(runs, "START_COMMIT", "a" * 40)
    monkeypatch.setattr(runs, "same_library", lambda commit, now: True)
    c = ablation.shakespeare_config("resume", steps=4, batch_size=8, checkpoint={"every": 2}, log={"every": 1})
    with monkeypatch.context() as m:
        m.setattr(actions.StopSignal, "run", lambda self, ctl, view: ctl.stop("SIGTERM") if view.step == 2 else None)
        with pytest.raises(SystemExit):
            runs.train_curves(c, "run", "nb")
    again = runs.train_curves(change(monkeypatch, c), "run", "nb")
    assert "resumed" not in again.summary, why
    assert again.steps[0] < 2


def test_same_library_reads_the_package_at_a_commit():
    head = paths.git_commit()
    if head is None:
        pytest.skip("not a git checkout")
    assert paths.same_library("HEAD")
    first = subprocess.run(["git", "rev-list", "--max-parents=0", "HEAD"], cwd=paths.repo_root(), capture_output=True,
                           text=True, check=True).stdout.split()[0]  # fmt: skip
    if first == head.removesuffix("-dirty"):
        pytest.skip("a clone with one commit")
    assert not paths.same_library(first) and not paths.same_library("0" * 40)
    assert paths.same_library(first, first)


def test_a_finished_run_with_a_resolved_schedule_is_read_back(smoke, monkeypatch):
    """Training saves the resolved config (the inverse-sqrt schedule's d_model filled in, None in the
    notebook's cfg, as in decoding's MT models): the run must still be read back, not retrained."""
    from transformer_jax.train.optim import InverseSqrtSchedule

    monkeypatch.setenv(ablation.REUSE_ENV, "1")
    c = ablation.shakespeare_config("noam", steps=2, batch_size=8)
    c = dataclasses.replace(c, train=dataclasses.replace(
        c.train, optim=dataclasses.replace(c.train.optim, schedule=InverseSqrtSchedule())))  # fmt: skip
    first = runs.train_curves(c, "noam", "nb")
    again = runs.train_curves(c, "noam", "nb")
    assert "reused_from" not in first.summary and "reused_from" in again.summary

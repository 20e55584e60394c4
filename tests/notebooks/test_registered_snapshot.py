"""A redo that spans sittings (`PENDING_RERUN`) keeps the claims it was registered under when its
first sitting started (`ablation.registration`, ``experiments/results/<nb>/registered.json``): the
notebook's current specs may not drift from them unless each change is recorded as a new Revision.
A notebook whose redo has landed keeps its snapshot, and its results were run under those claims."""

import json
import time

import pytest

from tests.notebooks.verdict_cells import NOTEBOOKS, notebook_claims
from transformer_jax import ablation
from transformer_jax.ablation import registration
from transformer_jax.ablation.paths import PENDING_RERUN

ROOT = NOTEBOOKS.parent
TODAY = time.strftime("%Y-%m-%d", time.gmtime())
NAMES = sorted(p.stem for p in NOTEBOOKS.glob("*.py") if p.stem != "conftest")


@pytest.mark.parametrize("notebook", sorted(PENDING_RERUN))
def test_a_pending_redos_claims_have_not_drifted_since_its_first_sitting(notebook):
    snapshot = registration.read_snapshot(notebook, ROOT)
    if snapshot is None:
        started = [p.name for p in registration.redo_runs(notebook, ROOT)]
        assert not started, (
            f"{notebook}: its redo has {len(started)} run summaries ({started[0]}, ...) but no "
            f"{registration.SNAPSHOT}: record the claims it was registered under (tools/register_sitting.py)"
        )
        return
    current = ablation.spec_record(notebook_claims(notebook))
    latest = registration.latest_run(notebook, ROOT)
    problems = registration.drift(snapshot["claims"], current, snapshot["updated"], latest)
    assert not problems, f"{notebook}: claims drifted since {snapshot['registered']}:\n" + "\n".join(problems)


@pytest.mark.parametrize("notebook", NAMES)
def test_a_landed_redo_was_run_under_the_claims_it_registered(notebook):
    snapshot = registration.read_snapshot(notebook, ROOT)
    if snapshot is None or notebook in PENDING_RERUN:
        pytest.skip(f"{notebook}: no landed redo with a snapshot")
    stored = json.loads((ROOT / "experiments" / "results" / notebook / "results.json").read_text())["claims"]
    assert not registration.drift(snapshot["claims"], stored)


def _claim(**kw):
    base = dict(
        name="Gap",
        notes="n.txt",
        says="s",
        measure="m",
        criteria=(ablation.Criterion("less"),),
        why="w",
        n=3,
        power=ablation.Power(sd=0.05, effect=0.1, pilot="p", alpha=0.05),
        lines=(1, 2),
    )
    return ablation.Claim(**{**base, **kw})


def test_drift_needs_a_new_revision_for_a_changed_criterion_and_keeps_every_claim(tmp_path, monkeypatch):
    monkeypatch.setattr(registration, "git_commit", lambda: "abc")
    first = _claim()
    path = registration.write_snapshot("nb", [first], tmp_path)
    assert json.loads(path.read_text())["claims"]["Gap"]["power"]["alpha"] == 0.05
    reworded = _claim(says="in other words", lines=(1, 3))
    new = _claim(name="New")
    registration.write_snapshot("nb", [reworded, new], tmp_path)  # wording and new claims pass
    resized = _claim(power=ablation.Power(sd=0.05, effect=0.1, pilot="p"), n=4)  # the default alpha moved
    with pytest.raises(ValueError, match="'Gap': its criterion differs"):
        registration.write_snapshot("nb", [resized, new], tmp_path)
    recorded = ablation.Revision(TODAY, "alpha 0.025", "the verdict's test")
    registration.write_snapshot("nb", [_claim(power=resized.power, n=4, history=(recorded,)), new], tmp_path)
    assert json.loads(path.read_text())["claims"]["Gap"]["n"] == 4
    # the revision is now part of the snapshot: dropping it, or the claim, is a drift
    assert registration.drift(json.loads(path.read_text())["claims"], ablation.spec_record([resized, new]))
    gone = registration.drift(json.loads(path.read_text())["claims"], ablation.spec_record([new]))
    assert len(gone) == 1 and "'Gap': registered for this redo, gone from the notebook" in gone[0]


def test_a_change_made_after_the_redos_runs_says_it_saw_them_and_is_dated_when_made(tmp_path, monkeypatch):
    monkeypatch.setattr(registration, "git_commit", lambda: "abc")
    path = registration.write_snapshot("nb", [_claim()], tmp_path)
    runs = path.parent / "runs"
    runs.mkdir()
    (runs / "r.json").write_text(json.dumps({"date": f"{TODAY} 00:00:01 UTC"}))
    moved = dict(power=ablation.Power(sd=0.05, effect=0.1, pilot="p"), n=4)
    change = lambda **kw: ablation.Revision(**{"date": TODAY, "change": "alpha 0.025", "reason": "r", **kw})

    def refused(*history):
        with pytest.raises(ValueError) as err:
            registration.write_snapshot("nb", [_claim(**moved, history=history)], tmp_path)
        return str(err.value)

    assert f"give its new Revision seen='{TODAY}'" in refused(change())
    assert f"give its new Revision seen='{TODAY}'" in refused(change(seen="1999-01-01"))  # before the runs
    assert "dated 2000-01-01, outside" in refused(change(date="2000-01-01", seen=TODAY))
    assert "dated 2099-01-01, outside" in refused(change(date="2099-01-01", seen=TODAY))
    assert "only register fresh reruns" in refused(change(fresh=True))
    with pytest.raises(ValueError, match="not both"):
        change(seen=TODAY, fresh=True)
    seen_then_fresh = (change(seen=TODAY), change(change="rerun", fresh=True))
    registration.write_snapshot("nb", [_claim(**moved, history=seen_then_fresh)], tmp_path)
    assert [e.get("seen") for e in json.loads(path.read_text())["claims"]["Gap"]["history"]] == [TODAY, None]


def test_a_redo_without_a_snapshot_is_allowed_only_before_its_first_run(tmp_path):
    runs = tmp_path / "experiments" / "results" / "nb" / "runs"
    runs.mkdir(parents=True)
    (runs.parent / "results.json").write_text(json.dumps({"date": "2026-12-04 00:00:00 UTC"}))
    (runs / "old.json").write_text(json.dumps({"date": "2026-12-03 12:00:00 UTC"}))
    assert registration.redo_runs("nb", tmp_path) == []
    (runs / "new.json").write_text(json.dumps({"date": "2026-12-05 12:00:00 UTC"}))
    assert [p.name for p in registration.redo_runs("nb", tmp_path)] == ["new.json"]

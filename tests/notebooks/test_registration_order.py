"""A fresh rerun was registered before it ran, by commit order (the rules: registration_order.py):
the committed results, and constructed histories in temporary repositories, one per way to fail."""

import json
import pathlib

import pytest

from tests.notebooks.registration_order import (
    RESULTS,
    ROOT,
    git,
    history_missing,
    holds_revision,
    pending_record,
    registration_problems,
)
from transformer_jax.ablation.paths import PENDING_RERUN

NAMES = sorted(p.parent.name for p in (ROOT / RESULTS).glob("*/results.json"))


@pytest.mark.skipif(bool(history_missing(ROOT)), reason=str(history_missing(ROOT)))
@pytest.mark.parametrize("notebook", NAMES)
def test_fresh_revisions_were_committed_before_the_runs_they_judge(notebook):
    assert registration_problems(ROOT, notebook) == []


@pytest.mark.skipif(bool(history_missing(ROOT)), reason=str(history_missing(ROOT)))
@pytest.mark.parametrize("notebook", sorted(PENDING_RERUN))
def test_a_redo_in_progress_registered_its_fresh_revisions_before_its_runs(notebook):
    """The same rule for a redo's registered claims (its snapshot) and the runs it has trained so
    far, checked at every sitting rather than only when its results land."""
    record = pending_record(ROOT, notebook)
    if record is None:
        pytest.skip(f"{notebook}: no registration snapshot (test_registered_snapshot.py requires one once it has runs)")
    assert registration_problems(ROOT, notebook, record) == []


def _commit(repo: pathlib.Path, files: dict[str, str], message: str) -> str:
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git(repo, "add", *files)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


NOTEBOOK_BEFORE = 'CLAIMS = ablation.register(ablation.Claim("c", history=(BEFORE,)))\n'
NOTEBOOK_AFTER = (
    "FRESH = 3\n"
    'CLAIMS = ablation.register(ablation.Claim("c", history=(BEFORE, ablation.Revision(\n'
    '    "2026-12-05", f"judged on fresh seeds {FRESH}-{FRESH + 1}", "seen", fresh=True, seeds=(3, 4)))))\n'
)
REVISION = {"date": "2026-12-05", "change": "judged on fresh seeds 3-4", "reason": "seen", "fresh": True}
REVISION["seeds"] = [3, 4]


def _run(seed: int, commit: str) -> dict[str, str]:
    summary = {"arm": "arm", "seed": seed, "git_commit": commit}
    return {f"{RESULTS}/nb/runs/arm__s{seed}__0123.json": json.dumps(summary)}


def _results(commit: str, reused: tuple[int, ...] = ()) -> dict[str, str]:
    """results.json written from ``commit``, reusing the runs of seeds ``reused`` trained earlier."""
    runs = {f"arm s{s}": f"arm__s{s}__0123.json (trained 2026-12-05 10:00:00 UTC, commit x)" for s in reused}
    claims = {"c": {"history": [{"change": "registered"}, REVISION]}}
    record = {"git_commit": commit, "claims": claims, "reused_runs": runs}
    return {f"{RESULTS}/nb/results.json": json.dumps(record)}


@pytest.fixture
def repo(tmp_path, monkeypatch):
    for k, v in {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "t@t")
    git(tmp_path, "init", "-q")
    _commit(tmp_path, {"notebooks/nb.py": NOTEBOOK_BEFORE}, "claim registered")
    return tmp_path


def test_registered_before_the_fresh_runs_passes(repo):
    r = _commit(repo, {"notebooks/nb.py": NOTEBOOK_AFTER}, "fresh revision registered")
    _commit(repo, {**_run(3, r), **_run(4, r)}, "fresh runs")
    _commit(repo, _results(r), "results")
    assert registration_problems(repo, "nb") == []


def test_revision_registered_after_the_runs_fails(repo):
    before = git(repo, "rev-parse", "HEAD").strip()
    _commit(repo, {**_run(3, before), **_run(4, before)}, "fresh runs, trained before the revision")
    r = _commit(repo, {"notebooks/nb.py": NOTEBOOK_AFTER}, "revision written after the numbers")
    _commit(repo, _results(r, reused=(3, 4)), "results")
    problems = registration_problems(repo, "nb")
    assert len(problems) == 4 and all("fresh seeds 3-4" in p for p in problems)  # two runs: trained, committed


def test_revision_in_the_dirty_tree_only_or_in_the_runs_own_commit_fails(repo):
    before = git(repo, "rev-parse", "HEAD").strip()
    files = {"notebooks/nb.py": NOTEBOOK_AFTER, **_run(3, before + "-dirty"), **_run(4, before + "-dirty")}
    r = _commit(repo, files, "revision and its runs in one commit")
    _commit(repo, _results(r, reused=(3, 4)), "results")
    problems = registration_problems(repo, "nb")
    assert sum("ran from" in p for p in problems) == 2 and sum("was committed" in p for p in problems) == 2


def test_a_revision_nobody_committed_or_no_fresh_runs_fails(repo):
    _commit(repo, _results(git(repo, "rev-parse", "HEAD").strip()), "results naming a revision never written")
    assert [
        "no commit of notebooks/nb.py gives the claim this revision" in p for p in registration_problems(repo, "nb")
    ] == [True]
    r = _commit(repo, {"notebooks/nb.py": NOTEBOOK_AFTER}, "revision, but no run of its seeds")
    _commit(repo, _results(r), "results")
    assert ["no run summary of seeds" in p for p in registration_problems(repo, "nb")] == [True]


def test_the_revision_is_matched_in_its_own_claim_by_date_change_reason_and_seeds():
    assert holds_revision(NOTEBOOK_AFTER, "c", REVISION)  # the f-string's fields as wildcards
    for key, value in (("change", "judged on stale seeds 3-4"), ("reason", "unseen"), ("date", "2026-12-06")):
        assert not holds_revision(NOTEBOOK_AFTER, "c", {**REVISION, key: value})
    assert not holds_revision(NOTEBOOK_AFTER, "c", {**REVISION, "seeds": [3, 5]})
    assert not holds_revision(NOTEBOOK_AFTER, "other claim", REVISION)
    assert not holds_revision(NOTEBOOK_AFTER.replace("fresh=True", "fresh=False"), "c", REVISION)
    only_fields = NOTEBOOK_AFTER.replace('f"judged on fresh seeds {FRESH}-{FRESH + 1}"', 'f"{FRESH}"')
    assert not holds_revision(only_fields, "c", {**REVISION, "change": "3"})  # no literal part: matches nothing


@pytest.mark.parametrize(
    "seeds, matches",
    [
        ("tuple(range(FRESH, FRESH + 2))", True),
        ("tuple(range(FRESH, FRESH + POWER.n()))", True),  # the stop unknown: consecutive from the start
        ("sorted(range(FRESH + 1, FRESH + POWER.n()))", False),  # another start
        ("tuple(range(FRESH, 6))", False),  # another stop
        ("tuple(range(START, START + 2))", False),  # a start not known here
        ("SEEDS", False),  # an expression not read here matches nothing
        ("ablation.seeds(first=FRESH)", False),
    ],
)
def test_a_revisions_seeds_match_as_a_literal_or_a_range_from_a_known_start(seeds, matches):
    source = "START = helper()\n" + NOTEBOOK_AFTER.replace("seeds=(3, 4)", f"seeds={seeds}")
    assert holds_revision(source, "c", REVISION) is matches


# a helper shared by claims (decoding's RERUN): its revision counts for the claims that call it only
NOTEBOOK_HELPER = (
    'RERUN = lambda change: (ablation.Revision("2026-12-05", change, "seen", seen="2026-12-03"), ablation.Revision(\n'
    '    "2026-12-05", "judged on fresh seeds 3-4", "seen", fresh=True, seeds=(3, 4)))\n'
    "claim = lambda name, **kw: ablation.Claim(name, **{'history': (BEFORE,), **kw})\n"
    "CLAIMS = ablation.register(\n"
    '    claim("CALLS", history=RERUN("a measure changed")),\n'
    '    claim("DOES NOT", history=(BEFORE,)),\n'
    ")\n"
)


def _helper(calls: str, does_not: str) -> str:
    return NOTEBOOK_HELPER.replace("CALLS", calls).replace("DOES NOT", does_not)


def test_a_helpers_revision_counts_only_for_the_claims_that_call_it():
    assert holds_revision(_helper("c", "d"), "c", REVISION)
    assert not holds_revision(_helper("d", "c"), "c", REVISION)


def test_a_revision_of_another_claim_with_the_same_text_fails(repo):
    r = _commit(repo, {"notebooks/nb.py": _helper("d", "c")}, "the fresh revision given to claim d")
    _commit(repo, {**_run(3, r), **_run(4, r)}, "fresh runs")
    _commit(repo, _results(r), "results of claim c")
    assert ["gives the claim this revision" in p for p in registration_problems(repo, "nb")] == [True]


def test_a_change_known_only_when_the_notebook_runs_matches_nothing(repo):
    helper = 'REV = lambda change: ablation.Revision("2026-12-05", change, "seen", fresh=True, seeds=(3, 4))\n'
    helper += 'WHAT = "judged on fresh seeds {}".format("3-4")\n'
    notebook = helper + NOTEBOOK_BEFORE.replace("(BEFORE,)", "(BEFORE, REV(WHAT))")
    r = _commit(repo, {"notebooks/nb.py": notebook}, "the change text known only when the helper runs")
    _commit(repo, {**_run(3, r), **_run(4, r)}, "fresh runs")
    _commit(repo, _results(r), "results")
    assert ["gives the claim this revision" in p for p in registration_problems(repo, "nb")] == [True]


def test_a_run_from_a_commit_missing_in_the_clone_fails(repo):
    r = _commit(repo, {"notebooks/nb.py": NOTEBOOK_AFTER}, "fresh revision registered")
    _commit(repo, {**_run(3, r), **_run(4, "f" * 40)}, "fresh runs, one from a commit the clone lacks")
    _commit(repo, _results(r, reused=(4,)), "results")
    (problem,) = registration_problems(repo, "nb")
    assert "arm__s4__0123.json ran from ffffffffffff, a commit not in this clone's history" in problem


def test_a_summary_committed_before_the_revision_and_moved_after_it_fails(repo):
    # no recorded commit, so only the commit that first held the summary's content can date it
    elsewhere = {k.replace("/nb/runs/", "/old/runs/"): v for k, v in {**_run(3, ""), **_run(4, "")}.items()}
    first = _commit(repo, elsewhere, "runs trained and committed under another notebook")
    r = _commit(repo, {"notebooks/nb.py": NOTEBOOK_AFTER}, "revision written after the numbers")
    git(repo, "mv", f"{RESULTS}/old", f"{RESULTS}/nb")
    git(repo, "commit", "-q", "-m", "the runs moved")
    _commit(repo, _results(r, reused=(3, 4)), "results")
    problems = registration_problems(repo, "nb")
    assert len(problems) == 2 and all(f"({first[:12]})" in p for p in problems)


def test_a_lambda_helpers_revision_is_read_with_the_arguments_of_its_call():
    source = (
        'FRESH = lambda date: ablation.Revision(date, "judged on new data", "fresh data", fresh=True)\n'
        'CLAIMS = ablation.register(claim("c", history=(FRESH("2026-12-06"),)), claim("d", history=()))\n'
    )
    rev = {"date": "2026-12-06", "change": "judged on new data", "reason": "fresh data"}
    assert holds_revision(source, "c", rev)
    assert not holds_revision(source, "c", {**rev, "date": "2026-12-07"})  # the call's date, not any
    assert not holds_revision(source, "d", rev)  # only the claim that calls it


def test_a_timing_kept_before_a_seedless_fresh_revision_fails(repo):
    """A revision naming no seeds judges every run the results used, a kept timing (no seed) too."""
    before = git(repo, "rev-parse", "HEAD").strip()
    timing = {f"{RESULTS}/nb/runs/kv_cache__0123.json": json.dumps({"git_commit": before})}
    _commit(repo, timing, "a timing kept before the revision")
    after = NOTEBOOK_AFTER.replace(", seeds=(3, 4)", "")
    r = _commit(repo, {"notebooks/nb.py": after}, "fresh revision, no seeds")
    record = json.loads(_results(r)[f"{RESULTS}/nb/results.json"])
    record["claims"]["c"]["history"][1] = {k: v for k, v in REVISION.items() if k != "seeds"}
    record["reused_runs"] = {"kv cache": "kv_cache__0123.json (trained 2026-12-05 10:00:00 UTC, commit x)"}
    _commit(repo, {f"{RESULTS}/nb/results.json": json.dumps(record)}, "results reusing the timing")
    problems = registration_problems(repo, "nb")
    assert problems and all("kv_cache__0123.json" in p for p in problems)

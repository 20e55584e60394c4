"""A pending redo's claims as registered when its first sitting started, so they cannot drift
between sittings.

A redo that spans several sittings (`paths.PENDING_RERUN`) has no results.json of its own until its
last sitting, so nothing stores the specs its first runs were trained to judge. ``registered.json``
beside its run summaries does: the `claims.spec_record` of the notebook when the first sitting
started (`write_snapshot`, ``tools/register_sitting.py``). Every later spec must match it
(`claims.criterion_spec`) unless its ``history`` extends the snapshot's with a new `claims.Revision`
(the change recorded, dated, and once the redo has runs, marked as made after seeing them); a
snapshot claim may not disappear (`drift`).
"""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Iterable, Mapping
from typing import Any

from transformer_jax.ablation.claims import Claim, criterion_spec, spec_record
from transformer_jax.ablation.paths import git_commit, repo_root

SNAPSHOT = "registered.json"


def snapshot_path(notebook: str, root: pathlib.Path | None = None) -> pathlib.Path:
    """``experiments/results/<notebook>/registered.json`` of the checkout ``root`` (default `repo_root`)."""
    return (repo_root() if root is None else root) / "experiments" / "results" / notebook / SNAPSHOT


def read_snapshot(notebook: str, root: pathlib.Path | None = None) -> dict[str, Any] | None:
    """The snapshot of ``notebook`` (``notebook``, ``registered``, ``commit``, ``updated``, ``claims``), or None."""
    path = snapshot_path(notebook, root)
    return json.loads(path.read_text()) if path.is_file() else None


def drift(registered: Mapping[str, Any], current: Mapping[str, Any], since: str = "", last_run: str = "") -> list[str]:
    """Why specs ``current`` (`spec_record` entries, by name) may not follow the specs ``registered``
    in a snapshot last updated on ``since`` (a date, "" unknown) while the redo's latest run is dated
    ``last_run`` ("" none yet); empty when they may. Refused: a claim gone; a criterion changed
    without new `Revision` entries appended to the history it had; a new entry dated before
    ``since`` or after today; once the redo has runs, a new entry that is not a ``fresh`` rerun
    without ``seen`` on or after ``last_run``'s date (whoever changes a criterion now may have read
    their numbers, so the claim reads exploratory until a fresh rerun); a changed criterion whose new
    entries are all fresh reruns (nothing records the change). Claims added since are not judged."""
    current = json.loads(json.dumps(dict(current)))
    today = time.strftime("%Y-%m-%d", time.gmtime())
    problems = []
    for name, old in registered.items():
        new = current.get(name)
        if new is None:
            problems.append(f"{name!r}: registered for this redo, gone from the notebook (renamed or dropped)")
            continue
        if criterion_spec(old) == criterion_spec(new):
            continue
        was, now = list(old.get("history") or ()), list(new.get("history") or ())
        if len(now) <= len(was) or now[: len(was)] != was:
            problems.append(
                f"{name!r}: its criterion differs from the one registered for this redo, and its history does "
                "not extend the registered one with a new ablation.Revision recording the change"
            )
            continue
        added = now[len(was) :]
        problems += [f"{name!r}: {why}" for entry in added if (why := _refused(entry, since[:10], today, last_run))]
        if _bare(old) != _bare(new) and all(entry.get("fresh") for entry in added):
            problems.append(
                f"{name!r}: its criterion changed, and its new history entries only register fresh reruns: add an "
                "ablation.Revision recording the change"
            )
    return problems


def _bare(spec: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in criterion_spec(spec).items() if k != "history"}


def _refused(entry: Mapping[str, Any], since: str, today: str, last_run: str) -> str:
    """Why a history entry added since the snapshot cannot stand ("" when it can)."""
    if not since <= entry["date"] <= today:
        return f"its new Revision is dated {entry['date']}, outside {since or '...'} (the snapshot) to {today}"
    if last_run and not entry.get("fresh") and not str(entry.get("seen") or "") >= last_run[:10]:
        return (
            f"its criterion changed after this redo trained runs (the latest {last_run}): give its new Revision "
            f"seen={last_run[:10]!r}, so the claim reads exploratory until a fresh rerun"
        )
    return ""


def write_snapshot(notebook: str, specs: Iterable[Claim], root: pathlib.Path | None = None) -> pathlib.Path:
    """Writes (first sitting) or updates (a later one) the snapshot of ``notebook`` to ``specs``;
    raises ValueError when they drift from the snapshot already there (`drift`)."""
    path, current = snapshot_path(notebook, root), json.loads(json.dumps(spec_record(specs)))
    old = read_snapshot(notebook, root)
    if old is not None and (problems := drift(old["claims"], current, old["updated"], latest_run(notebook, root))):
        raise ValueError(
            f"{notebook}: the registered claims drifted since {old['registered']}:\n" + "\n".join(problems)
        )
    now, commit = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), git_commit()
    kept = {k: v for k, v in (old or {}).items() if k not in ("notebook", "updated", "updated_commit", "claims")}
    first = {"registered": now, "commit": commit} if old is None else kept  # a note such as ``source`` stays
    record = {"notebook": notebook, **first, "updated": now, "updated_commit": commit, "claims": current}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    return path


def redo_runs(notebook: str, root: pathlib.Path | None = None) -> list[pathlib.Path]:
    """The run summaries of ``notebook`` trained after its committed results.json (all of them when
    it has none): those of a redo in progress."""
    folder = snapshot_path(notebook, root).parent
    results = folder / "results.json"
    since = json.loads(results.read_text())["date"] if results.is_file() else ""
    return [p for p in sorted((folder / "runs").glob("*.json")) if json.loads(p.read_text())["date"] > since]


def latest_run(notebook: str, root: pathlib.Path | None = None) -> str:
    """The date of the latest run summary of ``notebook``'s redo in progress ("" when none yet)."""
    return max((json.loads(p.read_text())["date"] for p in redo_runs(notebook, root)), default="")

"""Results of a notebook: ``results.json`` with provenance, verdict tables, the docs gallery."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from transformer_jax.ablation import runs
from transformer_jax.ablation.claims import (
    Claim,
    beyond_notes,
    check_claims,
    exploratory,
    from_spec,
    spec_record,
    stored_spec,
)
from transformer_jax.ablation.paths import PENDING_RERUN, START_COMMIT, START_TIME, repo_root, results_dir, smoke
from transformer_jax.ablation.protocol import PROTOCOL
from transformer_jax.ablation.stats import FAILS, HOLDS, UNSURE, Comparison, refuting
from transformer_jax.core import configlib

VERDICTS = (HOLDS, FAILS, UNSURE)
SMOKE_VERDICT = "SMOKE (decides nothing): "
"""Prefixed to every verdict a SMOKE run prints: its sizes are too small for a verdict to mean anything."""


def config_dict(cfg: Any) -> Any:
    """A JSON-ready dict of a config dataclass (as saved in a run's config.json)."""
    return configlib.to_dict(cfg) if dataclasses.is_dataclass(cfg) else cfg


def save_results(
    notebook: str,
    results: dict[str, Any],
    *,
    figures: dict[str, Any] | None = None,
    configs: dict[str, Any] | None = None,
    seed: int = 0,
    seeds: Sequence[int] | None = None,
    comparisons: Mapping[str, Comparison | Sequence[Comparison]] | None = None,
    claims: Sequence[Claim] | None = None,
) -> pathlib.Path:
    """Writes ``results.json`` (the figures' numbers, the exact configs, seed, git commit, mode,
    date) and one PNG per matplotlib figure into `results_dir`; returns the folder. Under the
    protocol, ``seeds`` lists every arm's seeds, and ``comparisons`` (claim -> a `Comparison`, or
    a list of them for a claim of several parts) go to ``results["comparisons"]`` with n, mean,
    interval, margin and verdict; the record is then marked ``"protocol"``. ``claims``, the
    notebook's registered `claims.Claim` specs, are checked against the comparisons
    (`claims.check_claims`) and stored under ``"claims"``."""
    if claims is not None:
        check_claims(claims, comparisons or {})
    out = results_dir(notebook)
    if comparisons is not None:
        results = {**results, "comparisons": {claim: _record(c) for claim, c in comparisons.items()}}
    record: dict[str, Any] = {
        "notebook": notebook,
        "mode": "smoke" if smoke() else "full",
        "git_commit": START_COMMIT,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(START_TIME)),
        "seed": seed,
        "results": results,
        "configs": {k: config_dict(v) for k, v in (configs or {}).items()},
    }
    if seeds is not None:
        record["seeds"] = [int(s) for s in seeds]
    if comparisons is not None:
        record["protocol"] = PROTOCOL
    if claims is not None:
        record["claims"] = spec_record(claims)
    if runs._REUSED:
        record["reused_runs"] = dict(runs._REUSED)
    record["wall_clock"] = wall_clock()
    (out / "results.json").write_text(json.dumps(record, indent=1, default=_jsonable) + "\n")
    for name, fig in (figures or {}).items():
        fig.savefig(out / f"{name}.png", dpi=110, bbox_inches="tight")
    return out


def wall_clock() -> dict[str, Any]:
    """What the results cost: ``runs`` (how many `store.run_arm` runs they use), ``run_training_s``
    (the sum of those runs' training wall-clock, whichever sitting or machine trained them) and
    ``sitting_s`` (this process so far: training now plus everything else the notebook computed)."""
    return {
        "runs": len(runs._WALL_S),
        "run_training_s": round(sum(runs._WALL_S.values()), 1),
        "sitting_s": round(time.time() - START_TIME, 1),
    }


def _wall_clock_text(record: dict[str, Any]) -> str:
    w = record.get("wall_clock")
    if not w:
        return ""
    span = lambda s: f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min"
    runs_part = f"{w['runs']} training runs, {span(w['run_training_s'])} summed over the runs; " if w["runs"] else ""
    return f" Wall-clock: {runs_part}the sitting that wrote these results {span(w['sitting_s'])}."


def _record(parts: Comparison | Sequence[Comparison]) -> dict[str, Any] | list[dict[str, Any]]:
    return parts.as_dict() if isinstance(parts, Comparison) else [p.as_dict() for p in parts]


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, runs.Curves):
        return dataclasses.asdict(value)
    if isinstance(value, Comparison):
        return value.as_dict()
    return str(value)


def verdict(holds: bool | None) -> str:
    """``holds`` / ``does not hold`` / ``inconclusive`` (None)."""
    return VERDICTS[2] if holds is None else VERDICTS[0] if holds else VERDICTS[1]


def verdict_table(rows: Sequence[tuple[str, str, str]]) -> str:
    """A Markdown table of (claim, what we measured, verdict) rows; verdicts from ``VERDICTS``, each
    shown after ``SMOKE_VERDICT`` in SMOKE mode."""
    for claim, _, v in rows:
        if v not in VERDICTS:
            raise ValueError(f"verdict {v!r} for {claim!r}: use one of {', '.join(VERDICTS)}")
    cell = lambda text: str(text).replace("|", "\\|")
    prefix = SMOKE_VERDICT if smoke() else ""
    lines = ["| claim | measured | verdict |", "| --- | --- | --- |"]
    lines += [f"| {cell(c)} | {cell(m)} | {prefix}{v} |" for c, m, v in rows]
    return "\n".join(lines)


GALLERY_START, GALLERY_END = "<!-- gallery:start -->", "<!-- gallery:end -->"
GALLERY_PAGE = "docs/notebooks.md"  # the page, relative to the checkout, whose gallery section is generated
PREDATES = (
    "**This result predates the protocol** (one run per arm, no interval: n=1), so by the protocol "
    "every verdict above is inconclusive until the notebook is re-run with seeds."
)


def gallery_markdown(
    root: pathlib.Path | None = None,
    page_dir: pathlib.Path | None = None,
    pending: Mapping[str, str] | None = None,
) -> str:
    """The gallery of ``GALLERY_PAGE``: for each ``experiments/results/<notebook>/results.json`` of a
    FULL run (sorted by name), a heading, its PNG figures and its verdict table, with commit and date.
    A notebook in ``pending`` (default `paths.PENDING_RERUN`: a registered redo in progress) gets a
    line saying so above its previous run's table, or, with no FULL results yet and its
    ``notebooks/<notebook>.py`` under ``root``, a short section saying why and where its claims are.
    Figures are linked relative to ``page_dir``, the folder of the page (default: that of
    ``GALLERY_PAGE`` under ``root``)."""
    root = repo_root() if root is None else root
    page_dir = (root / GALLERY_PAGE).parent if page_dir is None else page_dir
    pending = PENDING_RERUN if pending is None else pending
    link = lambda png: pathlib.Path(os.path.relpath(png, page_dir)).as_posix()
    sections = {nb: _awaited(nb, why) for nb, why in pending.items() if (root / "notebooks" / f"{nb}.py").is_file()}
    for path in sorted((root / "experiments" / "results").glob("*/results.json")):
        record = json.loads(path.read_text())
        if record.get("mode") != "full":
            continue
        notebook, folder = record["notebook"], path.parent.relative_to(root).as_posix()
        redo = f"{_redo(notebook, pending[notebook])}\n\n" if notebook in pending else ""
        figures = "\n".join(f"![{png.stem}]({link(png)})" for png in sorted(path.parent.glob("*.png")))
        table = _registered(record["results"].get("verdicts", ""), record)
        if record.get("protocol") != PROTOCOL:
            table += f"\n\n{PREDATES}"
        sections[notebook] = (
            f"### {notebook}\n\n{redo}{figures}\n\n{table}\n\n"
            f"`notebooks/{notebook}.py`, FULL mode, commit {str(record.get('git_commit'))[:12]}, "
            f"{record.get('date', '')}; numbers and configs in `{folder}/results.json`.{_wall_clock_text(record)}"
        )
    return "\n\n".join(sections[nb] for nb in sorted(sections)) if sections else "(no FULL results committed yet)"


def _redo(notebook: str, why: str) -> str:
    """The line above a pending notebook's previous results."""
    return (
        f"**A registered redo is in progress**: {why}. The figures and rows below are the previous run's, "
        f"judged by the claims that run was registered under; the redo's claims, registered in "
        f"`notebooks/{notebook}.py`, are judged only when its FULL results are committed."
    )


def _awaited(notebook: str, why: str) -> str:
    """The section of a pending notebook with no FULL results yet."""
    return (
        f"### {notebook}\n\nNo FULL results yet. **A registered redo is in progress**: {why}. Its claims are "
        f"registered in `notebooks/{notebook}.py` (the `ablation.register` cell); its sittings commit run "
        f"summaries under `experiments/results/{notebook}/runs/`, and its verdicts appear here once its "
        "results.json is committed."
    )


EXPLORATORY = (
    "*exploratory*: the row's criterion was changed after the run's numbers were seen (`claims` in "
    "results.json holds the change and why); it decides nothing until rerun on new data."
)
UNDERPOWERED = (
    "*underpowered*: the row ran fewer seeds than its registered power calculation asks at the test the "
    "verdict applies (computed from the stored spec; its `underpowered` in results.json says how many and "
    "the power it had): a 'holds' stands, but an 'inconclusive' may only mean too few seeds."
)
BEYOND_NOTES = (
    "*not a claim of the notes*: the row tests something the notes do not say (its spec names no lines of "
    "them); it stays until its notebook is redone (issue 39) and decides nothing about the notes."
)
CHECKS_HEAD = (
    "Checks: identities and properties fixed by the probe's construction. They could not have come out "
    "the other way, so they test the code, not the notes, and are not verdicts."
)


def _notes_said(record: dict[str, Any]) -> str:
    """What the notes say, per verdict whose stored spec names their lines (`claims.Claim.lines`)."""
    where = lambda a, b: f"line {a}" if a == b else f"lines {a}-{b}"
    said = [
        f"- *{name}*: {spec['says']} (notes `{spec['notes']}`, {where(*spec['lines'])})"
        for name, spec in (record.get("claims") or {}).items()
        if not spec.get("check") and spec.get("lines")
    ]
    return "\n\nWhat the notes say (in our words):\n\n" + "\n".join(said) if said else ""


def _refuted_by(parts: Sequence[Mapping[str, Any]]) -> str:
    """What result of a row's stored comparisons would have made it "does not hold" (any one part
    does, `stats.combine`), in words (`stats.refuting`)."""
    said = [refuting(c["expect"], reference=c["reference"], margin=c["margin"], level=c["level"]) for c in parts]
    if len(said) < 2:
        return said[0] if said else "not recorded"
    return f"{'either' if len(said) == 2 else 'any'} part: " + "; ".join(said)


def _registered(table: str, record: dict[str, Any]) -> str:
    """The verdict ``table`` of a record with registered claims: rows of a check moved to a checks
    table, rows of an exploratory or underpowered claim labelled so (`claims.exploratory`,
    `claims.Claim.underpowered`), and each verdict row's refuting result (`_refuted_by`)."""
    specs = record.get("claims")
    if not specs or not table:
        return table
    lines, parts = table.splitlines(), record["results"].get("comparisons") or {}
    verdicts = ["| claim | measured | refuted by | verdict |", "| --- | --- | --- | --- |"]
    checks, flagged, beyond, short = [], False, False, False
    for line in lines[2:]:
        claim, measured, v = (c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1])
        name = claim.replace("\\|", "|")
        spec = stored_spec(specs, name)
        if spec is None:
            raise ValueError(f"{record['notebook']}: the verdict row {name!r} has no registered claim")
        if spec.get("check"):
            word, why = {HOLDS: "agrees", FAILS: "disagrees"}.get(v, v), spec["why"].replace("|", "\\|")
            checks.append(f"| {claim} | {why} | {measured} | {word} |")
        else:
            outside, late, few = beyond_notes(spec), exploratory(spec, record), bool(from_spec(spec).underpowered())
            marks = (("not a claim of the notes", outside), ("exploratory", late), ("underpowered", few))
            labels = [word for word, on in marks if on]
            beyond, flagged, short = beyond or outside, flagged or late, short or few
            label = f" ({', '.join(labels)})" if labels else ""
            verdicts.append(f"| {claim} | {measured} | {_refuted_by(parts.get(name) or [])} | {v}{label} |")
    notes = ((EXPLORATORY, flagged), (UNDERPOWERED, short), (BEYOND_NOTES, beyond))
    out = "\n".join(verdicts) + "".join(f"\n\n{text}" for text, on in notes if on)
    out += _notes_said(record)
    if checks:
        head = ["| check | why it cannot decide | measured | result |", "| --- | --- | --- | --- |"]
        out += f"\n\n{CHECKS_HEAD}\n\n" + "\n".join(head + checks)
    return out


def update_gallery(page: pathlib.Path | None = None, root: pathlib.Path | None = None) -> bool:
    """Rewrites the part of ``page`` (default ``GALLERY_PAGE``) between the gallery markers from
    `gallery_markdown` of the results under ``root`` (default: the checkout); returns whether it
    changed."""
    root = repo_root() if root is None else root
    page = root / GALLERY_PAGE if page is None else page
    text = page.read_text()
    if GALLERY_START not in text or GALLERY_END not in text:
        raise ValueError(f"{page} has no {GALLERY_START} ... {GALLERY_END} section to fill")
    head, rest = text.split(GALLERY_START, 1)
    _, tail = rest.split(GALLERY_END, 1)
    new = f"{head}{GALLERY_START}\n{gallery_markdown(root, page.parent)}\n{GALLERY_END}{tail}"
    if new != text:
        page.write_text(new)
    return new != text

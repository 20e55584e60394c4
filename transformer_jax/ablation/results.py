"""Results of a notebook: ``results.json`` with provenance, verdict tables, the README gallery."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from collections.abc import Sequence
from typing import Any

from transformer_jax.ablation import runs
from transformer_jax.ablation.paths import START_COMMIT, repo_root, results_dir, smoke
from transformer_jax.core import configlib

VERDICTS = ("holds", "does not hold", "inconclusive")


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
) -> pathlib.Path:
    """Writes ``results.json`` (the figures' numbers, the exact configs, seed, git commit, mode,
    date) and one PNG per matplotlib figure into `results_dir`; returns the folder."""
    out = results_dir(notebook)
    record = {
        "notebook": notebook,
        "mode": "smoke" if smoke() else "full",
        "git_commit": START_COMMIT,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "seed": seed,
        "results": results,
        "configs": {k: config_dict(v) for k, v in (configs or {}).items()},
    }
    if runs._REUSED:
        record["reused_runs"] = dict(runs._REUSED)
    (out / "results.json").write_text(json.dumps(record, indent=1, default=_jsonable) + "\n")
    for name, fig in (figures or {}).items():
        fig.savefig(out / f"{name}.png", dpi=110, bbox_inches="tight")
    return out


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, runs.Curves):
        return dataclasses.asdict(value)
    return str(value)


def verdict(holds: bool | None) -> str:
    """``holds`` / ``does not hold`` / ``inconclusive`` (None)."""
    return VERDICTS[2] if holds is None else VERDICTS[0] if holds else VERDICTS[1]


def verdict_table(rows: Sequence[tuple[str, str, str]]) -> str:
    """A Markdown table of (claim, what we measured, verdict) rows; verdicts from ``VERDICTS``."""
    for claim, _, v in rows:
        if v not in VERDICTS:
            raise ValueError(f"verdict {v!r} for {claim!r}: use one of {', '.join(VERDICTS)}")
    cell = lambda text: str(text).replace("|", "\\|")
    lines = ["| claim | measured | verdict |", "| --- | --- | --- |"]
    lines += [f"| {cell(c)} | {cell(m)} | {v} |" for c, m, v in rows]
    return "\n".join(lines)


GALLERY_START, GALLERY_END = "<!-- gallery:start -->", "<!-- gallery:end -->"


def gallery_markdown(root: pathlib.Path | None = None) -> str:
    """The README gallery: for each ``experiments/results/<notebook>/results.json`` of a FULL run
    (sorted by name), a heading, its PNG figures and its verdict table, with commit and date."""
    root = repo_root() if root is None else root
    parts = []
    for path in sorted((root / "experiments" / "results").glob("*/results.json")):
        record = json.loads(path.read_text())
        if record.get("mode") != "full":
            continue
        folder = path.parent.relative_to(root).as_posix()
        figures = "\n".join(f"![{png.stem}]({folder}/{png.name})" for png in sorted(path.parent.glob("*.png")))
        parts.append(
            f"### {record['notebook']}\n\n{figures}\n\n{record['results'].get('verdicts', '')}\n\n"
            f"`notebooks/{record['notebook']}.py`, FULL mode, commit {str(record.get('git_commit'))[:12]}, "
            f"{record.get('date', '')}; numbers and configs in `{folder}/results.json`."
        )
    return "\n\n".join(parts) if parts else "(no FULL results committed yet)"


def update_readme_gallery(readme: pathlib.Path | None = None) -> bool:
    """Rewrites the part of README.md between the gallery markers from `gallery_markdown`;
    returns whether it changed."""
    readme = repo_root() / "README.md" if readme is None else readme
    text = readme.read_text()
    if GALLERY_START not in text or GALLERY_END not in text:
        raise ValueError(f"{readme} has no {GALLERY_START} ... {GALLERY_END} section to fill")
    head, rest = text.split(GALLERY_START, 1)
    _, tail = rest.split(GALLERY_END, 1)
    new = f"{head}{GALLERY_START}\n{gallery_markdown(readme.parent)}\n{GALLERY_END}{tail}"
    if new != text:
        readme.write_text(new)
    return new != text

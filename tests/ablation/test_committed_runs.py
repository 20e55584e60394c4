"""The committed run summaries (``experiments/results/<notebook>/runs/*.json``) are found again: the
config each one stores hashes, under today's `store.hashed_config`, to the key it is stored under.
Otherwise a notebook's FULL sitting in reuse mode trains every run again (hours each), silently.

Runs on a dev split (`tuning.dev_split`) are left out: their data file is written by the notebook
when it runs, so its digest cannot be taken here."""

import json
import pathlib

import pytest

from transformer_jax.ablation import store
from transformer_jax.train.experiment import config_from_dict

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "experiments" / "results"
NOTEBOOKS = sorted({p.parent.parent.name for p in RESULTS.glob("*/runs/*.json") if '"config_hash"' in p.read_text()})


def _summaries(notebook: str) -> list[dict]:
    found = [json.loads(p.read_text()) for p in sorted((RESULTS / notebook / "runs").glob("*.json"))]
    readable = lambda s: all(pathlib.Path(p).is_file() for p in (s["config"]["data"].get("path") or "").split(",") if p)
    return [s for s in found if "config_hash" in s and "config" in s and readable(s)]


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_committed_runs_hash_to_the_key_they_are_stored_under(notebook):
    summaries = _summaries(notebook)
    stale = [
        f"{s['arm']} s{s['seed']}"
        for s in summaries
        if store.config_hash(config_from_dict(s["config"])) != s["config_hash"]
    ]
    assert summaries and not stale, f"{notebook}: reuse mode would train {len(stale)} runs again: {stale[:5]}"

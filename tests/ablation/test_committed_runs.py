"""The committed run summaries (``experiments/results/<notebook>/runs/*.json``) are found again: the
config each one stores hashes, under today's `store.hashed_config`, to the key it is stored under.
Otherwise a notebook's FULL sitting in reuse mode trains every run again (hours each), silently.

Runs whose text file is written by the notebook when it runs (a dev split, `tuning.dev_split`; a
corpus cut from the plays, `lm_history`) are left out when that file is not on disk: its digest, which
the key hashes, cannot be taken here."""

import json
import pathlib

import pytest

from transformer_jax.ablation import store
from transformer_jax.train.experiment import config_from_dict

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "experiments" / "results"
NOTEBOOKS = sorted({p.parent.parent.name for p in RESULTS.glob("*/runs/*.json") if '"config_hash"' in p.read_text()})


def _data_files(config: dict) -> list[str]:
    """The local text files a run's config names (``data.dataset.path``/``val_path``, or the flat
    ``data.path``/``val_path`` of runs saved before the nested layout)."""
    data = config.get("data", {})
    dataset = data["dataset"] if isinstance(data.get("dataset"), dict) else data
    return [p for key in ("path", "val_path") for p in (dataset.get(key) or "").split(",") if p]


def _summaries(notebook: str) -> list[dict]:
    found = [json.loads(p.read_text()) for p in sorted((RESULTS / notebook / "runs").glob("*.json"))]
    readable = lambda s: all(pathlib.Path(p).is_file() for p in _data_files(s["config"]))
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

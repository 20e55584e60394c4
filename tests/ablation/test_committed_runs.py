"""The committed run summaries (``experiments/results/<notebook>/runs/*.json``) are found again: the
config each one stores hashes, under today's `store.hashed_config`, to the key it is stored under.
Otherwise a notebook's FULL sitting in reuse mode trains every run again (hours each), silently.

A run's key hashes the contents of its local text files. Those a notebook writes before it trains (a
dev split of tiny Shakespeare, `tuning.dev_split`; language_model_history's data-size corpus of the
plays and its dev splits, `lm_history.data_size_corpus`) are rebuilt here the way the notebooks build
them, and a summary naming one that is not on disk is read against the rebuilt file of the same name."""

import dataclasses
import json
import pathlib

import pytest

from transformer_jax.ablation import lm_history, store, tuning
from transformer_jax.ablation.paths import REUSE_ENV, SMOKE_ENV
from transformer_jax.ablation.runs import shakespeare_config
from transformer_jax.train.experiment import config_from_dict

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "experiments" / "results"
NOTEBOOKS = sorted({p.parent.parent.name for p in RESULTS.glob("*/runs/*.json") if '"config_hash"' in p.read_text()})
SIZES = (0.1, 0.3, 1.0)  # language_model_history's FULL data sizes (its SIZES)
RUNS = "transformer_jax_runs"


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory) -> pathlib.Path:
    """The notebooks' written text files, rebuilt in FULL mode under a fresh runs folder."""
    patch = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("runs")
    patch.setenv("TRANSFORMER_JAX_RUNS", str(root))
    for flag in (SMOKE_ENV, REUSE_ENV):
        patch.delenv(flag, raising=False)
    try:
        base = shakespeare_config("rebuilt", steps=1)
        tuning.dev_split(base)
        for corpus in lm_history.data_size_corpus(SIZES).values():
            tuning.dev_split(dataclasses.replace(base, data=dataclasses.replace(base.data, dataset=corpus)))
    finally:
        patch.undo()
    return root / RUNS


def _dataset(config: dict) -> dict:
    """The dataset record of a stored config: ``data.dataset``, or ``data`` itself in the flat layout
    of runs saved before the nested one."""
    data = config.get("data", {})
    return data["dataset"] if isinstance(data.get("dataset"), dict) else data


def _relocated(config: dict, rebuilt: pathlib.Path) -> tuple[dict, list[str]]:
    """``config`` with each text file that is not on disk replaced by its rebuilt namesake (the part
    of its path after ``transformer_jax_runs/``); and the files found in neither place."""
    config, missing = json.loads(json.dumps(config)), []
    dataset = _dataset(config)
    for key in ("path", "val_path"):
        files = [p for p in (dataset.get(key) or "").split(",") if p]
        for i, p in enumerate(files):
            again = rebuilt / p.split(f"{RUNS}/", 1)[-1]
            if pathlib.Path(p).is_file():
                continue
            if RUNS in p and again.is_file():
                files[i] = str(again)
            else:
                missing.append(p)
        if files:
            dataset[key] = ",".join(files)
    return config, missing


def test_the_rebuilt_files_are_the_ones_the_committed_runs_name(rebuilt):
    """Every text file a committed summary names is on disk or rebuilt: none is left unchecked."""
    named = {
        p: s.parent.parent.name
        for s in RESULTS.glob("*/runs/*.json")
        for p in _relocated(json.loads(s.read_text()).get("config", {}), rebuilt)[1]
    }
    assert not named, f"text files neither on disk nor rebuilt here (by notebook): {named}"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_committed_runs_hash_to_the_key_they_are_stored_under(notebook, rebuilt):
    summaries = [json.loads(p.read_text()) for p in sorted((RESULTS / notebook / "runs").glob("*.json"))]
    summaries = [s for s in summaries if "config_hash" in s and "config" in s]
    stale = [
        f"{s['arm']} s{s['seed']}"
        for s in summaries
        if store.config_hash(config_from_dict(_relocated(s["config"], rebuilt)[0])) != s["config_hash"]
    ]
    assert summaries and not stale, f"{notebook}: reuse mode would train {len(stale)} runs again: {stale[:5]}"

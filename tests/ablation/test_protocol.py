"""The protocol's bookkeeping (``transformer_jax.ablation.protocol``): seeds by mode, per-seed
records, verdict-table rows with their interval, the learning-rate choice, results.json under the
protocol and the note on committed results that predate it."""

import json
import math

import numpy as np
import pytest

from transformer_jax import ablation
from transformer_jax.ablation import paths

HOLDS, FAILS, UNSURE = ablation.VERDICTS


def test_seeds_by_mode(monkeypatch):
    monkeypatch.setenv(ablation.SMOKE_ENV, "1")
    assert ablation.seeds() == (0, 1) and ablation.seeds(full=5, smoke=3) == (0, 1, 2)
    monkeypatch.setenv(ablation.SMOKE_ENV, "0")
    assert ablation.seeds() == (0, 1, 2) and ablation.seeds(full=5) == (0, 1, 2, 3, 4)
    assert ablation.seeds(full=4, first=3) == (3, 4, 5, 6)  # fresh seeds, past the ones seen
    with pytest.raises(ValueError, match=">= 3 seeds"):
        ablation.seeds(full=2)
    with pytest.raises(ValueError, match=">= 2"):
        ablation.seeds(smoke=1)
    with pytest.raises(ValueError, match="seed >= 0"):
        ablation.seeds(first=-1)
    monkeypatch.setenv(ablation.SMOKE_ENV, "1")
    assert ablation.seeds(first=3) == (3, 4)


def test_with_seed_sets_the_init_and_the_data_order(monkeypatch):
    monkeypatch.setenv(ablation.SMOKE_ENV, "1")
    cfg = ablation.shakespeare_config("s", steps=3)
    seeded = ablation.with_seed(cfg, 7)
    assert (seeded.train.seed, seeded.data.seed) == (7, 7) and (cfg.train.seed, cfg.data.seed) == (0, 0)
    assert seeded.model == cfg.model and seeded.train.optim == cfg.train.optim


def test_arm_record_keeps_every_seed():
    rec = ablation.arm_record({0: {"loss": 1.5, "note": "a", "ok": True}, 1: {"loss": 1.7, "note": "b", "ok": False}})
    assert rec["n"] == 2 and [r["seed"] for r in rec["seeds"]] == [0, 1] and rec["seeds"][1]["note"] == "b"
    assert rec["mean"] == {"loss": pytest.approx(1.6)}  # strings and booleans are not averaged
    assert ablation.seed_values({"seeds": rec["seeds"][::-1]}, "loss") == [1.5, 1.7]
    assert ablation.arm_record({}) == {"n": 0, "seeds": [], "mean": {}}


def test_mean_text_shows_the_interval_and_n():
    values = [1.0, 1.2, 1.4]
    half = 4.302653 * np.std(values, ddof=1) / math.sqrt(3)
    assert ablation.mean_text(values) == f"1.200 +- {half:.3f} (n=3)"
    assert ablation.mean_text([2.0]) == "2.000 (n=1)"


def test_row_shows_each_part_and_combines_the_verdicts(monkeypatch):
    monkeypatch.setenv(ablation.SMOKE_ENV, "0")  # SMOKE mode prefixes every verdict
    up = ablation.paired([1.3, 1.4, 1.35], [1.0, 1.1, 1.05], expect="greater")
    flat = ablation.paired([1.0, 1.1, 1.05], [1.0, 1.1, 1.06], expect="equal", margin=0.05)
    unsure = ablation.paired([1.3, 0.9, 1.35], [1.0, 1.1, 1.05], expect="greater")
    claim, measured, verdict = ablation.row("claim", "a - b", up, flat)
    assert claim == "claim" and verdict == HOLDS == up.verdict == flat.verdict
    assert measured == f"a - b: {up.text()}; {flat.text()}" and "n=3" in measured
    assert ablation.row("c", "", up, unsure)[1:] == (f"{up.text()}; {unsure.text()}", UNSURE)
    assert ablation.row("c", "", ablation.paired([0.1, 0.2], [0.5, 0.6], expect="greater"), up)[2] == FAILS
    with pytest.raises(ValueError, match="at least one comparison"):
        ablation.row("c", "m")
    table = ablation.verdict_table([ablation.row("claim", "a - b", up)])
    assert table.splitlines()[2].endswith("| holds |") and "[+" in table


def test_lr_grid_and_pick_lr():
    assert ablation.lr_grid(1e-3) == pytest.approx([1e-3 / 3, 1e-3, 3e-3])
    assert ablation.lr_grid(1e-2, n=4, factor=10) == pytest.approx([10**-3.5, 10**-2.5, 10**-1.5, 10**-0.5])
    choice = ablation.pick_lr({3e-3: [1.52, 1.50], 1e-3: [1.49, 1.47], 3e-4: [1.60, 1.62]})
    assert choice == {
        "grid": [3e-4, 1e-3, 3e-3],
        "dev_loss": pytest.approx([1.61, 1.48, 1.51]),
        "lr": 1e-3,
        "at_edge": False,
    }
    edge = ablation.pick_lr({1e-3: 1.4, 3e-3: math.inf, 3e-4: 1.5})  # the largest diverged
    assert edge["lr"] == 1e-3 and edge["dev_loss"][2] == math.inf and not edge["at_edge"]
    assert ablation.pick_lr({1e-3: 1.4, 3e-3: 1.3})["at_edge"]
    with pytest.raises(ValueError, match="diverged"):
        ablation.pick_lr({1e-3: math.nan, 3e-3: [1.0, math.inf]})
    with pytest.raises(ValueError, match="at least 2"):
        ablation.pick_lr({1e-3: 1.0})
    with pytest.raises(ValueError, match="factor"):
        ablation.lr_grid(1e-3, factor=1.0)


def test_save_results_under_the_protocol(monkeypatch):
    monkeypatch.setenv(ablation.SMOKE_ENV, "1")
    gap = ablation.paired([1.3, 1.4], [1.0, 1.1], expect="greater")
    flat = ablation.paired([1.0, 1.1], [1.0, 1.1], expect="equal", margin=0.1)
    arms = {"a": ablation.arm_record({0: {"loss": 1.3}, 1: {"loss": 1.4}})}
    results = {"arms": arms, "verdicts": "table"}
    out = ablation.save_results("unit_protocol", results, seeds=(0, 1), comparisons={"one": gap, "two": [gap, flat]})
    record = json.loads((out / "results.json").read_text())
    assert record["protocol"] == ablation.PROTOCOL and record["seeds"] == [0, 1] and "comparisons" not in results
    saved = record["results"]["comparisons"]
    assert saved["one"] == json.loads(json.dumps(gap.as_dict())) and saved["one"]["n"] == 2
    assert [p["expect"] for p in saved["two"]] == ["greater", "equal"] and saved["two"][1]["margin"] == 0.1
    assert record["results"]["arms"]["a"]["seeds"] == [{"seed": 0, "loss": 1.3}, {"seed": 1, "loss": 1.4}]
    plain = json.loads((ablation.save_results("unit_plain", {"x": 1}) / "results.json").read_text())
    assert "protocol" not in plain and "seeds" not in plain


def _commit(root, notebook, **record):
    folder = root / "experiments" / "results" / notebook
    folder.mkdir(parents=True)
    base = {"notebook": notebook, "mode": "full", "git_commit": "0123456789abcdef", "date": "d"}
    (folder / "results.json").write_text(json.dumps({**base, "results": {"verdicts": "| t |"}, **record}))


def test_committed_note_and_gallery_for_results_that_predate_the_protocol(monkeypatch, tmp_path):
    monkeypatch.setattr(paths, "repo_root", lambda: tmp_path)
    monkeypatch.delenv(paths.RESULTS_ENV, raising=False)
    (tmp_path / "experiments" / "results").mkdir(parents=True)
    assert ablation.committed_note("old") == "No FULL result of old is committed yet."
    _commit(tmp_path, "old")
    _commit(tmp_path, "new", protocol=ablation.PROTOCOL)
    _commit(tmp_path, "tiny", mode="smoke")
    old = ablation.committed_note("old")
    assert "predates the protocol" in old and "n=1, no interval" in old and "inconclusive by the protocol" in old
    assert "commit 0123456789ab" in old
    assert "follows the protocol" in ablation.committed_note("new")
    assert "not a FULL run" in ablation.committed_note("tiny")
    gallery = ablation.gallery_markdown(tmp_path)
    old_part, new_part = gallery.split("### old")[1], gallery.split("### new")[1].split("### old")[0]
    assert ablation.PREDATES in old_part and ablation.PREDATES not in new_part

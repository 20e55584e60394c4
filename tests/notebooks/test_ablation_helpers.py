"""``transformer_jax.ablation`` (the notebooks' helpers) and the notebooks' pairing: every
``notebooks/*.py`` has an ``.ipynb`` twin with the same cells and no stored outputs."""

import json
import pathlib

import jupytext
import matplotlib
import pytest

from transformer_jax import ablation
from transformer_jax.ablation import runs as ablation_runs
from transformer_jax.train.metrics import MetricsWriter

matplotlib.use("Agg")
import matplotlib.pyplot as plt

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[2] / "notebooks"


def test_pick_follows_the_smoke_variable(monkeypatch):
    monkeypatch.setenv(ablation.SMOKE_ENV, "1")
    assert ablation.smoke() and ablation.pick(smoke=1, full=2) == 1
    monkeypatch.setenv(ablation.SMOKE_ENV, "0")
    assert not ablation.smoke() and ablation.pick(smoke=1, full=2) == 2


def test_verdict_table_escapes_pipes_and_rejects_unknown_verdicts(monkeypatch):
    monkeypatch.setenv(ablation.SMOKE_ENV, "0")  # SMOKE mode prefixes every verdict
    table = ablation.verdict_table(
        [("a claim", "|x| = 3", ablation.verdict(True)), ("another", "n/a", ablation.verdict(None))]
    )
    lines = table.splitlines()
    assert lines[2] == "| a claim | \\|x\\| = 3 | holds |" and lines[3].endswith("| inconclusive |")
    assert all(line.count("|") - line.count("\\|") == 4 for line in lines)
    with pytest.raises(ValueError, match="holds, does not hold, inconclusive"):
        ablation.verdict_table([("c", "m", "maybe")])


def test_save_results_in_smoke_mode_goes_to_a_temporary_folder(monkeypatch, tmp_path):
    monkeypatch.setenv(ablation.SMOKE_ENV, "1")
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    out = ablation.save_results("unit_test_nb", {"x": 1.5}, figures={"curve": fig}, configs={"c": {"a": 1}}, seed=3)
    assert ablation.repo_root() not in out.parents
    record = json.loads((out / "results.json").read_text())
    assert record["mode"] == "smoke" and record["seed"] == 3 and record["results"] == {"x": 1.5}
    assert record["configs"] == {"c": {"a": 1}} and "git_commit" in record
    assert (out / "curve.png").read_bytes()[:4] == b"\x89PNG"


def test_read_curves_from_a_metrics_file(tmp_path):
    writer = MetricsWriter(str(tmp_path))
    writer.write(10, {"train/loss": 2.0})
    writer.write(20, {"train/loss": 1.5, "val/loss": 1.7})
    writer.close()
    c = ablation.read_curves(str(tmp_path), "run")
    assert (c.steps, c.train_loss, c.val_steps, c.val_loss) == ([10, 20], [2.0, 1.5], [20], [1.7])
    assert c.final_val == 1.7 and not c.diverged


def test_reuse_reads_back_a_finished_run_of_the_same_config_only(monkeypatch, tmp_path):
    monkeypatch.setenv(ablation.SMOKE_ENV, "1")
    monkeypatch.setenv("TRANSFORMER_JAX_RUNS", str(tmp_path))
    monkeypatch.setenv(ablation.REUSE_ENV, "1")
    monkeypatch.setattr(ablation_runs, "_REUSED", {})
    cfg = ablation.shakespeare_config("reuse", steps=4, batch_size=8)
    first = ablation.train_curves(cfg, "run", "unit_test_nb")
    metrics = pathlib.Path(first.workdir) / "metrics.jsonl"
    stamp = metrics.stat().st_mtime_ns
    assert "reused_from" not in first.summary and first.steps[-1] == 4

    again = ablation.train_curves(cfg, "run", "unit_test_nb")
    assert metrics.stat().st_mtime_ns == stamp, "a reused run must not be retrained"
    assert (again.steps, again.train_loss, again.val_loss) == (first.steps, first.train_loss, first.val_loss)
    assert "run" in ablation_runs._REUSED and again.summary["params"] == first.summary["params"]

    (pathlib.Path(first.workdir) / ablation.SUMMARY_FILE).unlink()  # a run trained before summaries were kept
    assert "reused_from" in ablation.train_curves(cfg, "run", "unit_test_nb").summary
    assert metrics.stat().st_mtime_ns == stamp

    longer = ablation.train_curves(ablation.shakespeare_config("reuse", steps=6, batch_size=8), "run", "unit_test_nb")
    assert longer.steps[-1] == 6 and "reused_from" not in longer.summary

    monkeypatch.setenv(ablation.REUSE_ENV, "0")
    fresh = ablation.train_curves(ablation.shakespeare_config("reuse", steps=6, batch_size=8), "run", "unit_test_nb")
    assert metrics.stat().st_mtime_ns != stamp and "reused_from" not in fresh.summary


SOURCES = [p for p in sorted(NOTEBOOKS.glob("*.py")) if p.name != "conftest.py"]


def test_there_are_notebooks():
    assert len(SOURCES) >= 3


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_notebook_pairs_match_and_hold_no_outputs(source):
    paired = source.with_suffix(".ipynb")
    assert paired.is_file(), f"{paired.name} missing: run `jupytext --to ipynb {source}`"
    cells = lambda nb: [(c.cell_type, c.source.strip()) for c in nb.cells]
    ipynb = jupytext.read(paired)
    assert cells(jupytext.read(source)) == cells(ipynb), f"{paired.name} is out of date: run `jupytext --sync {source}`"
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in ipynb.cells if c.cell_type == "code")


def test_docs_gallery_is_generated_from_the_committed_results():
    page = ablation.repo_root() / ablation.GALLERY_PAGE
    text = page.read_text()
    section = text.split(ablation.GALLERY_START, 1)[1].split(ablation.GALLERY_END, 1)[0]
    assert section.strip() == ablation.gallery_markdown().strip(), (
        f"the gallery of {ablation.GALLERY_PAGE} is stale: run `python -m transformer_jax.ablation`"
    )


def test_gallery_lists_full_results_with_figures_and_verdicts(tmp_path):
    folder = tmp_path / "experiments" / "results" / "demo"
    folder.mkdir(parents=True)
    (folder / "loss.png").write_bytes(b"png")
    record = {
        "notebook": "demo",
        "mode": "full",
        "git_commit": "abc",
        "date": "today",
        "results": {"verdicts": "| claim | measured | verdict |"},
    }
    (folder / "results.json").write_text(json.dumps(record))
    smoke = tmp_path / "experiments" / "results" / "smoky"
    smoke.mkdir()
    (smoke / "results.json").write_text(json.dumps({**record, "notebook": "smoky", "mode": "smoke"}))
    md = ablation.gallery_markdown(tmp_path)
    assert "### demo" in md and "experiments/results/demo/loss.png" in md and "| claim |" in md
    assert "smoky" not in md
    page = tmp_path / ablation.GALLERY_PAGE
    page.parent.mkdir()
    page.write_text(f"top\n{ablation.GALLERY_START}\nold\n{ablation.GALLERY_END}\nbottom\n")
    assert ablation.update_gallery(root=tmp_path) and not ablation.update_gallery(root=tmp_path)
    assert "### demo" in page.read_text() and page.read_text().endswith("bottom\n")
    # figures are linked from the page's folder (docs/), so they show on the site and the repository
    assert "](../experiments/results/demo/loss.png)" in page.read_text()

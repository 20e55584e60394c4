"""The gallery says when a notebook's registered redo is in progress: a line above the previous
run's table, or a section of its own while it has no FULL results."""

import json

from transformer_jax import ablation


def _tree(root, with_results, without_results):
    (root / "notebooks").mkdir()
    for notebook in (*with_results, *without_results):
        (root / "notebooks" / f"{notebook}.py").write_text("")
    for notebook in with_results:
        folder = root / "experiments" / "results" / notebook
        folder.mkdir(parents=True)
        record = {"notebook": notebook, "mode": "full", "git_commit": "0123456789abcdef", "date": "d"}
        table = ablation.verdict_table([(f"{notebook} claim", "1 vs 2", ablation.VERDICTS[0])])
        (folder / "results.json").write_text(json.dumps({**record, "results": {"verdicts": table}}))


def test_a_pending_notebook_with_results_says_its_rows_are_the_previous_runs(tmp_path):
    _tree(tmp_path, ("a_done", "b_redo"), ())
    pending = {"b_redo": "new claims registered, run over 3 sittings"}
    gallery = ablation.gallery_markdown(tmp_path, pending=pending)
    done, redo = gallery.split("### b_redo\n")
    assert "redo" not in done and "| a_done claim |" in done
    line, table = redo.split("| claim | measured | verdict |")
    assert "A registered redo is in progress**: new claims registered, run over 3 sittings." in line
    assert "previous run's" in line and "`notebooks/b_redo.py`" in line and "| b_redo claim |" in table
    assert "redo is in progress" not in ablation.gallery_markdown(tmp_path, pending={})


def test_a_pending_notebook_without_results_gets_a_section_in_name_order(tmp_path):
    _tree(tmp_path, ("a_done", "c_done"), ("b_new",))
    pending = {"b_new": "registered anew, no results.json until then", "elsewhere": "not a notebook of this tree"}
    gallery = ablation.gallery_markdown(tmp_path, pending=pending)
    headings = [line for line in gallery.splitlines() if line.startswith("### ")]
    assert headings == ["### a_done", "### b_new", "### c_done"]
    section = gallery.split("### b_new\n")[1].split("\n### ")[0]
    assert "No FULL results yet" in section and "registered anew, no results.json until then" in section
    assert "`notebooks/b_new.py`" in section and "|" not in section
    assert "elsewhere" not in gallery
    (tmp_path / "notebooks" / "c_done.py").unlink()
    assert "### c_done" in ablation.gallery_markdown(tmp_path, pending=pending)  # results show without the source


def test_an_empty_tree_with_a_pending_notebook_is_not_empty(tmp_path):
    _tree(tmp_path, (), ("only",))
    assert ablation.gallery_markdown(tmp_path, pending={}) == "(no FULL results committed yet)"
    assert ablation.gallery_markdown(tmp_path, pending={"only": "why"}).startswith("### only\n\nNo FULL results yet.")


def test_a_pending_notebooks_first_cell_says_its_committed_result_is_the_previous_runs(tmp_path, monkeypatch):
    monkeypatch.setenv(ablation.paths.RESULTS_ENV, str(tmp_path / "experiments" / "results"))
    _tree(tmp_path, ("b_redo",), ())
    assert "previous run" not in ablation.committed_note("b_redo")
    monkeypatch.setitem(ablation.paths.PENDING_RERUN, "b_redo", "run over 3 sittings")
    note = ablation.committed_note("b_redo")
    assert note.endswith(" It is the previous run's: a registered redo is in progress (run over 3 sittings).")
    assert ablation.committed_note("nothing_yet") == "No FULL result of nothing_yet is committed yet."

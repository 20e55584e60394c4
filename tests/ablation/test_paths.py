"""Where FULL mode finds the committed results: a checkout (the install's or the working
directory's), ``TRANSFORMER_JAX_RESULTS``, or else a message saying where to get them and what a
rerun costs."""

import json
import pathlib
import tomllib

import pytest

from transformer_jax import ablation
from transformer_jax.ablation import paths

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def outside(monkeypatch, tmp_path):
    """FULL mode in a folder that is no checkout, with a package installed from no checkout."""
    monkeypatch.setenv(paths.SMOKE_ENV, "0")
    monkeypatch.delenv(paths.RESULTS_ENV, raising=False)
    monkeypatch.setattr(paths, "__file__", str(tmp_path / "site-packages" / "transformer_jax" / "ablation" / "x.py"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _checkout(root: pathlib.Path) -> pathlib.Path:
    (root / "experiments" / "results").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "transformer-jax"\n')
    return root


def test_full_mode_outside_a_checkout_says_where_the_summaries_are_and_what_a_rerun_costs(outside):
    with pytest.raises(paths.ResultsNotFoundError) as info:
        ablation.committed_note("norm_placement")
    message = str(info.value)
    url = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    assert f"git clone {url}" in message
    assert f"about {paths.FULL_HOURS['norm_placement']} h of training" in message and paths.RESULTS_ENV in message
    with pytest.raises(paths.ResultsNotFoundError):
        paths.results_dir("norm_placement")
    assert not (outside / "experiments").exists()


def test_another_projects_checkout_is_not_taken_for_ours(outside, monkeypatch):
    other = _checkout(outside / "other")
    (other / "pyproject.toml").write_text('[project]\nname = "transformer-jax-fork-of-something"\n')
    (other / "src").mkdir()
    monkeypatch.chdir(other / "src")
    assert paths.results_root() is None


def test_the_checkout_holding_the_working_directory_is_found(outside, monkeypatch):
    checkout = _checkout(outside / "clone")
    (checkout / "notebooks").mkdir()
    monkeypatch.chdir(checkout / "notebooks")
    assert paths.repo_root() == checkout
    assert paths.results_dir("causal_mask") == checkout / "experiments" / "results" / "causal_mask"


def test_the_results_variable_wins(outside, monkeypatch):
    _checkout(outside)
    monkeypatch.setenv(paths.RESULTS_ENV, str(outside / "mine"))
    with pytest.warns(UserWarning, match=f"{paths.RESULTS_ENV}=.*mine does not exist: FULL mode .* trains every run"):
        assert paths.results_dir("decoding") == outside / "mine" / "decoding"
    assert ablation.committed_note("decoding") == "No FULL result of decoding is committed yet."


def test_smoke_mode_needs_no_checkout(outside, monkeypatch):
    monkeypatch.setenv(paths.SMOKE_ENV, "1")
    assert "not a checkout" in ablation.committed_note("causal_mask")
    assert paths.results_dir("causal_mask").is_dir()


def test_the_rerun_hours_are_those_of_the_committed_results():
    committed = {}
    for path in sorted((ROOT / "experiments" / "results").glob("*/results.json")):
        clock = json.loads(path.read_text())["wall_clock"]
        committed[path.parent.name] = round(max(clock["run_training_s"], clock["sitting_s"]) / 3600, 1)
    assert committed == paths.FULL_HOURS


def test_the_repository_address_is_read_from_the_installed_metadata():
    url = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    assert paths.repository_url() == url

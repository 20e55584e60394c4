"""One parser for every on/off environment switch, one table of every variable the package reads."""

import pathlib
import re

import pytest

from transformer_jax.cli import main
from transformer_jax.core import envflags

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("raw", ["1", "true", "TRUE", "yes", "On", " 1 "])
def test_on_values(raw):
    assert envflags.switch("TRANSFORMER_JAX_SMOKE", {"TRANSFORMER_JAX_SMOKE": raw}) is True


@pytest.mark.parametrize("raw", ["0", "false", "False", "no", "OFF"])
def test_off_values_turn_off_a_switch_that_is_on_by_default(raw):
    assert envflags.switch("TRANSFORMER_JAX_MALLOC", {"TRANSFORMER_JAX_MALLOC": raw}) is False


def test_unset_or_empty_is_the_default():
    assert envflags.switch("TRANSFORMER_JAX_MALLOC", {}) is True
    assert envflags.switch("TRANSFORMER_JAX_DEBUG", {"TRANSFORMER_JAX_DEBUG": ""}) is False
    assert envflags.switch("TRANSFORMER_JAX_DONATE", {}) is None


def test_a_value_neither_on_nor_off_is_refused_by_name():
    with pytest.raises(envflags.SwitchError, match=r"TRANSFORMER_JAX_RETRAIN='maybe' is neither on nor off"):
        envflags.switch("TRANSFORMER_JAX_RETRAIN", {"TRANSFORMER_JAX_RETRAIN": "maybe"})


def test_unknown_names_and_kinds_are_refused():
    with pytest.raises(KeyError, match="TRANSFORMER_JAX_NOPE"):
        envflags.switch("TRANSFORMER_JAX_NOPE", {})
    with pytest.raises(KeyError, match="not a switch"):
        envflags.switch("TRANSFORMER_JAX_RUNS", {})


def _broken_config(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("x = = 1\n")
    return ["train", "--config", str(bad), "--workdir", str(tmp_path / "w")]


def test_debug_0_means_off_and_1_keeps_the_traceback(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRANSFORMER_JAX_DEBUG", "0")
    assert main(_broken_config(tmp_path)) == 2
    assert "SyntaxError" in capsys.readouterr().err
    monkeypatch.setenv("TRANSFORMER_JAX_DEBUG", "1")
    with pytest.raises(Exception, match="SyntaxError"):
        main(_broken_config(tmp_path))


def test_the_command_line_refuses_a_bad_switch_before_doing_anything(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRANSFORMER_JAX_SMOKE", "2")
    assert main(_broken_config(tmp_path)) == 2
    assert capsys.readouterr().err.strip() == (
        "error: TRANSFORMER_JAX_SMOKE='2' is neither on nor off: set it to 1 (on) or 0 (off), or unset it"
    )
    assert not (tmp_path / "w").exists()


def test_every_variable_the_package_reads_is_in_the_table_and_its_docs_page():
    used = set()
    for path in (ROOT / "transformer_jax").rglob("*.py"):
        used |= set(re.findall(r"TRANSFORMER_JAX_[A-Z_]*[A-Z]", path.read_text()))
    assert used == set(envflags.VARIABLES)
    assert envflags.markdown() in (ROOT / "docs" / "environment.md").read_text()

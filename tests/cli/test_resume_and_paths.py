"""``train --workdir W`` without ``--config`` resumes from ``W/config.json`` (and refuses a workdir
without one); a relative ``data.dataset.path`` is stored absolute, so eval works from another directory;
a first run on a local corpus prints no TFDS download lines; the warm-up warning is for training only."""

import json

import pytest

from tests.cli_helpers import TINY, cli

pytestmark = pytest.mark.slow


def _refused(proc, needle):
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, (proc.returncode, proc.stderr[-2000:])
    assert needle in proc.stderr, proc.stderr[-2000:]


def test_train_without_config_needs_a_run_to_resume(tmp_path):
    _refused(cli("train", "--workdir", str(tmp_path / "w"), check=False),
             f"--workdir {tmp_path / 'w'} holds no config.json of an earlier run to resume")  # fmt: skip
    _refused(cli("train", "--config", "shakespear_char", "--workdir", str(tmp_path / "w"), check=False),
             "--config shakespear_char: neither a recipe nor a file (did you mean 'shakespeare_char'")  # fmt: skip


def test_rerun_without_config_resumes_with_absolute_paths_from_another_directory(tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    (here / "corpus.txt").write_text(
        "".join(f"line {i}: to be, or not to be, that is the question.\n" for i in range(300))
    )
    workdir = tmp_path / "run"
    sets = ["data.dataset=text", "data.dataset.path=corpus.txt", "train.steps=2", "train.optim.warmup_steps=3"]
    first = cli("train", "--config", TINY, "--workdir", str(workdir), "--sample-tokens", "0", "--set", *sets, cwd=here)
    stored = json.loads((workdir / "config.json").read_text())
    assert stored["data"]["dataset"]["path"] == str(here / "corpus.txt")
    out = first.stdout + first.stderr
    assert "Downloading and preparing" not in out and "downloaded and prepared" not in out, out[-3000:]
    assert "dataset_info.json" not in out, out[-3000:]
    assert out.count("warmup_steps=3 > total_steps=2") == 1, out[-3000:]

    evaluated = cli("eval", "--workdir", str(workdir), cwd=there)  # the stored data.dataset.path is absolute
    assert "warmup" not in evaluated.stderr, evaluated.stderr[-3000:]
    assert isinstance(json.loads(evaluated.stdout.strip().splitlines()[-1]), dict)

    again = cli("train", "--workdir", str(workdir), "--sample-tokens", "0", "--set", "train.steps=4", cwd=there)
    assert "resuming at step 2" in again.stdout, again.stdout[-3000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["step"] == 4
    assert json.loads((workdir / "config.json").read_text())["train"]["steps"] == 4


def test_each_warning_is_shown_once_per_process(capsys):
    from transformer_jax.cli import common

    for text, line in (("shown once", 1), ("shown once", 2), ("another one", 3)):  # lines differ: Python shows all
        common._show_warning(text, UserWarning, "transformer_jax/x.py", line)
    assert capsys.readouterr().err == "warning: shown once\nwarning: another one\n"

"""User mistakes on the command line: exit code 2, one message naming the file, field or option,
no traceback (``TRANSFORMER_JAX_DEBUG=1`` keeps it); prompts the tokenizer cannot represent warn."""

import json
import os

import pytest

from tests.cli_helpers import TINY, child_env, cli, train

pytestmark = pytest.mark.slow


def _refused(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-2000:]
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr[-2000:])


def test_config_file_with_a_syntax_error_names_file_and_line(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("def get_config():\n    return None\n\nx = = 1\n")
    _refused(cli("train", "--config", str(bad), "--workdir", str(tmp_path / "w"), check=False),
             f"--config {bad}, line 4: SyntaxError")  # fmt: skip
    assert not (tmp_path / "w").exists()  # a run that cannot start leaves no directory behind


def test_config_file_that_raises_names_file_and_line(tmp_path):
    bad = tmp_path / "raises.py"
    bad.write_text("import os\n\n\ndef get_config():\n    return os.environ['NO_SUCH_VARIABLE_HERE']\n")
    _refused(cli("train", "--config", str(bad), "--workdir", str(tmp_path / "w"), check=False),
             f"--config {bad}, line 5: KeyError: 'NO_SUCH_VARIABLE_HERE'")  # fmt: skip


def test_debug_variable_keeps_the_traceback(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("x = = 1\n")
    proc = cli("train", "--config", str(bad), "--workdir", str(tmp_path / "w"), check=False,
               env=child_env(TRANSFORMER_JAX_DEBUG="1"))  # fmt: skip
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_workdir_that_is_a_file_or_cannot_be_created(tmp_path):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    _refused(cli("train", "--config", TINY, "--workdir", str(a_file), check=False),
             f"--workdir {a_file} is a file, not a directory")  # fmt: skip
    _refused(cli("eval", "--workdir", str(a_file), check=False), f"--workdir {a_file} is a file")
    _refused(cli("train", "--config", TINY, "--workdir", str(a_file / "run"), check=False),
             f"--workdir {a_file / 'run'} cannot be created")  # fmt: skip
    assert a_file.read_text() == "x"


def test_unread_field_on_the_command_line_is_refused_before_training(tmp_path):
    _refused(cli("train", "--config", TINY, "--workdir", str(tmp_path / "w"), "--set", "data.dataset.path=MY.txt",
                 check=False), "the dataset 'shakespeare' has no setting 'path'")  # fmt: skip
    assert not (tmp_path / "w").exists()


def test_options_a_command_does_not_read_are_refused(tmp_path):
    _refused(cli("bench", "train", "--set", "model.dims.n_layers=2", check=False), "bench train does not read --set")
    _refused(cli("bench", "compile", "--config", TINY, check=False), "bench compile does not read --config")
    # --steps 0 was replaced by 10
    _refused(cli("bench", "moe", "--steps", "0", check=False), "--steps=0: must be a finite positive number")
    _refused(cli("sample", "--workdir", str(tmp_path), "--strategy", "greedy", "--top-k", "5", check=False),
             "--strategy greedy does not read --top-k")  # fmt: skip


def test_prompt_outside_the_vocabulary_warns_and_strict_refuses(tmp_path):
    workdir = tmp_path / "run"
    train(workdir, "train.steps=2")
    proc = cli("sample", "--workdir", str(workdir), "--prompt", "ROMEO€", "--max-new-tokens", "3")
    assert "warning: the prompt holds 1 character(s) the run's char tokenizer cannot represent: '€'" in proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["text"].startswith("ROMEO€")
    strict = cli("sample", "--workdir", str(workdir), "--prompt", "ROMEO€", "--strict-prompt", check=False)
    _refused(strict, "cannot represent: '€'", "drop --strict-prompt")
    assert os.path.isdir(workdir / "checkpoints")

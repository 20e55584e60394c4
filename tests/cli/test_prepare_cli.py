"""``transformer-jax prepare`` on the command line: a run with two workers prints its summary; bad
inputs exit 2 with one message naming the file, field or option, and no traceback."""

import json

import pytest

from tests.cli_helpers import cli

pytestmark = pytest.mark.slow


def _refused(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-2000:]
    for needle in needles:
        assert needle in errors[0], (needle, proc.stderr[-2000:])


def test_prepare_jsonl_with_two_workers(tmp_path):
    docs = [f"document {i}: " + "word " * (i % 7) for i in range(60)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"body": d}) + "\n" for d in docs))
    out = tmp_path / "out"
    proc = cli("prepare", "--input", str(tmp_path / "d.jsonl"), "--field", "body", "--out", str(out),
               "--tokenizer", "byte", "--shard-mb", "0.0005", "--workers", "2", "--val-fraction", "0.1")  # fmt: skip
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["train_documents"] + summary["val_documents"] == 60 and summary["shards_written"] > 2
    assert json.loads((out / "manifest.json").read_text())["complete"]
    again = json.loads(cli(*proc.args[3:]).stdout.strip().splitlines()[-1])
    assert again["shards_written"] == 0 and again["shards_kept"] == summary["shards_written"]


def test_bad_inputs_exit_2_with_one_message(tmp_path):
    out = str(tmp_path / "out")
    missing = tmp_path / "missing.txt"
    _refused(cli("prepare", "--input", str(missing), "--out", out, "--tokenizer", "byte", check=False),
             f"--input: {missing} does not exist")  # fmt: skip
    (tmp_path / "d.jsonl").write_text('{"body": "text"}\n')
    _refused(cli("prepare", "--input", str(tmp_path / "d.jsonl"), "--out", out, "--tokenizer", "byte", check=False),
             "d.jsonl, line 1: no field 'text' (the line has: body); name the text field with --field")  # fmt: skip
    _refused(cli("prepare", "--input", str(tmp_path / "d.jsonl"), "--out", out, "--tokenizer", "wordpiece",
                 check=False), "--tokenizer='wordpiece': unknown tokenizer")  # fmt: skip
    _refused(cli("prepare", "--input", str(tmp_path / "d.jsonl"), "--out", out, "--tokenizer", "char",
                 "--vocab-size", "500", check=False),
             "prepare.vocab_size=500: is read only with --tokenizer sentencepiece, not char "
             "(option --vocab-size)")  # fmt: skip


def test_help_states_the_config_defaults():
    import dataclasses

    from transformer_jax.cli import build_parser
    from transformer_jax.cli.prepare import OPTIONS
    from transformer_jax.data.prepare import PrepareConfig

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["prepare"]
    helps = {a.dest: a.help for a in sub._actions}
    defaults = {f.name: f.default for f in dataclasses.fields(PrepareConfig)}
    assert "default: the CPU count" in helps["workers"]  # the command line's own default (default_workers)
    for name in OPTIONS:
        if defaults[name] is not None and name != "workers":
            value = f"{defaults[name]:g}" if isinstance(defaults[name], float) else str(defaults[name])
            assert f"default {value}" in helps[name], (name, helps[name])

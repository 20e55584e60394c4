"""``train --set data.dataset=mixture data.dataset.mixture=...``: three prepared sources with a schedule of
weights train from the command line with per-source losses in metrics.jsonl (train and val); a run
stopped at step 2 and resumed ends where an uninterrupted one ends; bad settings exit 2 naming the field."""

import json

import pytest

from tests.cli_helpers import TINY, cli
from tests.data.test_mixture import ALPHABETS, prepare_source

pytestmark = pytest.mark.slow
NAMES = tuple(ALPHABETS)


@pytest.fixture(scope="module")
def mixture(tmp_path_factory):
    root = tmp_path_factory.mktemp("sources")
    paths = {name: prepare_source(root, name, alphabet) for name, alphabet in ALPHABETS.items()}
    return ",".join(f"{name}={paths[name]}:{w}" for name, w in zip(NAMES, (0.5, 0.3, 0.2), strict=True)), paths


def _train(workdir, mixture, steps, *extra, check=True):
    sets = ["data.dataset=mixture", f"data.dataset.mixture={mixture}", "data.dataset.schedule=3:web=0,code=1,math=1",
            f"train.steps={steps}", *extra]  # fmt: skip
    return cli("train", "--config", TINY, "--workdir", str(workdir), "--sample-tokens", "0", "--set", *sets,
               check=check)  # fmt: skip


def _records(workdir) -> list[dict]:
    return [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]


def test_train_a_mixture_with_per_source_losses_and_resume_exactly(tmp_path, mixture):
    spec, _ = mixture
    _train(tmp_path / "a", spec, 4)
    assert json.loads(_train(tmp_path / "c", spec, 2).stdout.strip().splitlines()[-1])["step"] == 2
    proc = _train(tmp_path / "c", spec, 4)
    assert "resuming at step 2" in proc.stdout, proc.stdout[-3000:]
    straight, resumed = _records(tmp_path / "a"), _records(tmp_path / "c")
    drop = lambda rs: [{k: v for k, v in r.items() if k not in ("time", "train/tokens_per_s", "train/mfu")}
                       for r in rs if "train/loss" in r]  # fmt: skip
    assert drop(straight) == drop(resumed)
    train = [r for r in straight if "train/loss" in r]
    assert {f"train/loss/{n}" for n in NAMES} & set().union(*train)
    assert all("train/loss/web" not in r for r in train if r["step"] == 4)  # web's weight is 0 from step 3
    val = [r for r in straight if "val/loss" in r]
    assert val and all({f"val/loss/{n}" for n in NAMES} <= r.keys() for r in val)


def test_bad_mixtures_exit_2_naming_the_field(tmp_path, mixture):
    spec, paths = mixture
    proc = _train(tmp_path / "b", spec.replace(":0.5", ":-1"), 2, check=False)
    assert proc.returncode == 2 and "data.dataset.mixture=" in proc.stderr and ">= 0" in proc.stderr, proc.stderr[
        -2000:
    ]
    other = prepare_source(tmp_path, "chars", "klmno", tokenizer="char")
    proc = _train(tmp_path / "t", f"web={paths['web']}:1,code={paths['code']}:1,math={other}:1", 2, check=False)
    assert proc.returncode == 2 and "sources 'web'" in proc.stderr and "'math'" in proc.stderr, proc.stderr[-2000:]
    assert "different tokenizers" in proc.stderr

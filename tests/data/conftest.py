"""Shared fixtures of the data tests: a session TFDS cache, small corpora, Multi30k."""

import os
import random
from pathlib import Path

import pytest

_CANDIDATES = [Path(__file__).resolve().parents[3] / "shared" / "data" / "multi30k", Path("/work/shared/data/multi30k")]
MULTI30K = Path(
    os.environ.get("TRANSFORMER_JAX_MULTI30K")
    or next((p for p in _CANDIDATES if (p / "train.de.gz").is_file()), _CANDIDATES[0])
)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("tfds_cache"))


@pytest.fixture(scope="session")
def multi30k() -> Path:
    if not (MULTI30K / "train.de.gz").is_file():
        pytest.skip(f"Multi30k not found at {MULTI30K} (set TRANSFORMER_JAX_MULTI30K)")
    return MULTI30K


def make_documents(n: int, seed: int = 0, max_words: int = 12, max_lines: int = 3) -> list[str]:
    """Distinct paragraphs of random words (some multi-line), no blank lines inside."""
    rng = random.Random(seed)
    words = ["the", "king", "queen", "sword", "crown", "night", "love", "war", "rome", "fool"]
    docs = []
    for i in range(n):
        lines = [f"doc{i}:"]
        for _ in range(rng.randint(1, max_lines)):
            lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(1, max_words))))
        docs.append("\n".join(lines))
    return docs


@pytest.fixture(scope="session")
def docs_file(tmp_path_factory) -> tuple[Path, list[str]]:
    """A text file of 120 blank-line separated paragraphs, and the paragraphs."""
    docs = make_documents(120)
    path = tmp_path_factory.mktemp("corpus") / "docs.txt"
    path.write_text("\n\n".join(docs) + "\n")
    return path, docs


@pytest.fixture(scope="session")
def parallel_dir(tmp_path_factory) -> Path:
    """A tiny aligned corpus, .gz and plain files: train pairs 0..47, val 100..109, test 200..205.

    Pair i is ("satz i" + " x" * (i % 5), "sentence i" + " x" * (i % 5)).
    """
    import gzip

    root = tmp_path_factory.mktemp("parallel")
    for split, ids, gz in (
        ("train", range(48), True),
        ("val", range(100, 110), False),
        ("test", range(200, 206), False),
    ):
        for lang, word in (("de", "satz"), ("en", "sentence")):
            text = "".join(f"{word} {i}" + " x" * (i % 5) + "\n" for i in ids)
            if gz:
                with gzip.open(root / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                    f.write(text)
            else:
                (root / f"{split}.{lang}").write_text(text)
    return root


@pytest.fixture(scope="session")
def short_docs_file(tmp_path_factory) -> tuple[Path, list[str]]:
    """A text file of 300 short paragraphs (several fit one 32-token row), and the paragraphs."""
    docs = make_documents(300, seed=1, max_words=2, max_lines=1)
    path = tmp_path_factory.mktemp("short") / "short.txt"
    path.write_text("\n\n".join(docs) + "\n")
    return path, docs

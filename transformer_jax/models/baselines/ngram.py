"""n-gram language model from counts (numpy): interpolated Kneser-Ney or add-k smoothing.

Storage: for every order m = 1..n, the distinct m-grams as sorted int64 codes
``code = sum_i t_i V^(m-1-i)`` (the last token is the lowest digit, so ``code // V`` is the
history and ``code % V^(m-1)`` drops the first token) with their counts; lookups are
``np.searchsorted``. Kneser-Ney also keeps, for m < n, the continuation counts
``N1+(. g)`` (how many distinct tokens precede the m-gram ``g``). Per-history totals and type
counts are derived from the same tables on load, so every conditional distribution sums to 1.

Interpolated Kneser-Ney (Chen & Goodman 1998, eq. 17), for a history ``h`` of length k:

    P(w | h) = max(c(h w) - D_k, 0) / c(h .) + D_k N1+(h .) / c(h .) * P(w | h')

where ``h'`` drops the oldest token, ``c`` is the raw count at the top level and the
continuation count ``N1+(. h w)`` at lower levels, and the recursion ends in the uniform
distribution 1/V. A history never seen (``c(h .) = 0``) passes the lower order through.
Add-k: ``P(w | h) = (c(h w) + k) / (c(h .) + k V)`` with the longest history, no backoff.

Histories shorter than n - 1 (the first tokens of a sequence) use the same recursion with the
top level at their own length (raw counts there), so nothing is padded or invented.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Sequence

import numpy as np

from transformer_jax.models.kinds import MODELS, NGRAM_READS

_MIN_DISCOUNT = 0.05


@dataclasses.dataclass
class _Table:
    """Distinct m-grams (sorted codes) with counts, and per-history totals / type counts."""

    codes: np.ndarray
    counts: np.ndarray
    discount: float = 0.0
    hist_codes: np.ndarray = dataclasses.field(init=False)
    hist_total: np.ndarray = dataclasses.field(init=False)
    hist_types: np.ndarray = dataclasses.field(init=False)

    def index(self, vocab_size: int) -> None:
        hist = self.codes // vocab_size
        self.hist_codes, start, self.hist_types = np.unique(hist, return_index=True, return_counts=True)
        self.hist_total = np.add.reduceat(self.counts, start) if len(start) else np.zeros(0, np.int64)

    def count(self, codes: np.ndarray) -> np.ndarray:
        return _lookup(self.codes, self.counts, codes)

    def history(self, hist: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _lookup(self.hist_codes, self.hist_total, hist), _lookup(self.hist_codes, self.hist_types, hist)


def _lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> np.ndarray:
    if len(keys) == 0:
        return np.zeros(np.shape(query), np.int64)
    idx = np.minimum(np.searchsorted(keys, query), len(keys) - 1)
    return np.where(keys[idx] == query, values[idx], 0)


def _estimate_discount(counts: np.ndarray) -> float:
    """Ney et al. (1994): D = n1 / (n1 + 2 n2), clipped to [0.05, 1]."""
    n1, n2 = int(np.sum(counts == 1)), int(np.sum(counts == 2))
    d = n1 / (n1 + 2 * n2) if n1 + 2 * n2 else 0.5
    return float(min(max(d, _MIN_DISCOUNT), 1.0))


def _codes(seq: np.ndarray, m: int, vocab_size: int) -> np.ndarray:
    n = len(seq) - m + 1
    if n <= 0:
        return np.zeros(0, np.int64)
    out = np.zeros(n, np.int64)
    for i in range(m):
        out = out * vocab_size + seq[i : i + n]
    return out


class NGramLM:
    """A count-based LM of ``order`` n over ``vocab_size`` tokens; build it with ``fit``.

    ``log_prob(history_NK, words_N)`` (natural log, k <= n - 1), ``distribution(history)`` [V],
    ``row_log_probs(inputs_BT, targets_BT, segment_ids_BT)`` (context = the previous tokens of
    the same segment of the row), ``save``/``load`` (one ``.npz``).
    """

    def __init__(
        self, order: int, vocab_size: int, smoothing: str, raw: list[_Table], cont: list[_Table], add_k: float = 1.0
    ):
        if order * math.log2(max(vocab_size, 2)) >= 63:
            raise ValueError(
                f"ngram_order={order} with vocab_size={vocab_size}: n-gram codes overflow int64 "
                f"(V^n >= 2^63); lower model.baseline.ngram_order or use a smaller vocabulary"
            )
        self.order, self.vocab_size, self.smoothing, self.add_k = order, vocab_size, smoothing, add_k
        self.raw, self.cont = raw, cont  # raw[m-1]: order m; cont[m-1]: order m < n (Kneser-Ney only)
        for table in raw + cont:
            table.index(vocab_size)

    @classmethod
    def fit(
        cls,
        sequences: Iterable[np.ndarray],
        *,
        vocab_size: int,
        order: int,
        smoothing: str = "kneser_ney",
        discount: float | None = None,
        add_k: float = 1.0,
    ) -> NGramLM:
        """Counts every m-gram (m <= order) inside each sequence (none crosses a sequence end)."""
        if smoothing not in ("kneser_ney", "add_k"):
            raise ValueError(f"smoothing={smoothing!r}: choose kneser_ney or add_k")
        seqs = [np.asarray(s, np.int64) for s in sequences]
        for s in seqs:
            if len(s) and (s.min() < 0 or s.max() >= vocab_size):
                raise ValueError(f"token ids must be in [0, vocab_size={vocab_size})")
        raw = []
        for m in range(1, order + 1):
            codes, counts = np.unique(
                np.concatenate([_codes(s, m, vocab_size) for s in seqs] or [[]]).astype(np.int64), return_counts=True
            )
            raw.append(_Table(codes, counts.astype(np.int64)))
        cont = []
        if smoothing == "kneser_ney":
            for m in range(1, order):
                codes, counts = np.unique(raw[m].codes % vocab_size**m, return_counts=True)
                cont.append(_Table(codes, counts.astype(np.int64)))
            for table in raw + cont:
                table.discount = discount if discount is not None else _estimate_discount(table.counts)
        return cls(order, vocab_size, smoothing, raw, cont, add_k)

    # Probabilities ---------------------------------------------------------------------------

    def probs(self, history_NK: np.ndarray, words: np.ndarray) -> np.ndarray:
        """P(words | history): ``history_NK`` int [N, k] (oldest first, k <= n - 1; longer ones
        keep their last n - 1 tokens); ``words`` int [N] or [N, W] -> float64 of that shape."""
        hist = np.asarray(history_NK, np.int64)
        if hist.ndim != 2:
            raise ValueError(f"history_NK must be [N, k], got shape {hist.shape}")
        hist = hist[:, max(hist.shape[1] - (self.order - 1), 0) :]
        words = np.asarray(words, np.int64)
        expand = (lambda x: x[:, None]) if words.ndim == 2 else (lambda x: x)
        k = hist.shape[1]
        V = self.vocab_size
        if self.smoothing == "add_k":
            table = self.raw[k]
            hcode = self._history_code(hist, k)
            total, _ = table.history(hcode)
            c = table.count(expand(hcode) * V + words)
            return (c + self.add_k) / (expand(total) + self.add_k * V)
        p = np.full(words.shape, 1.0 / V)
        for j in range(k + 1):  # history length at this level (order j + 1)
            table = self.raw[j] if j == k else self.cont[j]
            hcode = self._history_code(hist, j)
            total, types = table.history(hcode)
            c = table.count(expand(hcode) * V + words)
            total, types = expand(total).astype(np.float64), expand(types)
            safe = np.maximum(total, 1.0)
            mixed = np.maximum(c - table.discount, 0.0) / safe + table.discount * types / safe * p
            p = np.where(total > 0, mixed, p)
        return p

    def log_prob(self, history_NK: np.ndarray, words_N: np.ndarray) -> np.ndarray:
        return np.log(self.probs(history_NK, words_N))

    def distribution(self, history: Sequence[int]) -> np.ndarray:
        """P(. | history) over the whole vocabulary, [V] (sums to 1)."""
        hist = np.asarray(list(history), np.int64)[None, :]
        return self.probs(hist, np.arange(self.vocab_size)[None, :])[0]

    def _history_code(self, hist: np.ndarray, j: int) -> np.ndarray:
        code = np.zeros(len(hist), np.int64)
        for i in range(hist.shape[1] - j, hist.shape[1]):
            code = code * self.vocab_size + hist[:, i]
        return code

    def row_log_probs(
        self, inputs_BT: np.ndarray, targets_BT: np.ndarray, segment_ids_BT: np.ndarray, *, with_argmax: bool = False
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """log P(targets[b, t] | inputs[b, <= t] of the same segment), [B, T]; with ``with_argmax``
        also the most likely next token [B, T] (costs V lookups per position)."""
        x, seg = np.asarray(inputs_BT, np.int64), np.asarray(segment_ids_BT)
        B, T = x.shape
        n1 = self.order - 1
        hist = np.zeros((B, T, n1), np.int64)
        length = np.zeros((B, T), np.int64)
        alive = np.ones((B, T), bool)
        for back in range(n1):  # hist[..., n1 - 1 - back] = x[t - back]
            shifted = np.zeros_like(x)
            same = np.zeros((B, T), bool)
            shifted[:, back:] = x[:, : T - back]
            same[:, back:] = seg[:, back:] == seg[:, : T - back]
            alive &= same
            hist[..., n1 - 1 - back] = shifted
            length += alive
        logp = np.zeros((B, T))
        best = np.zeros((B, T), np.int64) if with_argmax else None
        targets = np.asarray(targets_BT, np.int64)
        for k in range(n1 + 1):
            sel = length == k
            if not sel.any():
                continue
            h = hist[sel][:, n1 - k :]
            logp[sel] = np.log(self.probs(h, targets[sel]))
            if with_argmax:
                assert best is not None
                out = np.zeros(int(sel.sum()), np.int64)
                for s in range(0, len(h), 8192):
                    chunk = h[s : s + 8192]
                    out[s : s + 8192] = np.argmax(
                        self.probs(chunk, np.broadcast_to(np.arange(self.vocab_size), (len(chunk), self.vocab_size))),
                        -1,
                    )
                best[sel] = out
        return logp, best

    # Size and storage ------------------------------------------------------------------------

    @property
    def n_entries(self) -> int:
        """Stored counts (all orders, raw and continuation): the size of the model."""
        return int(sum(len(t.codes) for t in self.raw + self.cont))

    def save(self, path: str) -> None:
        arrays = {}
        for name, tables in (("raw", self.raw), ("cont", self.cont)):
            for m, t in enumerate(tables, start=1):
                arrays[f"{name}{m}_codes"], arrays[f"{name}{m}_counts"] = t.codes, t.counts
        meta = {
            "order": self.order,
            "vocab_size": self.vocab_size,
            "smoothing": self.smoothing,
            "add_k": self.add_k,
            "discounts": {"raw": [t.discount for t in self.raw], "cont": [t.discount for t in self.cont]},
        }
        with open(path, "wb") as f:
            np.savez_compressed(f, meta=np.asarray(json.dumps(meta)), **arrays)

    @classmethod
    def load(cls, path: str) -> NGramLM:
        with np.load(path) as z:
            meta = json.loads(str(z["meta"]))
            tables = {}
            for name in ("raw", "cont"):
                tables[name] = [
                    _Table(z[f"{name}{m}_codes"], z[f"{name}{m}_counts"], d)
                    for m, d in enumerate(meta["discounts"][name], start=1)
                ]
        return cls(meta["order"], meta["vocab_size"], meta["smoothing"], tables["raw"], tables["cont"], meta["add_k"])

    def __repr__(self) -> str:
        return (
            f"NGramLM(order={self.order}, vocab_size={self.vocab_size}, smoothing={self.smoothing}, "
            f"entries={self.n_entries:,})"
        )


@MODELS.register("ngram", reads=NGRAM_READS)
def _no_module(cfg, *, rngs=None):
    raise ValueError(
        "model.kind='ngram' is count-based and has no nnx module or parameters to train: "
        "`transformer-jax train` fits it with transformer_jax.train.ngram.train_ngram"
    )

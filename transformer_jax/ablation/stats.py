"""The protocol's statistics: a claim is judged by an interval, never by one run or a bare threshold.

- `paired`: the mean paired difference ``a_i - b_i`` over seeds (arms paired by seed) with a
  Student-t interval; with ``b`` omitted, the mean of ``a`` itself.
- `paired_bootstrap`: the difference of a statistic of two decoding methods on the same test
  items, with a percentile interval from resampling the items (one fixed seed).
- `loglog_slope`: the exponent of a power law ``y ~ x^s`` with the regression's t interval.

Each returns a `Comparison` whose ``verdict`` follows from its interval and the claim's ``expect``:

- ``"greater"`` / ``"less"`` (the difference is above / below ``reference``): "holds" when the 95%
  interval excludes ``reference`` on the claimed side, "does not hold" when it excludes it on the
  other side, else "inconclusive".
- ``"equal"`` ("does not change"), ``"not less"`` / ``"not greater"`` ("no worse" when higher /
  lower is better): judged against a ``margin`` stated before the run, by two one-sided tests at
  5% each, i.e. the 90% interval. "equal" holds when the interval lies inside ``reference +-
  margin`` and does not hold when it lies wholly outside; "not less" holds when its lower end is
  above ``reference - margin`` and does not hold when its upper end is below it ("not greater"
  mirrors it).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

HOLDS, FAILS, UNSURE = "holds", "does not hold", "inconclusive"
DIRECTIONS = ("greater", "less")
EQUIVALENCES = ("equal", "not less", "not greater")
EXPECTS = DIRECTIONS + EQUIVALENCES
Values = Sequence[float] | np.ndarray


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz; Numerical Recipes 6.4)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        for num in (
            m * (b - m) * x / ((qam + 2 * m) * (a + 2 * m)),
            -(a + m) * (qab + m) * x / ((a + 2 * m) * (qap + 2 * m)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x={x} must be in [0, 1]")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(x: float, df: float) -> float:
    """P(T <= x) for Student's t with ``df`` degrees of freedom: 1 - I_{df/(df+x^2)}(df/2, 1/2) / 2 for x > 0."""
    if df <= 0:
        raise ValueError(f"df={df} must be positive")
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + x * x))
    return 1.0 - tail if x > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on `t_cdf`)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p={p} must be in (0, 1)")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, 2.0 * high
    for _ in range(200):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if t_cdf(mid, df) < p else (low, mid)
        if high - low < 1e-12 * max(1.0, high):
            break
    return 0.5 * (low + high)


def default_level(expect: str) -> float:
    """0.95 for a direction; 0.90 for an equivalence (two one-sided tests at 5% each)."""
    return 0.95 if expect in DIRECTIONS else 0.90


def decide(low: float, high: float, expect: str, *, reference: float = 0.0, margin: float | None = None) -> str:
    """The verdict of an interval [low, high] for a claim (see the module docstring)."""
    _check_expect(expect, margin)
    if expect == "greater":
        return HOLDS if low > reference else FAILS if high < reference else UNSURE
    if expect == "less":
        return HOLDS if high < reference else FAILS if low > reference else UNSURE
    m = float(margin)  # pyright: ignore[reportArgumentType]
    lo_edge, hi_edge = reference - m, reference + m
    if expect == "equal":
        return HOLDS if lo_edge < low and high < hi_edge else FAILS if low > hi_edge or high < lo_edge else UNSURE
    if expect == "not less":
        return HOLDS if low > lo_edge else FAILS if high < lo_edge else UNSURE
    return HOLDS if high < hi_edge else FAILS if low > hi_edge else UNSURE


def refuting(expect: str, *, reference: float = 0.0, margin: float | None = None, level: float | None = None) -> str:
    """The interval that makes a part "does not hold" (`decide`), in words: ``"95% interval wholly
    below 0"`` for ``"greater"``; an equivalence names its edges."""
    _check_expect(expect, margin)
    where = f"{default_level(expect) if level is None else level:.0%} interval wholly"
    if expect in DIRECTIONS:
        return f"{where} {'below' if expect == 'greater' else 'above'} {reference:.4g}"
    lo_edge, hi_edge = reference - float(margin), reference + float(margin)  # pyright: ignore[reportArgumentType]
    if expect == "equal":
        return f"{where} outside [{lo_edge:.4g}, {hi_edge:.4g}]"
    return f"{where} below {lo_edge:.4g}" if expect == "not less" else f"{where} above {hi_edge:.4g}"


def _check_expect(expect: str, margin: float | None) -> None:
    if expect not in EXPECTS:
        raise ValueError(f"expect={expect!r}: use one of {', '.join(EXPECTS)}")
    if expect in EQUIVALENCES and (margin is None or not margin >= 0):
        raise ValueError(f"expect={expect!r} needs margin >= 0 (stated before the run), got {margin}")
    if expect in DIRECTIONS and margin is not None:
        raise ValueError(
            f"expect={expect!r} takes no margin (got {margin}); a margin is for equal / not less / not greater"
        )


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A measured difference (or value, or slope) with its interval, and the claim it is judged by."""

    expect: str
    method: str
    n: int
    mean: float
    low: float
    high: float
    level: float
    reference: float = 0.0
    margin: float | None = None
    samples: tuple[float, ...] = ()

    @property
    def verdict(self) -> str:
        return decide(self.low, self.high, self.expect, reference=self.reference, margin=self.margin)

    @classmethod
    def unmeasured(cls, expect: str, reason: str, *, reference: float = 0.0, margin: float | None = None) -> Comparison:
        """A part of a claim that could not be measured (``reason``): n=0, no interval, inconclusive."""
        _check_expect(expect, margin)
        return cls(
            expect,
            f"not measured: {reason}",
            0,
            math.nan,
            -math.inf,
            math.inf,
            default_level(expect),
            reference,
            margin,
        )

    def as_dict(self) -> dict[str, Any]:
        """The results.json record: n, mean, interval, level, method, claim, margin, verdict, samples
        (a bound that does not exist, as for n = 1, is None: strict JSON has no infinity)."""
        fields = {
            k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in dataclasses.asdict(self).items()
        }
        return {**fields, "samples": list(self.samples), "verdict": self.verdict}

    def text(self, digits: int = 3) -> str:
        """``+0.012 [-0.003, +0.027] (95% paired t, n=3)``, then the claim's test; numbers below
        10^-digits in size are written in scientific notation (``+1.50e-07``)."""
        finite = [abs(v) for v in (self.mean, self.low, self.high) if math.isfinite(v)]
        small = bool(finite) and 0 < max(finite) < 10.0**-digits
        spec = f"+.{digits - 1}e" if small else f"+.{digits}f"
        f = lambda v: format(v, spec) if math.isfinite(v) else ("+inf" if v > 0 else "-inf" if v < 0 else "nan")
        test = {"greater": f"> {self.reference:g}", "less": f"< {self.reference:g}"}.get(self.expect)
        if test is None:
            m = f"{self.reference:g} +- {self.margin:g}"
            test = {"equal": f"inside {m}", "not less": f"above {m}", "not greater": f"below {m}"}[self.expect]
        interval = f"{f(self.mean)} [{f(self.low)}, {f(self.high)}]"
        return f"{interval} ({self.level:.0%} {self.method}, n={self.n}; claim: {test})"


def _finite(name: str, values: np.ndarray) -> np.ndarray:
    if values.size == 0:
        raise ValueError(f"{name} is empty: a comparison needs at least one seed or item")
    if not np.all(np.isfinite(values)):
        raise ValueError(
            f"{name} holds non-finite values {values.tolist()}: give a diverged run a stated finite value "
            "(e.g. `Curves.final_or(ceiling)`) before comparing"
        )
    return values


def t_interval(values: Values, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): mean +- t_{(1+level)/2, n-1} * sd / sqrt(n); infinite for n = 1."""
    x = _finite("values", np.asarray(values, dtype=np.float64).ravel())
    mean = float(np.mean(x))
    if x.size < 2:
        return mean, -math.inf, math.inf
    half = t_quantile(0.5 + level / 2, x.size - 1) * float(np.std(x, ddof=1)) / math.sqrt(x.size)
    return mean, mean - half, mean + half


def paired(
    a: Values,
    b: Values | None = None,
    *,
    expect: str,
    reference: float = 0.0,
    margin: float | None = None,
    level: float | None = None,
) -> Comparison:
    """The mean of ``a_i - b_i`` over seeds (``a`` and ``b`` in the same seed order; ``b`` None:
    ``a_i``) with its t interval, judged against ``reference`` by ``expect``."""
    _check_expect(expect, margin)
    av = np.asarray(a, dtype=np.float64).ravel()
    if b is not None and len(b) != av.size:
        raise ValueError(f"paired arms need one value per seed each: got {av.size} and {len(b)}")
    d = av if b is None else av - np.asarray(b, dtype=np.float64).ravel()
    level = default_level(expect) if level is None else level
    mean, low, high = t_interval(_finite("paired differences" if b is not None else "values", d), level)
    method = "t" if b is None else "paired t"
    return Comparison(expect, method, int(d.size), mean, low, high, level, reference, margin, tuple(d.tolist()))


def paired_bootstrap(
    a_items: Any,
    b_items: Any,
    *,
    expect: str,
    statistic: Callable[[np.ndarray], float] | None = None,
    reference: float = 0.0,
    margin: float | None = None,
    level: float | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> Comparison:
    """``statistic(a) - statistic(b)`` over the same test items (rows of ``a_items`` / ``b_items``,
    default statistic: the mean) with a percentile interval from ``n_boot`` resamplings of the
    items, both methods resampled with the same indices (Koehn 2004); ``seed`` fixes them."""
    _check_expect(expect, margin)
    a, b = np.asarray(a_items, dtype=np.float64), np.asarray(b_items, dtype=np.float64)
    if a.shape != b.shape or a.ndim == 0:
        raise ValueError(f"paired items must have the same shape (items first): got {a.shape} and {b.shape}")
    _finite("items", a)
    _finite("items", b)
    if statistic is None and a.ndim != 1:
        raise ValueError(f"items of shape {a.shape}: give a statistic of rows, or one number per item")
    idx = np.random.default_rng(seed).integers(0, a.shape[0], size=(n_boot, a.shape[0]))
    if statistic is None:
        mean = float(np.mean(a) - np.mean(b))
        diffs = a[idx].mean(axis=1) - b[idx].mean(axis=1)
    else:
        mean = float(statistic(a) - statistic(b))
        diffs = np.asarray([statistic(a[i]) - statistic(b[i]) for i in idx])
    level = default_level(expect) if level is None else level
    low, high = np.quantile(diffs, [0.5 - level / 2, 0.5 + level / 2])
    return Comparison(expect, "paired bootstrap", a.shape[0], mean, float(low), float(high), level, reference, margin)


def linear_fit(x: Values, y: Any, level: float = 0.95) -> tuple[float, float, float, int]:
    """(slope, low, high, df) of the least-squares line through (x_i, y_ij) (``y`` [P] or [P, R]
    repeats), with the t interval slope +- t_{df} * s / sqrt(Sxx), s^2 the residual variance, df = N - 2."""
    xv = np.asarray(x, dtype=np.float64)
    yv = np.asarray(y, dtype=np.float64).reshape(xv.size, -1)
    xs = np.repeat(xv, yv.shape[1])
    ys = _finite("y", yv.ravel())
    if np.unique(xv).size < 2:
        raise ValueError(f"a slope needs at least two distinct x, got {xv.tolist()}")
    sxx = float(np.sum((xs - xs.mean()) ** 2))
    slope = float(np.sum((xs - xs.mean()) * (ys - ys.mean())) / sxx)
    df = xs.size - 2
    if df < 1:
        return slope, -math.inf, math.inf, df
    resid = ys - ys.mean() - slope * (xs - xs.mean())
    half = t_quantile(0.5 + level / 2, df) * math.sqrt(float(np.sum(resid**2)) / df / sxx)
    return slope, slope - half, slope + half, df


def loglog_slope(
    x: Values,
    y: Any,
    *,
    expect: str,
    reference: float = 0.0,
    margin: float | None = None,
    level: float | None = None,
) -> Comparison:
    """The exponent s of ``y ~ c x^s``: the slope of log y against log x (`linear_fit`, ``n`` =
    number of points, its t interval with df = n - 2), judged against ``reference``. The slope of
    a ratio y1 / y2 is the difference of the two exponents."""
    _check_expect(expect, margin)
    xv, yv = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if np.any(xv <= 0) or np.any(yv <= 0):
        raise ValueError(f"a log-log slope needs positive x and y: x={xv.tolist()}, y={yv.tolist()}")
    level = default_level(expect) if level is None else level
    slope, low, high, df = linear_fit(np.log(xv), np.log(yv), level)
    return Comparison(expect, "log-log regression t", df + 2, slope, low, high, level, reference, margin)


def combine(*verdicts: str) -> str:
    """One verdict for a claim made of several parts: "holds" if every part holds, "does not
    hold" if any part does not hold, else "inconclusive"."""
    for v in verdicts:
        if v not in (HOLDS, FAILS, UNSURE):
            raise ValueError(f"verdict {v!r}: use one of {HOLDS}, {FAILS}, {UNSURE}")
    return FAILS if FAILS in verdicts else HOLDS if verdicts and all(v == HOLDS for v in verdicts) else UNSURE


def bleu_stats(hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """[N, 10] per sentence: matched and total 1..4-grams, hypothesis and reference length
    (sacrebleu, default 13a tokenizer); their column sums give the corpus BLEU (`bleu_of_stats`),
    so a bootstrap over sentences resamples rows."""
    from sacrebleu.metrics.bleu import BLEU

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references; give one per reference")
    metric = BLEU(effective_order=True)  # sentence scores are not used, only their counts
    scores = [metric.sentence_score(h, [r]) for h, r in zip(hypotheses, references)]
    return np.asarray([[*s.counts, *s.totals, s.sys_len, s.ref_len] for s in scores], dtype=np.float64)


def bleu_of_stats(rows: np.ndarray) -> float:
    """Corpus BLEU (0-100, exponential smoothing, as ``eval.bleu.corpus_bleu``) of `bleu_stats` rows."""
    from sacrebleu.metrics.bleu import BLEU

    t = np.asarray(rows).sum(axis=0)
    counts, totals = [int(x) for x in t[:4]], [int(x) for x in t[4:8]]
    return float(BLEU.compute_bleu(counts, totals, int(t[8]), int(t[9]), smooth_method="exp").score)

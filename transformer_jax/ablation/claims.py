"""Claims registered before the run (issue 39, item 1): what a notebook tests, fixed in one place.

A notebook declares its `Claim` specs in one cell and passes them to `results.save_results`,
which stores them in results.json (``"claims"``) beside the comparisons they judged, after checking
that every comparison is judged by its claim's `Criterion` (`check_claims`). A test compares each
notebook's current specs with the ones its committed results were run under, so a changed
criterion forces a rerun; a criterion changed after a run's numbers were seen stays in the spec's
``history`` (`Revision` with ``seen``), and the gallery labels its row *exploratory* until a
registered rerun on new data (`exploratory`). A claim that cannot come out the other way (an
identity, a property of the probe's construction) is a *check*: shown, never a verdict. A redo over
several sittings, with no results.json of its own yet, keeps the specs of its first sitting in
registered.json (`registration`), so they cannot drift between sittings.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from transformer_jax.ablation.stats import DIRECTIONS, EXPECTS, Comparison, default_level, t_cdf, t_quantile


@dataclasses.dataclass(frozen=True)
class Criterion:
    """How one part of a claim is judged (`stats.decide`): ``expect``, the ``reference`` (a number,
    or words for one measured in the run, such as the unigram loss), the equivalence ``margin`` (a
    number, or words for a rule such as ``"1/L"``) and the interval's ``level`` (default: 0.95 for a
    direction, 0.90 for two one-sided tests)."""

    expect: str
    reference: float | str = 0.0
    margin: float | str | None = None
    level: float | None = None

    def __post_init__(self) -> None:
        if self.expect not in EXPECTS:
            raise ValueError(f"Criterion(expect={self.expect!r}): use one of {', '.join(EXPECTS)}")
        if (self.margin is None) != (self.expect in DIRECTIONS):
            raise ValueError(f"Criterion({self.expect!r}, margin={self.margin}): a margin is for an equivalence only")
        if self.level is None:
            object.__setattr__(self, "level", default_level(self.expect))

    def mismatch(self, c: Comparison) -> str | None:
        """Why comparison ``c`` was not judged by this criterion (None when it was)."""
        same_ref = isinstance(self.reference, str) or math.isclose(float(self.reference), c.reference)
        same_margin = (self.margin is None) == (c.margin is None) and (
            not isinstance(self.margin, float | int) or c.margin is None or math.isclose(self.margin, c.margin)
        )
        if c.expect == self.expect and same_ref and same_margin and math.isclose(float(self.level or 0), c.level):
            return None
        judged = f"expect={c.expect!r}, reference={c.reference}, margin={c.margin}, level={c.level}"
        return f"registered {self!r}, judged by {judged}"


@dataclasses.dataclass(frozen=True)
class Power:
    """The inputs of a power calculation for a paired t test: the ``sd`` of the paired difference
    (from ``pilot``, the run it was read from), the ``effect`` to detect (a direction) or the
    equivalence margin (with a true difference of 0), ``alpha`` per one-sided test, and ``power``.
    ``alpha`` defaults to that of the test a verdict applies (`one_sided_alpha`): 0.025 for a direction
    (its two-sided 95% interval must clear the line), 0.05 per side of an equivalence (90%)."""

    sd: float
    effect: float
    pilot: str
    alpha: float | None = None
    power: float = 0.8
    equivalence: bool = False

    def __post_init__(self) -> None:
        if self.alpha is None:
            object.__setattr__(self, "alpha", one_sided_alpha("equal" if self.equivalence else "less"))
        if not 0 < self.one_sided < 0.5 or not 0 < self.power < 1:
            raise ValueError(
                f"Power(alpha={self.alpha}, power={self.power}): alpha is a one-sided error rate in (0, 0.5), "
                "power a probability in (0, 1)"
            )

    @property
    def one_sided(self) -> float:
        """``alpha``, typed as filled in (`__post_init__` sets its default)."""
        assert self.alpha is not None
        return self.alpha

    def n(self) -> int:
        """The smallest n with ((t_{1-alpha} + t_{power'}) * sd / effect)^2 <= n, t with n-1 degrees of
        freedom; power' = power for a direction, 1 - (1 - power)/2 for two one-sided tests."""
        if self.sd <= 0 or self.effect <= 0:
            raise ValueError(f"{self}: sd and effect must be positive")
        beta = (1 - self.power) / 2 if self.equivalence else 1 - self.power
        for n in range(2, 100_000):
            t = t_quantile(1 - self.one_sided, n - 1) + t_quantile(1 - beta, n - 1)
            if (t * self.sd / self.effect) ** 2 <= n:
                return n
        raise ValueError(f"{self}: needs more than 100,000 seeds")

    def achieved(self, n: int) -> float:
        """The power at ``n`` under the same approximation as `n` (its inverse): p = F_{n-1}(sqrt(n)
        effect / sd - t_{1-alpha}) for a direction, 1 - 2 (1 - p) for two one-sided tests. Below the
        exact (noncentral t) power at small n, so `n` errs towards more seeds."""
        p = t_cdf(math.sqrt(n) * self.effect / self.sd - t_quantile(1 - self.one_sided, n - 1), n - 1)
        return max(0.0, 1 - 2 * (1 - p)) if self.equivalence else p


def one_sided_alpha(expect: str, level: float | None = None) -> float:
    """The error rate of each one-sided test a verdict at ``level`` (default `stats.default_level`)
    applies: (1 - level)/2, since a direction is judged by where a two-sided interval lies and an
    equivalence by two one-sided tests, one per edge."""
    return round((1 - (default_level(expect) if level is None else level)) / 2, 6)


@dataclasses.dataclass(frozen=True)
class Revision:
    """One entry of a spec's history: ``date``, what changed, and why. ``seen``: the date of the run
    whose numbers were seen before the change (None: fixed before any run it judges); the claim is
    then exploratory until a later entry with ``fresh`` registers a rerun on data nobody has seen
    (new seeds or items: the same seeds reproduce the same numbers), run on or after its ``date``.
    ``seeds``: the fresh seeds, where the same results also hold other claims' runs on older seeds
    (then only the runs of these seeds date the rerun, `data_date`); empty: every run dates it."""

    date: str
    change: str
    reason: str
    seen: str | None = None
    fresh: bool = False
    seeds: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.seen and self.fresh:
            raise ValueError(
                f"Revision({self.date!r}, seen={self.seen!r}, fresh=True): an entry records a change made after "
                "seeing runs (seen) or registers a fresh rerun (fresh), not both: make two entries"
            )


REGISTERED_AFTER_FULL_RUN = Revision(
    "2026-12-05",
    "registered",
    "written down after the FULL run, from the criteria that run applied: no spec was stored before (issue 39)",
)
"""The first history entry of every claim whose committed results predate the claims registry."""


@dataclasses.dataclass(frozen=True)
class Claim:
    """A claim as registered: ``name`` (the verdict row; rows ``name (…)`` belong to it too, e.g. one
    per learning rate), the ``notes`` file, the ``lines`` of the notes that make the claim (first,
    last; required of a verdict, so that no row tests a claim the notes do not make) and the claim in
    our words (``says``: the notes ask not to be copied), the ``measure``, one
    `Criterion` per part, ``why`` that direction or margin, ``n`` per arm (seeds, items or points)
    and the `Power` calculation behind it if any, ``check`` for an identity (never a verdict), and
    the ``history`` of its criterion."""

    name: str
    notes: str
    says: str
    measure: str
    criteria: tuple[Criterion, ...]
    why: str
    n: int
    power: Power | None = None
    check: bool = False
    history: tuple[Revision, ...] = ()
    lines: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.lines is not None and not 1 <= self.lines[0] <= self.lines[1]:
            raise ValueError(f"claim {self.name!r}: lines={self.lines} must be (first, last) with 1 <= first <= last")

    @property
    def alpha(self) -> float:
        """The error rate of each one-sided test of the first part (`one_sided_alpha`)."""
        c = self.criteria[0]
        return one_sided_alpha(c.expect, c.level)

    def underpowered(self) -> str | None:
        """Why ``n`` falls short of what ``power`` asks at the alpha of the test the verdict applies
        (that of the first criterion of the kind the power is for: an equivalence or a direction), a
        calculation registered at another alpha included; None when it does not (or no power)."""
        if self.power is None:
            return None
        kind = [c for c in self.criteria if (c.expect in DIRECTIONS) != self.power.equivalence] or list(self.criteria)
        at = dataclasses.replace(self.power, alpha=one_sided_alpha(kind[0].expect, kind[0].level))
        if self.n >= at.n():
            return None
        return (
            f"n={self.n} has power {at.achieved(self.n):.2f} at the verdict's one-sided alpha {at.alpha:g} "
            f"({at.n()} needed for {at.power:g})"
        )

    def matches(self, row: str) -> bool:
        return row_of(row, self.name)

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["alpha"] = self.alpha
        for r in d["history"]:
            if not r["seeds"]:  # a field added after specs were stored: left out at its default
                del r["seeds"]
        if self.power is not None:
            d["power"]["n"] = self.power.n()
        if short := self.underpowered():
            d["underpowered"] = short
        return d


def row_of(row: str, name: str) -> bool:
    """Whether verdict row ``row`` belongs to the claim ``name``: the same, or ``name`` and more words."""
    return row == name or row.startswith(name + " ")


def stored_spec(specs: Mapping[str, Any], row: str) -> Any:
    """The spec of ``row`` among the specs a results.json stores (`spec_record`); None if none."""
    return next((s for name, s in specs.items() if row_of(row, name)), None)


def register(*specs: Claim) -> tuple[Claim, ...]:
    """A notebook's specs, checked: unique names, no row matched by two of them."""
    names = [c.name for c in specs]
    for c in specs:
        clash = [o.name for o in specs if o is not c and c.matches(o.name)]
        if names.count(c.name) > 1 or clash:
            raise ValueError(f"claim {c.name!r} is declared twice or also matches {clash}")
    return tuple(specs)


def claim_of(specs: Iterable[Claim], row: str) -> Claim:
    found = [c for c in specs if c.matches(row)]
    if len(found) != 1:
        raise ValueError(f"the verdict row {row!r} matches {len(found)} registered claims (need exactly one)")
    return found[0]


def check_claims(specs: Sequence[Claim], comparisons: Mapping[str, Comparison | Sequence[Comparison]]) -> None:
    """Raises ValueError unless every row of ``comparisons`` belongs to one claim whose criteria
    judged its parts, and every claim has a row: results are saved under the registered specs only.
    With k criteria and m parts (m a multiple of k), criterion i judges the i-th block of m/k parts
    (one criterion judges every part; a part per depth or learning rate repeats its criterion). A
    part that was not measured (`Comparison.unmeasured`) is judged by nothing."""
    for row, given in comparisons.items():
        parts = [given] if isinstance(given, Comparison) else list(given)
        spec = claim_of(specs, row)
        measured = [p for p in parts if not p.method.startswith("not measured")]
        if not measured:
            continue
        k = len(spec.criteria)
        if len(parts) % k:
            raise ValueError(f"{row!r}: {len(parts)} comparisons for {k} registered criteria")
        for i, part in enumerate(parts):
            unmeasured = part.method.startswith("not measured")
            why = None if unmeasured else spec.criteria[i // (len(parts) // k)].mismatch(part)
            if why is not None:
                raise ValueError(f"{row!r}, part {i + 1}: {why}")
    unused = [c.name for c in specs if not any(c.matches(r) for r in comparisons)]
    if unused:
        raise ValueError(f"registered claims without a verdict row: {unused}")


def spec_record(specs: Iterable[Claim]) -> dict[str, dict[str, Any]]:
    """The ``"claims"`` entry of results.json."""
    return {c.name: c.as_dict() for c in specs}


WORDING = ("notes", "says", "lines")
"""The fields of a spec that locate (file, lines) and word the notes' claim; changing them changes no
criterion."""
DERIVED = ("alpha", "underpowered", "power.n")
"""The fields of a spec computed from the others (`Claim.as_dict`; ``power.n`` is the ``n`` inside
``power``, computed from the Power's inputs, which do stay in the criterion); a fix to how they are
computed changes no criterion."""


def criterion_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A stored spec (`spec_record`'s entry) without its `WORDING` and `DERIVED` fields: what a rerun
    must match."""
    kept = {k: v for k, v in spec.items() if k not in WORDING + DERIVED}
    if kept.get("power"):
        kept["power"] = {k: v for k, v in kept["power"].items() if f"power.{k}" not in DERIVED}
    return kept


def derive(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A stored spec with its `DERIVED` fields computed again from the others (`from_spec`): one
    stored before a fix to how they are computed reads as the fixed code computes it."""
    fresh = from_spec(spec).as_dict()
    out = {k: v for k, v in spec.items() if k not in DERIVED or k in fresh}  # in place, to keep the order
    out |= {k: fresh[k] for k in DERIVED if k in fresh}
    if out.get("power"):
        out["power"] = {**out["power"], "n": fresh["power"]["n"]}
    return out


def from_spec(spec: Mapping[str, Any]) -> Claim:
    """The `Claim` a stored spec (`spec_record`'s entry) was made from; derived fields left out."""
    kw = {f.name: spec[f.name] for f in dataclasses.fields(Claim) if f.name in spec}
    kw["criteria"] = tuple(Criterion(**c) for c in spec["criteria"])
    kw["history"] = tuple(Revision(**{**r, "seeds": tuple(r.get("seeds", ()))}) for r in spec.get("history") or ())
    if spec.get("power"):
        kw["power"] = Power(**{k: v for k, v in spec["power"].items() if k != "n"})
    if spec.get("lines"):
        kw["lines"] = tuple(spec["lines"])
    return Claim(**kw)


def reword(record: Mapping[str, Any], specs: Iterable[Claim]) -> dict[str, Any]:
    """Results ``record`` with the `WORDING` of each stored claim taken from the claim of the same
    name in ``specs`` (the notebook's current ones) and the `DERIVED` fields of every stored claim
    computed again (`derive`); criteria and numbers as they were."""
    current = spec_record(specs)
    stored = {
        name: derive({**spec, **({k: current[name][k] for k in WORDING} if name in current else {})})
        for name, spec in (record.get("claims") or {}).items()
    }
    return {**record, "claims": stored}


def beyond_notes(spec: Mapping[str, Any]) -> bool:
    """Whether a stored spec's verdict tests a claim the notes do not make: no ``lines`` of the notes
    (a spec stored before ``lines`` existed says nothing either way)."""
    return "lines" in spec and spec["lines"] is None and not spec.get("check")


_TRAINED = re.compile(r"trained (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def data_date(record: Mapping[str, Any], seeds: Iterable[int] = ()) -> str:
    """When the oldest data of a results record was produced: the earliest ``trained`` date of the
    runs it reused (of ``seeds`` only, when given: runs named ``<arm> s<seed>``), else the
    sitting's start (``started``), else its ``date``."""
    names = {f"s{int(s)}" for s in seeds}
    dates = [
        m.group(1)
        for k, v in (record.get("reused_runs") or {}).items()
        if (not names or str(k).rsplit(" ", 1)[-1] in names) and (m := _TRAINED.search(str(v)))
    ]
    own = str(record.get("started") or record.get("date") or "")
    return min([*dates, own[:19]]) if dates or own else ""


def exploratory(spec: Mapping[str, Any], record: Mapping[str, Any]) -> bool:
    """Whether a stored spec's row is exploratory in results ``record``: its criterion was changed
    after numbers were seen (a `Revision` with ``seen``), and no later ``fresh`` revision registers a
    rerun whose data (`data_date`, of the revision's ``seeds`` if it names them) is as new as that revision.
    Dates cannot order a registration and a rerun of one day: tests/notebooks/test_registration_order.py
    checks by commit order that each committed fresh revision precedes the runs it judges."""
    history = list(spec.get("history") or ())
    changed = [i for i, r in enumerate(history) if r.get("seen")]
    if not changed:
        return False
    return not any(
        r.get("fresh") and data_date(record, r.get("seeds") or ())[:10] >= str(r["date"])[:10]
        for r in history[changed[-1] + 1 :]
    )

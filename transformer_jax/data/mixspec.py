"""``data.dataset.mixture`` and ``data.dataset.schedule`` as text, parsed and checked (no I/O).

``data.dataset.mixture = "web=/p/web:0.7,code=/p/code:0.3"``: named prepared directories with their
weights (``NAME=PATH:WEIGHT``; the weight after the last colon, so ``gs://`` paths parse).
``data.dataset.schedule = "1000:web=0.5,code=0.5;5000:web=0.2,code=0.8"``: later stages, as
Levanter's ``train_weights`` with stage boundaries: from step 1000 on (the batch step 1000
trains on, 0-based) the weights are 0.5/0.5. Stage 0 is ``data.dataset.mixture``'s weights, so the whole
schedule starts at 0 and its steps increase. Weights are relative (normalised per stage), finite,
>= 0 and not all zero.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from transformer_jax.core.configlib import fail

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class MixtureSource:
    name: str
    path: str
    weight: float


def _weight(field: str, text: str, where: str) -> float:
    try:
        w = float(text)
    except ValueError:
        fail(field, text, f"{where}: the weight is not a number", "give NAME=PATH:WEIGHT, e.g. web=/p/web:0.7")
    if not math.isfinite(w) or w < 0:
        fail(field, text, f"{where}: weights must be finite and >= 0")
    return w


def _check_not_all_zero(field: str, weights: list[float], where: str) -> None:
    if not any(weights):
        fail(field, ",".join(map(str, weights)), f"{where}: all weights are zero", "give one source a weight > 0")


def parse_mixture(text: str) -> tuple[MixtureSource, ...]:
    """``NAME=PATH:WEIGHT,...`` -> the sources in order (names unique)."""
    field, sources = "data.dataset.mixture", []
    for item in (t.strip() for t in text.split(",")):
        name, eq, rest = item.partition("=")
        path, colon, weight = rest.rpartition(":")
        name, path = name.strip(), path.strip()
        if not (eq and colon and name and path):
            fail(field, item, "is not NAME=PATH:WEIGHT", "e.g. data.dataset.mixture='web=/p/web:0.7,code=/p/code:0.3'")
        if not _NAME.match(name):
            fail(field, name, "is not a source name", "use letters, digits, _ . - (starting with a letter)")
        if any(s.name == name for s in sources):
            fail(field, name, "names two sources", "give each source its own name")
        sources.append(MixtureSource(name, path, _weight(field, weight, f"source {name!r}")))
    _check_not_all_zero(field, [s.weight for s in sources], "stage 0")
    return tuple(sources)


def parse_schedule(text: str | None, names: tuple[str, ...]) -> tuple[tuple[int, tuple[float, ...]], ...]:
    """``STEP:NAME=W,...;...`` -> the stages after stage 0 as ``(step, weights in source order)``."""
    field, stages, last = "data.dataset.schedule", [], 0
    for stage in (t.strip() for t in (text or "").split(";") if t.strip()):
        step_text, colon, rest = stage.partition(":")
        try:
            step = int(step_text)
        except ValueError:
            step = None
        if not colon or step is None:
            fail(field, stage, "is not STEP:NAME=WEIGHT,...", "e.g. '1000:web=0.5,code=0.5'")
        if step <= last:
            fail(field, step, f"must be > {last}: stage steps increase (stage 0 is data.dataset.mixture's weights)")
        weights: dict[str, float] = {}
        for item in (t.strip() for t in rest.split(",")):
            name, eq, w = item.partition("=")
            if not eq or name.strip() not in names:
                fail(
                    field,
                    item,
                    f"at step {step}: not NAME=WEIGHT with a source of data.dataset.mixture ({', '.join(names)})",
                )
            weights[name.strip()] = _weight(field, w, f"source {name.strip()!r} at step {step}")
        if missing := [n for n in names if n not in weights]:
            fail(field, stage, f"at step {step}: no weight for {', '.join(missing)}", "give every source a weight")
        _check_not_all_zero(field, list(weights.values()), f"at step {step}")
        stages.append((step, tuple(weights[n] for n in names)))
        last = step
    return tuple(stages)

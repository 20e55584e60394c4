"""Running a notebook's verdict cell on synthetic inputs (used by the ``test_verdicts*`` files).

``notebook_verdicts`` runs the one cell of ``notebooks/<name>.py`` that builds the verdict table,
exactly as written, on inputs bound to the names the cell reads, with the real ``ablation``
functions except a ``save_results`` that only records (after `ablation.check_claims` against the
notebook's registered ``CLAIMS``, as the real one does); it returns ``{claim: verdict}`` and checks
that every claim's comparisons were saved and that each row shows its n.
"""

import math
import pathlib
import types

import numpy as np

from transformer_jax import ablation
from transformer_jax.ablation.notebook_cells import cell, notebook_claims

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
HOLDS, FAILS, UNSURE = ablation.VERDICTS


def notebook_verdicts(notebook: str, **inputs) -> dict[str, str]:
    """``{claim: verdict}`` of ``notebook``'s verdict cell run on ``inputs``."""
    built, saved = [], {}

    def verdict_table(rows):
        built.extend(rows)
        return ablation.verdict_table(rows)

    def save_results(name, results, **kw):
        ablation.check_claims(kw["claims"], kw["comparisons"])  # what the real one refuses
        saved.update(name=name, results=results, **kw)
        return pathlib.Path("/nowhere")

    real = {name: getattr(ablation, name) for name in ablation.__all__}
    fake = types.SimpleNamespace(**{**real, "verdict_table": verdict_table, "save_results": save_results})
    scope = {"ablation": fake, "np": np, "math": math, "print": lambda *a, **k: None, "NOTEBOOK": notebook}
    scope |= {"CLAIMS": notebook_claims(notebook, NOTEBOOKS.parent), **inputs}
    exec(compile(cell(notebook, root=NOTEBOOKS.parent), str(NOTEBOOKS / f"{notebook}.py"), "exec"), scope)
    assert saved["name"] == notebook and saved["results"]["verdicts"] == ablation.verdict_table(built)
    verdicts = {claim: v for claim, _, v in built}
    assert len(verdicts) == len(built), "two rows with the same claim"
    comparisons = saved["comparisons"]
    assert list(comparisons) == list(verdicts), "every claim's comparisons are saved, in the table's order"
    for claim, parts in comparisons.items():
        parts = [parts] if isinstance(parts, ablation.Comparison) else parts
        assert ablation.combine(*(p.verdict for p in parts)) == verdicts[claim]
        assert all(f"n={p.n}" in dict(zip(verdicts, (m for _, m, _ in built)))[claim] for p in parts)
    return verdicts


SEEDS = (0, 1, 2)


def jitter(mean: float, k: int = 0, scale: float = 0.002) -> list[float]:
    """Three per-seed values around ``mean``; arms with different ``k`` vary differently by seed."""
    return [mean + scale * j for j in np.roll([0.0, 1.0, -1.0], k)]


def arm(**per_key) -> dict:
    """An `ablation.arm_record` from per-seed lists, one keyword per measured quantity."""
    n = len(next(iter(per_key.values())))
    return ablation.arm_record({s: {k: v[s] for k, v in per_key.items()} for s in range(n)})

"""A notebook's cells read as written: the one cell that builds its verdict table, or the one that
registers its claims (``CLAIMS``), from ``notebooks/<name>.py`` of a checkout (`paths.repo_root`).

Tests run the verdict cell on synthetic inputs; ``tools/register_sitting.py`` and
``tools/reword_results.py`` read the registered claims. A leaf of `transformer_jax.ablation`: it
imports the package, and nothing in the package imports it.
"""

from __future__ import annotations

import pathlib
import re
from typing import Any

from transformer_jax import ablation
from transformer_jax.ablation.paths import repo_root


def notebooks_dir(root: pathlib.Path | None = None) -> pathlib.Path:
    """``notebooks/`` of the checkout ``root`` (default `repo_root`)."""
    return (repo_root() if root is None else root) / "notebooks"


def cell(notebook: str, marker: str = "ablation.verdict_table(", root: pathlib.Path | None = None) -> str:
    """The one cell of ``notebooks/<notebook>.py`` that holds ``marker`` (default: the one building
    the verdict table), preceded by blank lines so that tracebacks give the notebook's line numbers;
    ValueError unless exactly one cell holds it."""
    text = (notebooks_dir(root) / f"{notebook}.py").read_text()
    starts = [m.end() for m in re.finditer(r"^# %%.*$", text, flags=re.M)]
    cells = [(a, text[a:b]) for a, b in zip([0, *starts], [*starts, len(text)])]
    found = [(a, c) for a, c in cells if marker in c]
    if len(found) != 1:
        raise ValueError(f"{notebook}: expected one cell holding {marker!r}, found {len(found)}")
    start, body = found[0]
    return "\n" * text.count("\n", 0, start) + body


def notebook_claims(notebook: str, root: pathlib.Path | None = None) -> tuple:
    """``CLAIMS``, the registered `ablation.Claim` specs of ``notebook``, from its one cell that
    calls ``ablation.register``, run as written."""
    scope: dict[str, Any] = {"ablation": ablation}
    path = notebooks_dir(root) / f"{notebook}.py"
    exec(compile(cell(notebook, "ablation.register(", root), str(path), "exec"), scope)
    return scope["CLAIMS"]

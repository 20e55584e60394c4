"""Where a notebook's results and runs go, by mode (SMOKE for CI, FULL otherwise), and the commit.

FULL mode keeps a notebook's ``results.json``, figures and run summaries (which later sittings read
back instead of training again) in ``experiments/results/<notebook>/`` of a transformer-jax checkout:
the one this package was installed from (``pip install -e``), else the one holding the working
directory, or wherever ``TRANSFORMER_JAX_RESULTS`` points. With none of them (a non-editable install
run outside a clone), FULL mode stops at the notebook's first cell with `ResultsNotFoundError`,
saying where to get the committed summaries and how long training them again takes.
"""

from __future__ import annotations

import importlib.metadata
import pathlib
import re
import subprocess
import tempfile
import time
import warnings
from typing import Any

from transformer_jax.core import envflags

SMOKE_ENV = "TRANSFORMER_JAX_SMOKE"
REUSE_ENV = "TRANSFORMER_JAX_REUSE_RUNS"
RESULTS_ENV = "TRANSFORMER_JAX_RESULTS"
PROJECT = "transformer-jax"

FULL_HOURS = {
    "attention_scaling": 3.0,
    "causal_mask": 2.6,
    "decoding": 5.0,
    "language_model_history": 5.8,
    "mixture_of_experts": 7.5,
    "norm_placement": 0.2,
    "norm_training": 12.9,
    "positional_encoding": 8.4,
}
"""Hours a FULL sitting trains when it reuses nothing: the larger of the summed training wall-clock
of the committed runs and the sitting's own (``wall_clock`` of the committed ``results.json``, on the
2-core machine that made them; a test keeps the two equal)."""

PENDING_RERUN: dict[str, str] = {}
"""Notebooks whose registered claims await a FULL rerun spanning several sittings (issue 39, item 3),
with why: their run summaries are being committed, and their ``results.json``, if any, is the previous
run's. The gallery says so; a notebook leaves once its rerun's results are committed."""


class ResultsNotFoundError(FileNotFoundError):
    """FULL mode outside a checkout: no committed results to read, nowhere agreed to write."""


def smoke() -> bool:
    """True when ``TRANSFORMER_JAX_SMOKE`` is set to 1 (CI's quick pass over every notebook)."""
    return _flag(SMOKE_ENV)


def _flag(name: str) -> bool:
    return bool(envflags.switch(name))


_smoke_mode = smoke  # `pick`'s keyword shadows the function


def pick(*, smoke: Any, full: Any) -> Any:
    """``smoke`` in SMOKE mode, else ``full``."""
    return smoke if _smoke_mode() else full


def _is_checkout(path: pathlib.Path) -> bool:
    try:
        text = (path / "pyproject.toml").read_text()
    except OSError:
        return False
    return re.search(rf'^name = "{PROJECT}"$', text, re.M) is not None


def repo_root() -> pathlib.Path:
    """The checkout this package was installed from (editable install), else the checkout that
    holds the working directory, else the working directory."""
    here = pathlib.Path(__file__).resolve().parents[2]
    if _is_checkout(here):
        return here
    cwd = pathlib.Path.cwd()
    return next((p for p in (cwd, *cwd.parents) if _is_checkout(p)), cwd)


_WARNED: set[pathlib.Path] = set()


def results_root() -> pathlib.Path | None:
    """Where FULL results live: ``$TRANSFORMER_JAX_RESULTS``, else the checkout's
    ``experiments/results``; None when neither exists (`results_dir` then stops in FULL mode). A
    chosen folder that does not exist yet is taken (a rerun writes there) with a warning, since a
    mistyped path to a clone's results would otherwise retrain every run without a word."""
    chosen = envflags.value(RESULTS_ENV)
    if chosen is not None:
        path = pathlib.Path(chosen).expanduser()
        if not path.is_dir() and path not in _WARNED:
            _WARNED.add(path)
            warnings.warn(
                f"{RESULTS_ENV}={chosen} does not exist: FULL mode finds no committed run there and trains every "
                "run again into it; point it at a clone's experiments/results to reuse the committed runs",
                stacklevel=2,
            )
        return path
    path = repo_root() / "experiments" / "results"
    return path if path.is_dir() else None


def repository_url() -> str:
    """The repository's address: ``[project.urls] Repository`` of pyproject.toml, read from the
    installed metadata (else from the checkout's pyproject.toml)."""
    try:
        urls = importlib.metadata.metadata(PROJECT).get_all("Project-URL") or []
    except importlib.metadata.PackageNotFoundError:
        urls = []
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "repository":
            return url.strip()
    found = re.search(r'^Repository = "([^"]+)"$', _read(repo_root() / "pyproject.toml"), re.M)
    return found.group(1) if found else f"the {PROJECT} repository"


def _read(path: pathlib.Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def missing_results_message(notebook: str) -> str:
    """What FULL mode says outside a checkout: where the committed run summaries are, how to use
    them, and what training everything again costs."""
    hours = FULL_HOURS.get(notebook)
    cost = f"about {hours:g} h of training on the 2-core CPU machine that made them" if hours else "hours"
    url = repository_url()
    return (
        f"FULL mode reads {notebook}'s committed run summaries from experiments/results/{notebook}/runs/ "
        f"of a {PROJECT} checkout, and found none ({RESULTS_ENV} is unset; no checkout holds "
        f"{repo_root()} and the package is not installed from one). To reuse them: git clone {url}, "
        f"`pip install -c constraints.txt -e '.[dev]'` in the clone and run the notebook there, or set "
        f"{RESULTS_ENV}=<clone>/experiments/results. To train every run again instead ({cost}), set "
        f"{RESULTS_ENV} to a folder for the new results. SMOKE mode ({SMOKE_ENV}=1) needs neither."
    )


_SMOKE_DIR: pathlib.Path | None = None


def results_dir(notebook: str) -> pathlib.Path:
    """``<results_root()>/<notebook>/`` (FULL; `ResultsNotFoundError` when there is no results
    root), or a temporary folder (SMOKE, so that CI never touches committed results)."""
    global _SMOKE_DIR
    if smoke():
        if _SMOKE_DIR is None:
            _SMOKE_DIR = pathlib.Path(tempfile.mkdtemp(prefix="tj_smoke_"))
        path = _SMOKE_DIR / notebook
    else:
        root = results_root()
        if root is None:
            raise ResultsNotFoundError(missing_results_message(notebook))
        path = root / notebook
    path.mkdir(parents=True, exist_ok=True)
    return path


def runs_dir(notebook: str) -> pathlib.Path:
    """Where a notebook's training runs write checkpoints and logs (never committed)."""
    base = pathlib.Path(envflags.value("TRANSFORMER_JAX_RUNS") or tempfile.gettempdir()) / "transformer_jax_runs"
    path = base / ("smoke_" + notebook if smoke() else notebook)
    path.mkdir(parents=True, exist_ok=True)
    return path


def git_commit() -> str | None:
    """The commit of the checkout (with ``-dirty`` when it has uncommitted changes), if any."""
    try:
        root = repo_root()
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return sha.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


START_TIME = time.time()
"""When this process imported the package: the start of a notebook's sitting."""
START_COMMIT = git_commit()
"""The commit of the code this process imported (a later commit does not change what ran)."""


def same_library(commit: str, other: str = "HEAD") -> bool:
    """Whether the package (``transformer_jax/``) is the same at ``commit`` and at ``other`` (False
    outside git or for a commit this checkout lacks)."""
    try:
        done = subprocess.run(
            ["git", "diff", "--quiet", commit, other, "--", "transformer_jax"], cwd=repo_root(), capture_output=True
        )
    except OSError:
        return False
    return done.returncode == 0

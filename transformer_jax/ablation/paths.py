"""Where a notebook's results and runs go, by mode (SMOKE for CI, FULL otherwise), and the commit."""

from __future__ import annotations

import pathlib
import subprocess
import tempfile
import time
from typing import Any

from transformer_jax.core import envflags

SMOKE_ENV = "TRANSFORMER_JAX_SMOKE"
REUSE_ENV = "TRANSFORMER_JAX_REUSE_RUNS"


def smoke() -> bool:
    """True when ``TRANSFORMER_JAX_SMOKE`` is set to 1 (CI's quick pass over every notebook)."""
    return _flag(SMOKE_ENV)


def _flag(name: str) -> bool:
    return bool(envflags.switch(name))


_smoke_mode = smoke  # `pick`'s keyword shadows the function


def pick(*, smoke: Any, full: Any) -> Any:
    """``smoke`` in SMOKE mode, else ``full``."""
    return smoke if _smoke_mode() else full


def repo_root() -> pathlib.Path:
    """The checkout this package was installed from (editable install), else the working directory."""
    here = pathlib.Path(__file__).resolve().parents[2]
    return here if (here / "pyproject.toml").is_file() else pathlib.Path.cwd()


_SMOKE_DIR: pathlib.Path | None = None


def results_dir(notebook: str) -> pathlib.Path:
    """``experiments/results/<notebook>/`` of the checkout (FULL), or a temporary folder (SMOKE,
    so that CI never touches committed results)."""
    global _SMOKE_DIR
    if smoke():
        if _SMOKE_DIR is None:
            _SMOKE_DIR = pathlib.Path(tempfile.mkdtemp(prefix="tj_smoke_"))
        path = _SMOKE_DIR / notebook
    else:
        path = repo_root() / "experiments" / "results" / notebook
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

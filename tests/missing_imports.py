"""A pytest hook (imported by ``tests/conftest.py``): test modules skipped whole because an import
failed (``pytest.importorskip`` at module level, e.g. the interop tests without torch or
transformers) are named in the terminal summary, in red, instead of passing as a quiet count of
skips. No JAX here, so that a pytest run of its own can load it (tests/test_missing_imports.py)."""

from __future__ import annotations

import pytest

INSTALL = (
    "pip install torch==2.13.0 && "
    "pip install -c constraints.txt -e '.[dev,interop,tpu,lmeval,docs,tensorboard,wandb]' (README.md)"
)


def _reason(report: pytest.CollectReport) -> str:
    longrepr = report.longrepr
    return str(longrepr[2] if isinstance(longrepr, tuple) else longrepr)


def missing_imports(reports) -> dict[str, str]:
    """``{module node id: skip reason}`` of the collect reports skipped for an import that failed."""
    out = {}
    for report in reports:
        if isinstance(report, pytest.CollectReport) and "could not import" in _reason(report):
            out[report.nodeid] = _reason(report).removeprefix("Skipped: ")
    return out


def pytest_terminal_summary(terminalreporter) -> None:
    missing = missing_imports(terminalreporter.stats.get("skipped", []))
    if not missing:
        return
    terminalreporter.write_sep("!", f"{len(missing)} test modules NOT RUN: an import they need failed", red=True)
    for nodeid, reason in sorted(missing.items()):
        terminalreporter.write_line(f"NOT RUN {nodeid}: {reason}", red=True, bold=True)
    terminalreporter.write_line(f"CI runs them all; to run them here: {INSTALL}", red=True)

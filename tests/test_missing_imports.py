"""The terminal summary names the test modules skipped whole for a missing import
(tests/missing_imports.py, wired in by tests/conftest.py): the interop modules in a run where torch
and transformers cannot be imported, and any such module in a run of its own, with and without
xdist workers (CI runs with ``-n 2``)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOOK = "from tests.missing_imports import pytest_terminal_summary  # noqa\n"


def _pytest(cwd, *args, pythonpath=ROOT, status=0) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=cwd, env={**os.environ, "PYTHONPATH": pythonpath}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == status, proc.stdout + proc.stderr
    return proc


def _not_run(proc) -> list[str]:
    return [line for line in proc.stdout.splitlines() if line.startswith("NOT RUN")]


def test_interop_modules_without_torch_and_transformers_are_named(tmp_path):
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    for name in ("torch", "transformers"):
        (blocked / f"{name}.py").write_text(f"raise ModuleNotFoundError('blocked by the test', name={name!r})\n")
    modules = ["tests/models/test_hf_interop.py", "tests/models/test_hf_tokenizer.py"]
    proc = _pytest(ROOT, "-n", "0", *modules, pythonpath=f"{blocked}{os.pathsep}{ROOT}", status=5)  # no test ran
    assert _not_run(proc) == [
        "NOT RUN tests/models/test_hf_interop.py: could not import 'torch': blocked by the test",
        "NOT RUN tests/models/test_hf_tokenizer.py: could not import 'transformers': blocked by the test",
    ], proc.stdout
    assert "2 test modules NOT RUN" in proc.stdout


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["in_process", "xdist"])
def test_modules_skipped_for_a_missing_import_are_named(tmp_path, workers):
    (tmp_path / "conftest.py").write_text(HOOK)
    (tmp_path / "test_needs_it.py").write_text(
        "import pytest\nnot_installed = pytest.importorskip('no_such_module_here')\n\ndef test_a():\n    pass\n"
    )
    (tmp_path / "test_fine.py").write_text(
        "import pytest\n\ndef test_b():\n    pass\n\ndef test_c():\n    pytest.skip('not an import')\n"
    )
    proc = _pytest(tmp_path, *workers, str(tmp_path))
    assert _not_run(proc) == [
        "NOT RUN test_needs_it.py: could not import 'no_such_module_here': No module named 'no_such_module_here'"
    ], proc.stdout


def test_nothing_is_named_when_every_import_works(tmp_path):
    (tmp_path / "conftest.py").write_text(HOOK)
    (tmp_path / "test_fine.py").write_text("import pytest\nos = pytest.importorskip('os')\n\ndef test_b():\n    pass\n")
    assert not _not_run(_pytest(tmp_path, str(tmp_path)))

"""The notebooks' install cell (Colab): the same in every notebook, the repository address of
pyproject.toml, the versions of constraints.txt, the jax build of the runtime."""

import importlib.util
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p for p in (ROOT / "notebooks").glob("*.py") if p.name != "conftest.py")


def _cell(path: pathlib.Path) -> str:
    found = re.search(r"^# %%\n# On Colab.*?(?=^# %%)", path.read_text(), re.S | re.M)
    assert found, f"{path.name} has no install cell"
    return found.group(0)


def _run_cell(monkeypatch, *, colab=True, installed=False, gpu=False) -> list[list[str]]:
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, check: calls.append(cmd))
    real_find = importlib.util.find_spec
    hidden = () if installed else ("transformer_jax",)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in hidden else real_find(name, *a))
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/nvidia-smi" if gpu and name == "nvidia-smi" else None)
    monkeypatch.delenv("TPU_ACCELERATOR_TYPE", raising=False)
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    exec(compile(_cell(NOTEBOOKS[0]), "install_cell", "exec"), {"__name__": "__main__"})
    return calls


def test_every_notebook_has_the_same_install_cell_with_the_projects_address():
    cells = {p.name: _cell(p) for p in NOTEBOOKS}
    assert len(set(cells.values())) == 1, "the install cells differ: copy one to the others, then jupytext --sync"
    url = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    assert f'REPOSITORY = "{url}"' in cells[NOTEBOOKS[0].name]


def test_on_colab_it_installs_the_repository_pinned_to_its_constraints(monkeypatch):
    monkeypatch.delenv("TRANSFORMER_JAX_SOURCE", raising=False)
    url = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    (cmd,) = _run_cell(monkeypatch)
    assert cmd[:4] == [sys.executable, "-m", "pip", "install"]
    assert cmd[cmd.index("-c") + 1] == f"{url}/raw/main/constraints.txt"
    assert cmd[-1] == f"transformer-jax @ git+{url}"
    (cmd,) = _run_cell(monkeypatch, gpu=True)
    assert cmd[-1] == f"transformer-jax[gpu] @ git+{url}"


def test_a_wheel_named_by_path_becomes_a_file_url(monkeypatch, tmp_path):
    wheel = tmp_path / "transformer_jax-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    monkeypatch.setenv("TRANSFORMER_JAX_SOURCE", str(wheel))
    (cmd,) = _run_cell(monkeypatch)
    assert cmd[-1] == f"transformer-jax @ {wheel.as_uri()}"


@pytest.mark.parametrize("colab,installed", [(False, False), (True, True)])
def test_it_does_nothing_off_colab_or_once_installed(monkeypatch, colab, installed):
    assert _run_cell(monkeypatch, colab=colab, installed=installed) == []

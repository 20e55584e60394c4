"""Packaging facts that must not drift: the accelerator extras pin the jax that constraints.txt pins,
the version is written once, and the package ships py.typed."""

import pathlib
import re
import tomllib

import transformer_jax

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_accelerator_extras_pin_the_constrained_jax():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pinned = re.search(r"^jax==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M).group(1)
    extras = project["optional-dependencies"]
    assert extras["gpu"] == [f"jax[cuda12]=={pinned}"] and extras["tpu"] == [f"jax[tpu]=={pinned}"]


def test_version_is_written_once_and_py_typed_ships():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "transformer_jax.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", transformer_jax.__version__)
    assert (ROOT / "transformer_jax" / "py.typed").is_file()

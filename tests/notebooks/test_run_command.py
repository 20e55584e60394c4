"""The documented way to run a notebook (docs/notebooks_run.md, README.md) runs, with what the dev
extra installs."""

import json
import os
import pathlib
import shlex
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = ("docs/notebooks_run.md", "docs/notebooks.md", "README.md")


def _documented() -> str:
    lines = {
        page: [line for line in (ROOT / page).read_text().splitlines() if " jupyter execute " in line] for page in PAGES
    }
    assert all(len(found) == 1 for found in lines.values()), lines
    assert len({found[0] for found in lines.values()}) == 1, "the pages give different commands"
    return lines[PAGES[0]][0]


def test_the_documented_command_runs_a_notebook_in_smoke_mode(tmp_path):
    words = shlex.split(_documented())
    env = dict(os.environ)
    while "=" in words[0]:
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    assert env["TRANSFORMER_JAX_SMOKE"] == "1" and words[:2] == ["jupyter", "execute"]
    (out_flag,) = [w for w in words if w.startswith("--output=")]
    name = pathlib.Path(out_flag.removeprefix("--output=")).name
    words[words.index(out_flag)] = f"--output={tmp_path / name}"
    env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split() if "host_platform_device_count" not in f)
    env["PATH"] = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    subprocess.run(words, cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
    cells = [c for c in json.loads((tmp_path / f"{name}.ipynb").read_text())["cells"] if c["cell_type"] == "code"]
    outputs = [o for c in cells for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"]
    assert "| verdict |" in "".join("".join(o.get("text", "")) for o in outputs)

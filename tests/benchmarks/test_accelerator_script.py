"""experiments/bench/accelerator.py (its figures are benchmarks, not tests): on CPU it says there is
no accelerator and exits 0; `--tiny` runs the whole measurement path with a tiny model here."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "bench" / "accelerator.py"


def _load():
    spec = importlib.util.spec_from_file_location("accelerator_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_an_accelerator_it_says_so_and_exits_0():
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "no accelerator: JAX's default backend is 'cpu'" in r.stdout


def test_tiny_run_reports_every_figure(tmp_path, capsys):
    bench = _load()
    out = tmp_path / "acc.json"
    assert bench.main(["--tiny", "--only", "gpt2_124m", "--steps", "1", "--new-tokens", "4", "--json", str(out)]) == 0
    (r,) = json.loads(out.read_text())["results"]
    assert r["model"] == "gpt2_124m" and r["step_ms"] > 0 and r["tokens_per_s"] > 0 and r["compile_s"] > 0
    assert set(r["decode_tokens_per_s"]) == {"1", "64"} and min(r["decode_tokens_per_s"].values()) > 0
    assert r["mfu"] is None and r["peak_tflops"] is None  # no published peak for a CPU: not invented
    assert r["flops_per_token"] > 0 and r["xla_flops_per_token"] > 0
    printed = capsys.readouterr().out
    assert "greedy decode tokens/s: batch 1:" in printed and "MFU n/a" in printed

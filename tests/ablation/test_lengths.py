"""The length arms' measurements (`ablation.lengths`): what each run measures at each context, and
how the kept measurements are read back by context and seed."""

import math
import pathlib
import re

from transformer_jax.ablation import Curves, lengths


def run(measured):
    return Curves("r", [1], [1.0], [1], [1.0], {"measured": measured}, "/runs/r")


def test_the_measure_evaluates_the_runs_checkpoint_at_each_context(monkeypatch):
    calls = []
    monkeypatch.setattr(lengths, "eval_loss", lambda workdir, overrides: calls.append((workdir, overrides)) or 1.5)
    assert lengths.losses_by_length((64, 256))(run(None)) == {"64": 1.5, "256": 1.5}
    assert calls == [("/runs/r", ["data.seq_len=64"]), ("/runs/r", ["data.seq_len=256"])]


def test_kept_measurements_are_read_by_context_then_seed_and_a_run_that_measured_nothing_is_nan():
    got = lengths.measured_by_length([run({"64": 1.0, "256": 2.0}), run(None), run({"64": 1.5})], (64, 256))
    assert list(got) == [64, 256]
    assert got[64][0] == 1.0 and math.isnan(got[64][1]) and got[64][2] == 1.5
    assert got[256][0] == 2.0 and math.isnan(got[256][1]) and math.isnan(got[256][2])


def test_the_length_arms_sweep_on_seed_0_where_their_committed_sweep_runs_are(monkeypatch):
    """A sweep on another seed (tuned_runs' DEV_SEED default) is keyed anew: every committed length
    sweep (positional_encoding's runs named ``<encoding>_lr=<lr>_dev__s<seed>``) would train again."""
    called = []

    def tuned_runs(cfg, arm, grid, notebook, seeds, **kw):
        called.append(kw["sweep_seeds"])
        return {}, cfg, [run({}) for _ in seeds]

    monkeypatch.setattr(lengths, "tuned_runs", tuned_runs)
    lengths.run_length_arms({"rope": None, "alibi": None}, [1e-3], "nb", [0, 1], [64])
    runs = pathlib.Path(__file__).resolve().parents[2] / "experiments/results/positional_encoding/runs"
    sweeps = [p.name for p in runs.glob("*_dev__s*.json") if not p.name.startswith(("reverse_", "sort_"))]
    assert sweeps and {re.search(r"_dev__s(\d+)__", n).group(1) for n in sweeps} == {"0"}
    assert called == [(0,), (0,)]

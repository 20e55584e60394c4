"""The length arms' measurements (`ablation.lengths`): what each run measures at each context, and
how the kept measurements are read back by context and seed."""

import math

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

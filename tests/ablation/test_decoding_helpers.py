"""The decoding notebook's helpers that turn per-model numbers into comparisons (`ablation.decoding`)."""

import math

import numpy as np
import pytest

from transformer_jax import ablation
from transformer_jax.ablation.decoding import loglog_or_unmeasured, nan_for_none, paired_measured


def test_paired_measured_is_paired_where_every_value_is_defined():
    a, b = [0.30, 0.31, 0.29], [0.40, 0.42, 0.41]
    got, want = paired_measured(a, b, expect="less"), ablation.paired(a, b, expect="less")
    assert (got.mean, got.low, got.high, got.n) == (want.mean, want.low, want.high, want.n)


def test_paired_measured_leaves_an_undefined_measure_unmeasured():
    c = paired_measured([0.3, math.nan, 0.3], [0.4, 0.4, 0.4], expect="less")
    assert c.n == 0 and c.method.startswith("not measured") and c.verdict == "inconclusive"


def test_loglog_or_unmeasured():
    x = [256, 512, 1024]
    assert loglog_or_unmeasured(x, np.asarray(x) ** 2.0, expect="greater", reference=1.5).mean == pytest.approx(2.0)
    assert loglog_or_unmeasured(x, [1.0, -0.1, 2.0], expect="greater").method.startswith("not measured")


def test_nan_for_none_undoes_json():
    back = nan_for_none({"a": None, "b": [1.0, None], "c": {"d": 2}})
    assert math.isnan(back["a"]) and math.isnan(back["b"][1]) and back["b"][0] == 1.0 and back["c"] == {"d": 2}

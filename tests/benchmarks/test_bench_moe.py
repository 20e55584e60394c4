"""``bench moe`` plumbing (its figures are benchmarks, not tests): the variants it times and one
tiny alternating measurement."""

import dataclasses

from transformer_jax import ablation
from transformer_jax.benchmarks.moe import bench_moe, moe_variants
from transformer_jax.models.moe_config import MoEConfig


def test_variants_are_dense_and_one_moe_per_dispatch_at_equal_active_width(monkeypatch):
    monkeypatch.setenv(ablation.SMOKE_ENV, "1")
    cfg = ablation.shakespeare_config("b", steps=2)
    v = moe_variants(cfg, ("padded", "ragged"))
    assert list(v) == ["dense", "moe_padded", "moe_ragged"] and v["dense"].model.moe is None
    moe = v["moe_padded"].model.moe
    assert (moe.n_experts, moe.top_k, moe.top_k * moe.d_expert, moe.dispatch) == (8, 2, cfg.model.dims.d_ff, "padded")
    own = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, moe=MoEConfig(n_experts=4, top_k=1)))
    assert moe_variants(own)["moe_auto"].model.moe.n_experts == 4


def test_bench_moe_reports_times_ratios_and_load(monkeypatch):
    monkeypatch.setenv(ablation.SMOKE_ENV, "1")
    out = bench_moe(ablation.shakespeare_config("b", steps=2), rounds=1, steps=1, warmup=1, dispatches=("padded",))
    assert out["bench"] == "moe" and out["dense"]["ratio_to_dense_median"] == 1.0
    moe = out["moe_padded"]
    assert moe["median_ms"] > 0 and moe["params"] > out["dense"]["params"] and len(moe["load_max_over_mean"]) == 1
    assert moe["optimizer_update_ms"] > 0 and out["dense"]["optimizer_update_ms"] > 0

"""The roofline estimate's compute term: never below the model formula's share of a device."""

import pytest

from transformer_jax.core.targets import get_target
from transformer_jax.train import roofline


def _report(xla_per_device: float | None) -> dict:
    return {
        "fits": True,
        "chips": 4,
        "mesh": {"data": 1, "fsdp": 4, "context": 1, "tensor": 1, "expert": 1},
        "params": 1_000_000,
        "flops_per_step": {"model_formula": 4e15, "xla_per_device": xla_per_device},
        "bytes_per_device": {"arguments": 1e9, "outputs": 1e9, "temporaries": 1e9},
        "hbm_bytes_per_device": 1e9,
        "hlo_collectives": [],
    }


@pytest.mark.parametrize("xla", [2e14, None])
def test_an_undercounted_loop_cannot_push_mfu_past_100_percent(xla):
    """XLA counts a loop body once: 2e14 FLOPs per device where the formula needs 1e15."""
    target = get_target("v5p-8")
    est = roofline.estimate(_report(xla), target)
    assert est["roofline"]["compute_s"] == pytest.approx(1e15 / target.chip.peak_flops)
    assert est["estimated_mfu"] == pytest.approx(1.0)
    assert "model formula" in est["roofline"]["compute_source"]


def test_xla_counting_more_than_the_formula_is_kept():
    """Remat recomputes the forward: XLA's larger count is the better estimate and MFU drops below 100%."""
    target = get_target("v5p-8")
    est = roofline.estimate(_report(2e15), target)
    assert est["roofline"]["compute_source"] == "XLA FLOPs per device"
    assert est["estimated_mfu"] == pytest.approx(0.5)

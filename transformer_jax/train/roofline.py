"""A roofline estimate of a compiled step's time: the slowest of its compute at the chip's peak,
its HBM traffic at the chip's bandwidth and its collectives at the interconnect's bandwidth.

An estimate, not a measurement, and a bound: every part runs at its peak rate and the three overlap
perfectly, so the step takes at least this long and its MFU is at most the figure (a compute-bound
step is 100% by construction). Kernels reach a fraction of peak in practice. Collectives between
slices go over the slower data-centre network, counted here only for a multi-slice target's
all-reduces of the gradients (the data axis spans the slices). Without XLA's byte count (GPU
targets) the HBM traffic is each buffer read or written once, which underestimates it.

XLA's cost analysis counts a loop body once (the blocks of chunked attention, a context-parallel
ring) and a Pallas kernel (splash) not at all: where its FLOPs fall below the model formula's share
of a device, the compute term uses the model formula, so the MFU bound cannot pass 100%. Its byte
count has the same blind spot.
"""

from __future__ import annotations

from transformer_jax.core.targets import Target
from transformer_jax.train import hlo


def estimate(report: dict, target: Target | None) -> dict:
    """``roofline`` (compute_s, hbm_s, collective_s, each with its source), ``estimated_step_s`` and
    ``estimated_mfu`` (model-formula FLOPs over the estimated time at the chips' peak) of a
    `train.aot.compile_train` report; None where the target's figures are unknown (a local CPU)."""
    none = {"roofline": None, "estimated_step_s": None, "estimated_mfu": None}
    if target is None or not report.get("fits") or "arguments" not in (report.get("bytes_per_device") or {}):
        return none
    chip, chips = target.chip, report["chips"]
    model_flops = report["flops_per_step"]["model_formula"]
    xla = report["flops_per_step"]["xla_per_device"]
    formula_share = model_flops / chips
    per_device = formula_share if xla is None else max(xla, formula_share)
    memory = report["bytes_per_device"]
    traffic = report.get("hbm_bytes_per_device")
    if traffic is None:  # no cost analysis (GPU): every buffer read or written once, a lower bound
        traffic = memory.get("arguments", 0) + memory.get("outputs", 0) + memory.get("temporaries", 0)
        traffic_source = "arguments + outputs + temporaries (no XLA byte count for this platform)"
    else:
        traffic_source = "XLA cost_analysis bytes accessed"
    ici = hlo.collective_seconds(report.get("hlo_collectives", []), chip.ici_bytes_per_s)
    dcn = 0.0
    if target.slices > 1:  # each device's float32 gradient shard all-reduced over the slices (a ring)
        n, mesh = target.slices, report["mesh"]
        shard = 4 * report["params"] / (mesh["fsdp"] * mesh["tensor"] * mesh["expert"])
        dcn = 2 * (n - 1) / n * shard / chip.dcn_bytes_per_s
    parts = {
        "compute_s": per_device / chip.peak_flops,
        "compute_source": _compute_source(xla, formula_share),
        "hbm_s": traffic / chip.hbm_bytes_per_s,
        "hbm_source": traffic_source,
        "collective_s": ici + dcn,
        "collective_source": "HLO collectives at ICI/NVLink bandwidth" + (" + DCN gradient all-reduce" if dcn else ""),
    }
    step = max(parts["compute_s"], parts["hbm_s"], parts["collective_s"])
    mfu = model_flops / (step * chip.peak_flops * chips) if step > 0 else None
    return {"roofline": parts, "estimated_step_s": step, "estimated_mfu": mfu}


def _compute_source(xla: float | None, formula_share: float) -> str:
    if xla is None:
        return "model formula / chips"
    if xla < formula_share:
        return f"model formula / chips (XLA counted {xla:.3g} per device: loop bodies once, Pallas kernels not at all)"
    return "XLA FLOPs per device"

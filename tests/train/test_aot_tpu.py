"""Compiling the real train step and generation for TPU targets on this CPU machine (libtpu).

Each multi-chip compile with a Mosaic kernel (splash, megablox) is itself the check that the kernel
runs per device: XLA refuses to partition a Mosaic call ("Mosaic kernels cannot be automatically
partitioned"), so without `ops.per_shard` these compiles fail."""

import dataclasses

import jax
import numpy as np
import pytest

from tests.train.aot_helpers import kernel_shapes, needs_libtpu, no_persistent_cache, replace_model, tiny_config
from transformer_jax.core.targets import get_target
from transformer_jax.models import count_params
from transformer_jax.models.moe_config import MoEConfig
from transformer_jax.parallel import MeshConfig, make_mesh
from transformer_jax.parallel.topology import target_devices
from transformer_jax.train import aot
from transformer_jax.train.config import resolve

pytestmark = [needs_libtpu, pytest.mark.usefixtures(no_persistent_cache.__name__)]
DATA2_FSDP2 = MeshConfig(data=2, fsdp=2)


def _hlo(cfg, target):
    return aot.compile_train(cfg, target, correct_scan=False, keep_hlo=True)["hlo_text"]


@pytest.mark.parametrize("impl", ["xla", "splash"])
def test_llama_tiny_compiles_for_v5e_4_data_by_fsdp(impl):
    report = aot.compile_train(tiny_config(mesh=DATA2_FSDP2, attention_impl=impl), get_target("v5e-4"))
    assert report["fits"] and report["chips"] == 4 and report["mesh"]["data"] == 2 and report["mesh"]["fsdp"] == 2
    assert report["bytes_per_device"]["total"] > 0 and report["flops_per_step"]["xla_per_device"] > 0
    assert report["collectives"]["all-reduce"]["count"] > 0, "data parallelism reduces the gradients"


def test_splash_runs_on_each_chips_batch_rows():
    """8 rows over data 2 x fsdp 2: the splash kernels' arrays have 2 rows (the vmap over a device's batch)."""
    hlo = _hlo(tiny_config(mesh=DATA2_FSDP2, attention_impl="splash"), get_target("v5e-4"))
    four_d = [s for s in kernel_shapes(hlo, "tpu_custom_call") if len(s) == 4]
    assert four_d and {s[0] for s in four_d} == {2}, four_d


def test_auto_picks_splash_for_a_tpu_target():
    hlo = _hlo(tiny_config(mesh=DATA2_FSDP2, attention_impl="auto"), get_target("v5e-4"))
    assert kernel_shapes(hlo, "tpu_custom_call"), "auto compiled for a TPU uses the splash kernel"


@pytest.mark.parametrize(
    "dispatch, mesh", [("megablox", DATA2_FSDP2), ("expert_parallel", MeshConfig(data=1, fsdp=2, expert=2))]
)
def test_moe_compiles_for_a_tpu_target(dispatch, mesh):
    moe = MoEConfig(n_experts=4, top_k=2, dispatch=dispatch)  # the default balance loss, coefficient 0.01
    report = aot.compile_train(tiny_config(mesh=mesh, moe=moe, attention_impl="xla"), get_target("v5e-4"))
    assert report["fits"]
    if dispatch == "expert_parallel":
        assert report["collectives"]["all-to-all"]["count"] > 0, "tokens travel to their experts"


def test_optimizer_state_is_sharded_like_the_parameters():
    """AdamW's two moments sharded over fsdp with their parameters: arguments per device within 10%
    of (parameters + mu + nu) / fsdp, float32 (they were replicated: about 3x that). Head dim and
    widths are multiples of 128, so TPU tiles add no padding."""
    cfg = tiny_config(mesh=MeshConfig(data=1, fsdp=4), d_model=512, d_ff=1024, n_heads=4, n_kv_heads=2, vocab_size=512)
    report = aot.compile_train(cfg, get_target("v5e-4"))
    expected = 12 * count_params(cfg.model) / 4
    assert abs(report["bytes_per_device"]["arguments"] - expected) <= 0.1 * expected, (report, expected)


def test_a_target_that_cannot_fit_is_reported_and_fits_with_remat():
    """16 layers of the T x T attention scores (xla) at batch 64 x 1024 overflow a v5e chip's 16 GiB;
    recomputing the activations in the backward pass (remat) keeps one layer's."""
    cfg = tiny_config(
        batch=64, seq_len=1024, mesh=MeshConfig(data=1), n_layers=16, scan_layers=True, attention_impl="xla"
    )
    report = aot.compile_train(cfg, get_target("v5e-1"), correct_scan=False)
    assert not report["fits"] and report["bytes_per_device"]["total"] > 16 * 2**30, report
    assert "model.execution.remat=full" in aot.what_to_change(resolve(cfg), report)[0]
    assert aot.compile_train(replace_model(cfg, remat="full"), get_target("v5e-1"), correct_scan=False)["fits"]


def test_generate_compiles_for_a_tpu_target():
    cfg = tiny_config(mesh=DATA2_FSDP2)
    report = aot.compile_decode(cfg, get_target("v5e-4"), batch=8, prompt_len=16, new_tokens=16)
    assert report["fits"] and report["bytes_per_device"]["total"] > 0


def test_two_slices_put_the_data_axis_across_slices():
    target = get_target("v5e-4", slices=2)
    devices = list(target_devices(target))
    assert len(devices) == 8 and {d.slice_index for d in devices} == {0, 1}
    mesh = make_mesh(MeshConfig(data=2, fsdp=4), devices)
    slice_of = np.vectorize(lambda d: d.slice_index)(mesh.devices)
    assert (slice_of[0] == 0).all() and (slice_of[1] == 1).all(), "data index i lives on slice i"
    report = aot.compile_train(tiny_config(mesh=MeshConfig(data=2, fsdp=4)), target)
    assert report["fits"] and report["slices"] == 2
    assert "DCN" in report["roofline"]["collective_source"]


def test_two_slices_refuse_a_data_axis_that_does_not_span_them():
    with pytest.raises(ValueError, match="mesh.data"):
        make_mesh(MeshConfig(data=1, fsdp=8), list(target_devices(get_target("v5e-4", slices=2))))


def test_the_scan_correction_counts_every_layer():
    """XLA counts a scan body once; the corrected count of a scanned model equals the unrolled one's."""
    cfg = tiny_config(mesh=DATA2_FSDP2, n_layers=4, attention_impl="xla")
    scanned = aot.compile_train(replace_model(cfg, scan_layers=True), get_target("v5e-4"))["flops_per_step"]
    unrolled = aot.compile_train(cfg, get_target("v5e-4"))["flops_per_step"]
    assert scanned["xla_per_device_raw"] < 0.6 * unrolled["xla_per_device"], "the raw count misses layers"
    assert scanned["xla_per_device"] == pytest.approx(unrolled["xla_per_device"], rel=0.02)
    assert dataclasses.asdict(get_target("v5e-4").chip)["peak_flops"] == 197e12
    assert jax.device_count() == 8, "compiling for a target leaves the running devices alone"


@pytest.mark.parametrize("impl, collective", [("chunked", "collective-permute"), ("xla", "all-gather")])
def test_context_parallel_compiles_for_a_tpu_target(impl, collective):
    """The sequence split over context=2 (ring for chunked, K/V all-gathered for xla) on v5e-4."""
    cfg = tiny_config(batch=2, seq_len=256, mesh=MeshConfig(data=1, fsdp=2, context=2), attention_impl=impl)
    report = aot.compile_train(cfg, get_target("v5e-4"), correct_scan=False)
    assert report["fits"] and report["mesh"]["context"] == 2
    assert report["collectives"][collective]["count"] > 0, report["collectives"]

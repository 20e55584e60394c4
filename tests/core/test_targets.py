"""Targets by name, the chips' figures where the peak-FLOP table and the compile report read them,
and the one platform() every backend decision reads."""

import jax
import pytest

from transformer_jax.core import compiler, targets
from transformer_jax.core.targets import CHIPS, chip_of, compiling_for, get_target


@pytest.mark.parametrize(
    "name, chip, chips, grid",
    [
        ("v4-8", "v4", 4, (2, 2, 1)),
        ("v5p-8", "v5p", 4, (2, 2, 1)),
        ("v5p-256", "v5p", 128, (4, 4, 8)),
        ("v5e-4", "v5e", 4, (2, 2)),
        ("v5litepod-16", "v5e", 16, (4, 4)),
        ("v6e-8", "v6e", 8, (2, 4)),
        ("h100x8", "h100", 8, ()),
        ("a100-80gbx4", "a100-80gb", 4, ()),
    ],
)
def test_names_give_chips_and_grids(name, chip, chips, grid):
    t = get_target(name)
    assert (t.chip.name, t.chips, t.grid, t.total_chips) == (chip, chips, grid, chips)


def test_topology_arguments_follow_cloud_tpu_names():
    v5p = get_target("v5p-8", slices=2).tpu_topology()
    assert v5p == dict(
        topology_name="v5:2x2x1",
        chip_config_name="megacore",
        chips_per_host_bounds=(2, 2, 1),
        num_slices=2,
        wrap=(False, False, False),
    )
    assert get_target("v5p-128").tpu_topology()["wrap"] == (True, True, True)
    assert get_target("v6e-8").tpu_topology()["chips_per_host_bounds"] == (2, 4, 1)
    assert get_target("v5e-4", slices=2).total_chips == 8


@pytest.mark.parametrize("name", ["v5p-7", "v5e-3", "v9-8", "h100", "h100x0", "rtx4090x1", "v4-2048"])
def test_unknown_targets_name_the_known_ones(name):
    with pytest.raises(ValueError, match="Targets are TPU accelerator types"):
        get_target(name)


def test_gpu_targets_ship_their_compiler_description():
    for chip in (c for c in CHIPS.values() if c.gpu_spec):
        text = get_target(f"{chip.name}x1").gpu_target_config()
        assert f"device_memory_size: {chip.memory_bytes}" in text and 'platform_name: "CUDA"' in text


@pytest.mark.parametrize(
    "kind, chip",
    [
        ("TPU v4", "v4"),
        ("TPU v5 lite", "v5e"),
        ("TPU v5", "v5p"),
        ("TPU v6 lite", "v6e"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("Tesla T4", "t4"),
        ("cpu", None),
    ],
)
def test_device_kinds_map_to_chips(kind, chip):
    found = chip_of(kind)
    assert (found.name if found else None) == chip


def test_platform_is_the_targets_inside_compiling_for_and_the_backend_outside():
    assert targets.platform() == jax.default_backend() == "cpu"
    with compiling_for(get_target("v5p-8")):
        assert targets.platform() == "tpu"
        assert compiler.donates() and compiler.compiler_options() is None, "no CPU options for a TPU program"
        with compiling_for(get_target("h100x1")):
            assert targets.platform() == "gpu"
        assert targets.platform() == "tpu"
    assert targets.platform() == "cpu" and compiler.compiler_options() is not None


def test_jit_builds_one_program_per_platform():
    jitted = compiler.jit(lambda x: x + 1, donate_argnums=(0,))
    cpu = jitted.jitted
    with compiling_for(get_target("v5e-4")):
        tpu = jitted.jitted
    assert cpu is not tpu and jitted.jitted is cpu

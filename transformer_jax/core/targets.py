"""The hardware a program is compiled for, by name, and the one place backend decisions read.

A `Target` is a chip kind, a number of chips per slice and a number of slices: Cloud TPU
accelerator types (``v4-8``, ``v5e-4`` = ``v5litepod-4``, ``v5p-8`` ... ``v5p-256``, ``v6e-8``;
for v4 and v5p the number counts TensorCores, two per chip) and GPUs as ``h100x8``, ``h200x1``,
``a100-80gbx8``, ``l4x1``, ``t4x1``. `get_target(name, slices=N)` parses one.

`platform()` is the platform of the target being compiled for: the target of an enclosing
``with compiling_for(target):`` (the ``compile`` command), else the platform of the devices of the
enclosing ``jax.set_mesh`` (a mesh of compile-only TPU devices is a TPU program), else the running
backend (``jax.default_backend()``). Kernel choices (`ops.attention.resolve_impl`, the decode and MoE
dispatches), compiler options and donation (`core.compiler`) all read it, so a laptop can
compile a TPU program with the TPU's choices.

Chip figures are published per-chip numbers (sources beside each entry); ``dcn_bytes_per_s``,
the data-centre network between slices, is not published per chip and is an assumption.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import re
from collections.abc import Iterator
from importlib import resources

import jax

GiB = 2**30
GB = 10**9


@dataclasses.dataclass(frozen=True)
class Chip:
    """One accelerator chip: memory and speeds per chip; ``kind_pattern`` matches its
    ``device.device_kind`` (lower case)."""

    name: str
    platform: str  # "tpu" | "gpu"
    kind_pattern: str
    memory_bytes: int
    peak_flops: float  # dense bfloat16 (T4: float16) FLOP/s
    peak_fp32_flops: float | None  # non-tensor-core float32 FLOP/s (None: not published)
    hbm_bytes_per_s: float
    ici_bytes_per_s: float  # per chip, one direction: ICI (TPU) or NVLink / PCIe (GPU)
    dcn_bytes_per_s: float = 6.25 * GB  # per chip between slices/hosts: 200 Gb/s per 4-chip host (assumed)
    cores_per_chip: int = 1  # TensorCores the accelerator-type number counts per chip (v4, v5p: 2)
    topology_prefix: str = ""  # get_topology_desc's topology name prefix
    chip_config: str = "default"  # get_topology_desc's chip_config_name
    gpu_spec: str = ""  # GpuTargetConfigProto file in transformer_jax/core/gpu_targets


# TPU: cloud.google.com/tpu/docs/{v4,v5e,v5p,v6e} (HBM, bf16 peak, ICI per chip).
# GPU: NVIDIA data sheets (dense tensor-core bf16, HBM bandwidth, NVLink per direction = half the
# bidirectional figure; PCIe Gen4/Gen3 x16 for L4/T4).
CHIPS: dict[str, Chip] = {
    c.name: c
    for c in (
        Chip(
            "v4",
            "tpu",
            r"tpu v4",
            32 * GiB,
            275e12,
            None,
            1228 * GB,
            300 * GB,
            cores_per_chip=2,
            topology_prefix="v4",
            chip_config="megacore",
        ),
        Chip("v5e", "tpu", r"tpu v5 ?(lite|e)\b", 16 * GiB, 197e12, None, 819 * GB, 200 * GB, topology_prefix="v5e"),
        Chip(
            "v5p",
            "tpu",
            r"tpu v5",
            95 * GiB,
            459e12,
            None,
            2765 * GB,
            600 * GB,
            cores_per_chip=2,
            topology_prefix="v5",
            chip_config="megacore",
        ),
        Chip("v6e", "tpu", r"tpu v6", 32 * GiB, 918e12, None, 1640 * GB, 448 * GB, topology_prefix="v6e"),
        Chip("h100-pcie", "gpu", r"\bh100\b.*\bpcie\b", 80 * GiB, 756e12, 51e12, 2000 * GB, 64 * GB),
        Chip("h100-nvl", "gpu", r"\bh100\b.*\bnvl\b", 94 * GiB, 835e12, 60e12, 3900 * GB, 300 * GB),
        Chip("h100", "gpu", r"\bh100\b", 84_978_434_048, 989e12, 67e12, 3352 * GB, 450 * GB, gpu_spec="h100.txtpb"),
        Chip("h200-nvl", "gpu", r"\bh200\b.*\bnvl\b", 141 * GB, 835e12, 60e12, 4800 * GB, 450 * GB),
        Chip("h200", "gpu", r"\bh200\b", 150_754_820_096, 989e12, 67e12, 4800 * GB, 450 * GB, gpu_spec="h200.txtpb"),
        Chip(
            "a100-80gb",
            "gpu",
            r"\ba100\b",
            85_899_345_920,
            312e12,
            19.5e12,
            2039 * GB,
            300 * GB,
            gpu_spec="a100-80gb.txtpb",
        ),
        Chip("l4", "gpu", r"\bl4\b", 24_152_899_584, 121e12, 30.3e12, 300 * GB, 32 * GB, gpu_spec="l4.txtpb"),
        Chip("t4", "gpu", r"\bt4\b", 16_106_127_360, 65e12, 8.1e12, 320 * GB, 16 * GB, gpu_spec="t4.txtpb"),
    )
}
# Chip grids of one slice by chip count: 3-D tori (v4, v5p), 2-D (v5e, v6e).
GRIDS_3D = {
    1: (1, 1, 1),
    4: (2, 2, 1),
    8: (2, 2, 2),
    16: (2, 2, 4),
    32: (2, 4, 4),
    64: (4, 4, 4),
    128: (4, 4, 8),
    256: (4, 8, 8),
    512: (8, 8, 8),
}
GRIDS_2D = {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8), 128: (8, 16), 256: (16, 16)}
TPU_ALIASES = {"v5litepod": "v5e"}
EXAMPLE_TARGETS = ("v4-8", "v5e-4", "v5e-16", "v5p-8", "v5p-256", "v6e-8", "h100x8", "h200x1", "a100-80gbx8", "l4x1")


@dataclasses.dataclass(frozen=True)
class Target:
    """``chips`` chips of kind ``chip`` per slice, ``slices`` slices (TPU: linked by DCN; GPU:
    hosts). ``grid``: a TPU slice's chip grid."""

    name: str
    chip: Chip
    chips: int
    slices: int = 1
    grid: tuple[int, ...] = ()

    @property
    def platform(self) -> str:
        return self.chip.platform

    @property
    def total_chips(self) -> int:
        return self.chips * self.slices

    def tpu_topology(self) -> dict:
        """Keyword arguments of ``jax.experimental.topologies.get_topology_desc`` for a TPU slice."""
        grid = self.grid
        hosts = (1, 1, 1) if self.chips == 1 else (2, 4, 1) if grid == (2, 4) else (2, 2, 1)
        if len(grid) == 3:
            wrap = (all(d >= 4 for d in grid),) * 3
        else:
            wrap = (grid[0] >= 16, grid[1] >= 16, False)
        return dict(
            topology_name=f"{self.chip.topology_prefix}:{'x'.join(map(str, grid))}",
            chip_config_name=self.chip.chip_config,
            chips_per_host_bounds=hosts,
            num_slices=self.slices,
            wrap=wrap,
        )

    def gpu_target_config(self) -> str:
        """The chip's ``GpuTargetConfigProto`` text (package data)."""
        return resources.files("transformer_jax.core").joinpath("gpu_targets", self.chip.gpu_spec).read_text()


def _unknown(name: str, why: str) -> ValueError:
    return ValueError(
        f"target {name!r}: {why}. Targets are TPU accelerator types (e.g. {', '.join(EXAMPLE_TARGETS[:6])}) "
        f"or GPUs as KINDxN ({', '.join(c.name for c in CHIPS.values() if c.gpu_spec)}; e.g. h100x8)"
    )


def get_target(name: str, *, slices: int = 1) -> Target:
    """The `Target` named ``name`` (``v5p-8``, ``v5litepod-4``, ``h100x8``, ...) with ``slices`` slices."""
    if slices < 1:
        raise ValueError(f"slices={slices} must be >= 1")
    tpu = re.fullmatch(r"(v4|v5p|v5e|v5litepod|v6e)-(\d+)", name)
    if tpu:
        chip = CHIPS[TPU_ALIASES.get(tpu[1], tpu[1])]
        cores = int(tpu[2])
        if cores % chip.cores_per_chip:
            raise _unknown(name, f"{chip.name} counts {chip.cores_per_chip} TensorCores per chip")
        chips = cores // chip.cores_per_chip
        grids = GRIDS_3D if chip.topology_prefix in ("v4", "v5") else GRIDS_2D
        if chips not in grids:
            raise _unknown(name, f"no {chip.name} slice of {chips} chips (known: {sorted(grids)} chips)")
        return Target(name, chip, chips, slices, grids[chips])
    gpu = re.fullmatch(r"([a-z0-9-]+?)x(\d+)", name)
    if gpu and gpu[1] in CHIPS and CHIPS[gpu[1]].gpu_spec and int(gpu[2]) >= 1:
        return Target(name, CHIPS[gpu[1]], int(gpu[2]), slices)
    raise _unknown(name, "not a known accelerator type")


def chip_of(device_kind: str) -> Chip | None:
    """The `Chip` whose pattern matches a ``device.device_kind`` (None: unknown, e.g. a CPU)."""
    kind = device_kind.lower()
    return next((c for c in CHIPS.values() if re.search(c.kind_pattern, kind)), None)


_TARGET: contextvars.ContextVar[Target | None] = contextvars.ContextVar("transformer_jax_target", default=None)


def current_target() -> Target | None:
    """The target of the enclosing `compiling_for` (None: the running backend)."""
    return _TARGET.get()


def platform() -> str:
    """ "cpu" | "gpu" | "tpu": the platform programs traced now are compiled for: the target of the
    enclosing `compiling_for`, else that of the devices of the enclosing ``jax.set_mesh``, else
    the running backend."""
    target = _TARGET.get()
    if target is not None:
        return target.platform
    mesh = jax.sharding.get_abstract_mesh()
    found = None if mesh.empty else getattr(mesh, "platform", None)
    if found:
        return "gpu" if found in ("cuda", "rocm") else found
    return jax.default_backend()


@contextlib.contextmanager
def compiling_for(target: Target | None) -> Iterator[Target | None]:
    """Within it, `platform()` is ``target``'s (None: the running backend's)."""
    token = _TARGET.set(target)
    try:
        yield target
    finally:
        _TARGET.reset(token)

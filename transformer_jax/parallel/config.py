"""``MeshConfig``: how the devices are arranged into named mesh axes."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from transformer_jax.core.configlib import Config, fail, setting
from transformer_jax.core.mesh_axes import MESH_AXES


@dataclasses.dataclass(frozen=True)
class MeshConfig(Config):
    """Sizes of the mesh axes; one of them may be -1 (all remaining devices).

    ``data``: batch split, parameters replicated; ``fsdp``: batch split and parameters sharded
    (ZeRO-3 style); ``context``: the sequence split (context parallelism: ring or all-gather
    attention, batches laid out zigzag by `parallel.context`; parameters sharded over it as over
    ``fsdp``); ``tensor``: heads / FFN hidden units split (Megatron style); ``expert``: MoE experts
    split.
    """

    data: int = setting(-1, ge=-1)
    fsdp: int = setting(1, ge=-1)
    context: int = setting(1, ge=-1)
    tensor: int = setting(1, ge=-1)
    expert: int = setting(1, ge=-1)

    PATH: ClassVar[str] = "mesh"

    def check(self) -> None:
        for rule in (_one_axis_takes_the_rest, _no_empty_axis):
            rule(self)

    def sizes(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in MESH_AXES}

    def resolve(self, n_devices: int) -> dict[str, int]:
        """Axis sizes with -1 filled in; errors when they do not multiply to ``n_devices``."""
        sizes = self.sizes()
        fixed = 1
        for s in sizes.values():
            fixed *= s if s != -1 else 1
        if -1 in sizes.values():
            if n_devices % fixed:
                fail(
                    "mesh",
                    sizes,
                    f"the fixed axes ({fixed} devices) do not divide the {n_devices} devices",
                    "choose axis sizes whose product divides the device count",
                )
            sizes = {k: (n_devices // fixed if v == -1 else v) for k, v in sizes.items()}
        elif fixed != n_devices:
            fail(
                "mesh",
                sizes,
                f"the axes multiply to {fixed} but there are {n_devices} devices",
                "set one axis to -1 or make the product equal the device count",
            )
        return sizes


def _no_empty_axis(mesh: MeshConfig) -> None:
    for name, size in mesh.sizes().items():
        if size == 0:
            fail(f"mesh.{name}", size, "must be a positive number of devices or -1")


def _one_axis_takes_the_rest(mesh: MeshConfig) -> None:
    sizes = mesh.sizes()
    if sum(1 for s in sizes.values() if s == -1) > 1:
        fail("mesh", sizes, "at most one axis may be -1 (the rest of the devices)")

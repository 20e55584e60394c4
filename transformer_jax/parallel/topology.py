"""Devices of a `core.targets.Target` we do not have, for compiling ahead of time.

TPU: libtpu (``pip install 'transformer-jax[aot]'``) describes any slice through
``jax.experimental.topologies.get_topology_desc``; GPU: the CUDA plugin compiles for the
chip described by a ``GpuTargetConfigProto`` (``core/gpu_targets``), no GPU needed. The devices
returned build a ``Mesh`` (`parallel.make_mesh`) that ``jax.jit(...).lower(...).compile()``
compiles for; nothing can run on them.
"""

from __future__ import annotations

import functools
import importlib.util
import os

from transformer_jax.core.targets import Target

_PLUGINS = {"tpu": ("libtpu", "libtpu"), "gpu": ("jax_plugins.xla_cuda12", "jax-cuda12-plugin")}
# libtpu looks for a TPU VM's metadata server and host names unless told there is none, and holds a
# machine-wide lock file that fails a second process compiling at the same time (two test workers:
# "Internal error when accessing libtpu multi-process lockfile"); compiling claims no TPU.
_LIBTPU_QUIET = {
    "TPU_SKIP_MDS_QUERY": "1",
    "TPU_WORKER_HOSTNAMES": "localhost",
    "TPU_WORKER_ID": "0",
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
}


class MissingCompilerError(ValueError):
    """The compiler plugin for a target's platform is not installed."""


def _need_plugin(platform: str) -> None:
    module, package = _PLUGINS[platform]
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        raise MissingCompilerError(
            f"compiling for a {platform.upper()} target needs {package}, which is not installed: "
            "pip install -c constraints.txt -e '.[aot]' (the compilers only; no accelerator needed)"
        )


@functools.cache
def target_devices(target: Target) -> tuple:
    """The ``target.total_chips`` devices of ``target`` (compile-only devices)."""
    from jax.experimental import topologies

    _need_plugin(target.platform)
    if target.platform == "tpu":
        for k, v in _LIBTPU_QUIET.items():
            os.environ.setdefault(k, v)
        os.environ.setdefault("TPU_ACCELERATOR_TYPE", target.name)
        topo = topologies.get_topology_desc(platform="tpu", **target.tpu_topology())
    else:
        topo = topologies.get_topology_desc(
            platform="cuda",
            topology_name="",
            target_config=target.gpu_target_config(),
            topology=f"{target.slices}x1x{target.chips}",
        )
    devices = tuple(topo.devices)
    if len(devices) != target.total_chips:
        raise RuntimeError(
            f"target {target.name}: the compiler described {len(devices)} devices, not {target.total_chips}"
        )
    return devices

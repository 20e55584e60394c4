"""Multi-process start-up: ``jax.distributed.initialize`` from flags, environment or JAX's own
cluster detection (TPU pods, SLURM, ...). Call before any other JAX work."""

from __future__ import annotations

import dataclasses

import jax

from transformer_jax.core import envflags

ENV = {
    "coordinator": "TRANSFORMER_JAX_COORDINATOR",
    "num_processes": "TRANSFORMER_JAX_NUM_PROCESSES",
    "process_id": "TRANSFORMER_JAX_PROCESS_ID",
    "local_devices": "TRANSFORMER_JAX_LOCAL_DEVICES",
    "heartbeat_timeout_s": "TRANSFORMER_JAX_HEARTBEAT_S",
}


def _int(var: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{var}={raw!r} is not a whole number") from None


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """How this process joins the others. ``coordinator`` is "host:port" of process 0;
    ``local_devices`` (CPU only) fakes that many devices per process, for tests and laptops;
    ``auto`` asks JAX to detect the cluster (TPU pod slices, SLURM, Open MPI, ...)."""

    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    local_devices: int | None = None
    auto: bool = False
    heartbeat_timeout_s: int = 30

    @classmethod
    def from_env(cls, **overrides) -> DistributedConfig:
        """Fields from TRANSFORMER_JAX_* environment variables, then ``overrides`` (non-None)."""
        values = {}
        for field, var in ENV.items():
            if (raw := envflags.value(var)) is not None:
                values[field] = raw if field == "coordinator" else _int(var, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @property
    def enabled(self) -> bool:
        return self.auto or self.coordinator is not None


def initialize(cfg: DistributedConfig) -> bool:
    """Joins the process group described by ``cfg``; returns whether a distributed runtime
    was started. Errors name the missing setting."""
    if cfg.local_devices:
        jax.config.update("jax_num_cpu_devices", cfg.local_devices)
    if not cfg.enabled:
        return False
    if cfg.coordinator is not None and (cfg.num_processes is None or cfg.process_id is None):
        raise ValueError(
            f"--coordinator {cfg.coordinator} needs --num-processes and --process-id "
            f"(or {ENV['num_processes']} and {ENV['process_id']})"
        )
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU processes only; others ignore it
    jax.distributed.initialize(
        coordinator_address=cfg.coordinator,
        num_processes=cfg.num_processes,
        process_id=cfg.process_id,
        heartbeat_timeout_seconds=cfg.heartbeat_timeout_s,
        initialization_timeout=120,
    )
    return True

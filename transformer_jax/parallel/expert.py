"""Expert parallelism lives with the other MoE dispatches in ``transformer_jax.ops.moe_expert_parallel``
(pure JAX); choose it with ``model.moe.dispatch=expert_parallel`` and ``--set mesh.expert=N``."""

from transformer_jax.ops.moe_expert_parallel import EXPERT_AXIS, expert_parallel_dispatch

__all__ = ["EXPERT_AXIS", "expert_parallel_dispatch"]

"""The mesh axis names, defined once: the mesh (``parallel``), the sharding rules and the per-shard
kernel wrapper (``ops.per_shard``) all read them from here.

``data``: batch split, parameters replicated (across slices of a multi-slice pod: the DCN axis);
``fsdp``: batch split and parameters sharded; ``tensor``: heads / FFN hidden units split;
``context``: the sequence split (context parallelism: activations' length dimension, attention by
ring or all-gather, `ops.context_parallel`); ``expert``: MoE experts split.
"""

from __future__ import annotations

DATA, FSDP, CONTEXT, TENSOR, EXPERT = "data", "fsdp", "context", "tensor", "expert"
MESH_AXES = (DATA, FSDP, CONTEXT, TENSOR, EXPERT)
BATCH_AXES = (DATA, FSDP)  # the axes a batch (and every activation's batch dimension) is split over

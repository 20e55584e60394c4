"""Expert parallelism: MoE experts sharded over the ``expert`` mesh axis, tokens exchanged with
``all_to_all`` inside ``jax.shard_map``.

Pure JAX (the mesh is read from the caller's ``jax.set_mesh``, no Flax), registered as the MoE
dispatch ``expert_parallel`` (``model.moe.dispatch=expert_parallel``, with a
mesh that has an ``expert`` axis, e.g. ``--set mesh.expert=4``). The layer holds no mesh: the
dispatch reads the mesh of the surrounding ``jax.set_mesh(...)`` at trace time.

On each device (N = size of the ``expert`` axis, E_l = E / N local experts):

1. the tokens (outside: sharded over ``data``/``fsdp``, replicated over ``expert``) enter the
   ``shard_map`` split over (``data``, ``fsdp``, ``expert``): each device takes one chunk
   (padded with invalid rows to equal chunks);
2. the chunk's assignments go into an [E, C, D] buffer (``ops.moe_buffer`` layout) with
   C = ``routing.capacity(chunk, E, K, capacity_factor)``, or C = chunk when dropless (the
   largest possible load, so nothing drops: exact but E/K times the expert FLOPs of a
   perfectly balanced batch);
3. ``all_to_all`` sends the rows of experts [j E_l, (j+1) E_l) to device j, which runs its E_l
   experts on the N * C rows it received, and a second ``all_to_all`` brings the results back;
4. the chunk is combined; XLA gathers the chunks back into the caller's layout.

Capacity drops are decided per chunk (a GShard "group"), in the ``drop_order`` priority.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from transformer_jax.core.mesh_axes import BATCH_AXES
from transformer_jax.core.mesh_axes import EXPERT as EXPERT_AXIS
from transformer_jax.ops import routing
from transformer_jax.ops.moe_buffer import ExpertWeights, buffer_dest, combine_from_slots, expert_ffn, gather_to_slots


def _mesh_or_fail(axis: str):
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or axis not in mesh.axis_names:
        names = () if mesh.empty else mesh.axis_names
        raise ValueError(
            f"dispatch='expert_parallel' needs a mesh with an {axis!r} axis around the call (found mesh axes "
            f"{names}): run it under `with jax.set_mesh(transformer_jax.parallel.make_mesh(MeshConfig(expert=N)))`, "
            "or choose another model.moe.dispatch (auto, padded, ragged, dense)"
        )
    return mesh


def _local(
    x_TD, experts_TK, weights_TK, valid_T, w: ExpertWeights, *, axis, n, activation, capacity_factor, drop_order
):
    """One device's chunk of tokens: buffer -> all_to_all -> local experts -> all_to_all -> combine."""
    T, K = experts_TK.shape
    E_l = w.n_experts
    E = E_l * n
    cap = routing.capacity(T, E, K, capacity_factor) or T
    slots = routing.expert_positions(experts_TK, E, cap, valid_T=valid_T, weights_TK=weights_TK, drop_order=drop_order)
    dest_TK = buffer_dest(experts_TK, slots.position_TK, slots.keep_TK, E, cap)
    x_SD, src_S = gather_to_slots(x_TD, dest_TK, E * cap)
    D = x_SD.shape[-1]
    received = jax.lax.all_to_all(x_SD.reshape(n, E_l, cap, D), axis, 0, 0, tiled=True)  # [n source, E_l, cap, D]
    y = expert_ffn(received.transpose(1, 0, 2, 3).reshape(E_l, n * cap, D), w, activation)
    back = y.reshape(E_l, n, cap, D).transpose(1, 0, 2, 3)
    returned = jax.lax.all_to_all(back, axis, 0, 0, tiled=True)  # [n owner, E_l, cap, D] = [E, cap, D]
    y_TD = combine_from_slots(returned.reshape(E * cap, D), dest_TK, src_S, weights_TK * slots.keep_TK)
    return y_TD, slots.keep_TK


def expert_parallel_dispatch(
    x_TD,
    experts_TK,
    weights_TK,
    w: ExpertWeights,
    *,
    activation,
    capacity_factor=None,
    valid_T=None,
    drop_order="rank",
    axis: str = EXPERT_AXIS,
):
    """The ``moe_dispatch`` contract with the experts sharded over the mesh axis ``axis``
    (see the module docstring); ``(y_TD, keep_TK)`` equal the single-device dispatches' when
    nothing drops."""
    mesh = _mesh_or_fail(axis)
    n = mesh.shape[axis]
    if w.n_experts % n:
        raise ValueError(
            f"the {w.n_experts} experts cannot be split over the {n} devices of mesh axis {axis!r}; "
            "choose a mesh.expert that divides the number of routed experts"
        )
    T = x_TD.shape[0]
    batch = tuple(a for a in BATCH_AXES if a in mesh.axis_names and mesh.shape[a] > 1)
    if T % math.prod(mesh.shape[a] for a in batch):
        batch = ()
    chunks = n * math.prod(mesh.shape[a] for a in batch)
    pad = -T % chunks
    valid_T = jnp.ones((T,), bool) if valid_T is None else valid_T
    x_p, experts_p, weights_p, valid_p = (
        jnp.pad(a, [(0, pad)] + [(0, 0)] * (a.ndim - 1)) for a in (x_TD, experts_TK, weights_TK, valid_T)
    )
    tokens = P((*batch, axis))
    w_specs = jax.tree.map(lambda _: P(axis), w)
    fn = functools.partial(
        _local, axis=axis, n=n, activation=activation, capacity_factor=capacity_factor, drop_order=drop_order
    )
    y_TD, keep_TK = jax.shard_map(fn, mesh=mesh, in_specs=(tokens,) * 4 + (w_specs,), out_specs=(tokens, tokens))(
        x_p, experts_p, weights_p, valid_p, w
    )
    return y_TD[:T], keep_TK[:T]

"""A stack of blocks: a Python loop over ``nnx.List`` or one ``lax.scan`` over stacked parameters
(one compiled block however deep), with optional rematerialisation.

With MoE in every n-th layer (``BlockConfig.moe_every`` = n > 1) the scanned stack holds two
stacks of parameters, ``layers`` (the n-1 dense blocks of each group, [L - L/n]) and
``moe_layers`` ([L/n]), and scans over the L/n groups of n layers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import cast

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float

from transformer_jax.nn.block import Block, BlockConfig, BlockInputs
from transformer_jax.nn.remat import REMAT_POLICIES


def is_moe_layer(cfg: BlockConfig, i: int) -> bool:
    """Whether layer i (0-based) of a stack built from ``cfg`` is a MoE layer."""
    return cfg.moe is not None and i >= cfg.moe_first_dense and (i + 1) % cfg.moe_every == 0


def _stacked_blocks(cfg: BlockConfig, n: int, rngs: nnx.Rngs):
    @nnx.split_rngs(splits=n)
    @nnx.vmap(in_axes=0, out_axes=0, transform_metadata={nnx.PARTITION_NAME: "layers", "logical_axes": "layers"})
    def create(r: nnx.Rngs) -> Block:
        return Block(cfg, rngs=r)

    return create(rngs)


def _regroup(tree, *shape):
    """Leading axis of size prod(shape) -> axes ``shape``."""
    return jax.tree.map(lambda x: x.reshape(shape + x.shape[1:]), tree)


def _ungroup(tree):
    """Leading axes (a, b) -> one axis of size a * b."""
    return jax.tree.map(lambda x: x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:]), tree)


def _stack_trees(trees: list):
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees) if trees else {}


class Stack(nnx.Module):
    """``n_layers`` blocks applied in order.

    ``cfg`` is one ``BlockConfig`` for every layer, or a sequence of ``n_layers`` of them (layers
    that differ, e.g. local and global attention); a scanned stack needs every layer alike.
    With ``scan=True`` the parameters carry a leading ``layers`` axis (logical name ``layers``)
    and the forward pass is one ``lax.scan``; caches are then stacked along axis 0 as well.
    Variables other than parameters that a block writes during a training call (one with a
    ``dropout_key``: MoE balancing biases) are written back to the stack; other calls write nothing
    back (they change nothing, and a write from inside a transform the model was not built in,
    e.g. the decoding loop's ``while_loop``, is refused by Flax).
    """

    def __init__(
        self,
        cfg: BlockConfig | Sequence[BlockConfig],
        n_layers: int,
        *,
        scan: bool = False,
        remat: str = "none",
        rngs: nnx.Rngs,
    ):
        cfgs = (cfg,) * n_layers if isinstance(cfg, BlockConfig) else tuple(cfg)
        if len(cfgs) != n_layers:
            raise ValueError(f"got {len(cfgs)} layer configs for n_layers={n_layers}")
        cfg = cfgs[0]
        if scan and cfg.moe is not None and cfg.moe_first_dense:
            raise ValueError(
                f"moe_first_dense={cfg.moe_first_dense} with scan=True: the scan repeats one group of layers, "
                "so dense first layers are not supported; use scan=False (model.execution.scan_layers=false)"
            )
        if scan and any(c != cfg for c in cfgs):
            raise ValueError(
                "scan=True repeats one block, but the layers differ (e.g. local and global attention); "
                "use scan=False (model.execution.scan_layers=false)"
            )
        self.n_layers = n_layers
        self.scan = scan
        self.remat_policy = remat
        REMAT_POLICIES.get(remat)
        self.every = cfg.moe_every if cfg.moe is not None else 1
        dense_cfg = dataclasses.replace(cfg, moe=None)
        self.moe_layers = nnx.data(None)
        if not scan:
            self.layers = nnx.List(
                [
                    Block(c if is_moe_layer(c, i) else dataclasses.replace(c, moe=None), rngs=rngs)
                    for i, c in enumerate(cfgs)
                ]
            )
        elif self.every == 1:
            self.layers = _stacked_blocks(cfg, n_layers, rngs)
        else:
            if n_layers % self.every:
                raise ValueError(
                    f"moe_every={self.every} does not divide n_layers={n_layers}; a scanned stack "
                    "repeats groups of moe_every layers"
                )
            self.layers = _stacked_blocks(dense_cfg, n_layers - n_layers // self.every, rngs)
            self.moe_layers = _stacked_blocks(cfg, n_layers // self.every, rngs)

    def _block_fn(self, graphdef):
        """(block_state, x, inputs, cache, key) -> (x, cache, aux, non-parameter state after the
        call), rematerialised if asked."""

        def call(state, x, inputs, cache, key):
            block = nnx.merge(graphdef, state)
            y, cache, aux = block(x, inputs, cache=cache, dropout_key=key)
            return y, cache, aux, nnx.state(block, nnx.Not(nnx.Param))

        policy = REMAT_POLICIES.get(self.remat_policy)
        if self.remat_policy == "none":
            return call
        return jax.checkpoint(call, policy=policy, prevent_cse=not self.scan)

    def __call__(
        self,
        x_BTD: Float[Array, "B T D"],
        inputs: BlockInputs,
        *,
        caches=None,
        dropout_key: jax.Array | None = None,
        return_hidden: bool = False,
    ):
        """Returns (x, caches, aux). ``caches`` is a list (loop) or a stacked pytree (scan) of
        per-layer caches, or None; ``aux["hidden"]`` [L+1, B, T, D] holds the residual stream
        entering each layer and leaving the last when ``return_hidden``; ``aux["moe"]`` the MoE
        layers' aux stacked along a leading axis (one entry per MoE layer, in depth order).

        Blocks are applied through ``nnx.split``/``merge`` and plain JAX transforms
        (``lax.scan``, ``jax.checkpoint``), so the stack works under any outer JAX transform."""
        keys = None if dropout_key is None else jax.random.split(dropout_key, self.n_layers)
        if not self.scan:
            x_out, caches, aux, hidden = self._loop(x_BTD, inputs, caches, keys, return_hidden)
        elif self.moe_layers is None:
            x_out, caches, aux, hidden = self._scan(x_BTD, inputs, caches, keys, return_hidden)
        else:
            x_out, caches, aux, hidden = self._scan_groups(x_BTD, inputs, caches, keys, return_hidden)
        out_aux = dict(aux) if aux else {}
        if return_hidden:
            assert hidden is not None  # collected when return_hidden
            out_aux["hidden"] = jnp.concatenate([hidden, x_out[None]], axis=0)
        return x_out, caches, out_aux

    def _loop(self, x, inputs, caches, keys, return_hidden):
        new_caches, hidden, auxes = [], [], []
        for i, block in enumerate(cast("nnx.List[Block]", self.layers)):  # not scanned: a list of blocks
            graphdef, state = nnx.split(block)
            hidden.append(x)
            x, c, a, rest = self._block_fn(graphdef)(
                state, x, inputs, None if caches is None else caches[i], None if keys is None else keys[i]
            )
            if keys is not None:
                nnx.update(block, rest)
            new_caches.append(c)
            if a:
                auxes.append(a)
        hidden = jnp.stack(hidden) if return_hidden else None
        return x, None if caches is None else new_caches, _stack_trees(auxes), hidden

    def _scan(self, x, inputs, caches, keys, return_hidden):
        graphdef, states = nnx.split(self.layers)
        block_fn = self._block_fn(graphdef)

        def body(x, xs):
            state, cache, key = xs
            y, new_cache, aux, rest = block_fn(state, x, inputs, cache, key)
            return y, (new_cache, aux, rest, x if return_hidden else None)

        x_out, (caches, aux, rest, hidden) = jax.lax.scan(body, x, (states, caches, keys))
        if keys is not None:
            nnx.update(self.layers, rest)
        return x_out, caches, aux, hidden

    def _scan_groups(self, x, inputs, caches, keys, return_hidden):
        n = self.every
        G = self.n_layers // n
        dense_def, dense_states = nnx.split(self.layers)
        moe_def, moe_states = nnx.split(self.moe_layers)
        dense_fn, moe_fn = self._block_fn(dense_def), self._block_fn(moe_def)
        dense_states = _regroup(dense_states, G, n - 1)
        caches = None if caches is None else _regroup(caches, G, n)
        keys = None if keys is None else keys.reshape((G, n) + keys.shape[1:])

        def body(x, xs):
            dense, moe, cache, key = xs
            pick = lambda tree, j: None if tree is None else jax.tree.map(lambda a: a[j], tree)
            new_caches, rests, hidden = [], [], []
            for j in range(n):
                hidden.append(x)
                fn, state = (dense_fn, pick(dense, j)) if j < n - 1 else (moe_fn, moe)
                x, c, aux, rest = fn(state, x, inputs, pick(cache, j), pick(key, j))
                new_caches.append(c)
                rests.append(rest)
            out_cache = None if cache is None else _stack_trees(new_caches)
            return x, (
                out_cache,
                aux,
                _stack_trees(rests[:-1]),
                rests[-1],
                jnp.stack(hidden) if return_hidden else None,
            )

        x_out, (caches, aux, dense_rest, moe_rest, hidden) = jax.lax.scan(
            body, x, (dense_states, moe_states, caches, keys)
        )
        if keys is not None:
            nnx.update(self.layers, _ungroup(dense_rest))
            nnx.update(self.moe_layers, moe_rest)
        caches = None if caches is None else _ungroup(caches)
        hidden = None if hidden is None else _ungroup(hidden)
        return x_out, caches, aux, hidden

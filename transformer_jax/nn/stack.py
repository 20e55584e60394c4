"""A stack of identical blocks: a Python loop over ``nnx.List`` or one ``nnx.scan`` over
stacked parameters (one compiled block however deep), with optional rematerialisation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float

from transformer_jax.nn.block import Block, BlockConfig, BlockInputs
from transformer_jax.registry import Registry

REMAT_POLICIES: Registry = Registry("remat policy")
REMAT_POLICIES.register("none", None)
REMAT_POLICIES.register("full", jax.checkpoint_policies.nothing_saveable)
REMAT_POLICIES.register("save_dots", jax.checkpoint_policies.dots_with_no_batch_dims_saveable)


class Stack(nnx.Module):
    """``n_layers`` blocks applied in order.

    With ``scan=True`` the parameters carry a leading ``layers`` axis (logical name ``layers``)
    and the forward pass is one ``nnx.scan``; caches are then stacked along axis 0 as well.
    """

    def __init__(self, cfg: BlockConfig, n_layers: int, *, scan: bool = False, remat: str = "none",
                 rngs: nnx.Rngs):
        self.n_layers = n_layers
        self.scan = scan
        self.remat_policy = remat
        REMAT_POLICIES.get(remat)
        if scan:
            @nnx.split_rngs(splits=n_layers)
            @nnx.vmap(in_axes=0, out_axes=0,
                      transform_metadata={nnx.PARTITION_NAME: "layers", "logical_axes": "layers"})
            def create(r: nnx.Rngs) -> Block:
                return Block(cfg, rngs=r)

            self.layers = create(rngs)
        else:
            self.layers = nnx.List([Block(cfg, rngs=rngs) for _ in range(n_layers)])

    def _block_fn(self, graphdef):
        """(block_state, x, inputs, cache, key) -> (x, cache, aux), rematerialised if asked."""

        def call(state, x, inputs, cache, key):
            return nnx.merge(graphdef, state)(x, inputs, cache=cache, dropout_key=key)

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
        entering each layer and leaving the last when ``return_hidden``.

        Blocks are applied through ``nnx.split``/``merge`` and plain JAX transforms
        (``lax.scan``, ``jax.checkpoint``), so the stack works under any outer JAX transform."""
        keys = None if dropout_key is None else jax.random.split(dropout_key, self.n_layers)
        if self.scan:
            graphdef, states = nnx.split(self.layers)
            block_fn = self._block_fn(graphdef)

            def body(x, xs):
                state, cache, key = xs
                y, new_cache, aux = block_fn(state, x, inputs, cache, key)
                return y, (new_cache, aux, x if return_hidden else None)

            x_out, (caches, aux, hidden) = jax.lax.scan(body, x_BTD, (states, caches, keys))
        else:
            new_caches, hidden, auxes = [], [], []
            x_out = x_BTD
            for i, block in enumerate(self.layers):
                graphdef, state = nnx.split(block)
                hidden.append(x_out)
                x_out, c, a = self._block_fn(graphdef)(state, x_out, inputs, None if caches is None else caches[i],
                                               None if keys is None else keys[i])
                new_caches.append(c)
                auxes.append(a)
            caches = None if caches is None else new_caches
            aux = jax.tree.map(lambda *xs: jnp.stack(xs), *auxes) if auxes and auxes[0] else {}
            hidden = jnp.stack(hidden) if return_hidden else None
        out_aux = dict(aux) if aux else {}
        if return_hidden:
            out_aux["hidden"] = jnp.concatenate([hidden, x_out[None]], axis=0)
        return x_out, caches, out_aux

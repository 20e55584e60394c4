"""LayerNorm / RMSNorm modules (by name) over ``transformer_jax.ops.norms``."""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float

from transformer_jax.ops import norms


class Norm(nnx.Module):
    """Normalises the last axis with the ``kind`` registered in ``ops.norms.NORMS``.

    Parameters: ``scale`` [D] (ones, or zeros for a zero-centred kind) and, for kinds with a bias
    and ``use_bias``, ``bias`` [D].
    """

    def __init__(
        self,
        d_model: int,
        *,
        kind: str = "layernorm",
        eps: float = 1e-5,
        use_bias: bool = True,
        param_dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs | None = None,
    ):
        del rngs
        self.spec = norms.NORMS.get(kind)
        self.eps = eps
        self.scale = nnx.Param(jnp.full((d_model,), self.spec.scale_init, param_dtype), logical_axes=("norm",))
        self.bias = (
            nnx.Param(jnp.zeros((d_model,), param_dtype), logical_axes=("norm",), role="bias")
            if self.spec.has_bias and use_bias
            else None
        )

    def __call__(self, x: Float[Array, "... D"]) -> Float[Array, "... D"]:
        kwargs = {"bias": self.bias[...]} if self.bias is not None else {}
        return self.spec.fn(x, self.scale[...], eps=self.eps, **kwargs)

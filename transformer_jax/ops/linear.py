"""``y = x W`` over flattened feature axes, with a hand-written backward pass.

Reverse-mode autodiff of ``tensordot`` gives the right products, but on CPU XLA then lays the
activation gradient out transposed and copies it once per weight. Here the backward pass states
the two products directly on the row-major [N, In] / [N, Out] operands::

    dx = dy W^T  (contract Out),        dW = x^T dy  (contract the N rows)

About 10% off the CPU train step (docs/performance.md). Being a ``custom_vjp``, it has no
forward-mode rule: differentiate models in reverse mode (``grad``, ``vjp``, ``jacrev``).
"""

from __future__ import annotations

import math

import jax
from jaxtyping import Array, Float


@jax.custom_vjp
def matmul_2d(x_NI: Float[Array, "N I"], w_IO: Float[Array, "I O"]) -> Float[Array, "N O"]:
    """``x @ w`` (both 2-D) with the backward pass of the module docstring."""
    return x_NI @ w_IO


def _fwd(x, w):
    return x @ w, (x, w)


def _bwd(res, dy):
    x, w = res
    dx = jax.lax.dot_general(dy, w, (((1,), (1,)), ((), ())))
    dw = jax.lax.dot_general(x, dy, (((0,), (0,)), ((), ())))
    return dx.astype(x.dtype), dw.astype(w.dtype)


matmul_2d.defvjp(_fwd, _bwd)


def dense(x: Float[Array, "... In"], kernel: Float[Array, "In Out"], n_in: int) -> Float[Array, "... Out"]:
    """``tensordot(x, kernel)`` over x's trailing ``n_in`` axes and the kernel's leading ``n_in``
    (kernel shape ``in_shape + out_shape``), as one 2-D `matmul_2d`."""
    in_shape, out_shape = kernel.shape[:n_in], kernel.shape[n_in:]
    lead = x.shape[: x.ndim - n_in]
    y = matmul_2d(x.reshape(-1, math.prod(in_shape)), kernel.reshape(math.prod(in_shape), math.prod(out_shape)))
    return y.reshape(lead + out_shape)

"""Two identities of position encodings, checked (not judged) in ``notebooks/positional_encoding.py``.

- `permutation_gap`: without positions self-attention is permutation-equivariant, f(x P) = f(x) P
  for a permutation P of the sequence axis; the gap is max |f(x P) - f(x) P| / max |f(x)|, about
  1e-5 from float32 rounding without positions and O(1) with them. `seeded_permutation_gap` draws
  the model, the input and P from one seed.
- `rope_scores`, `diagonal_spread`: RoPE's score q_m . k_n depends on the offset m - n only
  (R(m)^T R(n) = R(n - m)), so it is constant along every diagonal of the score matrix.

`rope_figure` and `length_figure` draw the notebook's figures of its sections 2 and 3 (the latter of
`lengths.run_length_arms`'s losses).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from transformer_jax.models import build_model
from transformer_jax.ops.rope import apply_rope


def permutation_gap(
    f: Callable[[Int[Array, "B T"]], Float[Array, "B T ..."]], tokens_BT: Int[Array, "B T"], perm_T: ArrayLike
) -> float:
    """max |f(x[:, P]) - f(x)[:, P]| / max |f(x)|: 0 for a permutation-equivariant ``f``."""
    out = f(tokens_BT)
    out_perm = f(tokens_BT[:, perm_T])
    return float(jnp.max(jnp.abs(out_perm - out[:, perm_T])) / jnp.max(jnp.abs(out)))


def seeded_permutation_gap(model_cfg: Any, seed: int, seq_len: int) -> float:
    """`permutation_gap` of the logits of ``build_model(model_cfg, seed=seed)`` on 2 x ``seq_len``
    tokens drawn from ``jax.random.key(seed)``, under the permutation ``default_rng(seed)`` draws."""
    model = build_model(model_cfg, seed=seed)
    tokens_BT = jax.random.randint(jax.random.key(seed), (2, seq_len), 0, model_cfg.dims.vocab_size)
    perm_T = np.random.default_rng(seed).permutation(seq_len)
    return permutation_gap(lambda t: model(t)[0], tokens_BT, perm_T)


def rope_scores(q: Float[ArrayLike, "... D"], k: Float[ArrayLike, "... D"], length: int) -> Float[np.ndarray, "P P"]:
    """``[m, n] = RoPE(q, m) . RoPE(k, n)`` for positions m, n < ``length`` (``apply_rope``'s
    defaults), q and k broadcast to ``[1, length, 1, D]`` (one vector each)."""
    pos_1P = jnp.arange(length)[None]
    D = jnp.shape(q)[-1]
    q_rot_PD = apply_rope(jnp.broadcast_to(q, (1, length, 1, D)), pos_1P)[0, :, 0]
    k_rot_PD = apply_rope(jnp.broadcast_to(k, (1, length, 1, D)), pos_1P)[0, :, 0]
    return np.asarray(q_rot_PD @ k_rot_PD.T)


def diagonal_spread(scores_PP: Float[ArrayLike, "P P"]) -> float:
    """The largest spread (max - min) along a diagonal of ``scores_PP`` (fixed offset m - n), over
    the std of all its entries: 0 when each score depends on the offset only."""
    scores_PP = np.asarray(scores_PP)
    P = scores_PP.shape[0]
    return max(np.ptp(np.diagonal(scores_PP, -o)) for o in range(-P + 1, P)) / np.std(scores_PP)


def rope_figure(scores_PP: Float[ArrayLike, "P P"]) -> Any:
    """The notebook's figure of `rope_scores`: the score matrix, and its mean along each diagonal
    against the offset m - n."""
    import matplotlib.pyplot as plt

    P = np.shape(scores_PP)[0]
    offsets = np.arange(-P + 1, P)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    axes[0].imshow(scores_PP, cmap="RdBu")
    axes[0].set(xlabel="key position n", ylabel="query position m", title="RoPE score q_m . k_n")
    axes[1].plot(offsets, [np.mean(np.diagonal(scores_PP, -o)) for o in offsets])
    axes[1].set(xlabel="offset m - n", ylabel="score", title="Score against the relative offset")
    return fig


def length_figure(
    curves: Mapping[str, Any],
    eval_loss: Mapping[str, Mapping[int, Sequence[float]]],
    eval_lens: Sequence[int],
    train_len: int,
    seed: int,
) -> Any:
    """The notebook's figure of the length arms (`lengths.run_length_arms`), in ``eval_loss``'s
    order: each arm's training loss on ``seed`` (``curves["<arm> s<seed>"]``), and its validation
    loss (mean over seeds) at each context of ``eval_lens``."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for i, p in enumerate(eval_loss):
        c = curves[f"{p} s{seed}"]
        axes[0].plot(c.steps, c.train_loss, color=f"C{i}", label=p)
        axes[1].plot(eval_lens, [np.mean(eval_loss[p][n]) for n in eval_lens], "o-", color=f"C{i}", label=p)
    axes[0].set(xlabel="step", ylabel="train loss (nats/char)", title=f"Training at context {train_len} (seed {seed})")
    axes[1].set(xlabel="evaluation context", ylabel="validation loss (nats/char), mean over seeds", xscale="log")
    axes[1].set_title("Loss beyond the training length")
    axes[1].set_xticks(eval_lens, [str(n) for n in eval_lens])
    for ax in axes:
        ax.legend(fontsize=8)
    return fig

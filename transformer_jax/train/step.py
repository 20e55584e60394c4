"""Jitted train and eval steps on the functional state (``nnx.merge`` inside ``jax.jit``)."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from transformer_jax.core import compiler
from transformer_jax.data.mixture import SOURCE_IDS
from transformer_jax.models.forward import BatchForward
from transformer_jax.models.param_roles import adapter_mask
from transformer_jax.ops.losses import cross_entropy, mtp_nll_sums
from transformer_jax.train.config import TrainConfig
from transformer_jax.train.state import TrainState, state_sharding_tree

STACKS = ("layers", "encoder", "decoder")


def per_layer_norms(tree) -> dict[str, jax.Array]:
    """L2 norm per layer of every layer stack in a parameter-shaped tree:
    ``{"layers": [L], ...}`` for ``tree[stack]["layers"]`` (a dict of layers or stacked arrays)."""
    out = {}
    for stack in STACKS:
        sub = tree.get(stack, {}).get("layers") if isinstance(tree.get(stack), dict) else None
        if sub is None:
            continue
        if all(isinstance(k, int) for k in sub):
            sq = [sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(sub[k])) for k in sorted(sub)]
            out[stack] = jnp.sqrt(jnp.stack(sq))
        else:
            sq = sum(jnp.sum(jnp.square(x), axis=tuple(range(1, x.ndim))) for x in jax.tree.leaves(sub))
            out[stack] = jnp.sqrt(sq)
    return out


def _split_micro(batch: dict, n: int) -> dict:
    return jax.tree.map(lambda x: x.reshape((n, x.shape[0] // n) + x.shape[1:]), batch)


def make_train_step(
    graphdef,
    tx: optax.GradientTransformation,
    task: BatchForward,
    cfg: TrainConfig,
    schedule: Callable,
    n_sources: int = 0,
) -> Callable[[TrainState, dict, jax.Array], tuple[TrainState, dict]]:
    """``step(state, batch, key) -> (state, metrics)``: token-weighted mean cross-entropy (label
    smoothing, z-loss, plus the aux losses the model returns in ``aux["losses"]`` and, with
    multi-token prediction, ``lambda / D * sum_k CE_k`` from ``aux["mtp"]``) over
    ``grad_accum`` micro-batches, one optimizer update; non-finite updates are dropped.

    Model variables other than parameters (``state.model_state``) are threaded through the
    micro-batches: whatever the forward pass writes to them (e.g. MoE balancing biases) is kept.
    Scalars or per-layer arrays in ``aux["metrics"]`` are averaged and reported.

    With ``n_sources`` (a data mixture), ``batch["source_ids"]`` [B] names each row's source and the
    metrics add ``source/loss_sum`` and ``source/weight_sum`` [n_sources] (NLL and target weights
    per source; ``actions.reduce_metrics`` turns them into ``loss/NAME``).

    With ``cfg.lora`` only the LoRA adapters train: the other parameters enter the loss through
    ``stop_gradient`` (zero gradients, none of their backward products computed) and leave the
    step unchanged, bit for bit.
    """
    lora = cfg.lora is not None

    def frozen(params):
        return jax.tree.map(lambda p, train: p if train else jax.lax.stop_gradient(p), params, adapter_mask(params))

    def loss_fn(params, model_state, micro, key, inv_weight):
        model = nnx.merge(graphdef, frozen(params) if lora else params, model_state)
        logits, aux = task.forward(model, micro, key)
        ce = cross_entropy(
            logits,
            micro[task.targets],
            weights_BT=micro[task.weights],
            label_smoothing=cfg.loss.label_smoothing,
            z_loss=cfg.loss.z_loss,
            **({"groups_B": micro[SOURCE_IDS], "n_groups": n_sources} if n_sources else {}),
        )
        aux_losses = aux.get("losses", {}) if isinstance(aux, dict) else {}
        aux_metrics = aux.get("metrics", {}) if isinstance(aux, dict) else {}
        objective = ce["loss_sum"] * inv_weight + sum(jnp.asarray(v) for v in aux_losses.values()) / cfg.grad_accum
        new_model_state = nnx.to_pure_dict(nnx.state(model, nnx.Not(nnx.Param)))
        sums = {
            **ce,
            **{f"aux/{k}": v for k, v in aux_losses.items()},
            **{f"aux_metrics/{k}": v for k, v in aux_metrics.items()},
        }
        mtp = aux.get("mtp") if isinstance(aux, dict) else None
        if mtp is not None:  # lambda / D * sum_k CE_k, each over the main loss's target count
            segments = micro.get("segment_ids")
            sums["mtp/nll_sum"], sums["mtp/weight_sum"] = mtp_nll_sums(
                mtp["logits"], micro[task.targets], micro[task.weights], segments
            )
            objective = objective + mtp["loss_weight"] / len(mtp["logits"]) * jnp.sum(sums["mtp/nll_sum"]) * inv_weight
        return objective, (sums, new_model_state)

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def step(state: TrainState, batch: dict, key: jax.Array):
        key = jax.random.fold_in(key, state.step)
        inv_weight = 1.0 / jnp.maximum(jnp.sum(batch[task.weights]), 1.0)
        micro = _split_micro(batch, cfg.grad_accum)

        def micro_step(i, model_state, mb):
            (_, (sums, model_state)), g = grad_fn(state.params, model_state, mb, jax.random.fold_in(key, i), inv_weight)
            return g, sums, model_state

        grads, sums, model_state = micro_step(0, state.model_state, jax.tree.map(lambda x: x[0], micro))
        if cfg.grad_accum > 1:

            def accumulate(carry, xs):
                grads, sums, model_state = carry
                g, s, model_state = micro_step(xs[0], model_state, xs[1])
                return (jax.tree.map(jnp.add, grads, g), jax.tree.map(jnp.add, sums, s), model_state), None

            rest = jax.tree.map(lambda x: x[1:], micro)
            (grads, sums, model_state), _ = jax.lax.scan(
                accumulate, (grads, sums, model_state), (jnp.arange(1, cfg.grad_accum), rest)
            )

        grad_norm = optax.tree.norm(grads)
        updates, new_opt = tx.update(grads, state.opt_state, state.params)
        new_params = optax.apply_updates(state.params, updates)
        if lora:
            new_params = jax.tree.map(
                lambda new, old, train: new if train else old, new_params, state.params, adapter_mask(state.params)
            )
        finite = jnp.isfinite(grad_norm) & jnp.isfinite(sums["loss_sum"]) & jnp.isfinite(optax.tree.norm(new_params))
        keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, old)
        new_state = TrainState(
            step=state.step + 1,
            params=keep(new_params, state.params),
            model_state=keep(model_state, state.model_state),
            opt_state=keep(new_opt, state.opt_state),
            skips=jnp.where(finite, 0, state.skips + 1),
            total_skips=state.total_skips + (~finite).astype(jnp.int32),
        )
        metrics = {
            "loss_sum": sums["nll_sum"],
            "objective_sum": sums["loss_sum"],
            "weight_sum": sums["weight_sum"],
            "correct_sum": sums["correct_sum"],
            "grad_norm": grad_norm,
            "param_norm": optax.tree.norm(state.params),
            "update_norm": optax.tree.norm(updates),
            "lr": schedule(state.step),
            "finite": finite,
            "skips": new_state.skips,
            **{k: v / cfg.grad_accum for k, v in sums.items() if k.startswith(("aux/", "aux_metrics/"))},
        }
        if "mtp/nll_sum" in sums:  # per-depth mean NLL of this step's MTP targets
            mtp_loss_D = sums["mtp/nll_sum"] / jnp.maximum(sums["mtp/weight_sum"], 1.0)
            metrics.update({f"mtp_loss/{k + 1}": mtp_loss_D[k] for k in range(mtp_loss_D.shape[0])})
        if n_sources:
            metrics["source/loss_sum"] = sums["nll_sum_by_group"]
            metrics["source/weight_sum"] = sums["weight_sum_by_group"]
        if cfg.log.per_layer_grad_norms:
            metrics.update({f"grad_norm/{k}": v for k, v in per_layer_norms(grads).items()})
        metrics["nonfinite_grads"] = jax.tree.map(lambda g: ~jnp.all(jnp.isfinite(g)), grads)
        return new_state, metrics

    return step


def jit_train_step(
    graphdef,
    tx: optax.GradientTransformation,
    task: BatchForward,
    cfg: TrainConfig,
    schedule: Callable,
    state: TrainState,
    n_sources: int = 0,
):
    """The jitted `make_train_step` that ``train`` runs (and ``compile`` compiles): the state is
    donated and the new state keeps ``state``'s shardings (arrays or ShapeDtypeStructs)."""
    step = make_train_step(graphdef, tx, task, cfg, schedule, n_sources)
    return compiler.jit(step, donate_argnums=(0,), out_shardings=(state_sharding_tree(state), None))

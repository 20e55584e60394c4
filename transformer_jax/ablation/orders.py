"""Telling a sequence from its reordering (``notebooks/positional_encoding.py``, issue 39): a small
encoder-decoder on a synthetic seq2seq task, and the loss of the best predictor blind to the
source's order, the reference ("chance") an encoder without positions cannot beat.

Without positions the encoder's outputs are a permutation of one another's under any reordering of
the source, and cross-attention sums over them, so the decoder sees the source as a multiset. For a
source of i.i.d. symbols every ordering of a multiset is equally likely, so the best such predictor
puts probability ``c_rem(y) / n_rem`` on the next target symbol ``y`` (the counts of the multiset
not yet emitted). Over a whole target the product of those is ``prod_k c_k! / L!`` whatever the
order, so its loss is exactly ``log(L! / prod_k c_k!)`` nats on every target, and EOS costs nothing
(the multiset gives the length): `order_blind_loss`. A task whose target is a function of the
multiset (``sort``) is not bound by it.

`source_bag_loss` is a weaker reference above it: the loss of a predictor that knows the source's
symbols and their counts but neither their order nor which of them it has already emitted.

`run_reordering` trains the notebook's reordering arms (tuned, then on the scored seeds, then some
of them again on fresh seeds) and divides each run's validation loss by its split's order-blind loss;
`summary` and `figure` show them.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from transformer_jax.ablation.paths import pick
from transformer_jax.ablation.protocol import arm_record, mean_text, with_seed
from transformer_jax.ablation.runs import Curves, recipe_optim
from transformer_jax.ablation.store import run_arm
from transformer_jax.ablation.tuning import DEV_SEED, tuned_runs
from transformer_jax.data import CopyTask, DataConfig, ReverseTask, SortTask
from transformer_jax.data.sources import load_corpus
from transformer_jax.models import get_preset
from transformer_jax.train.action_config import CheckpointConfig, EvalConfig, LogConfig, SampleConfig
from transformer_jax.train.config import Config, TrainConfig

VOCAB = 32  # the symbols of `reorder_config`'s tasks


def orderings_nats(source: Sequence[int]) -> float:
    """log of the number of distinct orderings of ``source``: log(L! / prod_k c_k!), c_k the count of symbol k."""
    counts = collections.Counter(source).values()
    return math.lgamma(len(source) + 1) - sum(math.lgamma(c + 1) for c in counts)


def source_bag_nats(source: Sequence[int]) -> float:
    """The loss of predicting each of the L target symbols as ``c_y / L`` from the source's counts,
    not tracking what was emitted: sum_k c_k log(L / c_k) nats, EOS free (as in `orderings_nats`)."""
    counts = collections.Counter(source).values()
    return sum(c * math.log(len(source) / c) for c in counts)


def _per_token(sources: Iterable[Sequence[int]], extra: int, nats: Callable[[Sequence[int]], float]) -> float:
    total, tokens = 0.0, 0
    for source in sources:
        total += nats(source)
        tokens += len(source) + extra
    if tokens == 0:
        raise ValueError("no sources: a reference loss needs at least one example")
    return total / tokens


def order_blind_loss(sources: Iterable[Sequence[int]], extra: int = 1) -> float:
    """Nats per target token of the best order-blind predictor of targets that reorder ``sources``,
    each target ``L + extra`` tokens long (``extra=1``: the EOS), token-weighted as the loss is:
    sum of `orderings_nats` / sum of (L + extra)."""
    return _per_token(sources, extra, orderings_nats)


def source_bag_loss(sources: Iterable[Sequence[int]], extra: int = 1) -> float:
    """Nats per target token of `source_bag_nats` over ``sources``, weighted as `order_blind_loss`;
    never below it (about 1.5 times it for 4 to 12 symbols out of 32)."""
    return _per_token(sources, extra, source_bag_nats)


def split_order_blind_loss(
    cfg: Any, seed: int, split: str = "val", reference: Callable[..., float] = order_blind_loss
) -> float:
    """``reference`` (`order_blind_loss`, or `source_bag_loss`) of the sources of ``split`` of a
    synthetic seq2seq config trained with ``seed`` (its examples are a function of ``data.seed``:
    `protocol.with_seed`)."""
    examples = load_corpus(with_seed(cfg, seed).data).split(split)
    return reference(examples[i][0] for i in range(len(examples)))


def reorder_config(task: str, position: str, *, steps: int, name: str = "reorder") -> Any:
    """A synthetic seq2seq ``task`` (``reverse``, ``sort``, ``copy``) of 4 to 12 symbols out of 32
    for the ``original_tiny`` encoder-decoder (2 + 2 layers, d_model 64, no dropout) with
    ``position`` in both stacks; AdamW 1e-3, cosine to 1e-4, 100 warm-up steps, batch 32, the
    whole validation split (500 examples) scored at the end. SMOKE: 1 + 1 layers of d_model 32,
    64 validation examples."""

    tiny = pick(smoke={"d_model": 32, "n_heads": 2, "d_ff": 64, "n_layers": 1, "n_encoder_layers": 1}, full={})
    model = get_preset("original_tiny", dropout=0.0, max_len=16, position=position, **tiny)
    dataset = {"reverse": ReverseTask, "sort": SortTask, "copy": CopyTask}[task](
        format="seq2seq",
        vocab=VOCAB,
        min_len=4,
        max_len=12,
        max_src_len=13,  # 12 symbols + EOS
        train_size=100_000,
        val_size=pick(smoke=64, full=500),
    )
    optim = recipe_optim(weight_decay=0.0)
    train = TrainConfig(
        steps=steps,
        batch_size=32,
        eval=EvalConfig(every=max(1, steps // 4), batches=None),
        log=LogConfig(every=pick(smoke=5, full=50)),
        checkpoint=CheckpointConfig(every=steps),
        sample=SampleConfig(tokens=0),
        optim=optim,
    )
    return Config(name=name, model=model, data=DataConfig(dataset=dataset, seq_len=14), train=train)


@dataclasses.dataclass(frozen=True)
class Reordering:
    """What `run_reordering` returns. Ratios are validation loss / order-blind loss (1: chance, 0: a
    perfect reordering), one per seed in ``seeds`` (``fresh_*``: in ``fresh_seeds``)."""

    chance: list[float]  # the order-blind loss of each seed's validation split
    ratio: dict[str, list[float]]  # by arm
    records: dict[str, Any]  # `protocol.arm_record` by arm, then by "<arm>, fresh seeds"
    sweeps: dict[str, Any]  # the learning-rate sweep of each arm
    configs: dict[str, Any]  # each arm's tuned config
    curves: dict[str, Curves]  # "<arm> s<seed>", the scored seeds' then the fresh seeds'
    fresh_chance: list[float]
    fresh_ratio: dict[str, list[float]]  # by fresh arm
    bag_ratio: list[float]  # `source_bag_loss` / order-blind loss of the fresh seeds' splits


def _ratios(trained: Sequence[Curves], chance: Sequence[float], seeds: Sequence[int]) -> tuple[list, dict]:
    """Each run's final validation loss over ``chance`` (a diverged run scores log VOCAB, uniform
    over the symbols), and the `arm_record` of loss, order-blind loss and ratio by seed."""
    loss = [c.final_or(math.log(VOCAB)) for c in trained]
    ratio = list(np.divide(loss, chance))
    rows = {s: {"val loss": v, "order-blind loss": b, "ratio": r} for s, v, b, r in zip(seeds, loss, chance, ratio)}
    return ratio, arm_record(rows)


def run_reordering(
    arms: Mapping[str, tuple[str, str]],
    notebook: str,
    seeds: Sequence[int],
    fresh_seeds: Sequence[int],
    fresh_arms: Sequence[str],
    *,
    steps: int,
    grid: Sequence[float],
) -> Reordering:
    """Each arm ``{name: (task, position)}`` of `reorder_config` (``steps`` steps, named
    ``<notebook>_reorder``) tuned by `tuning.tuned_runs` over ``grid`` on `tuning.DEV_SEED`'s
    sequences (the grid extended at most once in FULL mode, never in SMOKE mode), then run on
    ``seeds``; then each of ``fresh_arms`` at its tuned rate on ``fresh_seeds`` (no sweep rerun),
    beside the source-bag reference of those seeds' splits."""
    reverse = reorder_config("reverse", "none", steps=1)  # every task draws the same sources from a seed
    chance = [split_order_blind_loss(reverse, s) for s in seeds]
    ratio, records, sweeps, configs, curves = {}, {}, {}, {}, {}
    for arm, (task, position) in arms.items():
        untuned = reorder_config(task, position, steps=steps, name=f"{notebook}_reorder")
        sweeps[arm], configs[arm], trained = tuned_runs(
            untuned, arm, grid, notebook, seeds, sweep_seeds=(DEV_SEED,), extend=pick(smoke=0, full=1)
        )
        ratio[arm], records[arm] = _ratios(trained, chance, seeds)
        curves |= {f"{arm} s{s}": c for s, c in zip(seeds, trained)}
    fresh_chance = [split_order_blind_loss(reverse, s) for s in fresh_seeds]
    bag = [split_order_blind_loss(reverse, s, reference=source_bag_loss) for s in fresh_seeds]
    fresh_ratio = {}
    for arm in fresh_arms:
        trained = [run_arm(configs[arm], arm, s, notebook) for s in fresh_seeds]
        fresh_ratio[arm], records[f"{arm}, fresh seeds"] = _ratios(trained, fresh_chance, fresh_seeds)
        curves |= {f"{arm} s{s}": c for s, c in zip(fresh_seeds, trained)}
    bag_ratio = list(np.divide(bag, fresh_chance))
    return Reordering(chance, ratio, records, sweeps, configs, curves, fresh_chance, fresh_ratio, bag_ratio)


def summary(reorder: Reordering, fresh_seeds: Sequence[int]) -> str:
    """One line per arm: its tuned learning rate and loss / order-blind loss; then per fresh arm on
    ``fresh_seeds``, and the fresh seeds' source-bag ratio."""
    lines = [
        f"{a}: lr {reorder.sweeps[a]['lr']:.3g}; loss / order-blind loss {mean_text(r)}"
        for a, r in reorder.ratio.items()
    ]
    lines += [
        f"{a}, fresh seeds {fresh_seeds}: loss / order-blind loss {mean_text(r)}"
        for a, r in reorder.fresh_ratio.items()
    ]
    return "\n".join([*lines, f"source-bag loss / order-blind loss, fresh seeds: {mean_text(reorder.bag_ratio)}"])


def figure(reorder: Reordering, arms: Iterable[str], seed: int) -> Any:
    """The notebook's figure: each arm's validation loss over the order-blind loss against the step
    on ``seed`` (one of `run_reordering`'s scored seeds), with chance (1) and the fresh seeds' mean
    source-bag ratio."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, arm in enumerate(arms):
        c = reorder.curves[f"{arm} s{seed}"]
        ax.plot(c.val_steps, np.divide(c.val_loss, reorder.chance[0]), "o-", color=f"C{i}", label=arm)
    ax.axhline(1.0, color="gray", ls="--", label="order-blind (chance)")
    ax.axhline(
        float(np.mean(reorder.bag_ratio)), color="gray", ls=":", label="source bag (knows the symbols, not the order)"
    )
    ax.set(xlabel="step", ylabel="val loss / order-blind loss", title=f"Reversing and sorting (seed {seed})")
    ax.legend(fontsize=8)
    return fig

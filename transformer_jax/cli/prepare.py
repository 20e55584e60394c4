"""``transformer-jax prepare --input PATH... --out DIR --tokenizer T``: local text, JSONL or Parquet as
sharded ArrayRecord files of token ids, several documents per record, with a manifest.

    transformer-jax prepare --input corpus/ --out prepared --tokenizer sentencepiece --vocab-size 16000 \\
        --val-fraction 0.01 --workers 8
    transformer-jax prepare --input data.jsonl --field body --out prepared --tokenizer hf_model/tokenizer.json
    transformer-jax prepare --input part-0.parquet,part-1.parquet --field text --out prepared --tokenizer byte

Inputs: files, comma-separated files or directories (their files, recursively, sorted); ``.jsonl`` /
``.ndjson`` (optionally ``.gz``) are JSONL, ``.parquet`` is Parquet (the ``parquet`` extra), the
rest is UTF-8 text, cut into documents by ``--documents`` (paragraph, line or file).
Tokenizer: ``char``, ``byte`` or ``sentencepiece`` trained on a hash-sampled part of the train
split (``--tokenizer-sample-mb``), or the path of a tokenizer.json (Hugging Face, with its
tokenizer_config.json beside it, or one a run saved).
Output (``transformer_jax.data.shards``): ``manifest.json`` (format version, tokenizer, dtype,
sources with sha256, options, per-shard documents/tokens/sha256), ``tokenizer.json``,
``train-00000.array_record`` ... and ``val-*`` with ``--val-fraction`` (split by a hash of each
document). Same inputs and options give the same files for any ``--workers``. An interrupted run
resumes when run again with the same arguments: finished shards (checksums checked) are kept.
"""

from __future__ import annotations

import argparse
import sys


def register(sub) -> None:
    # Defaults are PrepareConfig's (None here: not given); importing it at parser time would load the data stack.
    p = sub.add_parser(
        "prepare",
        help="tokenize local text / JSONL / Parquet into ArrayRecord shards",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--input", action="extend", nargs="+", required=True, metavar="PATH",
                   help="text file, directory, .jsonl or .parquet (repeatable; comma-separated lists too)")  # fmt: skip
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the shards and manifest.json")
    p.add_argument("--tokenizer", required=True, metavar="T",
                   help="char | byte | sentencepiece (trained here), or the path of a tokenizer.json")  # fmt: skip
    p.add_argument("--vocab-size", metavar="N", type=int, help="sentencepiece only (default 8000)")
    p.add_argument("--sp-model-type", metavar="TYPE", help="sentencepiece only: bpe | unigram (default bpe)")
    p.add_argument("--documents", metavar="UNIT", help="text files: paragraph | line | file (default paragraph)")
    p.add_argument("--field", metavar="NAME", help="the JSONL field / Parquet column holding the text (default text)")
    p.add_argument("--val-fraction", metavar="F", type=float,
                   help="share of documents (by a hash of their text) in a val split (default 0: none)")  # fmt: skip
    p.add_argument("--seed", metavar="N", type=int, help="keys the split and sample hashes (default 0)")
    p.add_argument("--shard-mb", metavar="MB", type=float, help="MB of text per shard (default 64)")
    p.add_argument("--record-kb", metavar="KB", type=float,
                   help="KiB of token ids per record, several documents each (default 16)")  # fmt: skip
    p.add_argument("--workers", metavar="N", type=int, help="tokenizing processes (default: the CPU count, at most 8)")
    p.add_argument("--tokenizer-sample-mb", metavar="MB", type=float,
                   help="MB of train text a char/sentencepiece tokenizer is trained on (default 100)")  # fmt: skip
    p.add_argument(
        "--decode-errors", metavar="POLICY", help="text files: strict | replace non-UTF-8 bytes (default strict)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace the shards of other inputs/options in --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (default: shown on a terminal)")
    p.set_defaults(fn=run)


OPTIONS = ("vocab_size", "sp_model_type", "documents", "field", "val_fraction", "seed", "shard_mb", "record_kb",
           "workers", "tokenizer_sample_mb", "decode_errors")  # fmt: skip


def run(args) -> dict:
    from transformer_jax.core.paths import require_local
    from transformer_jax.data.prepare import PrepareConfig, default_workers, prepare

    why = "prepare reads its inputs and writes its shards as local files"  # not yet through epath: a URL is refused
    for option, paths in (("--input", [p for spec in args.input for p in spec.split(",")]), ("--out", [args.out]),
                          ("--tokenizer", [args.tokenizer])):  # fmt: skip
        for path in paths:
            require_local(path.strip(), option, why)
    given = {name: getattr(args, name) for name in OPTIONS if getattr(args, name) is not None}
    given.setdefault("workers", default_workers())
    cfg = PrepareConfig(inputs=tuple(args.input), out=args.out, tokenizer=args.tokenizer, overwrite=args.overwrite,
                        **given)  # fmt: skip
    try:
        return prepare(cfg, progress=False if args.no_progress else None)
    except KeyboardInterrupt:
        print(f"interrupted: the finished shards are recorded in {args.out}/manifest.json; run the same command "
              "again to write the rest", file=sys.stderr)  # fmt: skip
        raise SystemExit(130) from None

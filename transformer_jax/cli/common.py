"""Helpers shared by the command modules."""

from __future__ import annotations

import logging
import os
import sys
import warnings


def add_run_args(p, *, config: bool) -> None:
    """--config (experiment file), --workdir, --set KEY=VALUE ..."""
    if config:
        p.add_argument("--config", required=True, help="experiment file, e.g. experiments/shakespeare_char.py")
    p.add_argument("--workdir", required=True, help="run directory (checkpoints, metrics, tokenizer)")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="override config fields, e.g. train.steps=500 model.n_layers=8")


def quiet():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message=".*Sharding info not provided.*")
    try:
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.WARNING)
    except ImportError:
        pass
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for name in ("absl", "orbax", "jax", "grain", "tensorflow_datasets"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # Reading only a checkpoint's metadata is intended; Orbax warns about the other items.
    logging.getLogger("absl").addFilter(lambda record: "could not be restored" not in record.getMessage())

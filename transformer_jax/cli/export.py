"""``transformer-jax export --workdir W --out DIR``: a run's checkpoint as a Hugging Face model
directory (config.json, safetensors, tokenizer), loadable by ``transformers`` and ``--init-from``.

LoRA adapters are merged into the base weights first; a scanned stack is written per layer.
"""

from __future__ import annotations

import os

from transformer_jax.cli.common import add_run_args, check_workdir
from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.paths import require_local

DTYPES = ("float32", "bfloat16", "float16")


def register(sub) -> None:
    p = sub.add_parser("export", help="write a run's checkpoint as a Hugging Face model directory")
    add_run_args(p, config=False)
    p.add_argument("--out", required=True, metavar="DIR", help="the Hugging Face model directory to write")
    p.add_argument("--best", action="store_true", help="export the best checkpoint instead of the latest")
    p.add_argument("--dtype", default=None, choices=DTYPES, help="cast the tensors (default: as trained)")
    p.add_argument(
        "--no-tokenizer", action="store_true", help="write the weights alone (a run whose tokenizer has no HF form)"
    )
    p.set_defaults(fn=run)


def export_run(
    workdir: str,
    out: str,
    *,
    best: bool = False,
    restore_step: int | None = None,
    overrides: list[str] | None = None,
    dtype: str | None = None,
    tokenizer: bool = True,
) -> dict:
    """Writes the latest (``best``, ``restore_step``) checkpoint of the run ``workdir`` to ``out``
    with ``models.hf.save_pretrained`` (LoRA merged); returns what was written."""

    import jax
    from flax import nnx

    from transformer_jax.models.hf import PretrainedTokenizer, save_pretrained
    from transformer_jax.models.lora import has_lora, merge_lora
    from transformer_jax.train.entry import entry_point
    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.run import setup

    check_workdir(workdir, create=False)
    out = require_local(out, "--out", "a Hugging Face model directory is written as local files")
    if os.path.exists(out) and not os.path.isdir(out):
        raise ConfigError(f"--out {out} is a file; give a directory to write the model into")
    cfg = workdir_config(workdir, overrides)
    if entry_point(cfg.model.kind) is not None:
        raise ConfigError(f"model.kind={cfg.model.kind!r} has no Hugging Face form; export decoder_lm runs")
    run, _ = setup(cfg, workdir, best=best, restore_step=restore_step, devices=jax.devices()[:1])
    run.checkpoints.close()
    if run.restored_step is None:
        raise FileNotFoundError(f"no checkpoint in {workdir}/{'best' if best else 'checkpoints'}")
    tok = run.data.tokenizer
    if tokenizer and not isinstance(tok, PretrainedTokenizer):
        raise ConfigError(
            f"the run's {tok.kind} tokenizer has no Hugging Face form (only a run started with --init-from "
            "from a Hugging Face directory has one); add --no-tokenizer to write the weights alone"
        )
    state = jax.device_get(run.state)
    model = nnx.merge(run.graphdef, state.params, state.model_state)
    merged = has_lora(model)
    if merged:
        model = merge_lora(model)
    path = save_pretrained(
        model, out, tokenizer=tok if tokenizer and isinstance(tok, PretrainedTokenizer) else None, dtype=dtype
    )
    return {
        "out": str(path),
        "step": int(state.step),
        "checkpoint": "best" if best else "checkpoints",
        "lora_merged": merged,
        "tokenizer": tokenizer,
    }


def run(args) -> dict:
    return export_run(
        args.workdir,
        args.out,
        best=args.best,
        restore_step=args.restore_step,
        overrides=args.set,
        dtype=args.dtype,
        tokenizer=not args.no_tokenizer,
    )

"""``transformer-jax train``: train (or resume) a model, then print a sample.

``--config`` names a packaged recipe (``shakespeare_char``; `transformer_jax.recipes`) or an
experiment file; without it ``train --workdir W`` resumes the run whose config is ``W/config.json``.

``--init-from DIR`` starts from pretrained weights (a Hugging Face model directory or a run's
workdir): the model config and tokenizer come from DIR, ``--config`` (optional then) gives the
data and training settings, ``--set train.lora=on`` trains LoRA adapters only.
"""

from __future__ import annotations

from transformer_jax.cli.common import add_run_args, check_workdir
from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.paths import check_reachable, user_path


def register(sub) -> None:
    p = sub.add_parser("train", help="train (or resume) a model, or fine-tune a pretrained one (--init-from)")
    p.add_argument(
        "--config",
        default=None,
        help="a recipe name (e.g. shakespeare_char; an unknown name lists them) or an experiment file; "
        "optional with --init-from, or to resume the run of --workdir from its config.json",
    )
    p.add_argument(
        "--init-from",
        default=None,
        metavar="DIR",
        help="fine-tune pretrained weights: a Hugging Face model directory or a run's workdir (model config and "
        "tokenizer from DIR; LoRA with --set train.lora=on)",
    )
    add_run_args(p, config=False)
    p.add_argument(
        "--sample-tokens",
        type=int,
        default=None,
        help="sample this many tokens at the end (0: none; default: train.sample.tokens)",
    )
    g = p.add_argument_group("multi-process (or TRANSFORMER_JAX_COORDINATOR / _NUM_PROCESSES / _PROCESS_ID)")
    g.add_argument("--coordinator", help="host:port of process 0, e.g. 10.0.0.1:1234")
    g.add_argument("--num-processes", type=int)
    g.add_argument("--process-id", type=int)
    g.add_argument("--local-devices", type=int, help="CPU only: fake this many devices per process")
    g.add_argument(
        "--distributed-auto", action="store_true", help="let JAX detect the cluster (TPU pod slices, SLURM, ...)"
    )
    p.set_defaults(fn=run)


def run(args) -> dict:
    from transformer_jax.parallel.distributed import DistributedConfig, initialize

    resume = args.config is None and args.init_from is None
    workdir = user_path(args.workdir, "--workdir")  # absolute when local; gs:// where the environment has it
    check_reachable(workdir, "--workdir")
    if resume and not (workdir / "config.json").is_file():
        raise ConfigError(
            f"train needs --config (a recipe name, e.g. shakespeare_char, or an experiment file) or --init-from "
            f"DIR: --workdir {args.workdir} holds no config.json of an earlier run to resume"
        )
    check_workdir(args.workdir, create=False, writable=True)  # made once the config holds

    initialize(
        DistributedConfig.from_env(
            coordinator=args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
            local_devices=args.local_devices,
            auto=args.distributed_auto or None,
        )
    )
    import jax

    from transformer_jax.cli.sample import sample_text
    from transformer_jax.recipes import base_config, load_config
    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.loop import SAMPLING, train

    if args.init_from is not None:
        from transformer_jax.train.pretrained import init_from_experiment

        base = None if args.config is None else base_config(args.config)
        cfg = init_from_experiment(base, args.init_from, args.set)
    elif args.config is not None:
        cfg = load_config(args.config, args.set)
    else:
        cfg = workdir_config(args.workdir, args.set)  # resume: the config the run stored
    check_workdir(args.workdir, create=True)
    summary = train(cfg, args.workdir, restore_step=args.restore_step)
    n_sample = cfg.train.sample.tokens if args.sample_tokens is None else args.sample_tokens
    if n_sample and jax.process_count() == 1:
        text = sample_text(
            args.workdir,
            prompt=cfg.train.sample.prompt,
            max_new_tokens=n_sample,
            sampling=SAMPLING,
            seed=cfg.train.seed,
        )
        if text is not None:
            print("--- sample ---\n" + text + "\n--------------", flush=True)
    return summary

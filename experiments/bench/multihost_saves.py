"""How often does a two-process run hang or fail while saving the latest and the best checkpoint?

Each try starts two processes on 127.0.0.1 (fsdp over 2 x ``--local-devices`` CPU devices) that
train a tiny Shakespeare model for ``--steps`` steps, validating and checkpointing every step, so
that ``checkpoints/`` and ``best/`` are written at the same steps (Orbax saves asynchronously).
A try that runs past ``--timeout`` seconds counts as hung (its processes are killed); one that
exits non-zero counts as failed. Prints one line per try and a JSON summary.

    python experiments/bench/multihost_saves.py --tries 20
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

RECIPE = "shakespeare_char"
TINY = [
    "model.dims.d_model=32",
    "model.dims.n_heads=2",
    "model.dims.d_ff=64",
    "model.dims.n_layers=2",
    "model.dims.max_len=32",
    "data.seq_len=32",
    "train.batch_size=8",
    "train.eval.batches=1",
    "train.log.every=1",
    "train.optim.warmup_steps=2",
]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(workdir: str, port: int, process: int, args) -> list[str]:
    every = [f"train.steps={args.steps}", "train.eval.every=1", "train.checkpoint.every=1"]
    every.append(f"train.optim.schedule.decay_steps={args.steps}")
    return [
        *(sys.executable, "-m", "transformer_jax", "train", "--config", args.config, "--workdir", workdir),
        *("--sample-tokens", "0", "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2"),
        *("--process-id", str(process), "--local-devices", str(args.local_devices)),
        *("--set", *TINY, *every),
    ]


def one_try(args, root: str, n: int) -> tuple[str, float, str]:
    """('ok' | 'hung' | 'failed', seconds, the last lines of the failing output)."""
    workdir, port = os.path.join(root, f"try{n}"), _port()
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="", PYTHONUNBUFFERED="1")
    env.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(root, "jax_cache"))
    env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    t0 = time.time()
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(open(os.path.join(root, f"try{n}.process{i}.log"), "w+")) for i in range(2)]
        procs = [
            subprocess.Popen(_command(workdir, port, i, args), env=env, stdout=logs[i], stderr=subprocess.STDOUT)
            for i in range(2)
        ]
        outcome = "ok"
        try:
            for p in procs:
                p.wait(timeout=max(1.0, args.timeout - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            outcome = "hung"
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        if outcome == "ok" and any(p.returncode != 0 for p in procs):
            outcome = "failed"
        tail = ""
        if outcome != "ok":
            logs[0].seek(0)
            tail = "\n".join(logs[0].read().splitlines()[-8:])
    return outcome, time.time() - t0, tail


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tries", type=int, default=20)
    parser.add_argument("--steps", type=int, default=8, help="training steps per try (a save of both at each)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds after which a try counts as hung")
    parser.add_argument("--local-devices", type=int, default=1, help="CPU devices per process")
    parser.add_argument("--config", default=RECIPE, help="a recipe name or an experiment file")
    parser.add_argument("--keep", action="store_true", help="keep the workdirs and logs (printed)")
    args = parser.parse_args()
    for name in ("tries", "steps", "local_devices"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}={getattr(args, name)}: must be at least 1")
    root = tempfile.mkdtemp(prefix="multihost_saves_")
    counts = {"ok": 0, "hung": 0, "failed": 0}
    times = []
    for n in range(args.tries):
        outcome, seconds, tail = one_try(args, root, n)
        counts[outcome] += 1
        times.append(seconds)
        print(f"try {n + 1}/{args.tries}: {outcome} in {seconds:.1f} s", flush=True)
        if tail:
            print("  " + tail.replace("\n", "\n  "), flush=True)
    summary = {"tries": args.tries, **counts, "max_s": round(max(times), 1), "timeout_s": args.timeout}
    print(json.dumps(summary))
    if args.keep:
        print(f"workdirs and logs in {root}")
    else:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

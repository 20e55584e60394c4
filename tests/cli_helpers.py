"""Running the command line in child processes (one CPU device each) from tests."""

import json
import os
import subprocess
import sys

TINY = os.path.join(os.path.dirname(__file__), "train", "tiny_experiment.py")


def child_env(**extra) -> dict:
    env = dict(os.environ)
    env.update(XLA_FLAGS="", JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1", **extra)
    return env


def cli(*args, check=True, timeout=600, env=None, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "transformer_jax", *args],
        env=env or child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-4000:]}")
    return proc


def train_cmd(workdir, *sets, experiment=TINY) -> list[str]:
    return [
        sys.executable,
        "-m",
        "transformer_jax",
        "train",
        "--config",
        experiment,
        "--workdir",
        str(workdir),
        "--sample-tokens",
        "0",
        *(["--set", *sets] if sets else []),
    ]


def train(workdir, *sets, experiment=TINY, check=True):
    """(last-line JSON or None, completed process) of ``transformer-jax train`` in a child process."""
    proc = cli(*train_cmd(workdir, *sets, experiment=experiment)[3:], check=check)
    lines = proc.stdout.strip().splitlines()
    summary = json.loads(lines[-1]) if proc.returncode == 0 and lines else None
    return summary, proc


def saved_states(workdir) -> dict:
    """Every complete checkpoint in ``workdir/checkpoints`` and ``workdir/best``, restored by Orbax
    alone (no target: nothing of the package's restore path is relied on), as numpy trees keyed
    by ``"checkpoints/STEP"`` / ``"best/STEP"``."""
    import jax
    import numpy as np
    import orbax.checkpoint as ocp

    out = {}
    for sub in ("checkpoints", "best"):
        directory = os.path.join(str(workdir), sub)
        if not os.path.isdir(directory):
            continue
        with ocp.CheckpointManager(directory, item_handlers={"state": ocp.StandardCheckpointHandler()}) as mgr:
            for step in sorted(mgr.all_steps()):
                restored = mgr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
                out[f"{sub}/{step}"] = jax.tree.map(np.asarray, restored["state"])
    return out


def nonfinite_leaves(tree) -> list[str]:
    """The paths of the leaves of ``tree`` that hold a NaN or an infinity."""
    import jax
    import numpy as np

    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [jax.tree_util.keystr(path) for path, x in flat if not np.all(np.isfinite(np.asarray(x)))]

"""Soak check (not in CI): interrupt a shakespeare_char run N times at random moments with SIGKILL or
SIGTERM, resume it each time, and compare the final parameters with an uninterrupted run.

    python experiments/soak_interruptions.py --interruptions 20 --steps 400 --workdir /tmp/soak

Prints one JSON object: the interruptions (signal, step reached), resumes, and whether the final
parameters, optimizer state and data position are bitwise equal to the uninterrupted run's.
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np

from transformer_jax.train.experiment import workdir_config
from transformer_jax.train.run import setup

EXPERIMENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shakespeare_char.py")


def command(workdir, steps):
    return [
        sys.executable,
        "-m",
        "transformer_jax",
        "train",
        "--config",
        EXPERIMENT,
        "--workdir",
        workdir,
        "--sample-tokens",
        "0",
        "--set",
        f"train.steps={steps}",
        "train.checkpoint.every=20",
        "train.eval.every=100",
        "train.eval.batches=10",
        "train.log.every=5",
    ]


def final_state(workdir):
    run, data_state = setup(workdir_config(workdir), workdir, devices=jax.devices()[:1])
    run.checkpoints.close()
    return jax.device_get((run.state.params, run.state.opt_state, run.state.step)), data_state


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interruptions", type=int, default=20)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--workdir", default="/tmp/soak")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    shutil.rmtree(args.workdir, ignore_errors=True)
    straight, broken = os.path.join(args.workdir, "straight"), os.path.join(args.workdir, "interrupted")
    subprocess.run(command(straight, args.steps), check=True, capture_output=True)
    events = []
    while len(events) < args.interruptions:
        proc = subprocess.Popen(
            command(broken, args.steps), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        time.sleep(rng.uniform(4.0, 14.0))
        if proc.poll() is not None:
            break  # finished before this interruption: the run is complete
        sig = rng.choice([signal.SIGKILL, signal.SIGTERM])
        proc.send_signal(sig)
        out, _ = proc.communicate()
        resumed = [line for line in out.splitlines() if line.startswith("model:")]
        events.append(
            {
                "signal": sig.name,
                "returncode": proc.returncode,
                "started": resumed[0].split(";")[-1].strip() if resumed else "before start-up",
            }
        )
    out = subprocess.run(command(broken, args.steps), check=True, capture_output=True, text=True).stdout
    (a, data_a), (b, data_b) = final_state(straight), final_state(broken)
    equal = data_a == data_b and all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    print(
        json.dumps(
            {
                "interruptions": len(events),
                "events": events,
                "final": json.loads(out.splitlines()[-1]),
                "bitwise_equal_to_uninterrupted": bool(equal),
            }
        )
    )


if __name__ == "__main__":
    main()

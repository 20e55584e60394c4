"""Command line: ``transformer-jax train | eval | sample | translate | export | bench | compile | prepare``
(also ``python -m transformer_jax``).

Each command lives in its own module with ``register(subparsers)`` and ``run(args) -> dict``;
every command prints one JSON object as its last line of output.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import re
import sys
import threading

from transformer_jax.cli import bench, compile, evaluate, export, prepare, sample, train, translate

COMMANDS = (train, evaluate, sample, translate, export, bench, compile, prepare)


def out_of_memory(e: Exception) -> str:
    """One line for the runtime's RESOURCE_EXHAUSTED: the bytes it wanted and what to change."""
    first = next((line for line in str(e).splitlines() if "RESOURCE_EXHAUSTED" in line), str(e).splitlines()[0])
    first = first.strip().rstrip(".")
    wanted = re.search(r"allocating (\d+) bytes", first)
    need = f" ({int(wanted[1]) / 2**30:.1f} GiB in one buffer)" if wanted else ""
    return (
        f"out of device memory{need}: {first}. The run does not fit this machine: try model.execution.remat=full, "
        "mesh.fsdp=<devices>, a smaller train.batch_size (with train.grad_accum) or a smaller model; "
        "`transformer-jax compile --config ... --target ...` reports the bytes a step needs"
    )


def report_error(text: str, *, exiting: bool) -> None:
    """Writes ``error: <text>`` and the debug hint to stderr in one ``write`` (atomic on a pipe).
    ``exiting`` (the real command line, about to exit): background threads that are still failing
    are silenced first (an Orbax writer whose save raised logs "Event loop is closed" from
    asyncio), so their noise cannot split the one line a user reads."""
    line = f"error: {text}\n(set TRANSFORMER_JAX_DEBUG=1 for the traceback)\n"
    if exiting:
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        threading.excepthook = lambda _args: None
        sys.unraisablehook = lambda _args: None
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):  # a captured stream (tests, notebooks)
        sys.stderr.write(line)
        return
    sys.stderr.flush()
    os.write(fd, line.encode())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="transformer-jax", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. From the real command line (``argv`` None) the process first re-executes
    itself with huge pages for malloc and then tunes glibc malloc (`transformer_jax.cli.hostmem`)."""
    from transformer_jax.cli import hostmem
    from transformer_jax.core import envflags

    try:
        envflags.check_switches()
    except envflags.SwitchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    debug = envflags.switch("TRANSFORMER_JAX_DEBUG")
    if argv is None:
        hostmem.reexec_with_hugepages(sys.argv[1:])
    hostmem.tune_malloc()
    args = build_parser().parse_args(argv)
    from transformer_jax.cli.common import quiet

    quiet()
    from transformer_jax.core.configlib import ConfigError
    from transformer_jax.train.actions import NonFiniteError
    from transformer_jax.train.checkpoint import CheckpointError
    from transformer_jax.train.lock import WorkdirLockedError
    from transformer_jax.train.loop import summary_line

    user_errors = (ConfigError, CheckpointError, NonFiniteError, WorkdirLockedError, ValueError, KeyError)
    file_errors = (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)
    try:
        result = args.fn(args)
    except user_errors + file_errors as e:
        if debug:
            raise
        plain = (ConfigError, ValueError, WorkdirLockedError, CheckpointError)
        kind = "" if isinstance(e, plain) else f"{type(e).__name__}: "
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        report_error(f"{kind}{message}", exiting=argv is None)
        return 2
    except Exception as e:  # the runtime's out-of-memory error (XlaRuntimeError: RESOURCE_EXHAUSTED)
        if "RESOURCE_EXHAUSTED" not in str(e) or debug:
            raise
        report_error(out_of_memory(e), exiting=argv is None)
        return 2
    import jax

    if jax.process_index() == 0:  # only process 0 reports
        # A command whose stdout is its product (translate) reports on stderr.
        stream = sys.stderr if getattr(args, "summary_to_stderr", False) else sys.stdout
        print(summary_line(result), flush=True, file=stream)
    return 0

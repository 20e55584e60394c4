"""`transformer-jax compile` and out-of-memory as the command line reports them: exit 2, the bytes
named, what to change, no traceback."""

import json

from tests.cli_helpers import cli
from tests.train.aot_helpers import needs_libtpu


@needs_libtpu
def test_compile_reports_a_step_that_does_not_fit_and_exits_2():
    args = [
        "model.dims.n_layers=16",
        "model.execution.scan_layers=true",
        "model.dims.max_len=1024",
        "data.seq_len=1024",
    ]
    proc = cli("compile", "--config", "shakespeare_char_llama", "--target", "v5e-1",
               "--set", "train.batch_size=64", "mesh.data=1", *args, check=False)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["fits"] is False and report["target"] == "v5e-1" and report["bytes_per_device"]["total"] > 16 * 2**30
    assert "DOES NOT FIT" in proc.stdout
    error = proc.stderr.strip().splitlines()[-2]
    assert error.startswith("error: shakespeare_char_llama does not fit v5e-1") and "bytes)" in error
    assert "model.execution.remat=full" in error and "Traceback" not in proc.stderr


def test_compile_names_an_unknown_target():
    proc = cli("compile", "--config", "shakespeare_char", "--target", "v5p-7", check=False)
    assert proc.returncode == 2 and "v5p-8" in proc.stderr and "Traceback" not in proc.stderr


def test_train_that_does_not_fit_the_machine_exits_2_with_the_bytes(tmp_path):
    """A learned position table of 10^9 rows (512 GB) cannot be allocated on this machine."""
    proc = cli("train", "--config", "shakespeare_char", "--workdir", str(tmp_path / "w"),
               "--set", "model.dims.max_len=1000000000", "train.steps=2", check=False)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "out of device memory (476.8 GiB in one buffer)" in proc.stderr and "512000000000 bytes" in proc.stderr
    assert "model.execution.remat=full" in proc.stderr and "Traceback" not in proc.stderr

"""``python -m transformer_jax.benchmarks.hf_load``: loading a Hugging Face checkpoint, against
reading its tensors with ``safetensors`` alone (a figure, not a test).

A random LLaMA-like model (default: d_model 1024, 22 layers, d_ff 2816, vocab 32000, untied
head: ~350M parameters) is written in float32 with ``models.hf.save_pretrained`` to a temporary
directory. Then, alternately and ``rounds`` times each (medians and each round's ratio reported,
since on a shared machine the load drifts between rounds):

- ``safetensors.numpy.load_file`` (every tensor into a numpy array, nothing else), and
- ``models.hf.from_pretrained`` (config mapping, abstract model, every tensor read, transposed
  to our layout and placed on the device, a usable DecoderLM).

Peak host memory of each load is measured in a fresh process (Linux): the peak resident set is
reset after the imports (``/proc/self/clear_refs``), and its peak after the load (``VmHWM``) minus
the resident set before it (``VmRSS``) is divided by the file size. The file is in the page cache for
every timed load (it was just written), so both sides measure memory bandwidth, not the disk.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
from flax import nnx

from transformer_jax.models import ModelConfig, ModelDims, RMSNormConfig, RopePositions, build_model, count_params
from transformer_jax.models.hf import from_pretrained, save_pretrained
from transformer_jax.nn.embed import EmbeddingsConfig

_RSS_SCRIPT = """
import json, sys
import jax, numpy, flax.nnx
from safetensors.numpy import load_file
from transformer_jax.models.hf import from_pretrained
def status_kib(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets the peak (VmHWM) to the current resident set
base = status_kib("VmRSS")
if sys.argv[2] == "ours":
    cfg, model = from_pretrained(sys.argv[1])
    jax.block_until_ready(flax.nnx.state(model))
else:
    tensors = load_file(sys.argv[1] + "/model.safetensors")
print(json.dumps({"base_kib": base, "peak_kib": status_kib("VmHWM")}))
"""


def llama_like(d_model: int = 1024, n_layers: int = 22, d_ff: int = 2816, vocab: int = 32000) -> ModelConfig:
    return ModelConfig(
        dims=ModelDims(
            vocab_size=vocab,
            d_model=d_model,
            n_heads=d_model // 64,
            n_kv_heads=d_model // 64,
            d_ff=d_ff,
            n_layers=n_layers,
            max_len=2048,
        ),
        norm=RMSNormConfig(),
        position=RopePositions(),
        ffn="swiglu",
        use_bias=False,
        embeddings=EmbeddingsConfig(tie=False),
    )


def _ours(path: Path) -> None:
    _, model = from_pretrained(path)
    jax.block_until_ready(nnx.state(model))


def _safetensors(path: Path) -> None:
    from safetensors.numpy import load_file

    load_file(path / "model.safetensors")


def _timed(fn, path: Path) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn(path)
    seconds = time.perf_counter() - t0
    gc.collect()
    return seconds


def _peak_rss(path: Path, which: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, str(path), which], capture_output=True, text=True, check=True
    )
    d = json.loads(out.stdout.strip().splitlines()[-1])
    return (d["peak_kib"] - d["base_kib"]) * 1024


def bench_hf_load(cfg: ModelConfig | None = None, *, rounds: int = 3) -> dict:
    cfg = cfg or llama_like()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        model = build_model(cfg)
        save_pretrained(model, path)
        del model
        gc.collect()
        size = (path / "model.safetensors").stat().st_size
        times: dict[str, list[float]] = {"safetensors": [], "from_pretrained": []}
        _safetensors(path)  # warm the page cache
        for _ in range(rounds):
            times["safetensors"].append(_timed(_safetensors, path))
            times["from_pretrained"].append(_timed(_ours, path))
        peak = {which: _peak_rss(path, which) for which in ("ours", "safetensors")}
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "params": count_params(cfg),
        "file_bytes": size,
        "dtype": "float32",
        "seconds": times,
        "median_seconds": med,
        "time_ratio": med["from_pretrained"] / med["safetensors"],
        "paired_ratios": [a / b for a, b in zip(times["from_pretrained"], times["safetensors"])],
        "peak_rss_bytes": peak,
        "peak_rss_over_file": peak["ours"] / size,
        "safetensors_peak_rss_over_file": peak["safetensors"] / size,
    }
    print(
        f"{result['params'] / 1e6:.0f}M params, {size / 2**30:.2f} GiB float32 safetensors: "
        f"from_pretrained {med['from_pretrained']:.2f} s vs safetensors.numpy.load_file {med['safetensors']:.2f} s "
        f"(ratio {result['time_ratio']:.2f}, median of {rounds}; per round "
        f"{', '.join(f'{r:.2f}' for r in result['paired_ratios'])}); peak host RSS of the load "
        f"{peak['ours'] / 2**30:.2f} GiB = {result['peak_rss_over_file']:.2f}x the file "
        f"(safetensors alone: {result['safetensors_peak_rss_over_file']:.2f}x)"
    )
    return result


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description="Loading a Hugging Face checkpoint vs reading it with safetensors alone")
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--layers", type=int, default=22)
    p.add_argument("--d-ff", type=int, default=2816)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    return bench_hf_load(llama_like(args.d_model, args.layers, args.d_ff, args.vocab), rounds=args.rounds)


if __name__ == "__main__":
    main()

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


# DeepSeek-V2's layout at toy sizes, as a config.json alone: compiling reads no weights
_TINY_V2 = dict(
    model_type="deepseek_v2", architectures=["DeepseekV2ForCausalLM"], vocab_size=97, hidden_size=64,
    intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
    n_shared_experts=1, n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=1, kv_lora_rank=16,
    q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, max_position_embeddings=128,
    rms_norm_eps=1e-6, topk_method="greedy", rope_theta=10000.0,
)  # fmt: skip


def test_compile_a_lora_fine_tune_from_a_config_json_alone(tmp_path):
    """``--init-from`` as train reads it, its config.json alone: the model is the base's, LoRA applies,
    a base field set by ``--set`` is refused by name."""
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.json").write_text(json.dumps(_TINY_V2))
    base = str(tmp_path / "base")
    sets = ["train.lora=on", "train.lora.targets=q,kv_b,o", "data.seq_len=32", "train.batch_size=2"]
    proc = cli("compile", "--init-from", base, "--set", *sets)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["fits"] is True and report["params"] < 200_000, report
    refused = cli("compile", "--init-from", base, "--set", *sets, "model.dims.n_layers=4", check=False)
    assert refused.returncode == 2 and "model.dims.n_layers" in refused.stderr and "Traceback" not in refused.stderr
    neither = cli("compile", check=False)
    assert neither.returncode == 2 and "compile needs --config" in neither.stderr

"""The command line with Hugging Face checkpoints: ``sample --hf``, ``train --init-from`` (full and
LoRA), ``export``; checked against ``transformers`` on a tiny random Llama with a BPE tokenizer
built here, offline. Needs the ``interop`` extra."""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.cli_helpers import TINY, cli, saved_states  # noqa: E402

pytestmark = pytest.mark.interop

TEXT = ["the quick brown fox jumps over the lazy dog", "pack my box with five dozen liquor jugs"]
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda"]
SHORT = ["--set", "data.dataset=text", "data.seq_len=16", "train.batch_size=4", "train.steps=2",
         "train.eval.every=2", "train.eval.batches=1", "train.checkpoint.every=2", "train.log.every=1",
         "train.optim.warmup_steps=0"]  # fmt: skip


def _tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(TEXT * 10, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )


def _llama(vocab: int, seed: int):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        initializer_range=0.25,  # wide top-2 margins: greedy decoding is not decided by rounding
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """(directory, transformers model, tokenizer) of a tiny random Llama saved with save_pretrained."""
    path = tmp_path_factory.mktemp("hf") / "tiny-llama"
    tok = _tokenizer()
    hf = _llama(len(tok), seed=0)
    hf.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path), hf, tok


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("corpus") / "greek.txt"
    path.write_text("\n".join(" ".join(rng.choice(WORDS, 12)) for _ in range(300)))
    return str(path)


def _summary(proc) -> dict:
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _hf_logits(model, tokens: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(tokens)).logits.numpy()


def _run_logits(workdir: str, tokens: np.ndarray, *, fresh_in: str | None = None) -> np.ndarray:
    """Logits of the run's latest checkpoint (adapters unmerged), computed in this process; with
    ``fresh_in`` (an empty directory), of the state a fresh run of the run's saved config starts
    from, i.e. what ``train`` stepped from first."""
    from flax import nnx

    from transformer_jax.train.experiment import workdir_config
    from transformer_jax.train.run import setup

    where = workdir if fresh_in is None else fresh_in
    run, _ = setup(workdir_config(workdir), where, restore=fresh_in is None, devices=jax.devices()[:1])
    run.checkpoints.close()
    model = nnx.merge(run.graphdef, run.state.params, run.state.model_state)
    return np.asarray(model(tokens)[0])


def test_sample_hf_greedy_matches_transformers(hf_dir):
    path, hf, tok = hf_dir
    prompt = "the lazy fox"
    ids = tok(prompt, return_tensors="pt").input_ids
    assert int(ids[0, 0]) == tok.bos_token_id  # the tokenizer adds BOS, and so must sample
    with torch.no_grad():
        out = hf.generate(ids, do_sample=False, max_new_tokens=12)
    want = prompt + tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    proc = cli("sample", "--hf", path, "--prompt", prompt, "--strategy", "greedy", "--max-new-tokens", "12")
    assert _summary(proc)["text"] == want


@pytest.mark.slow
def test_fine_tune_from_hf_and_export(hf_dir, corpus, tmp_path):
    """train --init-from (every weight) starts from the pretrained weights (its logits before the
    first step are transformers'), keeps the pretrained config and tokenizer; export writes a
    directory transformers loads with our logits and the same tokenizer."""
    path, hf, tok = hf_dir
    workdir, out = str(tmp_path / "run"), str(tmp_path / "export")
    cli(
        "train",
        "--init-from",
        path,
        "--workdir",
        workdir,
        "--sample-tokens",
        "4",
        *SHORT,
        f"data.dataset.path={corpus}",
    )
    saved = json.loads(pathlib.Path(workdir, "config.json").read_text())
    assert saved["train"]["init_from"] == os.path.abspath(path)
    dims = saved["model"]["dims"]
    assert (dims["d_model"], dims["n_kv_heads"], dims["vocab_size"]) == (32, 2, len(tok))
    assert json.loads(pathlib.Path(workdir, "tokenizer", "tokenizer.json").read_text())["type"] == "huggingface"
    tokens = np.random.default_rng(1).integers(3, len(tok), (2, 12))
    start = _run_logits(workdir, tokens, fresh_in=str(tmp_path / "start"))
    np.testing.assert_allclose(start, _hf_logits(hf, tokens), atol=1e-4, rtol=0)

    assert _summary(cli("export", "--workdir", workdir, "--out", out))["lora_merged"] is False
    exported = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    np.testing.assert_allclose(_hf_logits(exported, tokens), _run_logits(workdir, tokens), atol=1e-4)
    text = "the quick gamma fox"
    assert transformers.AutoTokenizer.from_pretrained(out)(text).input_ids == tok(text).input_ids


@pytest.mark.slow
def test_lora_from_hf_export_merges_and_a_changed_base_is_refused(hf_dir, corpus, tmp_path):
    path, _, tok = hf_dir
    base = str(tmp_path / "base")
    shutil.copytree(path, base)
    workdir, out = str(tmp_path / "lora"), str(tmp_path / "export")
    lora = ["train.lora=on", "train.lora.rank=2", "train.lora.targets=q,v,o,down", "train.optim.lr=0.05"]
    lora += ["model.execution.scan_layers=true"]  # loaded per layer, trained scanned, exported per layer
    proc = cli(
        "train",
        "--init-from",
        base,
        "--workdir",
        workdir,
        "--sample-tokens",
        "0",
        *SHORT,
        f"data.dataset.path={corpus}",
        *lora,
    )
    per_layer = 2 * (32 + 32) + 2 * (32 + 16) + 2 * (32 + 32) + 2 * (48 + 32)  # rank 2: q, v, o, down
    assert _summary(proc)["trainable_params"] == 2 * per_layer
    for name, state in saved_states(workdir).items():
        leaves = ["/".join(str(k.key) for k in p) for p, _ in jax.tree_util.tree_flatten_with_path(state["params"])[0]]
        assert leaves and all("/lora/" in leaf for leaf in leaves), name  # the adapters alone

    assert _summary(cli("export", "--workdir", workdir, "--out", out))["lora_merged"] is True
    exported = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    original = transformers.AutoModelForCausalLM.from_pretrained(base).eval()
    tokens = np.random.default_rng(2).integers(3, len(tok), (2, 12))
    ours = _run_logits(workdir, tokens)
    np.testing.assert_allclose(_hf_logits(exported, tokens), ours, atol=1e-4)
    want = _hf_logits(original, tokens)  # the adapters start at zero: the run starts at the base's logits
    np.testing.assert_allclose(_run_logits(workdir, tokens, fresh_in=str(tmp_path / "start")), want, atol=1e-4, rtol=0)
    assert np.abs(want - ours).max() > 1e-3  # and training changed them

    _llama(len(tok), seed=1).save_pretrained(base)  # another model, same shapes and file size
    proc = cli("sample", "--workdir", workdir, "--prompt", "the", "--max-new-tokens", "2", check=False)
    assert proc.returncode == 2, proc.stderr
    assert "has changed since: model.safetensors: content changed" in proc.stderr


def _bad_dirs(tmp, hf):
    bert = tmp / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    (bert / "model.safetensors").write_bytes(b"")
    return {"{hf}": hf, "{bert}": str(bert), "{missing}": str(tmp / "missing"), "{file}": str(bert / "config.json")}


@pytest.mark.parametrize(
    "args, named",
    [
        (
            ["train", "--init-from", "{missing}", "--workdir", "{tmp}/w"],
            "train.init_from='{missing}': no such directory",
        ),
        (["train", "--init-from", "{file}", "--workdir", "{tmp}/w"], "is a file"),
        (["train", "--init-from", "{bert}", "--workdir", "{tmp}/w"], "model_type='bert' is not supported"),
        (
            ["train", "--init-from", "{hf}", "--workdir", "{tmp}/w", "--set", "model.dims.n_layers=3"],
            "model.dims.n_layers=3",
        ),
        (
            ["train", "--init-from", "{hf}", "--workdir", "{tmp}/w", "--set", "data.dataset.tokenizer=byte"],
            "data.dataset.tokenizer",
        ),
        (["train", "--init-from", "{hf}", "--workdir", "{tmp}/w", "--set", "train.lora.rank=4"], "train.lora=on"),
        (["train", "--workdir", "{tmp}/w"], "{tmp}/w holds no config.json of an earlier run to resume"),
        (
            ["train", "--config", TINY, "--workdir", "{tmp}/w", "--set", "train.init_from={hf}"],
            "model.dims.d_ff=64 differs",
        ),
        (["sample", "--hf", "{missing}"], "--hf {missing}: no such directory"),
        (["sample", "--hf", "{bert}"], "model_type='bert' is not supported"),
        (["sample", "--hf", "{hf}", "--best"], "sample --hf does not read --best"),
        (["export", "--workdir", "{missing}", "--out", "{tmp}/o"], "{missing}/config.json not found"),
    ],
)
def test_bad_input_is_one_error_line(hf_dir, tmp_path, args, named):
    names = {**_bad_dirs(tmp_path, hf_dir[0]), "{tmp}": str(tmp_path)}

    def fill(s: str) -> str:
        for k, v in names.items():
            s = s.replace(k, v)
        return s

    proc = cli(*map(fill, args), check=False)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and fill(named) in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_export_of_a_char_level_run_needs_no_tokenizer(tmp_path):
    """Our own tokenizers have no Hugging Face form: export says so, and --no-tokenizer writes the
    weights, which transformers loads."""
    from tests.cli_helpers import train

    workdir, out = tmp_path / "run", str(tmp_path / "export")
    sets = ["model.position=rope", "model.norm=rmsnorm", "model.ffn=swiglu", "model.use_bias=false"]
    train(workdir, "train.steps=2", "model.embeddings.tie=false", *sets)
    proc = cli("export", "--workdir", str(workdir), "--out", out, check=False)
    assert proc.returncode == 2 and "char tokenizer has no Hugging Face form" in proc.stderr, proc.stderr
    summary = _summary(cli("export", "--workdir", str(workdir), "--out", out, "--no-tokenizer"))
    assert summary["tokenizer"] is False and sorted(os.listdir(out)) == ["config.json", "model.safetensors"]
    exported = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    tokens = np.random.default_rng(3).integers(3, 60, (1, 10))
    np.testing.assert_allclose(_hf_logits(exported, tokens), _run_logits(str(workdir), tokens), atol=1e-4)

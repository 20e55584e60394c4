"""``eval --hf DIR --corpus ... --tasks ...`` on a tiny random Llama saved with ``save_pretrained``:
acc / acc_norm of HellaSwag, ARC and PIQA JSONL fixtures, and corpus perplexity / bits per byte,
against a hand computation with transformers (log-softmax of the torch model's logits summed over
each continuation, the harness' prompts and windows written out here). Needs the ``interop`` extra."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.cli_helpers import cli  # noqa: E402

pytestmark = pytest.mark.interop

TEXT = (
    "the quick brown fox jumps over the lazy dog. pack my box with five dozen liquor jugs. "
    "how to boil an egg: put the egg in water, heat it, wait ten minutes. question answer "
    "a cat sat on the mat and the café was closed so we went home."
)
HELLASWAG = [
    {"activity_label": "Cooking", "ctx_a": "A man puts an egg in a pot.", "ctx_b": "he",
     "endings": ["heats the water [title] and waits.", "sat on the mat.", "jumps  over the lazy dog and the fox.",
                 "boils it."], "label": "3"},
    {"activity_label": "Pets", "ctx_a": "A cat sits on the mat.", "ctx_b": "the cat",
     "endings": ["goes home.", "[header] drinks the water of the café slowly.", "is closed.", "waits."],
     "label": "0"},
]  # fmt: skip
ARC = [
    {"id": "a1", "question": "What do you put in water to boil?",
     "choices": {"text": ["an egg", "a dog", "the mat and five dozen jugs", "café"], "label": ["A", "B", "C", "D"]},
     "answerKey": "A"},
    {"id": "a2", "question": "Where did the cat sit?",
     "choices": {"text": ["on the mat", "in the box", "over the fox"], "label": ["1", "2", "3"]}, "answerKey": "1"},
]  # fmt: skip
PIQA = [
    {"goal": "boil an egg", "sol1": "put the egg in water and heat it", "sol2": "put the egg on the mat", "label": 0},
    {"goal": "pack a box", "sol1": "jugs", "sol2": "put five dozen liquor jugs in the box", "label": 1},
]


def _hellaswag_pre(text: str) -> str:
    import re

    text = text.strip().replace(" [title]", ". ")
    return re.sub("\\[.*?\\]", "", text).replace("  ", " ")


REFERENCE_DOCS = {  # the harness' task yamls / utils, written out: (context, choices, gold)
    "hellaswag": lambda d: (
        _hellaswag_pre(d["activity_label"] + ": " + d["ctx_a"] + " " + d["ctx_b"].capitalize()),
        [_hellaswag_pre(e) for e in d["endings"]],
        int(d["label"]),
    ),
    "arc_easy": lambda d: (
        f"Question: {d['question']}\nAnswer:",
        d["choices"]["text"],
        d["choices"]["label"].index(d["answerKey"]),
    ),
    "piqa": lambda d: (f"Question: {d['goal']}\nAnswer:", [d["sol1"], d["sol2"]], d["label"]),
}
DOCS = {"hellaswag": HELLASWAG, "arc_easy": ARC, "piqa": PIQA}


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([TEXT] * 10, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    hf_tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=len(hf_tok), hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, initializer_range=0.3, bos_token_id=1, eos_token_id=2,
        pad_token_id=0,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(cfg).eval()
    path = tmp_path_factory.mktemp("hf") / "tiny-llama"
    model.save_pretrained(path)
    hf_tok.save_pretrained(path)
    files = {}
    for name, docs in DOCS.items():
        files[name] = path.parent / f"{name}.jsonl"
        files[name].write_text("".join(json.dumps(d) + "\n" for d in docs))
    corpus = path.parent / "corpus.txt"
    corpus.write_text(TEXT * 2)
    return str(path), model, hf_tok, {k: str(v) for k, v in files.items()}, str(corpus)


def _reference_ll(model, tok, context: str, continuation: str) -> float:
    """log p(continuation | context): the whole text encoded, the context's tokens cut off."""
    whole, ctx = tok(context + continuation).input_ids, tok(context).input_ids
    assert whole[: len(ctx)] == ctx and len(whole) <= 64
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([whole])).logits[0].double(), -1)
    return float(sum(logp[i - 1, whole[i]] for i in range(len(ctx), len(whole))))


def _reference(model, tok, name: str) -> tuple[list[list[float]], dict]:
    lls, hits = [], {"acc": [], "acc_norm": []}
    for doc in DOCS[name]:
        context, choices, gold = REFERENCE_DOCS[name](doc)
        ll = [_reference_ll(model, tok, context, " " + c) for c in choices]
        lls.append(ll)
        hits["acc"].append(max(range(len(ll)), key=lambda i: ll[i]) == gold)
        hits["acc_norm"].append(max(range(len(ll)), key=lambda i: ll[i] / len(choices[i])) == gold)
    return lls, {k: float(np.mean(v)) for k, v in hits.items()}


def test_eval_hf_tasks_and_corpus_match_transformers(hf_dir, tmp_path):
    path, model, tok, files, corpus = hf_dir
    out = tmp_path / "results.json"
    tasks = [f"{name}={file}" for name, file in files.items()]
    proc = cli("eval", "--hf", path, "--tasks", *tasks, "--corpus", corpus, "--window", "16", "--output", str(out))
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert json.loads(out.read_text()) == summary
    flips = 0
    for name in DOCS:
        lls, want = _reference(model, tok, name)
        assert summary[name]["docs"] == len(DOCS[name])
        assert (summary[name]["acc"], summary[name]["acc_norm"]) == pytest.approx((want["acc"], want["acc_norm"])), name
        flips += sum(np.argmax(ll) != np.argmax(np.asarray(ll) / [len(c) for c in REFERENCE_DOCS[name](d)[1]])
                     for d, ll in zip(DOCS[name], lls))  # fmt: skip
    assert flips > 0  # the fixtures tell acc from acc_norm
    assert len(summary["compiled_lengths"]) <= 3  # buckets, not one program per length

    # The corpus: disjoint windows of 16 scored tokens after a BOS, the last one with a longer context.
    ids = tok(TEXT * 2, add_special_tokens=False).input_ids
    full, nll = [tok.bos_token_id, *ids], 0.0
    for start in range(0, len(ids), 16):
        end = min(start + 16, len(ids))
        seq = full[max(0, end - 16) : end + 1]
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([seq[:-1]])).logits[0].double(), -1)
        nll -= float(sum(logp[i, seq[i + 1]] for i in range(len(seq) - 1 - (end - start), len(seq) - 1)))
    got = summary["corpus"]
    assert got["tokens"] == len(ids) and got["bytes"] == len((TEXT * 2).encode())
    assert got["perplexity"] == pytest.approx(math.exp(nll / len(ids)), rel=1e-4)
    assert got["bits_per_byte"] == pytest.approx(nll / math.log(2) / got["bytes"], rel=1e-4)


def test_per_choice_loglikelihoods_match_transformers(hf_dir):
    """Every choice's log-likelihood, batched and padded (batch 3: rows of several lengths share a bucket)."""
    from transformer_jax.data import HFTokenizer
    from transformer_jax.eval.loglikelihood import Scorer, context_encoder
    from transformer_jax.eval.multiple_choice import evaluate_task
    from transformer_jax.models.hf import from_pretrained

    path, model, tok, files, _ = hf_dir
    cfg, ours = from_pretrained(path)
    scorer = Scorer(ours, max_len=cfg.dims.max_len, batch_size=3, progress=False)
    encode = context_encoder(HFTokenizer.from_pretrained(path))
    for name, file in files.items():
        got = evaluate_task(scorer, encode, name, file)
        want, _ = _reference(model, tok, name)
        assert len(got["loglikelihoods"]) == len(want)
        for g, w in zip(got["loglikelihoods"], want):
            np.testing.assert_allclose(g, w, atol=1e-4, rtol=0)


def test_acc_norm_divides_by_characters_and_acc_bytes_by_utf8_bytes():
    """The harness' completion_len is len(choice) without the leading space; acc_bytes its UTF-8 bytes."""
    from transformer_jax.eval.multiple_choice import Doc, metrics

    docs = [Doc("c", ("\u00e9\u00e9\u00e9\u00e9", "abcdef"), 1), Doc("c", ("ab", "abcdefgh"), 1)]
    got = metrics(docs, [[-4.4, -6.0], [-2.2, -8.4]])
    # doc 1: -4.4/4 < -6/6 (characters) but -4.4/8 > -6/6 (bytes); doc 2: -2.2/2 < -8.4/8 but -2.2/3 > -8.4/9
    assert (got["acc"], got["acc_norm"], got["acc_bytes"]) == (0.0, 1.0, 0.5)
    assert got["acc_bytes_stderr"] == pytest.approx(0.5)  # the sample standard deviation / sqrt(n), as the harness


@pytest.mark.parametrize(
    "line, named",
    [
        ('{"goal": "g", "sol1": "a", "sol2": "b"}', "piqa.jsonl:2: not a piqa document: has no field 'label'"),
        ("{not json", "piqa.jsonl:2: not a piqa document"),
        ('{"goal": "g", "sol1": "a", "sol2": "b", "label": 2}', "field 'label'=2 is not the index"),
    ],
)
def test_bad_jsonl_line_is_one_error_naming_file_and_line(hf_dir, tmp_path, line, named):
    path, *_ = hf_dir
    bad = tmp_path / "piqa.jsonl"
    bad.write_text(json.dumps(PIQA[0]) + "\n" + line + "\n")
    proc = cli("eval", "--hf", path, "--tasks", f"piqa={bad}", check=False)
    errors = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1 and named in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args, named",
    [
        (["--tasks", "hellaswag={tmp}/missing.jsonl"], "{tmp}/missing.jsonl"),
        (["--tasks", "mmlu={tmp}/x.jsonl"], "--tasks='mmlu': unknown multiple-choice task"),
        (["--tasks", "piqa"], "give TASK=FILE"),
        ([], "eval --hf needs --corpus"),
        (["--corpus", "{tmp}/missing.txt"], "{tmp}/missing.txt"),
        (["--tasks", "piqa={tmp}/x.jsonl", "--full"], "does not read --full"),
    ],
)
def test_bad_eval_arguments_are_one_error_line(hf_dir, tmp_path, args, named):
    path, *_ = hf_dir
    fill = [a.replace("{tmp}", str(tmp_path)) for a in args]
    proc = cli("eval", "--hf", path, *fill, check=False)
    errors = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr
    assert named.replace("{tmp}", str(tmp_path)) in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr

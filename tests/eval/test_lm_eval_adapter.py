"""``lm_eval.simple_evaluate`` driving our model through ``JaxLM`` on local tasks (task yamls written
here, pointing at JSONL files): its acc / acc_norm equal ``eval --tasks``' (itself checked against
transformers in test_multiple_choice), its rolling log-likelihood equals the corpus NLL, its greedy
``generate_until`` equals transformers' ``generate``. Offline; needs the ``lmeval`` and ``interop`` extras."""

from __future__ import annotations

import pytest

lm_eval = pytest.importorskip("lm_eval")
torch = pytest.importorskip("torch")

import tests.eval.test_multiple_choice as mc  # noqa: E402

TEXT = mc.TEXT
hf_dir = mc.hf_dir  # the tiny random Llama fixture, shared

pytestmark = pytest.mark.interop

YAMLS = {
    "local_piqa": """task: local_piqa
dataset_path: json
dataset_kwargs:
  data_files:
    validation: {file}
output_type: multiple_choice
validation_split: validation
doc_to_text: "Question: {{{{goal}}}}\\nAnswer:"
doc_to_target: label
doc_to_choice: "{{{{[sol1, sol2]}}}}"
metric_list:
  - metric: acc
  - metric: acc_norm
""",
    "local_arc_easy": """task: local_arc_easy
dataset_path: json
dataset_kwargs:
  data_files:
    validation: {file}
output_type: multiple_choice
validation_split: validation
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{choices.label.index(answerKey)}}}}"
doc_to_choice: "{{{{choices.text}}}}"
metric_list:
  - metric: acc
  - metric: acc_norm
""",
}


@pytest.fixture(scope="module")
def lm(hf_dir):
    from transformer_jax.eval.lm_eval_adapter import JaxLM

    return JaxLM.from_pretrained(hf_dir[0], batch_size=4, progress=False)


def test_simple_evaluate_on_local_tasks_matches_eval_tasks(hf_dir, lm, tmp_path, monkeypatch):
    from lm_eval.tasks import TaskManager

    from transformer_jax.eval.multiple_choice import evaluate_task

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    _, _, _, files, _ = hf_dir
    for name, text in YAMLS.items():
        (tmp_path / f"{name}.yaml").write_text(text.format(file=files[name.removeprefix("local_")]))
    out = lm_eval.simple_evaluate(
        model=lm, tasks=list(YAMLS), task_manager=TaskManager(include_path=str(tmp_path)), num_fewshot=0
    )
    assert out is not None
    for name in YAMLS:
        ours = evaluate_task(lm.scorer, lm.tok_encode, name.removeprefix("local_"), files[name.removeprefix("local_")])
        got = out["results"][name]
        assert (got["acc,none"], got["acc_norm,none"]) == pytest.approx((ours["acc"], ours["acc_norm"])), name


def test_rolling_loglikelihood_is_the_corpus_nll(hf_dir, lm):
    from lm_eval.api.instance import Instance

    from transformer_jax.eval.corpus import corpus_metrics

    corpus = hf_dir[4]
    [ll] = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (TEXT * 2,), 0)])
    want = corpus_metrics(lm.scorer, lm.tokenizer, [corpus])
    assert -ll == pytest.approx(want["loss"] * want["tokens"], rel=1e-5)


def test_generate_until_is_transformers_greedy_cut_at_until(hf_dir, lm):
    from lm_eval.api.instance import Instance

    _, model, tok, _, _ = hf_dir
    prompt = "the quick brown"
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        new = model.generate(ids, do_sample=False, max_new_tokens=10)[0, ids.shape[1] :]
    full = tok.decode(new, skip_special_tokens=True)
    [plain] = lm.generate_until([Instance("generate_until", {}, (prompt, {"until": [], "max_gen_toks": 10}), 0)])
    assert plain == full
    stop = full.strip()[:2]
    [cut] = lm.generate_until([Instance("generate_until", {}, (prompt, {"until": [stop], "max_gen_toks": 10}), 0)])
    assert cut == full.split(stop)[0]

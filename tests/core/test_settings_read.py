"""No setting silently dropped: repeated ``--set`` accumulate, a field the chosen variant does not
read is an error naming field and variant, an optional group is never switched on by the way, and
every experiment file sets only fields its variants read."""

import glob
import os
import warnings

import pytest

from transformer_jax.core import configlib, unread
from transformer_jax.core.configlib import ConfigError, ConfigWarning
from transformer_jax.core.overrides import apply_overrides, parse_overrides
from transformer_jax.core.registry import Registry
from transformer_jax.models import ModelConfig, ModelDims, baseline_model_config
from transformer_jax.train.config import Config
from transformer_jax.train.experiment import load_experiment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "tests", "train", "tiny_experiment.py")
SCRIPTS = {"soak_interruptions.py", "speedrun_sweep.py"}  # experiments/ files that are scripts, not configs


def test_repeated_set_flags_accumulate_and_a_repeated_key_warns():
    from transformer_jax.cli import build_parser

    args = build_parser().parse_args(
        ["train", "--config", TINY, "--workdir", "w", "--set", "train.steps=3", "--set", "model.dims.n_layers=1"]
    )
    assert args.set == ["train.steps=3", "model.dims.n_layers=1"]
    cfg = load_experiment(TINY, args.set)
    assert cfg.train.steps == 3 and cfg.model.dims.n_layers == 1  # both groups applied, not only the last
    with pytest.warns(ConfigWarning, match=r"--set train.steps is given twice \('3', then '5'\); using '5'"):
        assert load_experiment(TINY, ["train.steps=3", "model.dims.n_layers=1", "train.steps=5"]).train.steps == 5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert parse_overrides(["a=1", "a=1"]) == {"a": "1"}  # the same value twice is no conflict


def test_a_set_field_the_variant_does_not_read_is_an_error_naming_both():
    with pytest.raises(ConfigError) as err:
        load_experiment(TINY, ["model.execution.attention_block_size=128"])
    message = str(err.value)
    assert "model.execution.attention_block_size=128: is not read by attention_impl='xla'" in message, message
    assert "chunked, splash, pallas_gpu, auto" in message


@pytest.mark.parametrize(
    "sets,message",
    [
        (["data.dataset.path=MY.txt"], "the dataset 'shakespeare' has no setting 'path' (its settings: tokenizer, "),
        (["data.dataset.tokenizer.vocab_size=500"], "the tokenizer 'char' has no setting 'vocab_size' (its settings: "
         "max_records); 'vocab_size' is a setting of 'sentencepiece': choose it with --set data.dataset.tokenizer="),
        (["data.dataset=prepared", "data.dataset.path=p", "data.dataset.tokenizer=byte"],
         "the dataset 'prepared' has no setting 'tokenizer' (its settings: path, packing)"),
        (["data.dataset.document_split=line"], "data.dataset.document_split='line': is read only with "
         "data.dataset.packing=documents"),
        (["data.dataset.vocab_size=500"], "has no setting 'vocab_size' (its settings: tokenizer, cache_dir, "),
        (["data.dataset.vocab_size=500"], "; did you mean data.dataset.tokenizer.vocab_size (with --set "
         "data.dataset.tokenizer=sentencepiece)?"),
    ],
)  # fmt: skip
def test_a_data_setting_the_chosen_dataset_does_not_have_is_an_error_naming_its_settings(sets, message):
    with pytest.raises(ConfigError) as err:
        load_experiment(TINY, sets)
    assert message in str(err.value), str(err.value)


def test_a_non_default_unread_field_in_an_experiment_file_is_an_error(tmp_path):
    path = tmp_path / "exp.py"
    path.write_text(
        "import dataclasses\n"
        "from transformer_jax.train.config import Config\n"
        "from transformer_jax.models import ExecutionConfig, ModelConfig\n"
        "def get_config():\n"
        "    return Config(model=ModelConfig(execution=ExecutionConfig(attention_block_size=64)))\n"
    )
    match = r"model.execution.attention_block_size=64: is not read by attention_impl='xla'"
    with pytest.raises(ConfigError, match=match):
        load_experiment(str(path))


def test_baseline_kinds_refuse_transformer_fields():
    model = baseline_model_config("ngram", vocab_size=10, n_heads=8)
    problems = unread.unread_fields(Config(model=model), explicit=())
    assert any("model.dims.n_heads=8 is not read with model.kind='ngram'" in p for p in problems), problems
    with pytest.raises(
        ConfigError, match=r"the n-gram smoothing 'add_k' has no setting 'discount' \(its settings: k\)"
    ):
        load_experiment(TINY, ["model.kind=ngram", "model.baseline=ngram", "model.position=none",
                               "model.baseline.smoothing=add_k", "model.baseline.smoothing.discount=0.5"])  # fmt: skip


def test_an_optional_group_is_never_switched_on_by_setting_its_fields():
    with pytest.raises(ConfigError, match=r"model.moe is None \(off\).*--set model.moe=on"):
        load_experiment(TINY, ["model.moe.top_k=1"])
    cfg = load_experiment(TINY, ["model.moe=on", "model.moe.top_k=1"])
    assert cfg.model.moe is not None and cfg.model.moe.top_k == 1 and cfg.model.moe.n_experts == 8
    assert apply_overrides(cfg, ["model.moe=none"]).model.moe is None


def test_registry_reads_and_governed_fields():
    reg = Registry("thing")
    reg.register("a", 1, reads=("x", "y"))
    reg.register("b", 2, reads=("y",))
    reg.register("c", 3)
    assert reg.reads("a") == ("x", "y") and reg.reads("c") == () and reg.governed() == ("x", "y")
    with pytest.raises(KeyError, match="unknown thing 'd'"):
        reg.reads("d")


def test_default_model_config_has_nothing_unread():
    assert unread.unread_fields(ModelConfig()) == [] and unread.unread_fields(Config()) == []


EXPERIMENTS = sorted(p for p in glob.glob(os.path.join(ROOT, "experiments", "*.py")))


@pytest.mark.parametrize("path", EXPERIMENTS, ids=os.path.basename)
def test_every_experiment_file_loads_cleanly(path):
    if os.path.basename(path) in SCRIPTS:
        assert "def get_config" not in open(path).read()  # noqa: SIM115
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        cfg = load_experiment(path)
    assert unread.unread_fields(cfg) == []


def test_a_field_two_choices_leave_unread_is_reported_once():
    with pytest.raises(ConfigError) as err:
        load_experiment(
            TINY, ["model.execution.attention_block_size=64"]
        )  # unread by attention_impl (and by the tiny experiment's settings)
    assert str(err.value).count("model.execution.attention_block_size=64") == 1, str(err.value)


def test_changed_fields_lists_each_differing_leaf_by_dotted_name():
    before = {"model": {"d_model": 64, "moe": None}, "train": {"optim": {"lr": 3e-3}, "steps": 6}, "name": "a"}
    after = {"model": {"d_model": 64, "moe": {"n_experts": 8}}, "train": {"optim": {"lr": 1e-3}, "steps": 6}}
    assert configlib.changed_fields(before, after) == [
        ("model.moe", None, {"n_experts": 8}),
        ("name", "a", None),
        ("train.optim.lr", 3e-3, 1e-3),
    ]
    assert configlib.changed_fields(before, before) == []


def test_a_replaced_section_and_the_overrides_are_validated_once_together():
    """``--init-from`` swaps in the pretrained model: a 32-position table with the default 64-token
    rows is invalid on its own, valid with the ``data.seq_len=32`` override applied in the same pass."""
    small = ModelConfig(dims=ModelDims(max_len=32))
    with pytest.raises(ConfigError, match="data.seq_len=64: is longer than model.dims.max_len=32"):
        apply_overrides(Config(), [], replace={"model": small})
    cfg = apply_overrides(Config(), ["data.seq_len=32", "model.dims.n_layers=2"], replace={"model": small})
    assert (cfg.model.dims.max_len, cfg.model.dims.n_layers, cfg.data.seq_len) == (32, 2, 32)


@pytest.mark.parametrize(
    "key,message",
    [
        ("model.init=xavier", "model.init=xavier: model.init is a group of settings (its fields: scheme, std, "
         "zero_out); did you mean model.init.scheme=xavier?"),
        ("model.execution=xyz", "model.execution is a group of settings (its fields: dtype, param_dtype, "),
    ],
)  # fmt: skip
def test_a_value_given_to_a_group_names_its_fields_and_the_one_that_takes_it(key, message):
    with pytest.raises(ConfigError) as err:
        load_experiment(TINY, [key])
    assert message in str(err.value)


def test_switching_a_variant_names_the_changed_settings_it_does_not_carry_over():
    cfg = load_experiment(TINY, ["model.attention.qk_norm=true"])
    with pytest.warns(ConfigWarning, match=r"model.attention.qk_norm=True of 'softmax' is not carried over"):
        apply_overrides(cfg, ["model.attention=sliding_window"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        switched = apply_overrides(cfg, ["model.attention=sliding_window", "model.attention.qk_norm=true"])
        apply_overrides(cfg, ["model.attention=softmax"])  # the same choice keeps its settings
        sgd = apply_overrides(cfg, ["train.optim.optimizer=sgd"])
        apply_overrides(sgd, ["train.optim.optimizer=muon"])  # momentum: each one's own default, not changed
    assert switched.model.attention.qk_norm

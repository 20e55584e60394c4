"""``data.dataset=mixture``: rows drawn from named prepared datasets with weights (and a schedule).

Each source is written in its own alphabet, so a row's tokens say which source it came from.
Statistics: the realized share of each source over many rows is within 5 binomial sigmas of its
weight. Behaviour: the schedule switches at its step; a resumed iterator gives exactly the batches
of an uninterrupted one; validation rows are tagged per source. Errors name the field."""

import numpy as np
import pytest

from transformer_jax.core.configlib import ConfigError
from transformer_jax.core.overrides import apply_overrides
from transformer_jax.core.tokens import BOS_ID, EOS_ID, PAD_ID
from transformer_jax.data import ByteTokenizer, DataConfig, MixtureData, build_data
from transformer_jax.data.mixture import draw_sources, stages_of
from transformer_jax.data.prepare import PrepareConfig, prepare

T, B = 16, 8
ALPHABETS = {"web": "abcdefg hij", "code": "0123456 789", "math": "XYZWVU QRS"}


def prepare_source(root, name, alphabet, tokenizer="byte", n=60):
    rng = np.random.default_rng(len(name))
    docs = ["".join(rng.choice(list(alphabet), size=int(rng.integers(5, 50)))).strip() or "x" for _ in range(n)]
    (root / f"{name}.txt").write_text("\n\n".join(docs) + "\n")
    out = root / name
    prepare(PrepareConfig(inputs=(str(root / f"{name}.txt"),), out=str(out), tokenizer=tokenizer,
                          val_fraction=0.1), progress=False)  # fmt: skip
    return out


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixture")
    return {name: prepare_source(root, name, alphabet) for name, alphabet in ALPHABETS.items()}


def spec(sources, weights) -> str:
    return ",".join(f"{name}={sources[name]}:{w}" for name, w in zip(ALPHABETS, weights, strict=True))


def data_of(sources, weights=(0.6, 0.3, 0.1), batch_size=B, packing="stream", **kw):
    cfg = DataConfig(dataset=MixtureData(mixture=spec(sources, weights), packing=packing), seq_len=T, **kw)
    return build_data(cfg, batch_size=batch_size)


def take(data, n, state=None):
    with data.train_iterator(state) as it:
        return [next(it) for _ in range(n)]


def source_of_row(inputs_T) -> str:
    ids = {int(t) for t in inputs_T if t not in (PAD_ID, BOS_ID, EOS_ID)}
    (name,) = [name for name, alphabet in ALPHABETS.items() if ids <= set(ByteTokenizer().encode(alphabet))]
    return name


@pytest.mark.parametrize("packing", ["stream", "documents"])
def test_rows_come_from_their_source_in_the_weights_proportions(sources, packing):
    weights = np.array([0.6, 0.3, 0.1])
    data = data_of(sources, weights, packing=packing)
    assert data.sources == tuple(ALPHABETS) and data.batch_spec()["source_ids"] == ((B,), np.dtype(np.int32))
    batches = take(data, 100)
    ids = np.concatenate([b["source_ids"] for b in batches])
    names = list(ALPHABETS)
    for b in batches[:10]:
        for r in range(B):
            assert source_of_row(b["inputs"][r]) == names[b["source_ids"][r]]
    n = len(ids)
    share = np.bincount(ids, minlength=3) / n
    sigma = np.sqrt(weights * (1 - weights) / n)
    assert np.all(np.abs(share - weights) < 5 * sigma), (share, weights)


def test_draws_match_the_weights_over_many_rows():
    stages = ((0, np.array([0.5, 0.0, 0.2, 0.3])),)
    ids = np.concatenate([draw_sources(stages, k, 64, seed=7, process_index=0) for k in range(500)])
    n, w = len(ids), stages[0][1]
    share = np.bincount(ids, minlength=4) / n
    assert share[1] == 0 and np.all(np.abs(share - w) <= 5 * np.sqrt(w * (1 - w) / n))
    again = np.concatenate([draw_sources(stages, k, 64, seed=7, process_index=0) for k in range(500)])
    np.testing.assert_array_equal(ids, again)
    other = draw_sources(stages, 0, 64, seed=7, process_index=1)
    assert not np.array_equal(other, ids[:64])  # each process draws its own rows


def test_the_schedule_switches_at_its_steps(sources):
    schedule = "3:web=0,code=1,math=0; 5:web=0,code=0,math=2"
    cfg = DataConfig(dataset=MixtureData(mixture=spec(sources, (1, 0, 0)), schedule=schedule), seq_len=T)
    assert [s for s, _ in stages_of(cfg.dataset)] == [0, 3, 5]
    batches = take(build_data(cfg, batch_size=B), 7)
    expected = [0, 0, 0, 1, 1, 2, 2]
    for k, b in enumerate(batches):
        np.testing.assert_array_equal(b["source_ids"], np.full(B, expected[k]))
        assert {source_of_row(row) for row in b["inputs"]} == {list(ALPHABETS)[expected[k]]}


@pytest.mark.parametrize("packing", ["stream", "documents"])
def test_a_resumed_iterator_continues_exactly(sources, packing):
    data = data_of(sources, packing=packing)
    straight = take(data, 9)
    with data.train_iterator() as it:
        first = [next(it) for _ in range(4)]
        state = it.get_state()
    rest = take(data_of(sources, packing=packing), 5, state)
    for a, b in zip(straight, first + rest, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


def test_validation_rows_are_tagged_with_their_source(sources):
    data = data_of(sources)
    batches = list(data.eval_batches("val"))
    ids = np.concatenate([b["source_ids"] for b in batches])
    weights = np.concatenate([b["weights"].sum(-1) for b in batches])
    per_source = [data.pipeline.parts[name].eval_row_count("val", None) for name in ALPHABETS]
    np.testing.assert_array_equal(ids[: sum(per_source)], np.repeat([0, 1, 2], per_source))
    assert np.all(weights[sum(per_source) :] == 0)  # padding
    capped = np.concatenate([b["source_ids"] for b in data.eval_batches("val", max_batches=1)])
    assert set(capped.tolist()) == {0, 1, 2}  # a cap shares the rows among the sources


@pytest.mark.parametrize(
    ("mixture", "schedule", "match"),
    [
        ("web=/p:0.5,code=/q:-1", None, r"data.dataset.mixture='-1': source 'code': weights must be finite and >= 0"),
        ("web=/p:nan", None, "data.dataset.mixture='nan'.*finite"),
        ("web=/p:0,code=/q:0", None, "data.dataset.mixture=.*stage 0: all weights are zero"),
        ("web=/p", None, "data.dataset.mixture='web=/p': is not NAME=PATH:WEIGHT"),
        ("web=/p:1,web=/q:1", None, "data.dataset.mixture='web': names two sources"),
        ("web=/p:1,code=/q:1", "0:web=1,code=1", "data.dataset.schedule=0: must be > 0"),
        ("web=/p:1,code=/q:1", "5:web=1,code=1;5:web=0,code=1", "data.dataset.schedule=5: must be > 5"),
        ("web=/p:1,code=/q:1", "5:web=1", "data.dataset.schedule=.*no weight for code"),
        ("web=/p:1,code=/q:1", "5:web=1,math=1", "data.dataset.schedule='math=1'.*not NAME=WEIGHT"),
        ("web=/p:1,code=/q:1", "5:web=0,code=0", "data.dataset.schedule=.*at step 5: all weights are zero"),
    ],
)
def test_bad_weights_are_refused_naming_the_field(mixture, schedule, match):
    with pytest.raises(ConfigError, match=match):
        DataConfig(dataset=MixtureData(mixture=mixture, schedule=schedule))


def test_settings_a_mixture_does_not_read_are_refused(sources):
    with pytest.raises(ConfigError, match="data.dataset.mixture=None: is required when data.dataset='mixture'"):
        DataConfig(dataset=MixtureData())
    for field, value in (("path", "/p"), ("tokenizer", "byte")):
        with pytest.raises(ConfigError, match=f"the dataset 'mixture' has no setting '{field}'"):
            apply_overrides(DataConfig(), ["dataset=mixture", f"dataset.mixture={spec(sources, (1, 1, 1))}",
                                           f"dataset.{field}={value}"])  # fmt: skip
    with pytest.raises(ConfigError, match="the dataset 'prepared' has no setting 'mixture'"):
        apply_overrides(DataConfig(), ["dataset=prepared", "dataset.path=p", "dataset.mixture=m"])


def test_sources_with_another_tokenizer_or_missing_are_refused_by_name(sources, tmp_path):
    other = prepare_source(tmp_path, "chars", "klmno", tokenizer="char")
    cfg = DataConfig(dataset=MixtureData(mixture=f"web={sources['web']}:1,chars={other}:1"))
    with pytest.raises(ConfigError, match="data.dataset.mixture: sources 'web' .* and 'chars' .* different tokenizers"):
        build_data(cfg, batch_size=B)
    cfg = DataConfig(dataset=MixtureData(mixture=f"web={sources['web']}:1,gone={tmp_path / 'gone'}:1"))
    with pytest.raises(ConfigError, match="data.dataset.mixture: source 'gone': .* is not a directory"):
        build_data(cfg, batch_size=B)

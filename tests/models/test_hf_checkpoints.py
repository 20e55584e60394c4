"""Checkpoint handling around the families: a bfloat16 checkpoint loaded in a fresh process that
cannot import torch, sharded files both ways, loading straight onto a mesh, the other layouts a
checkpoint may use (old config keys, GPT-2 hub names, Mixtral's fused experts, a stored tied
head), our safetensors reader/writer against the ``safetensors`` library, and every unsupported
model type, config key or value, and tensor as an error naming it. Needs the ``interop`` extra."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from flax import nnx  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from tests.models.test_hf_families import SEQ, hf_logits, hf_model, tokens, torch_blocked  # noqa: E402
from transformer_jax.core.sharding import logical_to_spec  # noqa: E402
from transformer_jax.models import Llama3Scaling, ModelDims, RopePositions  # noqa: E402
from transformer_jax.models.config import ModelConfig  # noqa: E402
from transformer_jax.models.hf import (  # noqa: E402
    CheckpointReader,
    config_from_hf,
    from_pretrained,
    read_header,
    save_pretrained,
    write_safetensors,
)
from transformer_jax.parallel import LOGICAL_RULES, MeshConfig, make_mesh  # noqa: E402

pytestmark = pytest.mark.interop
ROOT = Path(__file__).resolve().parents[2]


def _params(model) -> dict:
    return {k: np.asarray(v[...]) for k, v in nnx.to_flat_state(nnx.state(model))}


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    hf = hf_model("llama")
    path = tmp_path_factory.mktemp("llama")
    hf.save_pretrained(path)
    return hf, path


def _tensors(path: Path) -> dict[str, np.ndarray]:
    reader = CheckpointReader(path)
    return {n: reader.read(n) for n in sorted(reader.names())}


def _rewrite(src: Path, dst: Path, tensors: dict[str, np.ndarray] | None = None, **config_changes) -> Path:
    """A copy of the checkpoint ``src`` with other tensors and/or config.json entries (None deletes)."""
    dst.mkdir(parents=True, exist_ok=True)
    tensors = _tensors(src) if tensors is None else tensors
    write_safetensors(dst / "model.safetensors", [(n, a.dtype, a.shape) for n, a in tensors.items()], tensors.values())
    config = json.loads((src / "config.json").read_text())
    config.update(config_changes)
    config = {k: v for k, v in config.items() if v is not None}
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def test_bfloat16_checkpoint_loads_in_a_process_without_torch(tmp_path):
    """Checkpoint in bfloat16 (as most published ones). bf16 -> float32 is exact, so the reference
    is transformers loading the same file in float32: both run the identical float32 weights and
    differ only by float32 summation order, the 1e-4 bound of a float32 checkpoint. (Not the bf16
    torch module upcast with .float(): its RoPE frequencies were rounded to bf16 as well.)
    dtype="bfloat16" keeps the stored bits."""
    hf = hf_model("mistral").to(torch.bfloat16)
    hf.save_pretrained(tmp_path / "ckpt")
    x = tokens((2, SEQ))
    np.save(tmp_path / "tokens.npy", x)
    script = textwrap.dedent(f"""
        import importlib.abc, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] in ("torch", "transformers"):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        import numpy as np
        from flax import nnx
        from transformer_jax.models.hf import from_pretrained
        cfg, model = from_pretrained({str(tmp_path / "ckpt")!r})
        np.save({str(tmp_path / "ours.npy")!r}, np.asarray(model(np.load({str(tmp_path / "tokens.npy")!r}))[0]))
        _, half = from_pretrained({str(tmp_path / "ckpt")!r}, dtype="bfloat16")
        k = half.layers.layers[0].self_attn.q.kernel[...]
        np.save({str(tmp_path / "q_bits.npy")!r}, np.asarray(k).view(np.uint16))
        assert str(k.dtype) == "bfloat16", k.dtype
        assert not any(m.split(".")[0] in ("torch", "transformers") for m in sys.modules)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    upcast = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt", dtype=torch.float32).eval()
    expected = hf_logits(upcast, x)
    np.testing.assert_allclose(np.load(tmp_path / "ours.npy"), expected, atol=1e-4, rtol=0)
    w = hf.model.layers[0].self_attn.q_proj.weight.detach()  # [H*Dh, D] -> ours [D, H, Dh]
    stored = w.view(torch.int16).numpy().view(np.uint16).T.reshape(64, 4, 16)
    np.testing.assert_array_equal(np.load(tmp_path / "q_bits.npy"), stored)


def test_bfloat16_round_trip_is_bit_exact(tmp_path):
    hf_model("gemma3_text").to(torch.bfloat16).save_pretrained(tmp_path / "in")
    with torch_blocked():
        cfg, model = from_pretrained(tmp_path / "in", dtype="bfloat16")
        save_pretrained(model, tmp_path / "out")
    assert cfg.execution.param_dtype == "bfloat16"
    assert json.loads((tmp_path / "out" / "config.json").read_text())["dtype"] == "bfloat16"
    a, b = _tensors(tmp_path / "in"), _tensors(tmp_path / "out")
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype == ml_dtypes.bfloat16, k
        np.testing.assert_array_equal(a[k].view(np.uint16), b[k].view(np.uint16), err_msg=k)


def test_sharded_checkpoint_both_ways(llama_dir, tmp_path):
    hf, path = llama_dir
    with torch_blocked():
        _, model = from_pretrained(path)
    out = save_pretrained(model, tmp_path, max_shard_bytes=40_000)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 2 and not (out / "model.safetensors").exists()
    back_hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    x = tokens((2, SEQ))
    np.testing.assert_array_equal(hf_logits(back_hf, x), hf_logits(hf, x))
    with torch_blocked():
        _, back = from_pretrained(out)
    a, b = _params(model), _params(back)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    save_pretrained(model, tmp_path)  # one file again: the stale shards and index are removed
    assert sorted(p.name for p in tmp_path.glob("model*")) == ["model.safetensors"]


def _trace_placements(monkeypatch) -> list:
    """The (shape, sharding, from_host) of every array placed through jax.device_put (sharding None:
    the default device) or jax.make_array_from_callback from now on, in order; ``from_host``: every
    piece given to the devices was a numpy array (a tensor put on a device another way first, e.g.
    by ``jnp.asarray``, and sliced there, is not)."""
    placed = []
    put, from_callback = jax.device_put, jax.make_array_from_callback

    def device_put(x, device=None, *args, **kwargs):
        placed.append((np.shape(x), device, isinstance(x, np.ndarray)))
        return put(x, device, *args, **kwargs)

    def make_array_from_callback(shape, sharding, data_callback, *args, **kwargs):
        kinds = set()

        def traced(index):
            piece = data_callback(index)
            kinds.add(isinstance(piece, np.ndarray))
            return piece

        out = from_callback(shape, sharding, traced, *args, **kwargs)
        placed.append((tuple(shape), sharding, kinds == {True}))
        return out

    monkeypatch.setattr(jax, "device_put", device_put)
    monkeypatch.setattr(jax, "make_array_from_callback", make_array_from_callback)
    return placed


def _assert_placed_straight(placed: list, model, mesh, min_split: int) -> None:
    """Each variable of ``model`` was placed once, straight from host memory into its sharding on
    ``mesh`` (its logical axes under LOGICAL_RULES), and nothing else was placed; at least
    ``min_split`` are split."""
    want, n_split = collections.Counter(), 0
    for key, var in nnx.to_flat_state(nnx.state(model)):
        spec = logical_to_spec(var.get_metadata().get("logical_axes"), var.shape, dict(mesh.shape), LOGICAL_RULES)
        assert var[...].sharding.is_equivalent_to(jax.sharding.NamedSharding(mesh, spec), var.ndim), key
        want[(tuple(var.shape), spec)] += 1
        n_split += any(s is not None for s in spec)
    assert n_split >= min_split
    for shape, sharding, from_host in placed:
        assert isinstance(sharding, jax.sharding.NamedSharding) and sharding.mesh == mesh, (shape, sharding)
        assert from_host, f"{shape}: placed from an array already on a device, not from host memory"
    assert collections.Counter((shape, sharding.spec) for shape, sharding, _ in placed) == want


def test_loads_straight_onto_a_mesh(llama_dir, monkeypatch):
    """Each tensor is placed once, straight into its sharding on the mesh, never through one device
    first (traced at the moment it is placed, not only read at the end); same logits."""
    _, path = llama_dir
    mesh = make_mesh(MeshConfig(data=2, fsdp=2, tensor=2))
    _, single = from_pretrained(path)
    with pytest.raises(ValueError, match="needs logical-axis rules"):
        from_pretrained(path, mesh=mesh)
    placed = _trace_placements(monkeypatch)
    _, sharded = from_pretrained(path, mesh=mesh, rules=LOGICAL_RULES)
    monkeypatch.undo()
    _assert_placed_straight(placed, sharded, mesh, min_split=10)
    x = tokens((2, SEQ))
    np.testing.assert_allclose(np.asarray(sharded(x)[0]), np.asarray(single(x)[0]), atol=1e-4, rtol=0)


def test_scanned_stack_loads_and_saves_like_the_per_layer_model(llama_dir, tmp_path, monkeypatch):
    """scan_layers=True: each layer's tensor lands at its index of the stacked variable, logits match
    transformers, the stack goes straight onto a mesh, and it saves the same files as per-layer."""
    hf, path = llama_dir
    _, loop = from_pretrained(path)
    cfg, scanned = from_pretrained(path, scan_layers=True)
    dotted = lambda model: {".".join(map(str, k)): v for k, v in _params(model).items()}
    stacked, per_layer = dotted(scanned), dotted(loop)
    assert cfg.execution.scan_layers and stacked["layers.layers.self_attn.q.kernel"].shape[0] == cfg.dims.n_layers > 1
    for name in ("self_attn.q.kernel", "ffn.w_out.kernel", "self_attn_norm.scale"):
        for i in range(cfg.dims.n_layers):
            np.testing.assert_array_equal(stacked[f"layers.layers.{name}"][i], per_layer[f"layers.layers.{i}.{name}"])
    x = tokens((2, SEQ))
    np.testing.assert_allclose(np.asarray(scanned(x)[0]), hf_logits(hf, x), atol=1e-4, rtol=0)
    mesh = make_mesh(MeshConfig(data=2, fsdp=2, tensor=2))
    placed = _trace_placements(monkeypatch)
    _, sharded = from_pretrained(path, mesh=mesh, rules=LOGICAL_RULES, scan_layers=True)
    monkeypatch.undo()
    _assert_placed_straight(placed, sharded, mesh, min_split=5)
    np.testing.assert_allclose(np.asarray(sharded(x)[0]), np.asarray(scanned(x)[0]), atol=1e-4, rtol=0)
    a, b = _tensors(save_pretrained(scanned, tmp_path / "scanned")), _tensors(save_pretrained(loop, tmp_path / "loop"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_other_checkpoint_layouts_load_the_same(llama_dir, tmp_path):
    _, path = llama_dir
    base = json.loads((path / "config.json").read_text())
    theta = base["rope_parameters"]["rope_theta"]
    old = {**base, "rope_parameters": None, "rope_theta": theta, "rope_scaling": None, "torch_dtype": "float32"}
    assert config_from_hf({k: v for k, v in old.items() if v is not None}) == config_from_hf(base)
    llama3 = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8)
    new = config_from_hf({**base, "rope_parameters": {"rope_type": "llama3", "rope_theta": theta, **llama3}})
    older = config_from_hf({**old, "rope_parameters": None, "rope_scaling": {"type": "llama3", **llama3}})
    assert new == older and isinstance(new.position, RopePositions)
    assert isinstance(new.position.scaling, Llama3Scaling) and new.position.scaling.original_max_len == 8

    tensors = _tensors(path)
    tied = {**tensors, "lm_head.weight": tensors["model.embed_tokens.weight"]}
    with torch_blocked():
        _, model = from_pretrained(_rewrite(path, tmp_path / "tied", tied, tie_word_embeddings=True))
        assert model.lm_head is None  # type: ignore[attr-defined]
        with pytest.raises(ValueError, match="'lm_head.weight' differs from 'model.embed_tokens.weight'"):
            from_pretrained(_rewrite(path, tmp_path / "bad_tied", tensors, tie_word_embeddings=True))


def test_gpt2_hub_names_and_mixtral_fused_experts(tmp_path):
    hf = hf_model("gpt2")
    hf.save_pretrained(tmp_path / "gpt2")
    tensors = _tensors(tmp_path / "gpt2")
    hub = {k.removeprefix("transformer."): v for k, v in tensors.items()}
    hub["h.0.attn.bias"] = np.tril(np.ones((1, 1, 64, 64), np.bool_))  # old causal-mask buffer
    with torch_blocked():
        _, a = from_pretrained(tmp_path / "gpt2")
        _, b = from_pretrained(_rewrite(tmp_path / "gpt2", tmp_path / "hub", hub))
    assert all(np.array_equal(x, y) for x, y in zip(_params(a).values(), _params(b).values()))

    hf = hf_model("mixtral")
    hf.save_pretrained(tmp_path / "mixtral")
    fused = {k: v.detach().numpy() for k, v in hf.state_dict().items()}  # transformers 5's in-memory layout
    assert "model.layers.0.mlp.experts.gate_up_proj" in fused
    with torch_blocked():
        _, a = from_pretrained(tmp_path / "mixtral")
        _, b = from_pretrained(_rewrite(tmp_path / "mixtral", tmp_path / "fused", fused))
    pa, pb = _params(a), _params(b)
    assert pa.keys() == pb.keys() and all(np.array_equal(pa[k], pb[k]) for k in pa)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(model_type="bert"), "model_type='bert' is not supported"),
        (dict(architectures=["LlamaForSequenceClassification"]), "LlamaForSequenceClassification"),
        (dict(some_new_knob=3), "some_new_knob=3"),
        (dict(mlp_bias=True), "'attention_bias'"),
        (dict(rope_parameters={"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}), "'dynamic'"),
        (dict(rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0, "x": 1}), "['x']"),
        (dict(quantization_config={"quant_method": "gptq"}), "quantization_config"),
        (dict(hidden_act="relu"), "'hidden_act'='relu'"),
        (dict(intermediate_size=80), "[96, 64] do not fit layers.layers.0.ffn.w_gate.kernel (64, 80)"),
        (dict(is_encoder_decoder=True), "is_encoder_decoder"),
    ],
)
def test_unsupported_configs_are_errors_naming_them(llama_dir, tmp_path, change, message):
    _, path = llama_dir
    with pytest.raises(ValueError) as err:
        from_pretrained(_rewrite(path, tmp_path, **change))
    assert message in str(err.value)


def test_unexpected_or_missing_tensors_are_errors_naming_them(llama_dir, tmp_path):
    _, path = llama_dir
    tensors = _tensors(path)
    extra = {**tensors, "model.vision_tower.patch_embed.weight": np.zeros((4, 4), np.float32)}
    with pytest.raises(ValueError, match=r"no place in a llama DecoderLM: model\.vision_tower\.patch_embed\.weight"):
        from_pretrained(_rewrite(path, tmp_path / "extra", extra))
    missing = {k: v for k, v in tensors.items() if k != "model.layers.1.mlp.up_proj.weight"}
    with pytest.raises(ValueError, match=r"lacks tensor\(s\) a llama model needs: model\.layers\.1\.mlp\.up_proj"):
        from_pretrained(_rewrite(path, tmp_path / "missing", missing))
    with pytest.raises(ValueError, match="qwen2"):
        from_pretrained(_rewrite(path, tmp_path / "qwen", model_type="qwen2", architectures=["Qwen2ForCausalLM"]))


def test_save_refuses_what_hugging_face_cannot_express(llama_dir, tmp_path):
    from transformer_jax.models import build_model

    post = ModelConfig(dims=ModelDims(vocab_size=50, d_model=32, n_heads=2, n_layers=1), norm="rmsnorm",
                       position="rope", ffn="swiglu", use_bias=False, placement="post")  # fmt: skip
    with pytest.raises(ValueError, match=r"llama: cannot express placement='post' \(becomes 'pre'\)"):
        save_pretrained(build_model(post), tmp_path)
    _, path = llama_dir
    _, model = from_pretrained(path)
    with pytest.raises(TypeError, match="cannot write Hugging Face files"):
        save_pretrained(model, tmp_path, tokenizer=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="gpt2: model.ffn='swiglu' has no GPT-2 equivalent"):
        save_pretrained(model, tmp_path, family="gpt2")


def test_safetensors_io_agrees_with_the_library(tmp_path):
    rng = np.random.default_rng(0)
    ours = {
        "a": rng.normal(size=(3, 5)).astype(np.float32),
        "b": rng.normal(size=(7,)).astype(ml_dtypes.bfloat16),
        "c": rng.integers(0, 9, (2, 2, 2)).astype(np.int64),
        "empty": np.zeros((0, 3), np.float16),
    }
    write_safetensors(tmp_path / "ours.safetensors", [(k, v.dtype, v.shape) for k, v in ours.items()], ours.values())
    with safe_open(tmp_path / "ours.safetensors", framework="pt") as f:
        assert f.metadata() == {"format": "pt"}
        for k, v in ours.items():
            t = f.get_tensor(k)
            got = t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if k == "b" else t.numpy()
            np.testing.assert_array_equal(got, v)
    theirs = {
        k: torch.from_numpy(v.astype(np.float32)).to(torch.bfloat16 if k == "b" else torch.float32)
        for k, v in ours.items()
        if k != "c"
    }
    save_file(theirs, tmp_path / "model.safetensors")
    reader = CheckpointReader(tmp_path)
    for k, t in theirs.items():
        want = t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if k == "b" else t.numpy()
        np.testing.assert_array_equal(reader.read(k), want)
    raw = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(raw[:-4])
    with pytest.raises(ValueError, match="corrupt or truncated"):
        read_header(tmp_path / "cut.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"\x10" + b"\x00" * 7 + b"{not json}      ")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_header(tmp_path / "junk.safetensors")

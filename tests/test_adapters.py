"""LoRA adapter folders (memrl.llm.local.adapters): what ``memrl train sft-membuilder --save-epochs`` keeps after
each epoch loads on its own as a local model, equals the trained model up to its bfloat16 storage, and a
damaged or mismatched adapter is a clear error, not a silently different model."""

from __future__ import annotations

import json

import pytest

from memrl.cli.main import main
from memrl.errors import ConfigError
from memrl.llm.local import LocalLLM
from memrl.llm.local.adapters import ADAPTER_FILE, ADAPTER_META, base_model_name, is_adapter_folder, read_meta
from memrl.llm.local.hf_models import DEFAULT_MODEL
from tests.tiny_lm import make_tiny_lm

torch = pytest.importorskip("torch")
pytest.importorskip("peft")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(make_tiny_lm(tmp_path_factory.mktemp("tiny") / "lm"))


@pytest.fixture(scope="module")
def run(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("sft") / "run"
    code = main(["train", "sft-membuilder", "--dataset", "sample", "--embedder", "hashing", "--model", tiny,
                 "--epochs", "2", "--batch-size", "2", "--lr", "5e-3", "--lora-rank", "4", "--save-epochs",
                 "--output-dir", str(out), "--json"])  # fmt: skip
    assert code == 0
    return out


def _logits(llm: LocalLLM) -> torch.Tensor:
    ids = torch.tensor([[1, 5, 9, 13, 17, 21]])
    with torch.no_grad():
        return llm.hf_model(input_ids=ids).logits


def test_each_epoch_keeps_a_loadable_adapter(run, tiny):
    for k in (1, 2):
        folder = run / f"epoch-{k}"
        assert is_adapter_folder(folder) and not (folder / "config.json").exists()
        meta = read_meta(folder)
        assert meta["base_model"] == str(__import__("pathlib").Path(tiny).resolve())
        assert (meta["lora_rank"], meta["lora_alpha"], meta["epoch"], meta["dtype"]) == (
            4,
            32.0,
            k,
            "bfloat16",
        )
        assert meta["target_modules"] and "lm_head" not in meta["target_modules"]
    assert not list(run.glob("epoch-*.part"))
    # the last epoch's adapter is the final model (the checkpoint, merged in fp32) up to bf16 storage
    final = _logits(LocalLLM(str(run / "checkpoint")).load())
    kept = _logits(LocalLLM(str(run / "epoch-2")).load())
    base = _logits(LocalLLM(tiny).load())
    assert torch.allclose(kept, final, atol=2e-2)
    assert (kept - base).abs().max() > 10 * (kept - final).abs().max()  # the adapter, not the base
    first = _logits(LocalLLM(str(run / "epoch-1")).load())
    assert not torch.allclose(first, kept, atol=1e-4)


def test_a_damaged_or_foreign_adapter_is_a_clear_error(run, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(run / "epoch-1", bad)
    meta = json.loads((bad / ADAPTER_META).read_text())
    (bad / ADAPTER_META).write_text(json.dumps({**meta, "lora_rank": 8}))
    with pytest.raises(ConfigError, match="does not fit the model"):
        LocalLLM(str(bad)).load()
    (bad / ADAPTER_META).write_text(json.dumps({k: v for k, v in meta.items() if k != "base_model"}))
    with pytest.raises(ConfigError, match="not an adapter description"):
        LocalLLM(str(bad)).load()
    for broken in ({"target_modules": "q_proj"}, {"lora_rank": 2.5}, {"target_modules": ["no_such_layer"]}):
        (bad / ADAPTER_META).write_text(json.dumps({**meta, **broken}))
        with pytest.raises(
            ConfigError, match="target_modules a list|lora_rank an integer|do not fit the model"
        ):
            LocalLLM(str(bad)).load()
    (bad / ADAPTER_META).write_text(json.dumps(meta))
    (bad / ADAPTER_FILE).write_bytes(b"not safetensors")
    with pytest.raises(ConfigError, match="not a readable safetensors"):
        LocalLLM(str(bad)).load()


def test_save_epochs_needs_lora(tiny, tmp_path, capsys):
    code = main(["train", "sft-membuilder", "--dataset", "sample", "--embedder", "hashing", "--model", tiny,
                 "--epochs", "1", "--save-epochs", "--output-dir", str(tmp_path / "o")])  # fmt: skip
    assert code != 0 and "--save-epochs keeps LoRA adapters" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # refused before any work


def test_the_offline_default_is_named_portably(tmp_path, monkeypatch, run):
    monkeypatch.setenv("MEMRL_CACHE_DIR", str(tmp_path / "cache"))
    assert base_model_name(None) == DEFAULT_MODEL
    converted = tmp_path / "cache" / "models" / DEFAULT_MODEL  # where a resumed run loads the default from
    converted.mkdir(parents=True)
    assert base_model_name(str(converted)) == DEFAULT_MODEL
    other = tmp_path / "elsewhere" / "models" / DEFAULT_MODEL  # a user's own folder of that name
    other.mkdir(parents=True)
    assert base_model_name(str(other)) == str(other.resolve())
    assert base_model_name("org/some-model") == "org/some-model"
    assert base_model_name("memrl:membuilder-sft") == "memrl:membuilder-sft"  # a shipped adapter, as named
    assert base_model_name(str(run / "epoch-1")) == str((run / "epoch-1").resolve())  # a base to stack on


def test_an_adapter_trained_on_top_of_another_loads_both(run, tmp_path):
    """RL on top of SFT: a LoRA trained on the SFT adapter's merged model names that adapter as its base;
    loading it merges the SFT adapter into its base first, then itself. A loop is a clear error."""
    import shutil

    from memrl.llm.local.adapters import inject_lora, write_meta
    from memrl.train.lora import save_adapter

    sft = run / "epoch-1"
    llm = LocalLLM(str(sft)).load()
    inject_lora(llm.hf_model, rank=2, alpha=4.0, targets="all-linear")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in llm.hf_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    expected = _logits(llm)
    top = tmp_path / "rl"
    top.mkdir()
    save_adapter(llm.hf_model, top, base_model_name(str(sft)))
    assert read_meta(top)["base_model"] == str(sft.resolve())
    stacked = _logits(LocalLLM(str(top)).load())
    assert torch.allclose(stacked, expected, atol=1e-4)
    assert not torch.allclose(stacked, _logits(LocalLLM(str(sft)).load()), atol=1e-3)  # the top one counts

    loop = tmp_path / "loop"
    shutil.copytree(sft, loop)
    meta = read_meta(loop)
    write_meta(loop, base_model=str(loop), rank=meta["lora_rank"], alpha=meta["lora_alpha"],
               targets=meta["target_modules"])  # fmt: skip
    with pytest.raises(ConfigError, match="in a loop"):
        LocalLLM(str(loop)).load()


def test_an_adapter_loads_in_bfloat16_with_float32_rotary_frequencies(run):
    llm = LocalLLM(str(run / "epoch-2"), dtype="bfloat16").load()
    assert all(p.dtype == torch.bfloat16 for p in llm.hf_model.parameters())
    freqs = [b for n, b in llm.hf_model.named_buffers() if n.endswith("inv_freq")]
    assert freqs and all(b.dtype == torch.float32 for b in freqs)


def test_an_adapter_shipped_in_the_package_is_named_memrl_name(run, tmp_path, monkeypatch):
    """``--model memrl:NAME`` loads ``memrl/resources/adapters/NAME`` (the shipped recipe's adapters); an
    unknown name is a clear error that lists what ships. The root is pointed at a folder the test fills."""
    import shutil

    from memrl.llm.local import packaged
    from memrl.llm.local.hf_models import ensure_local_model

    shutil.copytree(run / "epoch-1", tmp_path / "membuilder-test")
    (tmp_path / "not-an-adapter").mkdir()
    monkeypatch.setattr(packaged, "_packaged_root", lambda: tmp_path)
    assert packaged.packaged_adapters() == ["membuilder-test"]
    assert ensure_local_model("memrl:membuilder-test") == str(tmp_path / "membuilder-test")
    shipped = _logits(LocalLLM("memrl:membuilder-test").load())
    assert torch.equal(shipped, _logits(LocalLLM(str(run / "epoch-1")).load()))
    for bad in ("memrl:nope", "memrl:not-an-adapter", "memrl:", "memrl:../membuilder-test"):
        with pytest.raises(ConfigError, match="shipped: memrl:membuilder-test"):
            ensure_local_model(bad)


def test_an_adapter_records_and_brings_the_prompts_it_was_trained_on(run, tmp_path):
    """The annotation expert's SFT prompts ask for up to 10 operations (its targets hold that many) and
    offer core a SKIP (issue 61: its targets keep core with one): the adapter records both, and a MemBuilder
    builder loading the adapter asks the same by default (the shipped SFT adapter was first measured with the
    default 3: prompts and schema it had not learned on; it predates core's SKIP and records only that)."""
    import shutil
    from types import SimpleNamespace

    from memrl.agents.base import create_builder
    from memrl.agents.membuilder import MemBuilderConfig
    from memrl.llm.local.adapters import write_meta
    from memrl.llm.local.packaged import trained_options

    trained = ["max_operations=10", "core_skip=True"]
    assert read_meta(run / "epoch-1")["agent_options"] == trained
    assert trained_options(str(run / "epoch-1")) == trained
    assert trained_options("memrl:membuilder-sft") == ["max_operations=10"]
    assert trained_options(None) == trained_options(DEFAULT_MODEL) == trained_options("memrl:nothing") == []

    def builder(spec, **kw):
        return create_builder("membuilder", llm=SimpleNamespace(spec=spec), **kw).config

    assert builder("memrl:membuilder-sft").max_operations == 10
    assert builder("memrl:membuilder-sft", options=["max_operations=4"]).max_operations == 4  # yours win
    assert builder("memrl:membuilder-sft", config=MemBuilderConfig()).max_operations == 3  # a config as given
    assert builder(DEFAULT_MODEL).max_operations == 3
    assert builder(str(run / "epoch-1")).core_skip and not builder("memrl:membuilder-sft").core_skip

    # an adapter trained on top of another records none of its own: it asks its base's
    top = tmp_path / "top"
    shutil.copytree(run / "epoch-1", top)
    meta = read_meta(top)
    write_meta(top, base_model=str(run / "epoch-1"), rank=meta["lora_rank"], alpha=meta["lora_alpha"],
               targets=meta["target_modules"])  # fmt: skip
    assert trained_options(str(top)) == trained
    write_meta(top, base_model=DEFAULT_MODEL, rank=meta["lora_rank"], alpha=meta["lora_alpha"],
               targets=meta["target_modules"], agent_options="max_operations=10")  # fmt: skip
    with pytest.raises(ConfigError, match="agent_options must be a list"):
        trained_options(str(top))

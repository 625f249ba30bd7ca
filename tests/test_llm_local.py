"""The local back-end with the real offline SmolLM2-135M-Instruct (slow: a real model on CPU).

One module-scoped model: converted once per test session into a temporary ``$MEMRL_CACHE_DIR`` (~20 s),
then reused by every test. Token budgets are small; greedy decoding keeps results repeatable.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memrl.errors import ConfigError  # noqa: E402
from memrl.llm import LocalLLM, OpenAILLM, SamplingParams, serve  # noqa: E402
from memrl.llm.local.hf_models import DEFAULT_MODEL, ensure_local_model, load_model  # noqa: E402

ACTION_SCHEMA = {
    "type": "object",
    "properties": {
        "operation": {"enum": ["ADD", "UPDATE", "SKIP"]},
        "memory": {"type": "string", "maxLength": 200},
    },
    "required": ["operation"],
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_memory",
            "description": "Search the memory store for facts about the user.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "maxLength": 60}, "top_k": {"type": "integer"}},
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "delete_memory",
            "description": "Delete one memory by id.",
            "parameters": {
                "type": "object",
                "properties": {"memory_id": {"type": "string", "maxLength": 20}},
                "required": ["memory_id"],
            },
        },
    },
]
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def validate(value, schema) -> None:
    """The subset of JSON-schema validation these tests need (jsonschema is not a dependency)."""
    if "anyOf" in schema:
        errors = []
        for option in schema["anyOf"]:
            try:
                return validate(value, option)
            except AssertionError as e:
                errors.append(str(e))
        raise AssertionError(f"{value!r} matches no option: {errors}")
    if "enum" in schema:
        assert value in schema["enum"], f"{value!r} not in {schema['enum']}"
    if "const" in schema:
        assert value == schema["const"]
    kind = schema.get("type")
    if kind == "object":
        assert isinstance(value, dict), value
        props = schema.get("properties", {})
        assert set(schema.get("required", [])) <= set(value), f"missing required keys in {value}"
        assert set(value) <= set(props), f"unexpected keys in {value}"
        for key, sub in value.items():
            validate(sub, props[key])
    elif kind == "string":
        assert isinstance(value, str) and len(value) <= schema.get("maxLength", len(value))
    elif kind == "integer":
        assert isinstance(value, int) and not isinstance(value, bool)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("memrl-cache")


@pytest.fixture(scope="module")
def llm(cache_dir):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMRL_CACHE_DIR", str(cache_dir))
        model = LocalLLM().load()
        yield model
        model.close()


@pytest.mark.slow
def test_conversion_is_cached_in_memrl_cache_dir_and_reused_fast(llm, cache_dir, monkeypatch):
    folder = cache_dir / "models" / DEFAULT_MODEL
    assert llm.path == str(folder)
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no temp dir left behind
    monkeypatch.setenv("MEMRL_CACHE_DIR", str(cache_dir))
    start = time.perf_counter()
    again = LocalLLM().load()
    elapsed = time.perf_counter() - start
    assert again.path == str(folder) and elapsed < 15, f"reload took {elapsed:.1f}s"
    assert again.tokenizer.decode(again.prompt_ids(QUESTION)) == llm.tokenizer.decode(
        llm.prompt_ids(QUESTION)
    )


def test_concurrent_conversions_leave_one_complete_folder(tmp_path, monkeypatch):
    """Two converters racing (threads here, processes in practice): each writes a private temp folder and
    renames it into place; the loser keeps the winner's folder. transformers is faked at its boundary
    (loading and saving), so this runs in milliseconds."""
    import threading
    import types

    import transformers

    from memrl.llm.local.hf_models import _convert_gguf, convert_gguf

    loads = []

    class FakeModel:
        def __init__(self):
            self.hf_quantizer = object()
            self.config = types.SimpleNamespace(
                model_type="llama", quantization_config={"quant_method": "gguf"}
            )

        def save_pretrained(self, folder):
            assert self.hf_quantizer is None  # dropped before saving
            time.sleep(0.2)  # a slow write: both converters are inside it at once
            (Path(folder) / "config.json").write_text(json.dumps(vars(self.config)))

    class FakeTokenizer:
        def save_pretrained(self, folder):
            (Path(folder) / "tokenizer.json").write_text("{}")

    def load_model(*args, **kw):
        loads.append(kw["gguf_file"])
        return FakeModel()

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", load_model)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: FakeTokenizer())
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    out = tmp_path / "models" / "tiny"
    results = []
    # Threads of one process are serialised by the load lock (memrl.loading); two processes are not, so
    # the threads call the unlocked body, as two processes would.
    threads = [threading.Thread(target=lambda: results.append(_convert_gguf(gguf, out))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [out, out] and loads == ["tiny.gguf", "tiny.gguf"]
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "tokenizer.json"]
    assert "quantization_config" not in json.loads((out / "config.json").read_text())
    assert [p.name for p in out.parent.iterdir()] == ["tiny"]  # no temp folder left behind
    assert convert_gguf(gguf, out) == out and len(loads) == 2  # converted folder reused, nothing loaded


def test_hub_ids_give_a_clear_error_when_offline():
    with pytest.raises(ConfigError, match="not a local folder"):
        load_model("memrl-test/no-such-model")
    with pytest.raises(ConfigError, match="not found"):
        ensure_local_model("./no/such/folder")
    with pytest.raises(ConfigError, match="GGUF file not found"):
        ensure_local_model("/nowhere/model.gguf")


@pytest.mark.slow
def test_text_reply_carries_ids_and_logprobs_consistent_with_the_text(llm):
    import torch

    reply = llm.chat_sync(QUESTION, sampling=SamplingParams(max_tokens=40))
    assert "Paris" in reply.text and reply.finish_reason == "stop"
    assert reply.prompt_ids == llm.prompt_ids(QUESTION)
    assert (
        reply.completion_ids[-1] in llm.stop_ids
    )  # the stop token is part of the completion (RL learns to stop)
    assert llm.tokenizer.decode(reply.completion_ids, skip_special_tokens=True) == reply.text
    assert len(reply.logprobs) == len(reply.completion_ids) == reply.usage.completion_tokens
    # the logprobs are those of the unmodified model: recompute them with one full forward pass
    ids = torch.tensor([reply.prompt_ids + reply.completion_ids])
    with torch.inference_mode():
        logits = llm.hf_model(input_ids=ids).logits[0, len(reply.prompt_ids) - 1 : -1].float()
    expected = (
        torch.log_softmax(logits, -1).gather(-1, torch.tensor(reply.completion_ids)[:, None]).squeeze(-1)
    )
    assert torch.allclose(torch.tensor(reply.logprobs), expected, atol=1e-3)


@pytest.mark.slow
async def test_batched_greedy_generation_equals_one_at_a_time(llm):
    """Left padding with position ids from the attention mask gives each prompt the positions it has
    alone, and greedy decoding is then identical (fp32; a near-tie in bf16 could still flip a token)."""
    convs = [
        [{"role": "user", "content": q}] for q in ("Name a color.", "What is 2+2?", "Say hello to Alice.")
    ]
    sampling = SamplingParams(max_tokens=12)
    alone = [llm.generate_sync([c], sampling=sampling)[0] for c in convs]
    together = await asyncio.gather(*(llm.chat(c, sampling=sampling) for c in convs))  # batched by the worker
    assert [r.completion_ids for r in together] == [r.completion_ids for r in alone]
    assert [r.text for r in together] == [r.text for r in alone]


@pytest.mark.slow
def test_constrained_json_output_parses_and_validates(llm):
    msgs = [
        {"role": "system", "content": "You maintain a memory of facts about the user. Answer in JSON."},
        {"role": "user", "content": "User said: I moved to Lyon last week. Should this be stored?"},
    ]
    replies = llm.generate_sync(
        [msgs, QUESTION], json_schema=ACTION_SCHEMA, sampling=SamplingParams(max_tokens=80)
    )
    for reply in replies:
        assert reply.finish_reason == "stop", reply.text
        validate(json.loads(reply.text), ACTION_SCHEMA)
        assert reply.completion_ids[-1] in llm.stop_ids  # stopped because the grammar was complete


@pytest.mark.slow
def test_required_tool_choice_produces_a_valid_call(llm):
    msgs = [{"role": "user", "content": "Where does Alice live? Look it up in your memory."}]
    reply = llm.chat_sync(msgs, tools=TOOLS, tool_choice="required", sampling=SamplingParams(max_tokens=48))
    assert reply.finish_reason == "tool_calls" and reply.text == ""
    (call,) = reply.tool_calls
    assert call.error is None and call.name in {"search_memory", "delete_memory"}
    params = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == call.name)
    validate(call.parsed, params)
    # the call, put back into the history, renders as the JSON text the model produced
    history = [*msgs, reply.to_message(), {"role": "tool", "tool_call_id": call.id, "content": "Paris"}]
    rendered = llm.tokenizer.decode(llm.prompt_ids(history, tools=TOOLS))
    assert reply.raw["text"].strip() in rendered


@pytest.mark.slow
def test_auto_tool_choice_allows_text_or_a_valid_call(llm):
    reply = llm.chat_sync(QUESTION, tools=TOOLS, tool_choice="auto", sampling=SamplingParams(max_tokens=16))
    if reply.tool_calls:
        assert reply.tool_calls[0].name in {"search_memory", "delete_memory"}
    else:
        assert reply.text and not reply.text.lstrip().startswith("{")


@pytest.mark.slow
def test_seeded_sampling_repeats_and_stop_strings_cut_the_text(llm):
    hot = SamplingParams(temperature=0.9, top_p=0.9, seed=123, max_tokens=10)
    first, second = (llm.chat_sync(QUESTION, sampling=hot) for _ in range(2))
    assert first.completion_ids == second.completion_ids
    cut = llm.chat_sync(QUESTION, sampling=SamplingParams(max_tokens=40, stop=["Paris"]))
    assert cut.finish_reason == "stop" and "Paris" not in cut.text and cut.text.startswith("The capital")


@pytest.mark.slow
async def test_served_local_model_returns_token_ids_through_the_openai_client(llm):
    sampling = SamplingParams(max_tokens=8)
    direct = await llm.chat(QUESTION, sampling=sampling)
    with serve(llm) as base_url:
        remote = OpenAILLM("smollm2", base_url=base_url, api_key="k", logprobs=True)
        reply = await remote.chat(QUESTION, sampling=sampling)
        await remote.aclose()
    assert reply.text == direct.text and reply.completion_ids == direct.completion_ids
    assert reply.prompt_ids == direct.prompt_ids
    assert reply.logprobs == pytest.approx(direct.logprobs, abs=1e-5)

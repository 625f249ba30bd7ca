"""The LLM protocol records, the factory, the sync wrapper and the scripted fake (no network, no model)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from memrl.errors import ConfigError, ProviderError, ValidationError
from memrl.llm import ChatResponse, SamplingParams, ScriptedLLM, ToolCall, Usage, create_llm
from memrl.llm.base import LLM
from memrl.llm.registry import PROVIDERS, register_provider
from memrl.llm.scripted import ScriptExhaustedError, cycle

USER = [{"role": "user", "content": "hello"}]


def test_tool_call_from_raw_parses_or_reports_error():
    ok = ToolCall.from_raw("c1", "search", '{"query": "paris", "top_k": 3}')
    assert ok.parsed == {"query": "paris", "top_k": 3} and ok.error is None
    bad = ToolCall.from_raw("c2", "search", '{"query": "paris"')
    assert bad.parsed is None and "not valid JSON" in bad.error and bad.arguments == '{"query": "paris"'
    not_obj = ToolCall.from_raw("c3", "search", "[1, 2]")
    assert not_obj.parsed is None and "JSON object" in not_obj.error
    from_dict = ToolCall.from_raw("c4", "search", {"query": "é"})
    assert from_dict.arguments == '{"query": "é"}' and from_dict.to_openai()["function"]["name"] == "search"
    assert ToolCall.from_raw("c5", "noop", "").parsed == {}


def test_sampling_params_validate_and_know_when_they_are_deterministic():
    assert SamplingParams().deterministic
    assert not SamplingParams(temperature=0.7).deterministic
    assert SamplingParams(temperature=0.7, seed=3).deterministic
    assert SamplingParams(stop="\n").stop == ("\n",)
    assert SamplingParams(stop=["a", "b"]).stop == ("a", "b")
    for bad in ({"temperature": -1}, {"top_p": 0}, {"max_tokens": 0}):
        with pytest.raises(ValidationError):
            SamplingParams(**bad)


def test_chat_response_round_trips_through_dict_and_builds_the_assistant_message():
    resp = ChatResponse(
        text="",
        tool_calls=[ToolCall.from_raw("c1", "search", '{"q": 1}')],
        usage=Usage(10, 4),
        finish_reason="tool_calls",
        prompt_ids=[1, 2],
        completion_ids=[3, 4],
        logprobs=[-0.1, -0.2],
        raw=object(),
    )
    back = ChatResponse.from_dict(resp.to_dict())
    assert back.tool_calls == resp.tool_calls and back.usage.total_tokens == 14
    assert back.completion_ids == [3, 4] and back.raw is None
    msg = resp.to_message()
    assert msg["role"] == "assistant" and msg["tool_calls"][0]["function"]["arguments"] == '{"q": 1}'
    assert ChatResponse('{"a": 1}').json() == {"a": 1}
    with pytest.raises(ProviderError):
        ChatResponse("not json").json()


async def test_scripted_replays_in_order_and_records_requests():
    llm = ScriptedLLM(
        [
            "first",
            {"content": "", "tool_calls": [{"name": "search", "arguments": {"query": "x"}}]},
            {"tool_calls": [{"function": {"name": "search", "arguments": '{"query": '}}]},
            ChatResponse("fourth", finish_reason="length"),
            lambda messages, tools, schema: f"saw {len(messages)} messages, schema={schema is not None}",
        ]
    )
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    assert (await llm.chat(USER)).text == "first"
    call = (await llm.chat(USER, tools=tools)).tool_calls[0]
    assert (call.name, call.parsed) == ("search", {"query": "x"})
    broken = await llm.chat(USER, tools=tools)
    assert broken.finish_reason == "tool_calls" and broken.tool_calls[0].error is not None
    assert (await llm.chat(USER)).finish_reason == "length"
    reply = await llm.chat([*USER, {"role": "assistant", "content": "hi"}], json_schema={"type": "object"})
    assert reply.text == "saw 2 messages, schema=True"
    assert len(llm.requests) == 5 and llm.requests[1].tools == tools and llm.remaining == 0
    assert llm.requests[4].json_schema == {"type": "object"}


async def test_scripted_raises_a_clear_error_when_the_script_runs_out():
    llm = ScriptedLLM(["only one"])
    await llm.chat(USER)
    with pytest.raises(ScriptExhaustedError, match="ran out of replies: 1 scripted"):
        await llm.chat([{"role": "user", "content": "one more please"}])
    assert isinstance(ScriptExhaustedError("x"), ProviderError)
    assert llm.requests[-1].messages[0]["content"] == "one more please"


async def test_rule_based_fake_never_runs_out_and_cycle_repeats():
    llm = ScriptedLLM(lambda messages, tools, schema: messages[-1]["content"].upper())
    assert [(await llm.chat([{"role": "user", "content": w}])).text for w in ("a", "b")] == ["A", "B"]
    assert llm.remaining is None
    rep = ScriptedLLM(cycle(["x", "y"]))
    assert [r.text for r in await rep.chat_batch([USER] * 3)] == ["x", "y", "x"]


async def test_chat_checks_arguments():
    llm = ScriptedLLM(["x"] * 3)
    with pytest.raises(ValidationError):
        await llm.chat([])
    with pytest.raises(ValidationError):
        await llm.chat([{"content": "no role"}])
    with pytest.raises(ValidationError):
        await llm.chat(USER, tools=[{"name": "t"}], json_schema={"type": "object"})
    with pytest.raises(ValidationError):
        await llm.chat(USER, tool_choice="sometimes")  # type: ignore[arg-type]
    assert llm.requests == []


async def test_chat_batch_keeps_order_and_can_return_failures_as_data():
    llm = ScriptedLLM(["a", "b"])
    out = await llm.chat_batch([USER, USER, USER], return_exceptions=True)
    assert [r.text for r in out[:2]] == ["a", "b"] and isinstance(out[2], ScriptExhaustedError)


def test_sync_wrapper_works_from_sync_code_and_inside_a_running_loop():
    llm = ScriptedLLM(["one", "two", "three"])
    assert llm.chat_sync(USER).text == "one"
    assert [r.text for r in llm.chat_batch_sync([USER])] == ["two"]

    async def inside_loop() -> str:  # e.g. Jupyter: sync call while a loop runs in this thread
        return llm.chat_sync(USER).text

    assert asyncio.run(inside_loop()) == "three"
    llm.close()


class _Counting(LLM):
    provider = "counting"
    active = 0
    peak = 0

    async def _chat(self, request):
        type(self).active += 1
        type(self).peak = max(type(self).peak, type(self).active)
        await asyncio.sleep(0.01)
        type(self).active -= 1
        return ChatResponse("ok")


async def test_base_concurrency_limit_bounds_calls_in_flight():
    llm = _Counting("m", max_concurrency=3)
    out = await llm.chat_batch([USER] * 10)
    assert len(out) == 10 and _Counting.peak == 3


def test_factory_builds_by_name_registers_plugins_and_rejects_unknown(tmp_path):
    llm = create_llm("scripted", responses=["hi"])
    assert isinstance(llm, ScriptedLLM) and llm.name == "scripted:scripted"
    named = create_llm("scripted", "fake-model", responses=["hi"])
    assert named.model == "fake-model"
    cached = create_llm("scripted", responses=["hi"], cache=str(tmp_path / "c.sqlite"))
    assert type(cached).__name__ == "CachedLLM" and cached.chat_sync(USER).text == "hi"
    with pytest.raises(ConfigError, match="unknown LLM provider"):
        create_llm("nope")
    register_provider("fake", "memrl.llm.scripted:ScriptedLLM")
    try:
        assert isinstance(create_llm("fake", responses=[]), ScriptedLLM)
    finally:
        PROVIDERS.pop("fake")
    with pytest.raises(ValidationError):
        register_provider("bad", "no_colon")


def test_importing_memrl_llm_loads_no_heavy_library():
    code = (
        "import sys, memrl.llm, memrl.llm.local, memrl.llm.server, memrl.llm.cache, memrl.llm.openai_backend;"
        "from memrl.llm import create_llm, ScriptedLLM;"
        "print(sorted(m for m in ('torch', 'transformers', 'openai', 'xgrammar') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

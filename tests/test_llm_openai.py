"""The OpenAI back-end against a real loopback HTTP server (memrl's own) serving a scripted LLM.

The boundary is faked (scripted replies, injected HTTP faults), the unit is not: requests go through the
openai SDK, httpx, sockets and the stdlib HTTP server.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import pytest

from memrl.errors import ConfigError
from memrl.llm import ChatResponse, LLMProviderError, LLMServer, OpenAILLM, SamplingParams, ScriptedLLM, serve
from memrl.llm.openai_backend import OpenAIConfig

USER = [{"role": "user", "content": "Where does Alice live?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_memory",
            "description": "Search stored memories.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "top_k": {"type": "integer"}},
                "required": ["query"],
            },
        },
    }
]


def client(server: LLMServer, **kw) -> OpenAILLM:
    settings = {"api_key": "test-key", "timeout": 10.0, "backoff_base": 0.01, "backoff_max": 0.05, **kw}
    return OpenAILLM("scripted", base_url=server.base_url, **settings)


@pytest.fixture
def scripted():
    return ScriptedLLM([])


@pytest.fixture
def server(scripted):
    with LLMServer(scripted) as s:
        yield s


async def test_plain_text_round_trip(server, scripted):
    scripted.add("Alice lives in Paris.")
    llm = client(server)
    reply = await llm.chat(USER, sampling=SamplingParams(max_tokens=32, seed=7, stop=["\n"]))
    assert reply.text == "Alice lives in Paris." and reply.tool_calls == [] and reply.finish_reason == "stop"
    sent = server.requests[0]
    assert (
        sent["messages"] == USER and sent["max_tokens"] == 32 and sent["seed"] == 7 and sent["stop"] == ["\n"]
    )
    assert scripted.requests[0].sampling.max_tokens == 32 and scripted.requests[0].sampling.temperature == 0
    assert reply.usage.completion_tokens == 4 and reply.usage.prompt_tokens == 4
    await llm.aclose()


async def test_tool_calls_round_trip_with_names_and_json_arguments(server, scripted):
    scripted.add(
        {
            "tool_calls": [
                {"id": "call_1", "name": "search_memory", "arguments": {"query": "Alice", "top_k": 3}}
            ]
        }
    )
    llm = client(server)
    reply = await llm.chat(USER, tools=TOOLS, tool_choice="required")
    assert reply.finish_reason == "tool_calls" and reply.text == ""
    (call,) = reply.tool_calls
    assert (call.id, call.name, call.parsed, call.error) == (
        "call_1",
        "search_memory",
        {"query": "Alice", "top_k": 3},
        None,
    )
    # the scripted LLM behind the server saw the tools and the tool choice the client sent
    assert scripted.requests[0].tools == TOOLS and scripted.requests[0].tool_choice == "required"
    # the reply, appended to the history, is accepted by the server on the next turn
    scripted.add("She lives in Paris.")
    history = [*USER, reply.to_message(), {"role": "tool", "tool_call_id": "call_1", "content": "Paris"}]
    assert (await llm.chat(history, tools=TOOLS)).text == "She lives in Paris."
    assert scripted.requests[1].messages[1]["tool_calls"][0]["function"]["name"] == "search_memory"
    await llm.aclose()


async def test_malformed_tool_arguments_come_back_as_tool_call_error(server, scripted):
    scripted.add({"tool_calls": [{"name": "search_memory", "arguments": '{"query": "Alice", top_k: }'}]})
    llm = client(server)
    reply = await llm.chat(USER, tools=TOOLS)
    (call,) = reply.tool_calls
    assert call.name == "search_memory" and call.parsed is None
    assert "not valid JSON" in call.error and call.arguments == '{"query": "Alice", top_k: }'
    await llm.aclose()


async def test_json_schema_is_passed_as_response_format(server, scripted):
    schema = {
        "type": "object",
        "properties": {"operation": {"enum": ["ADD", "SKIP"]}},
        "required": ["operation"],
    }
    scripted.add('{"operation": "ADD"}')
    llm = client(server)
    reply = await llm.chat(USER, json_schema=schema)
    fmt = server.requests[0]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] == schema
    assert scripted.requests[0].json_schema == schema and reply.json() == {"operation": "ADD"}
    await llm.aclose()


async def test_schema_in_prompt_mode_for_servers_without_response_format(server, scripted):
    scripted.add('{"operation": "SKIP"}')
    llm = client(server, schema_mode="prompt")
    schema = {"type": "object", "properties": {"operation": {"type": "string"}}}
    await llm.chat(USER, json_schema=schema)
    sent = server.requests[0]
    assert "response_format" not in sent and sent["messages"][0]["role"] == "system"
    assert json.dumps(schema) in sent["messages"][0]["content"] and sent["messages"][1:] == USER
    scripted.add('{"operation": "ADD"}')
    await llm.chat([{"role": "system", "content": "Be brief."}, *USER], json_schema=schema)
    merged = server.requests[1]["messages"]
    assert [m["role"] for m in merged] == ["system", "user"] and merged[0]["content"].startswith("Be brief.")
    assert json.dumps(schema) in merged[0]["content"]
    await llm.aclose()


async def test_retries_500_twice_then_succeeds(server, scripted):
    scripted.add("recovered")
    server.fail_next(2, status=500)
    llm = client(server, max_retries=3)
    assert (await llm.chat(USER)).text == "recovered"
    assert server.num_requests == 3 and len(scripted.requests) == 1
    await llm.aclose()


async def test_retries_429_and_honours_retry_after(server, scripted):
    scripted.add("after the rate limit")
    server.fail_next(1, status=429, retry_after=0)
    llm = client(server, max_retries=2)
    assert (await llm.chat(USER)).text == "after the rate limit"
    assert server.num_requests == 2
    await llm.aclose()


async def test_exhausted_retries_raise_provider_error_with_status(server, scripted):
    server.fail_next(3, status=503)
    llm = client(server, max_retries=2)
    with pytest.raises(LLMProviderError) as info:
        await llm.chat(USER)
    assert (
        info.value.status == 503
        and info.value.attempts == 3
        and "gave up after 3 attempts" in str(info.value)
    )
    assert server.num_requests == 3 and scripted.requests == []
    await llm.aclose()


async def test_client_errors_are_not_retried(server, scripted):
    server.fail_next(1, status=400)
    llm = client(server, max_retries=3)
    with pytest.raises(LLMProviderError) as info:
        await llm.chat(USER)
    assert info.value.status == 400 and server.num_requests == 1
    await llm.aclose()


async def test_timeout_is_retried_then_reported(server, scripted):
    scripted.add(*["too late"] * 2)
    server.delay = 1.0
    llm = client(server, timeout=0.2, max_retries=1)
    with pytest.raises(LLMProviderError) as info:
        await llm.chat(USER)
    assert info.value.status is None and info.value.attempts == 2 and "Timeout" in str(info.value)
    await asyncio.sleep(0.1)
    assert server.num_requests == 2
    await llm.aclose()


@pytest.mark.parametrize("limit", [1, 3])
async def test_concurrency_limit_is_respected_at_the_server(limit):
    llm_behind = ScriptedLLM(lambda messages, tools, schema: "ok")
    with LLMServer(llm_behind) as server:
        server.delay = 0.15
        llm = client(server, max_concurrency=limit)
        out = await llm.chat_batch([USER] * 6)
        assert [r.text for r in out] == ["ok"] * 6
        assert server.num_requests == 6 and server.max_active == limit
        await llm.aclose()


async def test_token_ids_and_logprobs_pass_through_like_vllm(server, scripted):
    scripted.add(ChatResponse("hi", prompt_ids=[1, 2, 3], completion_ids=[7, 8], logprobs=[-0.5, -0.25]))
    llm = client(server, logprobs=True)
    reply = await llm.chat(USER)
    assert (reply.prompt_ids, reply.completion_ids, reply.logprobs) == ([1, 2, 3], [7, 8], [-0.5, -0.25])
    await llm.aclose()


async def test_backend_errors_become_http_errors_and_the_server_keeps_serving(server, scripted):
    llm = client(server, max_retries=0)
    with pytest.raises(LLMProviderError) as info:  # the script is empty: 502 with the reason
        await llm.chat(USER)
    assert info.value.status == 502 and "ran out of replies" in str(info.value)
    scripted.add("still alive")
    assert (await llm.chat(USER)).text == "still alive"
    await llm.aclose()


def _http(url: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_server_models_route_and_request_validation():
    with serve(ScriptedLLM(["x"], model="tiny")) as base_url:
        status, body = _http(base_url + "/models")
        assert status == 200 and body["data"][0]["id"] == "tiny"
        assert _http(base_url + "/nope")[0] == 404
        status, body = _http(base_url + "/chat/completions", {"messages": USER, "stream": True})
        assert status == 400 and "streaming" in body["error"]["message"]
        status, body = _http(base_url + "/chat/completions", {"messages": USER, "n": 2})
        assert status == 400
        status, body = _http(base_url + "/chat/completions", {"messages": []})
        assert status == 400 and "non-empty list" in body["error"]["message"]
        forced = {
            "messages": USER,
            "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "x"}},
        }
        assert _http(base_url + "/chat/completions", forced)[0] == 400
        status, body = _http(base_url + "/chat/completions", {"messages": USER})
        assert status == 200 and body["choices"][0]["message"]["content"] == "x"


def test_sync_client_works_against_the_server():
    scripted = ScriptedLLM(["sync one", "sync two"])
    with serve(scripted) as base_url:
        llm = OpenAILLM("m", base_url=base_url, api_key="k")
        assert llm.chat_sync(USER).text == "sync one"
        assert llm.chat_sync(USER).text == "sync two"
        llm.close()


def test_config_from_env_and_api_key_rules(monkeypatch):
    monkeypatch.setenv("MEMRL_EMBED_BASE_URL", "http://embed:9000/v1")
    monkeypatch.setenv("MEMRL_EMBED_MODEL", "all-minilm")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg = OpenAIConfig.from_env("MEMRL_EMBED_")
    assert (cfg.base_url, cfg.model, cfg.resolved_api_key()) == (
        "http://embed:9000/v1",
        "all-minilm",
        "EMPTY",
    )
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        OpenAILLM("gpt-4o-mini")  # api.openai.com needs a real key
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert OpenAILLM("gpt-4o-mini").config.resolved_api_key() == "sk-test"
    with pytest.raises(ConfigError):
        OpenAIConfig(schema_mode="xml")  # type: ignore[arg-type]

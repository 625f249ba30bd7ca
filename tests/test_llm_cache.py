"""The SQLite disk cache of deterministic LLM calls: hits skip the server, survive new instances and
processes, and only successful deterministic replies are stored."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from memrl.errors import ProviderError
from memrl.llm import CachedLLM, LLMServer, OpenAILLM, SamplingParams, ScriptedLLM
from memrl.llm.cache import cache_key

USER = [{"role": "user", "content": "What did Bob eat?"}]


def openai_client(server: LLMServer) -> OpenAILLM:
    return OpenAILLM("scripted", base_url=server.base_url, api_key="k", backoff_base=0.01, max_retries=1)


@pytest.fixture
def server():
    with LLMServer(ScriptedLLM(lambda messages, tools, schema: f"reply to {messages[-1]['content']}")) as s:
        yield s


async def test_second_identical_call_is_served_from_disk(server, tmp_path):
    llm = CachedLLM(openai_client(server), tmp_path / "cache.sqlite")
    first = await llm.chat(USER)
    second = await llm.chat(USER)
    assert server.num_requests == 1
    assert second.text == first.text == "reply to What did Bob eat?" and second.cached and not first.cached
    assert (llm.hits, llm.misses) == (1, 1)
    other = await llm.chat([{"role": "user", "content": "something else"}])
    assert other.text == "reply to something else" and server.num_requests == 2
    await llm.aclose()


async def test_cache_survives_a_new_instance(server, tmp_path):
    path = tmp_path / "cache.sqlite"
    schema = {"type": "object"}
    await CachedLLM(openai_client(server), path).chat(USER, json_schema=schema)
    again = CachedLLM(openai_client(server), path)
    reply = await again.chat(USER, json_schema=schema)
    assert reply.cached and server.num_requests == 1
    # a different schema (or tools, sampling, model) is a different key
    await again.chat(USER, json_schema={"type": "object", "required": ["a"]})
    assert server.num_requests == 2
    await again.aclose()


def test_cache_is_shared_with_another_process(tmp_path):
    path = tmp_path / "shared.sqlite"
    llm = CachedLLM(ScriptedLLM(["computed once, in this process"]), path)
    assert llm.chat_sync(USER).text == "computed once, in this process"
    llm.close()
    code = (
        "import sys; from memrl.llm import CachedLLM, ScriptedLLM;"
        f"llm = CachedLLM(ScriptedLLM([]), {str(path)!r});"  # an empty script: any miss would raise
        f"r = llm.chat_sync({USER!r}); print(r.text, r.cached)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "computed once, in this process True"
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_sampled_calls_are_not_cached_but_seeded_ones_are(server, tmp_path):
    llm = CachedLLM(openai_client(server), tmp_path / "c.sqlite")
    hot = SamplingParams(temperature=0.8)
    await llm.chat(USER, sampling=hot)
    await llm.chat(USER, sampling=hot)
    assert server.num_requests == 2 and len(llm.store) == 0
    seeded = SamplingParams(temperature=0.8, seed=1)
    await llm.chat(USER, sampling=seeded)
    assert (await llm.chat(USER, sampling=seeded)).cached and server.num_requests == 3
    await llm.aclose()


async def test_failures_are_not_cached_and_are_retried_later(server, tmp_path):
    llm = CachedLLM(openai_client(server), tmp_path / "c.sqlite")
    server.fail_next(2, status=500)  # more failures than the client retries
    with pytest.raises(ProviderError):
        await llm.chat(USER)
    assert len(llm.store) == 0
    assert not (await llm.chat(USER)).cached and (await llm.chat(USER)).cached
    assert server.num_requests == 3 and len(llm.store) == 1
    await llm.aclose()


async def test_batch_sends_only_the_misses_to_the_wrapped_llm(tmp_path):
    inner = ScriptedLLM(lambda messages, tools, schema: messages[-1]["content"] * 2)
    llm = CachedLLM(inner, tmp_path / "c.sqlite")
    convs = [[{"role": "user", "content": c}] for c in "abc"]
    await llm.chat_batch(convs[:2])
    out = await llm.chat_batch(convs)
    assert [r.text for r in out] == ["aa", "bb", "cc"] and [r.cached for r in out] == [True, True, False]
    assert [r.messages[0]["content"] for r in inner.requests] == ["a", "b", "c"]


def test_cache_key_is_canonical_and_covers_what_shapes_the_reply():
    llm = ScriptedLLM([])
    base = cache_key(llm, USER, None, None, SamplingParams(), "auto")
    reordered = [{"content": USER[0]["content"], "role": "user"}]
    assert cache_key(llm, reordered, None, None, SamplingParams(), "auto") == base
    assert cache_key(llm, USER, None, None, SamplingParams(max_tokens=5), "auto") != base
    assert cache_key(ScriptedLLM([], model="other"), USER, None, None, SamplingParams(), "auto") != base
    tools = [{"name": "t", "parameters": {}}]
    assert cache_key(llm, USER, tools, None, SamplingParams(), "auto") != cache_key(
        llm, USER, tools, None, SamplingParams(), "required"
    )
    assert len(base) == 64 and json.dumps(base)

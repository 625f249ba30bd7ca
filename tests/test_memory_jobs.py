"""The Python API of agent jobs: ``AsyncMemory``/``Memory`` given a job writer (``job_writer`` over a scripted
LLM, the boundary) remember a conversation, maintain and read, on a real SQLite file; without a writer they
say how to pass one."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from memrl.agents.jobs import JobRunner, job_writer
from memrl.errors import ConfigError, ValidationError
from memrl.llm.scripted import ScriptedLLM
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.blocking import Memory
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.jobs.table import JobWriter
from tests.test_jobs import MESSAGES, membuilder_rule


@pytest.fixture
async def memory(tmp_path):
    m = AsyncMemory(
        tmp_path / "m.db", embedder=HashingEmbedder(64), writer=job_writer(ScriptedLLM(membuilder_rule()))
    )
    yield m
    await m.close()


async def test_remember_returns_the_finished_job_and_search_finds_its_memories(memory):
    assert isinstance(memory.writer, JobWriter)
    job = await memory.remember(MESSAGES, user_id="alice", session_time=datetime(2024, 5, 1, 10))
    assert job.status == "succeeded", job.error
    assert {(e["event"], e["after"]) for e in job.events} == {
        ("added", "Alice lives in Lisbon."), ("added", "2024-05-01: Alice moved to Lisbon"),
        ("added", "Alice - Home: Lisbon")}  # fmt: skip
    assert (
        job.request["session_time"] == "2024-05-01T10:00:00" and job.result["stats"]["agent"] == "membuilder"
    )
    hits = await memory.search("where does Alice live", user_id="alice")
    assert "Alice - Home: Lisbon" in [h.item.content for h in hits]
    assert [j.id for j in await memory.jobs(user_id="alice")] == [job.id]
    assert await memory.jobs(user_id="bob") == []
    # a dry run applies nothing; an idempotency key returns the first job; undo reverts exactly the job
    n = await memory.count(user_id="alice")
    dry = await memory.remember(MESSAGES, user_id="alice", builder="raw", dry_run=True)
    assert dry.status == "succeeded" and dry.events and await memory.count(user_id="alice") == n
    raw = await memory.remember(MESSAGES, user_id="alice", builder="raw", idempotency_key="k")
    again = await memory.remember(MESSAGES, user_id="alice", builder="raw", idempotency_key="k")
    assert again.id == raw.id and await memory.count(user_id="alice") == n + len(raw.events)
    assert (await memory.undo_job(raw.id)).undone
    assert await memory.count(user_id="alice") == n


async def test_wait_false_returns_the_queued_job_and_job_waits_for_it(memory):
    job = await memory.remember(MESSAGES, namespace="carol", builder="raw", wait=False)
    assert job.status == "queued" and not job.events
    done = await memory.job(job.id, wait=True, timeout=10)
    assert done.status == "succeeded" and {e["event"] for e in done.events} == {"added"}
    items = await memory.list(namespace="carol")
    assert sorted(e["id"] for e in done.events) == sorted(
        i.id for i in items
    )  # one turn, one item (+context)
    assert {"S1:1", "S1:2"} <= {i.id for i in items}
    assert (await memory.cancel_job(job.id)).status == "succeeded"  # a finished job stays as it was


async def test_bad_requests_are_refused_before_a_job_exists(memory):
    for bad, what in (([], "non-empty list"), ("hello", "non-empty list"), ([{"role": "user"}], "content"),
                      ([{"role": "user", "content": "x", "to": "bob"}], "unknown field")):  # fmt: skip
        with pytest.raises(ValidationError, match=what):
            await memory.remember(bad, user_id="alice")
    with pytest.raises(ValidationError, match="builder"):
        await memory.remember(MESSAGES, user_id="alice", builder="mem0")
    with pytest.raises(ValidationError, match="max_tool_calls"):
        await memory.maintain(user_id="alice", max_tool_calls=0)
    with pytest.raises(ValidationError, match="document"):
        await memory.read("  ", user_id="alice")
    assert await memory.jobs(user_id="alice") == []


async def test_without_a_writer_the_agent_methods_say_how_to_pass_one(tmp_path):
    m = AsyncMemory(tmp_path / "m.db", embedder=HashingEmbedder(64))
    try:
        for call in (m.remember(MESSAGES, user_id="a"), m.maintain(user_id="a"), m.read("doc", user_id="a"),
                     m.undo_job("x")):  # fmt: skip
            with pytest.raises(ConfigError, match=r"writer=job_writer\(\.\.\.\)"):
                await call
        assert await m.jobs(user_id="a") == []  # listing reads the store: no writer needed
    finally:
        await m.close()


async def test_a_runner_serves_one_memory(tmp_path):
    runner = job_writer(None)
    a = AsyncMemory(tmp_path / "a.db", embedder=HashingEmbedder(64), writer=runner)
    with pytest.raises(ConfigError, match="another memory"):
        AsyncMemory(tmp_path / "b.db", embedder=HashingEmbedder(64), writer=runner)
    with pytest.raises(ConfigError, match="no memory"):
        await JobRunner().start()
    # no LLM: raw remembers (the default), MemBuilder asked for fails the job with the reason, nothing applied
    job = await a.remember(MESSAGES, user_id="alice", builder="membuilder")
    assert job.status == "failed" and "--llm" in job.error
    job = await a.remember(MESSAGES, user_id="alice")
    assert job.status == "succeeded" and job.result["stats"]["agent"] == "raw"
    await a.close()


def read_rule(messages, tools, json_schema):
    prompt = messages[-1]["content"]
    if "Next section" in prompt:
        return "Alice keeps bees in Sintra."
    return "\\boxed{Sintra}"


def maintain_rule():
    replies = iter([{"tool_calls": [{"name": "manage_memory", "arguments": {"operation": "create",
                                                                            "content": "Alice keeps bees"}}]},
                    "done"])  # fmt: skip
    return lambda *_: next(replies)


def test_sync_memory_reads_maintains_and_closes_its_writer(tmp_path):
    with Memory(
        tmp_path / "m.db", embedder=HashingEmbedder(64), writer=job_writer(ScriptedLLM(read_rule))
    ) as m:
        job = m.read(
            "Alice has kept bees in Sintra since 2019.", user_id="alice", question="Where are the bees?"
        )
        assert job.status == "succeeded", job.error
        assert job.result["answer"] == "Sintra"
        assert [i.content for i in m.list(user_id="alice")] == ["Alice keeps bees in Sintra."]
        assert json.loads(json.dumps(job.to_dict()))["kind"] == "read"
    with Memory(
        tmp_path / "m.db", embedder=HashingEmbedder(64), writer=job_writer(ScriptedLLM(maintain_rule()))
    ) as m:
        job = m.maintain(user_id="alice", max_tool_calls=3)
        assert job.status == "succeeded", job.error
        assert [e["event"] for e in job.events] == ["added"]
        assert sorted(i.content for i in m.list(user_id="alice")) == [
            "Alice keeps bees",
            "Alice keeps bees in Sintra.",
        ]

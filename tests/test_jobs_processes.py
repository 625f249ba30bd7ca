"""Several server processes on one store: each runner (with its own connection to the store) stands for a
process. Jobs are claimed atomically, one namespace never runs two jobs at once across runners, a live
runner's job is never failed by another's start, a dead one's is (on this host by its pid, elsewhere by its
heartbeat), and a job cancelled from another runner is not applied. SQLite and a real Postgres server."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from memrl.agents.jobs import JobConfig, JobRunner
from memrl.llm.scripted import ScriptedLLM
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory

TYPES = ("core", "episodic", "semantic", "procedural")
MESSAGES = [
    {"role": "user", "speaker": "Alice", "content": "I moved to Lisbon in May."},
    {"role": "assistant", "content": "Lisbon is lovely."},
]
FAST = JobConfig(heartbeat_every=0.05, stale_after=1.0, claim_poll=0.02)


class GatedModel:
    """The boundary: a MemBuilder model that answers once the test opens its gate, counting the
    namespaces whose agents are waiting at once (shared by every runner of a test)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.waiting: dict[str, int] = {}
        self.most_jobs_at_once_per_namespace = 0

    def llm(self, label: str) -> ScriptedLLM:
        def reply(messages, tools, json_schema):
            t = next(t for t in TYPES if f"is the {t.upper()} memory" in messages[0]["content"])
            if t == "core":
                return json.dumps({"operation": "APPEND", "content": f"Alice lives in Lisbon ({label})."})
            return json.dumps(
                {
                    "operations": [
                        {"operation": "ADD", "memory": f"Alice moved to Lisbon ({t} fact from {label})"}
                    ]
                }
            )

        llm = ScriptedLLM(reply, max_concurrency=16)
        inner = llm._chat

        async def chat(request):
            await self.gate.wait()
            return await inner(request)

        llm._chat = chat
        return llm


async def _open(db_path) -> AsyncMemory:
    return AsyncMemory(db_path, embedder=HashingEmbedder(64))


async def _running(memory: AsyncMemory, ns: str) -> int:
    rows = memory.store.read("SELECT count(*) FROM jobs WHERE namespace = ? AND status = 'running'", (ns,))
    return rows[0][0]


@pytest.fixture
async def two_processes(db_path):
    """A gated model and two runners, each with its own connection to one store (two processes)."""
    model = GatedModel()
    mem_a, mem_b = await _open(db_path), await _open(db_path)
    a = JobRunner(mem_a, model.llm("a"), FAST)
    b = JobRunner(mem_b, model.llm("b"), FAST)
    yield model, a, b, mem_a
    await a.close()
    await b.close()
    await mem_a.close()
    await mem_b.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_two_processes_never_run_two_jobs_of_a_namespace_at_once(two_processes):
    model, a, b, mem_a = two_processes
    ja, _ = await a.submit("alice", "remember", {"messages": MESSAGES})
    await asyncio.sleep(0.3)
    assert a.get(ja.id).status == "running"
    jb, _ = await b.submit("alice", "remember", {"messages": MESSAGES})  # B's start must not fail A's job
    jc, _ = await b.submit("carol", "remember", {"messages": MESSAGES})
    for _ in range(10):  # B polls while A holds alice; carol is free
        await asyncio.sleep(0.05)
        assert await _running(mem_a, "alice") == 1
    assert b.get(jb.id).status == "queued" and b.get(jc.id).status == "running"
    assert a.get(ja.id).status == "running"  # B's heartbeats and start left it alone: A is alive
    model.gate.set()
    ja, jb, jc = await a.wait(ja.id, 20), await b.wait(jb.id, 20), await b.wait(jc.id, 20)
    assert ja.status == jb.status == jc.status == "succeeded", (ja.error, jb.error, jc.error)
    assert ja.started_at < ja.finished_at <= jb.started_at  # one after the other
    # the second job saw the first one's memory: it is session 2 of alice
    assert jb.result["stats"]["session"] == 2
    contents = {m.content for m in await mem_a.list(user_id="alice")}
    assert {
        "Alice moved to Lisbon (episodic fact from a)",
        "Alice moved to Lisbon (episodic fact from b)",
    } <= contents


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_a_job_cancelled_from_another_process_is_not_applied(two_processes):
    model, a, b, mem_a = two_processes
    job, _ = await a.submit("alice", "remember", {"messages": MESSAGES})
    await asyncio.sleep(0.3)
    assert a.get(job.id).status == "running"
    assert (await b.cancel(job.id)).status == "cancelled"
    model.gate.set()  # A's agents finish now; its heartbeat or its commit finds the job cancelled
    job = await a.wait(job.id, 10)
    assert job.status == "cancelled" and job.batch is None
    assert await mem_a.count(user_id="alice") == 0
    assert [n["name"] for n in await mem_a.namespaces()] == []  # its scratch clone is gone too


async def test_another_hosts_job_is_failed_only_when_its_heartbeat_is_stale(db_path):
    memory = await _open(db_path)
    runner = JobRunner(memory, None, FAST)
    try:
        fresh, _ = runner.table.create("alice", "remember", {"messages": MESSAGES, "agent": "raw"})
        stale, _ = runner.table.create("bob", "remember", {"messages": MESSAGES, "agent": "raw"})
        for job, owner in ((fresh, "elsewhere:123:x"), (stale, "elsewhere:456:y")):
            assert runner.table.claim(job.id, "__job__/" + job.id, owner, dead=lambda j: True) == "claimed"
        for job in (fresh, stale):  # their processes had written into their clones
            await memory.add("half-written", user_id="__job__/" + job.id)
        with memory.store.transaction() as c:  # bob's process stopped beating 5 s ago; alice's beats
            c.execute("UPDATE jobs SET heartbeat_at = ? WHERE id = ?", (time.time() - 5, stale.id))
        assert await runner.start() == [stale.id]
        assert runner.get(fresh.id).status == "running" and runner.get(stale.id).status == "failed"
        # a job of alice waits for the other host's job instead of running beside it
        queued, _ = await runner.submit("alice", "remember", {"messages": MESSAGES, "agent": "raw"})
        await asyncio.sleep(0.3)
        assert runner.get(queued.id).status == "queued"
        # the other host dies (no heartbeat for stale_after): a live runner's heartbeat reaps its job,
        # and the queued job runs
        queued = await runner.wait(queued.id, 5)
        assert runner.get(fresh.id).status == "failed" and "interrupted" in runner.get(fresh.id).error
        assert queued.status == "succeeded", queued.error
        assert await memory.count(user_id="alice") == len(queued.result["events"]) > 0
        assert [n["name"] for n in await memory.namespaces()] == ["alice"]  # both dead jobs' clones dropped
    finally:
        await runner.close()
        await memory.close()

"""Agent jobs on a real SQLite store, driven by a scripted LLM (the boundary): remember with MemBuilder and raw,
events, idempotency, dry run, undo (and its 409), one writer per namespace, cancellation, a restart after a
job was interrupted, the delete share, and tools that cannot leave the job's namespace."""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import subprocess
import sys

import pytest

from memrl.agents.jobs import JobConfig, JobRunner
from memrl.errors import ConflictError
from memrl.llm.scripted import ScriptedLLM
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory

TYPES = ("core", "episodic", "semantic", "procedural")
ANSWERS = {
    "core": {"operation": "APPEND", "content": "Alice lives in Lisbon."},
    "episodic": {"operations": [{"operation": "ADD", "memory": "2024-05-01: Alice moved to Lisbon"}]},
    "semantic": {"operations": [{"operation": "ADD", "memory": "Alice - Home: Lisbon"}]},
    "procedural": {"operations": []},
}
MESSAGES = [
    {"role": "user", "speaker": "Alice", "content": "I moved to Lisbon in May."},
    {"role": "assistant", "content": "Lisbon is lovely."},
]


def membuilder_rule(answers=ANSWERS):
    def reply(messages, tools, json_schema):
        t = next(t for t in TYPES if f"is the {t.upper()} memory" in messages[0]["content"])
        a = answers[t]
        return a if isinstance(a, str) else json.dumps(a)

    return reply


@pytest.fixture
async def memory(db_path):  # SQLite, unless a test is parametrized over backend
    m = AsyncMemory(db_path, embedder=HashingEmbedder(64))
    yield m
    await m.close()


async def test_remember_builds_memory_that_search_finds(memory):
    runner = JobRunner(memory, ScriptedLLM(membuilder_rule()))
    job, created = await runner.submit(
        "alice", "remember", {"messages": MESSAGES, "session_time": "2024-05-01"}
    )
    assert created and job.status == "queued"
    job = await runner.wait(job.id, 10)
    assert job.status == "succeeded", job.error
    events = {(e["event"], e["type"], e["after"]) for e in job.result["events"]}
    assert events == {("added", "core", "Alice lives in Lisbon."),
                      ("added", "episodic", "2024-05-01: Alice moved to Lisbon"),
                      ("added", "semantic", "Alice - Home: Lisbon")}  # fmt: skip
    hits = await memory.search("where does Alice live", user_id="alice")
    assert {h.item.content for h in hits} == {"Alice - Home: Lisbon", "2024-05-01: Alice moved to Lisbon"}
    # one history batch, written by the job; the scratch clone is gone
    batches = {(h.actor) for h in await memory.history(user_id="alice")}
    assert batches == {f"job:{job.id}"}
    assert [n["name"] for n in await memory.namespaces()] == ["alice"]
    assert job.result["tokens"]["completion"] > 0


async def test_idempotency_dry_run_and_undo(memory):
    runner = JobRunner(memory, None)
    raw = {"messages": MESSAGES, "agent": "raw"}
    dry, _ = await runner.submit("alice", "remember", raw, dry_run=True)
    dry = await runner.wait(dry.id, 10)
    assert dry.status == "succeeded" and dry.result["events"]
    assert await memory.count(user_id="alice") == 0  # a dry run applies nothing
    job, created = await runner.submit("alice", "remember", raw, idempotency_key="req-1")
    again, created2 = await runner.submit("alice", "remember", raw, idempotency_key="req-1")
    assert created and not created2 and again.id == job.id
    job = await runner.wait(job.id, 10)
    assert [e["after"] for e in job.result["events"]] == [e["after"] for e in dry.result["events"]]
    n = await memory.count(user_id="alice")
    assert n == len(job.result["events"]) > 0  # built once, not twice
    # undo is refused, naming the item, once another change touched one of the job's items
    first = job.result["events"][0]["id"]
    await memory.update(first, "changed by hand", user_id="alice")
    with pytest.raises(ConflictError, match=repr(first)):
        await runner.undo(job.id)
    await memory.undo(first, user_id="alice")
    job = await runner.undo(job.id)
    assert job.undone and await memory.count(user_id="alice") == 0


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_one_writer_per_namespace_and_cancel(memory):
    gate = asyncio.Event()
    active, most = 0, 0

    llm = ScriptedLLM(membuilder_rule(), max_concurrency=16)
    inner = llm._chat

    async def chat(request):
        nonlocal active, most
        active += 1
        most = max(most, active)
        await gate.wait()
        active -= 1
        return await inner(request)

    llm._chat = chat  # the boundary: a model that answers when the test says so
    runner = JobRunner(memory, llm)
    a, _ = await runner.submit("alice", "remember", {"messages": MESSAGES})
    b, _ = await runner.submit("alice", "remember", {"messages": MESSAGES})
    c, _ = await runner.submit("carol", "remember", {"messages": MESSAGES})
    await asyncio.sleep(0.2)
    assert runner.get(a.id).status == "running" and runner.get(b.id).status == "queued"
    assert runner.get(c.id).status == "running"  # another namespace runs at once
    cancelled = await runner.cancel(b.id)
    assert cancelled.status == "cancelled"
    gate.set()
    a, c = await runner.wait(a.id, 10), await runner.wait(c.id, 10)
    assert a.status == c.status == "succeeded"
    assert most == 8  # 4 agents x 2 namespaces, never 4 x 2 on one namespace
    # the second remember of a namespace is session 2 (its turns do not collide with session 1's)
    d, _ = await runner.submit("alice", "remember", {"messages": MESSAGES, "agent": "raw"})
    d = await runner.wait(d.id, 10)
    assert d.status == "succeeded" and d.result["stats"]["session"] == 2


async def test_restart_fails_the_interrupted_job_and_drops_its_writes(memory, db_path):
    await memory.add("Alice likes tea", user_id="alice")
    runner = JobRunner(memory, None)
    job, _ = runner.table.create("alice", "remember", {"messages": MESSAGES, "agent": "raw"})
    # a process that died mid-job (its pid is gone): the job is running and its clone holds partial writes
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    owner = f"{socket.gethostname()}:{int(dead.stdout)}:gone"
    assert runner.table.claim(job.id, "__job__/" + job.id, owner, dead=lambda j: True) == "claimed"
    await memory.clone("alice", "__job__/" + job.id)
    await memory.add("half-written", user_id="__job__/" + job.id)
    before = sqlite3.connect(db_path).execute("SELECT * FROM memories WHERE namespace='alice'").fetchall()
    fresh = JobRunner(memory, None)
    assert await fresh.start() == [job.id]
    job = fresh.get(job.id)
    assert job.status == "failed" and "interrupted" in job.error
    assert [n["name"] for n in await memory.namespaces()] == ["alice"]
    after = sqlite3.connect(db_path).execute("SELECT * FROM memories WHERE namespace='alice'").fetchall()
    assert after == before


def delete_all_then_write_bob(ids):
    calls = [{"name": "delete_memory", "arguments": {"memory_id": i}} for i in ids]
    calls.append(
        {
            "name": "manage_memory",
            "arguments": {"namespace": "bob", "operation": "create", "content": "Bob owes me $100"},
        }
    )
    return [{"tool_calls": calls}, "done"]


@pytest.mark.parametrize("allow", [False, True])
async def test_maintain_stays_in_its_namespace_and_deletes_within_the_share(memory, allow):
    items = [await memory.add(f"fact {i} about Alice", user_id="alice") for i in range(4)]
    await memory.add("Bob's own memory", user_id="bob")
    llm = ScriptedLLM(delete_all_then_write_bob([it.id for it in items]))
    runner = JobRunner(memory, llm, JobConfig(destruction_budget=0.5))
    msgs = "delete everything, then write into namespace bob"
    job, _ = await runner.submit("alice", "maintain", {"question": msgs, "max_tool_calls": 10,
                                                       "allow_mass_delete": allow})  # fmt: skip
    job = await runner.wait(job.id, 10)
    assert [i.content for i in await memory.list(user_id="bob")] == ["Bob's own memory"]
    if allow:
        assert job.status == "succeeded"
        assert await memory.count(user_id="alice") == 0
        assert {e["event"] for e in job.result["events"]} == {"deleted", "skipped"}
    else:
        assert job.status == "failed" and "allow_mass_delete" in job.error
        assert await memory.count(user_id="alice") == 4  # nothing applied


async def test_progress_counts_model_calls_of_the_expected_total(memory):
    seen = []
    runner = None

    def reply(messages, tools, json_schema):
        job = runner.table.list("alice", limit=1)[0]
        seen.append(job.result.get("progress"))
        return "\\boxed{Sintra}" if "Answer the question" in messages[-1]["content"] else "bees in Sintra"

    runner = JobRunner(memory, ScriptedLLM(reply), JobConfig(progress_every=0))
    doc = " ".join(f"word{i}" for i in range(30))  # 12 words a chunk at chunk_tokens=16: 3 chunks
    job, _ = await runner.submit("alice", "read", {"document": doc, "chunk_tokens": 16, "question": "Where?"})
    job = await runner.wait(job.id, 10)
    assert job.status == "succeeded", job.error
    steps = [(p or {}).get("steps_done") for p in seen]
    assert steps == [None, 1, 2, 3] and {p["steps_total"] for p in seen[1:]} == {4}  # 3 chunks + the answer
    assert job.to_dict()["progress"] == {"steps_done": 4, "steps_total": 4, "unit": "model calls"}
    # remember: one session of four agents' calls
    runner.llm = ScriptedLLM(membuilder_rule())
    job, _ = await runner.submit("alice", "remember", {"messages": MESSAGES})
    job = await runner.wait(job.id, 10)
    assert job.to_dict()["progress"] == {"steps_done": 4, "steps_total": 4, "unit": "model calls",
                                         "sessions_done": 1, "sessions_total": 1}  # fmt: skip
    # raw remember: one session, no model calls
    runner.llm = None
    job, _ = await runner.submit("alice", "remember", {"messages": MESSAGES, "agent": "raw"})
    job = await runner.wait(job.id, 10)
    assert job.to_dict()["progress"] == {"steps_done": 0, "steps_total": 0, "unit": "model calls",
                                         "sessions_done": 1, "sessions_total": 1}  # fmt: skip


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_a_job_refused_at_commit_keeps_its_progress_and_changes_nothing(memory):
    item = await memory.add("Alice lives in Lisbon", user_id="alice")
    script = iter([{"tool_calls": [{"name": "manage_memory", "arguments": {
        "operation": "update", "memory_id": item.id, "content": "Alice lives in Porto"}}]}, "done"])  # fmt: skip

    def reply(messages, tools, json_schema):
        step = next(script)
        if step == "done":  # another client edits the same item while the job runs
            memory.store.update("alice", item.id, content="Alice lives in Faro", actor="someone")
        return step

    runner = JobRunner(memory, ScriptedLLM(reply), JobConfig(progress_every=0))
    job, _ = await runner.submit("alice", "maintain", {"max_tool_calls": 5})
    job = await runner.wait(job.id, 10)
    assert job.status == "failed" and "ConflictError" in job.error and repr(item.id) in job.error
    assert job.to_dict()["progress"] == {"steps_done": 2, "steps_total": 2, "unit": "model calls"}
    assert (
        job.result["stats"] and job.events == [] and job.batch is None
    )  # nothing applied, no event claims so
    assert [i.content for i in await memory.list(user_id="alice")] == ["Alice lives in Faro"]
    assert [e.actor for e in await memory.history(item.id, user_id="alice")] == [None, "someone"]


async def test_a_cancelled_job_keeps_the_progress_it_recorded(memory):
    gate = asyncio.Event()
    llm = ScriptedLLM(lambda *a: "bees in Sintra")
    inner = llm._chat
    calls = 0

    async def chat(request):
        nonlocal calls
        calls += 1
        if calls == 2:
            await gate.wait()  # the second chunk never comes back: the job is cancelled meanwhile
        return await inner(request)

    llm._chat = chat
    runner = JobRunner(memory, llm, JobConfig(progress_every=0))
    doc = " ".join(f"word{i}" for i in range(30))
    job, _ = await runner.submit("alice", "read", {"document": doc, "chunk_tokens": 16})
    while (runner.table.get(job.id).result.get("progress") or {}).get("steps_done") != 1:
        await asyncio.sleep(0.01)
    job = await runner.cancel(job.id)
    job = await runner.wait(job.id, 10)
    assert job.status == "cancelled"
    assert job.to_dict()["progress"] == {"steps_done": 1, "steps_total": 4, "unit": "model calls"}

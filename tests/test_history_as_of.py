"""Contradictions keep history: an updated or deleted fact stays queryable ``as_of`` an earlier time and
among an item's earlier versions, through Python (an agent job's update, on SQLite and Postgres), REST
over real HTTP and the MCP tools' code (the scripted LLM is the boundary)."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

from memrl.agents.jobs import job_writer
from memrl.errors import NotFoundError, ValidationError
from memrl.llm.scripted import ScriptedLLM
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.store.past import to_time
from memrl.tools.service import SERVICE_TOOLS
from tests.server_helpers import ALICE, client, memory_server

Q = "Where does Alice live?"


def move_to_porto(memory_id):
    script = iter(
        [
            {"tool_calls": [{"name": "manage_memory", "arguments": {
                "operation": "update", "memory_id": memory_id, "content": "Alice lives in Porto"}}]},
            "done",
        ]
    )  # fmt: skip
    return lambda messages, tools, json_schema: next(script)


def tick() -> float:
    """A time strictly between two writes (history times are UNIX seconds of the write)."""
    time.sleep(0.02)
    t = time.time()
    time.sleep(0.02)
    return t


async def contents(m, query=Q, **kw) -> list[str]:
    return [h.item.content for h in await m.search(query, user_id="alice", **kw)]


async def test_a_job_updating_a_fact_and_a_delete_keep_the_old_versions(db_path):
    holder = {}
    llm = ScriptedLLM(lambda *a: holder["rule"](*a))
    m = AsyncMemory(db_path, embedder=HashingEmbedder(64), writer=job_writer(llm))
    try:
        before_add = tick()
        lisbon = await m.add("Alice lives in Lisbon", user_id="alice")
        await m.add("Alice drinks green tea", user_id="alice")
        before_job = tick()
        holder["rule"] = move_to_porto(lisbon.id)
        job = await m.maintain(
            user_id="alice", question="Alice moved to Porto: update her home", max_tool_calls=5
        )
        assert job.status == "succeeded", job.error
        assert [(e["event"], e["before"], e["after"]) for e in job.events if e["event"] == "updated"] == [
            ("updated", "Alice lives in Lisbon", "Alice lives in Porto")
        ]
        after_job = tick()

        assert (await contents(m))[0] == "Alice lives in Porto"
        assert "Alice lives in Lisbon" not in await contents(m)
        past = await m.search(Q, user_id="alice", as_of=before_job)
        assert past[0].item.content == "Alice lives in Lisbon" and past[0].item.id == lisbon.id
        assert "Alice lives in Porto" not in [h.item.content for h in past]
        assert (await contents(m, as_of=after_job))[0] == "Alice lives in Porto"
        assert await contents(m, as_of=before_add) == []
        for mode in ("bm25", "dense"):
            assert (await contents(m, "Lisbon", mode=mode, as_of=before_job))[0] == "Alice lives in Lisbon"
        iso = datetime.fromtimestamp(before_job, timezone.utc).isoformat()
        assert (await m.get(lisbon.id, user_id="alice", as_of=iso)).content == "Alice lives in Lisbon"
        assert (await m.get(lisbon.id, user_id="alice", as_of=after_job)).content == "Alice lives in Porto"
        with pytest.raises(NotFoundError, match="did not exist yet"):
            await m.get(lisbon.id, user_id="alice", as_of=before_add)
        assert [(v["content"], v["replaced_by"]) for v in await m.versions(lisbon.id, user_id="alice")] == [
            ("Alice lives in Lisbon", "UPDATE")
        ]

        await m.delete(lisbon.id, user_id="alice")
        after_delete = tick()
        assert "Alice lives in Porto" not in await contents(m)
        assert (await contents(m, as_of=after_job))[0] == "Alice lives in Porto"  # before the delete
        assert "Alice lives in Porto" not in await contents(m, as_of=after_delete)
        with pytest.raises(NotFoundError, match="was deleted"):
            await m.get(lisbon.id, user_id="alice", as_of=after_delete)
        assert [v["content"] for v in await m.versions(lisbon.id, user_id="alice")] == [
            "Alice lives in Lisbon", "Alice lives in Porto"]  # fmt: skip

        # a clone has no history: its items count from their creation, as they are now
        await m.clone("alice", "alice-copy")
        copy = await m.search("green tea", namespace="alice-copy", as_of=time.time())
        assert [h.item.content for h in copy] == ["Alice drinks green tea"]
    finally:
        await m.close()


def test_as_of_accepts_seconds_iso_and_datetimes_and_refuses_the_rest():
    assert to_time(12.5) == 12.5 and to_time("12.5") == 12.5
    assert to_time("1970-01-01T00:01:00Z") == 60.0 == to_time(datetime(1970, 1, 1, 0, 1))
    assert to_time("1970-01-01T01:01:00+01:00") == 60.0
    for bad in ("yesterday", True, [1]):
        with pytest.raises(ValidationError, match="as_of"):
            to_time(bad)


def test_rest_as_of_and_include_history_over_http(db_path):
    with memory_server(db_path) as (url, _):
        c = client(url, ALICE)
        a = c.post("/v1/namespaces/alice/memories", json={"content": "Alice lives in Lisbon"}).json()["id"]
        before = tick()
        r = c.patch(f"/v1/namespaces/alice/memories/{a}", json={"content": "Alice lives in Porto"})
        assert r.status_code == 200, r.text
        hits = c.post("/v1/namespaces/alice/search", json={"query": Q, "as_of": before}).json()
        assert [h["content"] for h in hits] == ["Alice lives in Lisbon"]
        iso = datetime.fromtimestamp(before, timezone.utc).isoformat().replace("+00:00", "Z")
        assert c.post("/v1/namespaces/alice/search", json={"query": Q, "as_of": iso}).json() == hits
        now = c.post("/v1/namespaces/alice/search", json={"query": Q, "include_history": True}).json()
        assert now[0]["content"] == "Alice lives in Porto"
        assert [v["content"] for v in now[0]["history"]] == ["Alice lives in Lisbon"]
        got = c.get(f"/v1/namespaces/alice/memories/{a}", params={"as_of": iso})
        assert got.status_code == 200, got.text
        assert got.json()["content"] == "Alice lives in Lisbon"
        full = c.get(f"/v1/namespaces/alice/memories/{a}", params={"include_history": "true"}).json()
        assert full["content"] == "Alice lives in Porto" and full["history"][0]["replaced_by"] == "UPDATE"
        bad = c.post("/v1/namespaces/alice/search", json={"query": Q, "as_of": "last week"})
        assert bad.status_code == 422 and "as_of" in bad.text
        c.delete(f"/v1/namespaces/alice/memories/{a}")
        gone = c.get(f"/v1/namespaces/alice/memories/{a}", params={"as_of": time.time()})
        assert gone.status_code == 404


async def test_the_mcp_tools_take_as_of_and_include_history(tmp_path):
    m = AsyncMemory(tmp_path / "m.db", embedder=HashingEmbedder(64))
    try:
        from memrl.tools.memupdate import MemoryContext

        item = await m.add("Alice lives in Lisbon", user_id="alice")
        before = tick()
        await m.update(item.id, "Alice lives in Porto", user_id="alice")
        ctx = MemoryContext(m, namespace="alice", actor="mcp")
        for name in ("search_memories", "get_memory"):
            assert {"as_of", "include_history"} <= set(SERVICE_TOOLS.by_name[name].parameters["properties"])
        r = await SERVICE_TOOLS.call(ctx, "search_memories", {"query": Q, "as_of": before})
        assert r.ok and "Lisbon" in r.content and "Porto" not in r.content
        r = await SERVICE_TOOLS.call(ctx, "get_memory", {"memory_id": item.id, "include_history": True})
        assert r.ok and "Porto" in r.content and "earlier (UPDATE): 'Alice lives in Lisbon'" in r.content
    finally:
        await m.close()


def test_the_sync_memory_takes_as_of_and_versions(tmp_path):
    from memrl.memory.facade.blocking import Memory

    with Memory(tmp_path / "m.db", embedder=HashingEmbedder(64)) as m:
        item = m.add("Alice lives in Lisbon", user_id="alice")
        before = tick()
        m.update(item.id, "Alice lives in Porto", user_id="alice")
        assert [h.item.content for h in m.search(Q, user_id="alice", as_of=before)] == [
            "Alice lives in Lisbon"
        ]
        assert m.get(item.id, user_id="alice", as_of=before).content == "Alice lives in Lisbon"
        assert [v["content"] for v in m.versions(item.id, user_id="alice")] == ["Alice lives in Lisbon"]

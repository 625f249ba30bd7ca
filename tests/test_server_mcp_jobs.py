"""The agent-job tools of the MCP server (remember, maintain, read_document, job_status, undo_job), driven by
the official SDK's client: over streamable HTTP with a namespace-scoped token and a scripted model behind the
memory's job writer, and over stdio (``memrl serve mcp --llm none``: raw remember only)."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("mcp", reason="the MCP tests need the 'mcp' extra: pip install 'memrl[mcp]'")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402

from memrl.agents.jobs import job_writer  # noqa: E402
from memrl.llm.scripted import ScriptedLLM  # noqa: E402
from memrl.memory.embedders.providers import HashingEmbedder  # noqa: E402
from memrl.memory.facade.blocking import Memory  # noqa: E402
from memrl.memory.facade.memory import AsyncMemory  # noqa: E402
from memrl.memory.jobs.table import JobTable  # noqa: E402
from memrl.server.http import ServerThread, Tokens  # noqa: E402
from memrl.server.mcp_server import create_mcp, http_app  # noqa: E402
from tests.test_jobs import MESSAGES, membuilder_rule  # noqa: E402

TOKEN = "mcp-secret-alice"


async def test_job_tools_over_http_stay_in_the_served_namespace(tmp_path) -> None:
    import httpx

    db = tmp_path / "mcp.db"
    memory = AsyncMemory(db, embedder=HashingEmbedder(64), writer=job_writer(ScriptedLLM(membuilder_rule())))
    table = JobTable(memory.store)
    bobs, _ = table.create("bob", "remember", {"messages": MESSAGES, "agent": "raw"})
    table.finish(bobs.id, "cancelled", error="cancelled")  # a job of bob's that exists (and never runs)
    app = http_app(
        create_mcp(memory, "alice"), Tokens.parse([f"a={TOKEN}:alice", "b=mcp-secret-bob:bob"]), "alice"
    )
    with ServerThread(app) as server:
        url = server.base_url + "/mcp"
        hc = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
        async with Client(streamable_http_client(url, http_client=hc)) as c:
            names = [t.name for t in (await c.list_tools()).tools]
            assert names[-5:] == ["remember", "maintain", "read_document", "job_status", "undo_job"]
            r = await c.call_tool("remember", {"messages": MESSAGES, "session_time": "2024-05-01"})
            assert not r.is_error, r.content[0].text
            job = r.structured_content["data"]
            assert job["status"] == "succeeded" and job["namespace"] == "alice"
            assert "added 3" in r.content[0].text and "Alice - Home: Lisbon" in r.content[0].text
            hits = await c.call_tool("search_memory", {"query": "where does Alice live"})
            assert "Lisbon" in hits.content[0].text
            # a queued job comes back at once, and job_status follows it
            q = await c.call_tool("remember", {"messages": MESSAGES, "builder": "raw", "wait_seconds": 0})
            queued = q.structured_content["data"]
            assert queued["status"] in ("queued", "running") and "job_status" in q.content[0].text
            done = await c.call_tool("job_status", {"job_id": queued["id"], "wait_seconds": 30})
            assert done.structured_content["data"]["status"] == "succeeded"
            # another namespace's job does not exist here; a namespace argument is refused, nothing runs
            other = await c.call_tool("job_status", {"job_id": bobs.id})
            assert other.is_error and "no job" in other.content[0].text
            assert (await c.call_tool("undo_job", {"job_id": bobs.id})).is_error
            stray = await c.call_tool("remember", {"messages": MESSAGES, "namespace": "bob"})
            assert stray.is_error and "'namespace': unknown argument" in stray.content[0].text
            bad = await c.call_tool("remember", {"messages": [{"role": "user", "content": ""}]})
            assert bad.is_error and "content" in bad.content[0].text
            undo = await c.call_tool("undo_job", {"job_id": job["id"]})
            assert not undo.is_error and undo.structured_content["data"]["undone"]
            assert "It was undone." in undo.content[0].text
        r = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
                       headers={"Authorization": "Bearer mcp-secret-bob"})  # fmt: skip
        assert r.status_code == 403
    with Memory(db, embedder=HashingEmbedder(64)) as m:
        assert m.count(namespace="bob") == 0 and m.history(namespace="bob") == []  # nothing reached bob
        assert "Alice - Home: Lisbon" not in [i.content for i in m.list(namespace="alice")]  # undone
        assert m.count(namespace="alice") > 0  # the raw job's turns stay
        assert [j.status for j in m.jobs(namespace="bob")] == ["cancelled"]  # bob's job untouched


async def test_stdio_remember_raw_then_undo(tmp_path) -> None:
    db = tmp_path / "mcp.db"
    argv = ["-m", "memrl.cli.main", "serve", "mcp", "--db", str(db), "--embedder", "hashing:64", "-n", "alice",
            "--llm", "none"]  # fmt: skip
    async with Client(StdioServerParameters(command=sys.executable, args=argv)) as c:
        r = await c.call_tool("remember", {"messages": MESSAGES, "builder": "raw", "wait_seconds": 30})
        job = r.structured_content["data"]
        assert job["status"] == "succeeded" and {e["event"] for e in job["events"]} == {"added"}
        needs_llm = await c.call_tool("maintain", {"wait_seconds": 30})
        assert needs_llm.is_error and "--llm" in needs_llm.content[0].text
        assert not (await c.call_tool("undo_job", {"job_id": job["id"]})).is_error
    with Memory(db, embedder=HashingEmbedder(64)) as m:
        assert m.count(namespace="alice") == 0
        assert [j.kind for j in m.jobs(namespace="alice")] == ["maintain", "remember"]

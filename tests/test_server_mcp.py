"""The MCP server, driven by the official SDK's own client over both transports: stdio (``memrl serve mcp``
as a subprocess) and streamable HTTP (on loopback, behind a namespace-scoped bearer token)."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("mcp", reason="the MCP tests need the 'mcp' extra: pip install 'memrl[mcp]'")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402

from memrl.memory.embedders.providers import HashingEmbedder  # noqa: E402
from memrl.memory.facade.blocking import Memory  # noqa: E402
from memrl.memory.facade.memory import AsyncMemory
from memrl.server.http import ServerThread, Tokens  # noqa: E402
from memrl.server.mcp_server import MCP_TOOLS, create_mcp, http_app  # noqa: E402

TOKEN = "mcp-secret-alice"
NAMES = ["search_memory", "manage_memory", "delete_memory", "sample_memory", "merge_memory", "split_memory",
         "memory_history", "undo_change"]  # fmt: skip


async def session(client: Client) -> dict:
    """A model's use of the memory tools; returns what it saw."""
    seen: dict = {}
    async with client as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        seen["tools"] = list(tools)
        seen["search_schema"] = tools["search_memory"].input_schema
        a = await c.call_tool(
            "manage_memory",
            {"operation": "create", "content": "Alice lives in Lisbon. She has a dog named Rex."},
        )
        b = await c.call_tool(
            "manage_memory",
            {"operation": "create", "content": "Alice works as a nurse", "memory_type": "semantic"},
        )
        ida, idb = a.structured_content["data"]["id"], b.structured_content["data"]["id"]
        seen["search"] = (
            (await c.call_tool("search_memory", {"query": "Where does Alice live?"})).content[0].text
        )
        split = await c.call_tool("split_memory", {"memory_id": ida})
        seen["split"] = split.structured_content["data"]
        seen["history"] = (await c.call_tool("memory_history", {"memory_id": ida})).structured_content["data"]
        seen["undo"] = (await c.call_tool("undo_change", {"memory_id": ida})).content[0].text
        await c.call_tool("delete_memory", {"memory_id": idb, "reason": "test"})
        seen["after_delete"] = (await c.call_tool("search_memory", {"query": "nurse"})).content[0].text
        bad = await c.call_tool("search_memory", {"query": "x", "top_k": 500})
        seen["bad"] = (bad.is_error, bad.content[0].text)
        unknown = await c.call_tool("delete_memory", {"memory_id": "nope"})
        seen["unknown"] = (unknown.is_error, unknown.content[0].text)
        stray = await c.call_tool(
            "manage_memory", {"operation": "create", "content": "Bob's", "namespace": "bob"}
        )
        seen["stray"] = (stray.is_error, stray.content[0].text)
        sample = await c.call_tool("sample_memory", {"k": 5, "strategy": "recent"})
        seen["sample"] = sample.content[0].text
    seen["ids"] = (ida, idb)
    return seen


def check(seen: dict, db, ns: str, job_tools: bool = False) -> None:
    jobs = ["remember", "maintain", "read_document", "job_status", "undo_job"] if job_tools else []
    assert seen["tools"] == [*NAMES, *jobs] and [t.name for t in MCP_TOOLS] == NAMES
    props = seen["search_schema"]["properties"]
    assert (
        props["top_k"]["maximum"] == 50
        and props["query"]["description"] == "What to look for, in natural language."
    )
    assert "Lisbon" in seen["search"]
    assert len(seen["split"]["ids"]) == 2
    assert [e["op"] for e in seen["history"]] == ["ADD", "SPLIT"], seen["history"]
    assert "Undid" in seen["undo"]
    assert "nurse" not in seen["after_delete"]
    assert seen["bad"][0] and "top_k" in seen["bad"][1]
    # the id and the namespace both quoted whole (the closing quote used to be stripped off the end)
    assert seen["unknown"][0] and f"memory 'nope' does not exist in namespace '{ns}'." in seen["unknown"][1]
    # an argument the tool does not take is refused (it used to be dropped: the write went to this namespace)
    assert seen["stray"][0] and "'namespace': unknown argument" in seen["stray"][1]
    ida, idb = seen["ids"]
    with Memory(
        db, embedder=HashingEmbedder(128)
    ) as m:  # the changes are in the store file, in that namespace
        assert m.get(ida, namespace=ns).content == "Alice lives in Lisbon. She has a dog named Rex."
        assert m.get(idb, namespace=ns, include_deleted=True).deleted
        assert [e.actor for e in m.history(ida, namespace=ns)][0] == "mcp"
        assert [n["name"] for n in m.namespaces()] == [ns]  # nothing reached "bob"
        assert m.get(ida, namespace=ns).type.value == "semantic"  # REST's default type, not episodic
        assert "Bob's" not in [i.content for i in m.list(namespace=ns)]


async def test_stdio_transport(tmp_path) -> None:
    db = tmp_path / "mcp.db"
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "memrl.cli.main",
            "serve",
            "mcp",
            "--db",
            str(db),
            "--embedder",
            "hashing:128",
            "-n",
            "alice",
        ],
    )
    check(await session(Client(params)), db, "alice", job_tools=True)  # --llm none by default: raw remember


async def test_streamable_http_transport_with_scoped_tokens(tmp_path) -> None:
    import httpx

    db = tmp_path / "mcp.db"
    memory = AsyncMemory(db, embedder=HashingEmbedder(128))
    app = http_app(
        create_mcp(memory, "alice"), Tokens.parse([f"a={TOKEN}:alice", "b=mcp-secret-bob:bob"]), "alice"
    )
    with ServerThread(app) as server:
        url = server.base_url + "/mcp"
        hc = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
        seen = await session(Client(streamable_http_client(url, http_client=hc)))
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
        for token, status in ((None, 401), ("wrong-token-1", 401), ("mcp-secret-bob", 403)):
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            r = httpx.post(url, json=init, headers=headers)
            assert r.status_code == status and "error" in r.json()
    check(seen, db, "alice")


async def test_the_embedder_loads_as_the_http_server_starts(tmp_path) -> None:
    """The model starts loading when the app is made (not in the first tool call that embeds); a search
    made while it loads waits for it and answers."""
    from tests.test_server_warmup import SlowLoad, until

    slow = SlowLoad()
    memory = AsyncMemory(tmp_path / "mcp.db", embedder=slow)
    app = http_app(create_mcp(memory, "alice"), Tokens.parse([f"a={TOKEN}:alice"]), "alice")
    until(slow.started.is_set)  # no request yet
    with ServerThread(app) as server:
        hc = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
        async with Client(streamable_http_client(server.base_url + "/mcp", http_client=hc)) as c:
            slow.release.set()
            out = await c.call_tool("search_memory", {"query": "Lisbon"})
        assert not out.is_error
    assert slow.loads == 1 and slow.waiting == 0  # loaded once, by the server's thread

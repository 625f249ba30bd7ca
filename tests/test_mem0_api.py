"""The calls mem0 and OpenAI users make first: chat messages in OpenAI's format (``name``, text parts)
everywhere messages are taken, ``add(messages)`` (turns, or remember with ``infer``), ``search(limit=)``,
``type=`` as the one name of the memory type (``memory_type`` over REST still accepted), ``get_all`` and an
undoable ``delete_all``: in Python, over REST on loopback and through the MCP job tool."""

from __future__ import annotations

import pytest

from memrl.agents.jobs import job_writer
from memrl.errors import ConfigError, ValidationError
from memrl.memory import Memory
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.jobs import check_messages
from memrl.tools.jobs import JOB_TOOLS
from memrl.tools.memupdate import MemoryContext
from tests.server_helpers import ALICE, client, memory_server

OPENAI = [
    {"role": "user", "name": "Alice", "content": "I moved to Lisbon last month"},
    {"role": "assistant", "content": [{"type": "text", "text": "Lisbon is lovely."}, {"type": "text", "text": "Do you like it?"}]},
]  # fmt: skip


def test_openai_messages_become_memrls():
    assert check_messages(OPENAI) == [
        {"role": "user", "speaker": "Alice", "content": "I moved to Lisbon last month"},
        {"role": "assistant", "content": "Lisbon is lovely.\nDo you like it?"},
    ]
    with pytest.raises(ValidationError, match="only text parts"):
        check_messages([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])
    with pytest.raises(ValidationError, match="or name, as OpenAI"):
        check_messages([{"role": "user", "content": "hi", "tool_calls": []}])


def test_add_messages_search_limit_get_all_and_an_undoable_delete_all(tmp_path):
    with Memory(tmp_path / "m.db", embedder=HashingEmbedder(64)) as m:
        items = m.add(OPENAI, user_id="alice")  # no writer: the turns, as said
        assert [(it.type.value, it.content) for it in items] == [
            ("episodic", "Alice: I moved to Lisbon last month"),
            ("episodic", "assistant: Lisbon is lovely.\nDo you like it?"),
        ]
        assert items[0].metadata["speaker"] == "Alice"
        with pytest.raises(ConfigError, match="infer=False"):
            m.add(OPENAI, user_id="alice", infer=True)
        m.add("Alice likes fado", user_id="alice")  # text: one semantic memory, as before
        assert len(m.search("Lisbon", user_id="alice", limit=1)) == 1
        assert {h.item.type.value for h in m.search("Alice", user_id="alice", type="semantic")} == {
            "semantic"
        }
        assert len(m.get_all(user_id="alice")) == 3 and len(m.get_all(user_id="alice", type="episodic")) == 2
        assert m.delete_all(user_id="alice") == 3
        assert m.get_all(user_id="alice") == []
        assert len(m.undo(user_id="alice")) == 3  # one change: all three back
        assert len(m.get_all(user_id="alice")) == 3


async def test_add_messages_with_a_writer_runs_remember(tmp_path):
    m = AsyncMemory(tmp_path / "m.db", embedder=HashingEmbedder(64), writer=job_writer())
    try:
        job = await m.add(OPENAI, user_id="alice")  # a writer: remember (no model here: the raw agent)
        assert job.status == "succeeded" and job.result["stats"]["agent"] == "raw"
        assert job.request["messages"][0]["speaker"] == "Alice"
        assert isinstance(await m.add(OPENAI, user_id="bob", infer=False), list)
        ctx = MemoryContext(m, namespace="carol", actor="mcp")  # the MCP tool takes OpenAI's format too
        r = await JOB_TOOLS.call(ctx, "remember", {"messages": OPENAI, "wait_seconds": 10})
        assert r.ok and r.data["status"] == "succeeded", r.content
    finally:
        await m.close()


def test_rest_takes_type_limit_and_openai_messages(tmp_path):
    with memory_server(tmp_path / "m.db") as (url, _), client(url, ALICE) as c:
        r = c.post(
            "/v1/namespaces/alice/memories", json={"content": "Alice moved to Lisbon", "type": "episodic"}
        )
        assert r.status_code == 201 and r.json()["type"] == "episodic"
        r = c.post(
            "/v1/namespaces/alice/memories", json={"content": "Alice likes fado", "memory_type": "procedural"}
        )
        assert r.status_code == 201 and r.json()["type"] == "procedural"  # the old name, still accepted
        hits = c.post("/v1/namespaces/alice/search", json={"query": "Alice", "limit": 1}).json()
        assert len(hits) == 1
        hits = c.post("/v1/namespaces/alice/search", json={"query": "Alice", "type": "procedural"}).json()
        assert [h["type"] for h in hits] == ["procedural"]
        r = c.post("/v1/namespaces/alice/remember?wait=true&timeout=30", json={"messages": OPENAI})
        assert r.status_code == 200, r.text
        job = r.json()
        assert job["status"] == "succeeded" and job["stats"]["agent"] == "raw"
        assert job["request"]["messages"][1]["content"] == "Lisbon is lovely.\nDo you like it?"

"""``memrl memory remember`` on a store (the job runs in the command, its model behind ``--llm``: a scripted
model served over real HTTP) and against a running memory server (``--server``, with a scoped token)."""

from __future__ import annotations

import json

import pytest

from memrl.agents.jobs import JobRunner
from memrl.cli.main import main
from memrl.llm.scripted import ScriptedLLM
from memrl.llm.server import LLMServer
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.blocking import Memory
from memrl.memory.facade.memory import AsyncMemory
from memrl.server.http import ServerThread, Tokens
from memrl.server.memory_api import create_app
from tests.server_helpers import ALICE, TOKENS
from tests.test_jobs import MESSAGES, membuilder_rule


def run(capsys, *argv: str) -> tuple[int, dict | str, str]:
    code = main(["memory", "remember", *argv])
    out, err = capsys.readouterr()
    try:
        return code, json.loads(out), err
    except json.JSONDecodeError:
        return code, out, err


@pytest.fixture
def conv(tmp_path):
    path = tmp_path / "conv.json"
    path.write_text(json.dumps({"messages": MESSAGES, "session_time": "2024-05-01T10:00:00"}))
    return str(path)


def test_remember_on_a_store_with_a_served_model(tmp_path, capsys, conv):
    db = str(tmp_path / "m.db")
    store = ["--db", db, "-n", "alice", "--embedder", "hashing:64"]
    with LLMServer(ScriptedLLM(membuilder_rule())) as llm:
        code, job, _ = run(capsys, "--messages", conv, *store, "--llm", llm.base_url, "--json")
        assert code == 0 and job["status"] == "succeeded", job
        assert job["request"]["session_time"] == "2024-05-01T10:00:00"
        assert {e["after"] for e in job["events"]} >= {"Alice - Home: Lisbon"}
        code, text, _ = run(capsys, "--messages", conv, *store, "--llm", llm.base_url, "--dry-run")
        assert code == 0 and "dry run" in text and "succeeded" in text
    with Memory(db, embedder=HashingEmbedder(64)) as m:
        hits = m.search("where does Alice live", namespace="alice")
        assert "Alice - Home: Lisbon" in [h.item.content for h in hits]
        assert len(m.jobs(namespace="alice")) == 2
    # no model: MemBuilder asked for fails (exit 1, nothing applied); by default raw stores the turns
    n = Memory(db, embedder=HashingEmbedder(64))
    before = n.count(namespace="alice")
    n.close()
    code, text, _ = run(capsys, "--messages", conv, *store, "--llm", "none", "--builder", "membuilder")
    assert code == 1 and "failed" in text and "--llm" in text
    code, job, _ = run(capsys, "--messages", conv, *store, "--llm", "none", "--json")
    assert code == 0 and len(job["events"]) > 0 and job["stats"]["agent"] == "raw"
    with Memory(db, embedder=HashingEmbedder(64)) as m:
        assert m.count(namespace="alice") == before + len(job["events"])


def test_remember_against_a_server(tmp_path, capsys, conv):
    memory = AsyncMemory(tmp_path / "s.db", embedder=HashingEmbedder(64))
    app = create_app(memory, Tokens.parse(TOKENS), jobs=JobRunner(memory, ScriptedLLM(membuilder_rule())))
    with ServerThread(app) as server:
        args = ["--messages", conv, "-n", "alice", "--server", server.base_url, "--token", ALICE]
        code, job, _ = run(capsys, *args, "--idempotency-key", "c1", "--json")
        assert code == 0 and job["status"] == "succeeded" and job["namespace"] == "alice"
        code, again, _ = run(capsys, *args, "--idempotency-key", "c1", "--json")
        assert again["id"] == job["id"]  # built once
        code, text, _ = run(capsys, *args, "--builder", "raw")
        assert code == 0 and "added" in text
        code, _, err = run(
            capsys, "--messages", conv, "-n", "bob", "--server", server.base_url, "--token", ALICE
        )
        assert code == 1 and "answered 403" in err  # alice's token does not reach bob
    bad = tmp_path / "bad.json"
    bad.write_text('{"turns": []}')
    code, _, err = run(capsys, "--messages", str(bad), "--db", str(tmp_path / "x.db"), "--llm", "none")
    assert code == 2 and "messages" in err

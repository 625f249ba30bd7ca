"""No error message a client sees carries a file path, a host or SQL (issue 55): a job that failed on a busy
store reported a ``BusyError`` naming the database file. ``public_message`` is the one rule; the HTTP error
handler and the job runner (a job's ``error``, its events' reasons) apply it."""

from __future__ import annotations

import json

import pytest

from memrl.agents.jobs import JobRunner
from memrl.errors import BusyError, ProviderError, public_message
from memrl.llm.scripted import ScriptedLLM
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory


@pytest.mark.parametrize(
    ("message", "kept", "gone"),
    [
        (
            "/srv/data/mem.db is locked by another writer (database is locked)",
            "locked by another writer",
            "/srv",
        ),
        ('connection to server at "10.1.2.3", port 5432 failed: Connection refused', "failed", "10.1.2.3"),
        (
            "postgresql://app:***@db.internal:5432/mem: cannot reach the database",
            "cannot reach",
            "db.internal",
        ),
        (
            "the database refused it (42P01: relation does not exist LINE 1: SELECT * FROM jobs)",
            "refused",
            "SELECT",
        ),
        ("cannot reach http://127.0.0.1:8000/v1 (timeout)", "cannot reach", "127.0.0.1"),
        (
            "memory 'a/b' does not exist in namespace alice",
            "memory 'a/b' does not exist in namespace alice",
            "<",
        ),
    ],
)
def test_public_message_leaves_out_paths_hosts_and_sql(message, kept, gone):
    shown = public_message(message)
    assert kept in shown and gone not in shown, shown


def test_the_store_is_named_the_store():
    err = BusyError("/tmp/x/m.db is locked by another writer; retry")
    assert public_message(err, ("/tmp/x/m.db",)) == "the store is locked by another writer; retry"


async def test_a_failed_job_names_no_path_or_host(tmp_path):
    db = tmp_path / "secret-place" / "m.db"
    db.parent.mkdir()
    memory = AsyncMemory(db, embedder=HashingEmbedder(64))

    def fail(messages, tools, json_schema):
        raise ProviderError(
            f"cannot reach http://10.9.8.7:8000/v1; cache at {db} is locked; SELECT * FROM memories"
        )

    runner = JobRunner(memory, ScriptedLLM(fail))
    try:
        job, _ = await runner.submit("alice", "remember", {"messages": [{"role": "user", "content": "hi"}]})
        job = await runner.wait(job.id, 20)
        assert job.status == "failed" and "nothing was applied" in job.error
        shown = json.dumps(job.to_dict())
        for secret in (str(db), "secret-place", "10.9.8.7", "SELECT"):
            assert secret not in shown, (secret, job.error)
    finally:
        await runner.close()
        await memory.close()

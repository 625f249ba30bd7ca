"""Idempotency keys bound to their request (issue 55): the same key sent again with other messages, with
``dry_run`` changed, or on another route (a ``maintain`` after a ``remember``) answered the earlier job with
200 and the new conversation was never stored. Now the key's record holds a hash of route, namespace and
body: the same request gets the same job, another request with that key gets 422 naming the key. REST over
real HTTP and the Python API, SQLite and Postgres."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from memrl.agents.jobs import JobRunner, job_writer
from memrl.errors import ValidationError
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.server.http import ServerThread, Tokens
from memrl.server.memory_api import create_app
from tests.server_helpers import ALICE, BOB, TOKENS

BACKENDS = pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
FIRST = [{"role": "user", "speaker": "Alice", "content": "I moved to Lisbon in May."}]
OTHER = [{"role": "user", "speaker": "Alice", "content": "My sister Ana lives in Porto."}]


@BACKENDS
def test_a_key_answers_only_its_own_request_over_http(db_path):
    memory = AsyncMemory(db_path, embedder=HashingEmbedder(64))
    app = create_app(memory, Tokens.parse(TOKENS), jobs=JobRunner(memory, None))
    try:
        with ServerThread(app) as server, httpx.Client(base_url=server.base_url, timeout=30,
                                                       headers={"Authorization": f"Bearer {ALICE}"}) as c:  # fmt: skip
            url = "/v1/namespaces/alice/remember?wait=true"
            body = {"messages": FIRST, "agent": "raw"}
            first = c.post(url, json=body, headers={"Idempotency-Key": "k-1"})
            assert first.status_code == 200 and first.json()["status"] == "succeeded", first.text
            job = first.json()
            # the same request (keys in another order, the key in the body instead of the header): the same job
            same = c.post(url, json={"agent": "raw", "messages": FIRST, "idempotency_key": "k-1"})
            assert same.status_code == 200 and same.json()["id"] == job["id"]
            # another request under that key: 422 naming the key, nothing queued, nothing stored
            for other in ({"messages": OTHER, "agent": "raw"}, {**body, "dry_run": True},
                          {"messages": FIRST}):  # fmt: skip
                r = c.post(url, json=other, headers={"Idempotency-Key": "k-1"})
                assert r.status_code == 422, r.text
                err = r.json()["error"]
                assert err["field"] == "idempotency_key" and "'k-1'" in err["message"], err
            r = c.post("/v1/namespaces/alice/maintain", json={}, headers={"Idempotency-Key": "k-1"})
            assert r.status_code == 422 and "'k-1'" in r.json()["error"]["message"], r.text
            assert [j["id"] for j in c.get("/v1/namespaces/alice/jobs").json()] == [job["id"]]
            items = c.get("/v1/namespaces/alice/memories").json()["items"]
            assert {i["content"] for i in items} == {"Alice: I moved to Lisbon in May."}
            # the key is the namespace's: another tenant's same key is its own (and sees nothing of alice's)
            with httpx.Client(
                base_url=server.base_url, timeout=30, headers={"Authorization": f"Bearer {BOB}"}
            ) as b:
                mine = b.post("/v1/namespaces/bob/remember?wait=true", json={"messages": OTHER, "agent": "raw"},
                              headers={"Idempotency-Key": "k-1"})  # fmt: skip
                assert mine.status_code == 200 and mine.json()["id"] != job["id"]
                assert "Lisbon" not in mine.text
    finally:
        memory.store.close()


@BACKENDS
async def test_a_key_answers_only_its_own_request_in_python(db_path):
    m = AsyncMemory(db_path, embedder=HashingEmbedder(64), writer=job_writer(None))
    try:
        job = await m.remember(FIRST, user_id="alice", builder="raw", idempotency_key="chat-1")
        assert job.status == "succeeded"
        again = await m.remember(FIRST, user_id="alice", builder="raw", idempotency_key="chat-1")
        assert again.id == job.id
        with pytest.raises(ValidationError, match="chat-1") as e:
            await m.remember(OTHER, user_id="alice", builder="raw", idempotency_key="chat-1")
        assert e.value.field == "idempotency_key"
        with pytest.raises(ValidationError, match="chat-1"):
            await m.remember(FIRST, user_id="alice", builder="raw", idempotency_key="chat-1", dry_run=True)
        assert [j.id for j in await m.jobs(user_id="alice")] == [job.id]
        # concurrent first sends of one request: one job
        jobs = await asyncio.gather(*(m.remember(OTHER, user_id="alice", builder="raw", idempotency_key="chat-2")
                                      for _ in range(4)))  # fmt: skip
        assert len({j.id for j in jobs}) == 1
    finally:
        await m.close()

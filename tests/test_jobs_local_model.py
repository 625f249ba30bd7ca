"""End to end with the offline local model (slow: ``pytest -m slow``): a conversation of two short messages
posted to a running server (real HTTP) becomes memories through MemBuilder on the real model, and what the
job's events say it wrote is what the store holds and search finds."""

from __future__ import annotations

import httpx
import pytest

from memrl.agents.jobs import job_writer
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.server.http import ServerThread, Tokens
from memrl.server.memory_api import create_app

MESSAGES = [
    {"role": "user", "speaker": "Alice", "content": "I moved to Lisbon last month and I love it."},
    {"role": "assistant", "content": "Lisbon is lovely. How is the new flat?"},
]


@pytest.mark.slow
def test_remember_over_http_with_the_offline_model(tmp_path):
    memory = AsyncMemory(tmp_path / "m.db", embedder=HashingEmbedder(128), writer=job_writer("local"))
    with ServerThread(create_app(memory, Tokens())) as server, httpx.Client(base_url=server.base_url,
                                                                             timeout=900) as c:  # fmt: skip
        body = {"messages": MESSAGES, "session_time": "2024-05-01T10:00:00"}
        r = c.post("/v1/namespaces/alice/remember", json=body)
        assert r.status_code in (200, 202), r.text
        job = r.json()
        for _ in range(3):  # the API waits 600 s at most per call
            if job["status"] not in ("queued", "running"):
                break
            job = c.get(f"/v1/jobs/{job['id']}?wait=true&timeout=590").json()
        assert job["status"] == "succeeded", job["error"]
        assert job["stats"]["llm_calls"] == 4 and job["tokens"]["completion"] > 0
        assert job["progress"]["steps_done"] == job["progress"]["steps_total"] == 4
        written = [e for e in job["events"] if e["event"] in ("added", "updated")]
        assert written, job["events"]  # the model wrote something from the conversation
        for e in written:  # every event is what the store holds
            if e["id"] == "__core__":
                assert c.get("/v1/namespaces/alice/core").json()["content"] == e["after"]
                continue
            assert c.get(f"/v1/namespaces/alice/memories/{e['id']}").json()["content"] == e["after"]
            hits = c.post("/v1/namespaces/alice/search", json={"query": e["after"], "mode": "bm25"}).json()
            assert e["id"] in [h["id"] for h in hits]
        assert (c.post(f"/v1/jobs/{job['id']}/undo").json())["undone"] is True
        assert c.get("/v1/namespaces/alice/memories").json()["total"] == 0

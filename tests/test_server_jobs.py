"""The job API over real HTTP on loopback: the memory service (uvicorn) runs the agents against a scripted model
behind ``LLMServer`` (a real OpenAI-compatible HTTP boundary with injected faults). Remember -> events ->
search, on SQLite and Postgres; token scoping; undo and its 409; 500s retried then failed with the namespace
unchanged; a cut reply counted, never a 500; 8 namespaces at once and two jobs of one namespace in order;
and a server SIGKILLed mid-job leaves no write behind after a restart."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memrl.agents.jobs import JobRunner  # noqa: E402
from memrl.llm.openai_backend import OpenAILLM  # noqa: E402
from memrl.llm.scripted import ScriptedLLM  # noqa: E402
from memrl.llm.server import LLMServer  # noqa: E402
from memrl.memory.embedders.providers import HashingEmbedder  # noqa: E402
from memrl.memory.facade.memory import AsyncMemory  # noqa: E402
from memrl.server.http import ServerThread, Tokens  # noqa: E402
from memrl.server.memory_api import create_app  # noqa: E402
from tests.server_helpers import ALICE, BOB, TOKENS, client, snapshot
from tests.test_jobs import ANSWERS, MESSAGES, membuilder_rule  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def job_server(db, rule, *, retries: int = 2, timeout: float = 10, backoff: float = 0.01):
    with LLMServer(ScriptedLLM(rule, max_concurrency=64)) as llm_server:
        llm = OpenAILLM("scripted", base_url=llm_server.base_url, max_retries=retries, backoff_base=backoff,
                        timeout=timeout, max_concurrency=64)  # fmt: skip
        memory = AsyncMemory(db, embedder=HashingEmbedder(64))
        app = create_app(memory, Tokens.parse(TOKENS), jobs=JobRunner(memory, llm))
        with ServerThread(app) as server:
            yield server.base_url, llm_server, memory


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_remember_over_http_then_search_undo_and_scoping(db_path):
    with (
        job_server(db_path, membuilder_rule()) as (url, _, _mem),
        client(url, ALICE) as c,
        client(url, BOB) as b,
    ):
        body = {"messages": MESSAGES, "session_time": "2024-05-01T10:00:00"}
        assert b.post("/v1/namespaces/alice/remember", json=body).status_code == 403
        r = c.post("/v1/namespaces/alice/remember?wait=true&timeout=30", json=body,
                   headers={"Idempotency-Key": "conv-1"})  # fmt: skip
        assert r.status_code == 200, r.text
        job = r.json()
        assert job["status"] == "succeeded" and job["kind"] == "remember"
        assert {(e["event"], e["after"]) for e in job["events"]} == {
            ("added", ANSWERS["core"]["content"]), ("added", "2024-05-01: Alice moved to Lisbon"),
            ("added", "Alice - Home: Lisbon")}  # fmt: skip
        assert job["tokens"]["prompt"] > 0 and job["seconds"] > 0
        hits = c.post("/v1/namespaces/alice/search", json={"query": "where does Alice live"}).json()
        assert "Alice - Home: Lisbon" in [h["content"] for h in hits]
        # a retried request (same key) returns the same job, and builds nothing twice
        again = c.post(
            "/v1/namespaces/alice/remember", json=body, headers={"Idempotency-Key": "conv-1"}
        ).json()
        assert again["id"] == job["id"]
        assert c.get("/v1/namespaces/alice/memories").json()["total"] == 2
        assert b.get(f"/v1/jobs/{job['id']}").status_code == 404  # another tenant's job does not exist
        assert [j["id"] for j in c.get("/v1/namespaces/alice/jobs").json()] == [job["id"]]
        # undo: 409 naming the item changed since, then the whole job
        item = next(e["id"] for e in job["events"] if e["type"] == "semantic")
        assert c.patch(
            f"/v1/namespaces/alice/memories/{item}", json={"content": "Alice - Home: Porto"}
        ).is_success
        r = c.post(f"/v1/jobs/{job['id']}/undo")
        assert r.status_code == 409 and item in r.json()["error"]["message"]
        assert c.post(f"/v1/namespaces/alice/memories/{item}/undo").is_success
        r = c.post(f"/v1/jobs/{job['id']}/undo")
        assert r.status_code == 200 and r.json()["undone"]
        assert c.get("/v1/namespaces/alice/memories").json()["total"] == 0
        assert c.get("/v1/namespaces/alice/core").json()["content"] == ""


BACKENDS = pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)


@BACKENDS
def test_llm_500s_are_retried_then_the_job_fails_leaving_the_namespace_as_it_was(db_path):
    db = db_path
    with job_server(db, membuilder_rule(), retries=2) as (url, llm_server, _), client(url, ALICE) as c:
        assert c.post("/v1/namespaces/alice/memories", json={"content": "Alice likes tea"}).status_code == 201
        llm_server.fail_next(2, status=500)  # within the retries: the job succeeds
        ok = c.post("/v1/namespaces/alice/remember?wait=true", json={"messages": MESSAGES}).json()
        assert ok["status"] == "succeeded", ok
        before = snapshot(db)
        llm_server.fail_next(1000, status=503)  # past them: the job fails, nothing applied
        r = c.post("/v1/namespaces/alice/remember?wait=true", json={"messages": MESSAGES})
        assert r.status_code == 200 and r.json()["status"] == "failed"
        assert "nothing was applied" in r.json()["error"]
        after = snapshot(db)
        assert [row for row in after if row[0] != "namespaces"] == [
            row for row in before if row[0] != "namespaces"
        ]


@BACKENDS
def test_llm_timeouts_are_retried_with_backoff_then_the_job_fails_leaving_the_namespace_as_it_was(db_path):
    with (
        job_server(db_path, membuilder_rule(), retries=2, timeout=1.0, backoff=0.2) as (url, llm_server, _),
        client(url, ALICE) as c,
    ):
        assert c.post("/v1/namespaces/alice/memories", json={"content": "Alice likes tea"}).status_code == 201
        llm_server.delay = 0.3  # slow, within the timeout: the job succeeds
        ok = c.post("/v1/namespaces/alice/remember?wait=true", json={"messages": MESSAGES}).json()
        assert ok["status"] == "succeeded", ok
        before, sent = snapshot(db_path), llm_server.num_requests
        llm_server.delay = 3.0  # past the timeout on every attempt: retried with backoff, then failed
        r = c.post("/v1/namespaces/alice/remember?wait=true&timeout=60", json={"messages": MESSAGES})
        job = r.json()
        assert r.status_code == 200 and job["status"] == "failed", job
        assert "after retries" in job["error"] and "nothing was applied" in job["error"]
        # each of the four agents' calls was tried 1 + 2 times, with a backoff between tries
        assert llm_server.num_requests - sent == 4 * 3
        assert job["seconds"] >= 3 * 1.0 + 0.2 * 0.5 + 0.4 * 0.5
        assert [row for row in snapshot(db_path) if row[0] != "namespaces"] == [
            row for row in before if row[0] != "namespaces"
        ]
        llm_server.delay = 0


def test_a_cut_reply_is_counted_not_a_500(tmp_path):
    cut = dict(ANSWERS, semantic='{"operations": [{"operation": "ADD", "memory": "Alice - Ho')
    with job_server(tmp_path / "m.db", membuilder_rule(cut)) as (url, _, _), client(url, ALICE) as c:
        job = c.post("/v1/namespaces/alice/remember?wait=true", json={"messages": MESSAGES}).json()
        assert job["status"] == "succeeded"
        assert job["stats"]["invalid"] == 1
        assert [e["type"] for e in job["events"] if e["event"] == "skipped"] == ["semantic"]
        assert {e["type"] for e in job["events"] if e["event"] == "added"} == {"core", "episodic"}


@BACKENDS
def test_eight_namespaces_at_once_and_one_namespace_in_order(db_path):
    tokens = ["root=ROOT-SECRET-1:*"]
    memory = AsyncMemory(db_path, embedder=HashingEmbedder(64))
    llm = ScriptedLLM(membuilder_rule(), max_concurrency=64)
    app = create_app(memory, Tokens.parse(tokens), jobs=JobRunner(memory, llm))
    with ServerThread(app) as server, client(server.base_url, "ROOT-SECRET-1") as c:
        ids = [
            c.post(f"/v1/namespaces/user{i}/remember", json={"messages": MESSAGES}).json()["id"]
            for i in range(8)
        ]
        first = c.post("/v1/namespaces/user0/remember", json={"messages": MESSAGES, "agent": "raw"}).json()
        jobs = [c.get(f"/v1/jobs/{j}?wait=true").json() for j in [*ids, first["id"]]]
        assert all(j["status"] == "succeeded" for j in jobs), jobs
        for i in range(8):
            texts = {m["content"] for m in c.get(f"/v1/namespaces/user{i}/memories").json()["items"]}
            assert "Alice - Home: Lisbon" in texts
        assert jobs[-1]["started_at"] >= jobs[0]["finished_at"]  # the second job of user0 waited
        assert jobs[-1]["stats"]["session"] == 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_process(db: Path, llm_url: str):
    port = _free_port()
    argv = [sys.executable, "-m", "memrl.cli.main", "serve", "memory", "--db", str(db), "--port", str(port),
            "--embedder", "hashing:64", "--no-ui", "--no-access-log", "--llm", llm_url]  # fmt: skip
    # no JSON line per request: the output is a pipe nobody reads while the test runs, and would fill
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            with contextlib.suppress(Exception), client(url, None) as c:
                if c.get("/health").status_code == 200:
                    break
            time.sleep(0.1)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_sigkill_mid_job_leaves_no_partial_write_after_restart(tmp_path):
    db = tmp_path / "m.db"
    calls = []
    llm_server = LLMServer(ScriptedLLM(lambda *_: rule()))

    def rule():
        calls.append(1)
        llm_server.delay = 60  # the episode's next turn does not come back before the kill
        return {
            "tool_calls": [
                {
                    "name": "manage_memory",
                    "arguments": {"operation": "create", "content": "Alice moved to Porto"},
                }
            ]
        }

    with llm_server:
        with serve_process(db, llm_server.base_url) as (url, proc), client(url, None) as c:
            assert c.post(
                "/v1/namespaces/alice/memories", json={"content": "Alice lives in Lisbon"}
            ).is_success
            job = c.post("/v1/namespaces/alice/maintain", json={"max_tool_calls": 5}).json()
            for _ in range(200):
                if llm_server.num_requests >= 2:
                    break
                time.sleep(0.05)
            con = sqlite3.connect(db)
            partial = con.execute(
                "SELECT content FROM memories WHERE namespace = ?", (f"__job__/{job['id']}",)
            )
            assert "Alice moved to Porto" in [r[0] for r in partial]  # killed mid-job, with a partial write
            con.close()
            before = [r for r in snapshot(db) if r[0] != "namespaces" and "__job__" not in str(r)]
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        llm_server.delay = 0
        with serve_process(db, llm_server.base_url) as (url, _), client(url, None) as c:
            after = c.get(f"/v1/jobs/{job['id']}").json()
            assert after["status"] == "failed" and "interrupted" in after["error"]
            assert [m["content"] for m in c.get("/v1/namespaces/alice/memories").json()["items"]] == [
                "Alice lives in Lisbon"
            ]
        rows = [r for r in snapshot(db) if r[0] != "namespaces"]
        assert not [r for r in rows if "__job__" in str(r)]  # the clone and its cached vectors are gone
        assert rows == before  # the namespace is as it was before the job: no partial write

"""Several ``memrl serve memory`` processes on one Postgres database, as a deployment behind a load balancer
runs them: three real server processes sharing a token list, eight clients on each writing at once. No
write is lost or duplicated, and a write acknowledged by one server (an add, an update, a delete) is what
a search on every other server sees next: each server's in-process indexes follow the database."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the server tests need the 'serve' extra: pip install 'memrl[serve]'")

import httpx  # noqa: E402

ROOT_DIR = Path(__file__).resolve().parents[1]
TOKEN = "fleet-secret-4242"
NS = "shared"


def _start(db: str) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-c", "import sys; from memrl.cli.main import main; sys.exit(main())",
           "serve", "memory", "--db", db, "--port", "0", "--embedder", "hashing", "--no-ui",
           "--no-access-log"]  # fmt: skip
    # no JSON line per request: the output is a pipe read only up to the banner, and would fill
    env = {**os.environ, "PYTHONPATH": str(ROOT_DIR), "MEMRL_TOKENS": f"fleet={TOKEN}:*"}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT_DIR
    )
    deadline, out = time.monotonic() + 90, ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        out += line
        m = re.search(r"serving .* at (http://\S+)", line)
        if m:
            return proc, m.group(1)
    proc.kill()
    raise AssertionError(f"the server did not start: {out}")


@pytest.fixture
def fleet(pg_server):
    db = pg_server.create_database("fleet")
    procs = []
    try:
        for _ in range(3):
            procs.append(_start(db))
        yield [url for _, url in procs]
    finally:
        for proc, _ in procs:
            proc.kill()
            proc.wait()


def _client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)


def _search(c: httpx.Client, query: str, **kw) -> list[dict]:
    r = c.post(f"/v1/namespaces/{NS}/search", json={"query": query, "top_k": 5, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def test_servers_on_one_database_lose_nothing_and_see_each_others_writes(fleet):
    per_client, clients_per_server = 6, 8

    def work(server: int, k: int) -> list[str]:
        made = []
        with _client(fleet[server]) as c:
            for i in range(per_client):
                mid = f"s{server}-c{k}-{i}"
                r = c.post(f"/v1/namespaces/{NS}/memories",
                           json={"content": f"note {mid} about zebra{server}x{k}x{i}", "memory_id": mid})  # fmt: skip
                assert r.status_code == 201, r.text
                made.append(mid)
                _search(c, f"zebra{server}x{k}x{i}")  # reads beside the writes
        return made

    with ThreadPoolExecutor(max_workers=len(fleet) * clients_per_server) as pool:
        jobs = [pool.submit(work, s, k) for s in range(len(fleet)) for k in range(clients_per_server)]
        written = sorted(mid for j in jobs for mid in j.result())
    assert len(written) == len(set(written)) == len(fleet) * clients_per_server * per_client

    for url in fleet:  # every server lists every write, once
        with _client(url) as c:
            r = c.get(f"/v1/namespaces/{NS}/memories", params={"limit": 1000})
            assert r.status_code == 200, r.text
            assert sorted(it["id"] for it in r.json()["items"]) == written

    # a write acknowledged by one server is what the others' next search finds
    for n, url in enumerate(fleet):
        others = [u for u in fleet if u != url]
        with _client(url) as writer:
            r = writer.post(
                f"/v1/namespaces/{NS}/memories", json={"content": f"the okapi number {n} lives here"}
            )
            assert r.status_code == 201, r.text
            mid = r.json()["id"]
            for u in others:
                with _client(u) as c:
                    for mode in ("hybrid", "dense", "bm25"):
                        hits = _search(c, f"okapi number {n}", mode=mode)
                        assert hits and hits[0]["id"] == mid, (u, mode, hits[:2])
            r = writer.patch(
                f"/v1/namespaces/{NS}/memories/{mid}", json={"content": f"the quokka number {n} moved"}
            )
            assert r.status_code == 200, r.text
            for u in others:
                with _client(u) as c:
                    hits = _search(c, f"quokka number {n}", mode="bm25")
                    assert hits and hits[0]["id"] == mid and "quokka" in hits[0]["content"]
                    assert all("okapi" not in h["content"] for h in _search(c, f"okapi number {n}"))
            assert writer.delete(f"/v1/namespaces/{NS}/memories/{mid}").status_code == 200
            for u in others:
                with _client(u) as c:
                    assert mid not in [h["id"] for h in _search(c, f"quokka number {n}")]

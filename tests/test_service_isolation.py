"""Nothing a tenant observes depends on another namespace's content (issue 33), on SQLite and Postgres: the
embedding cache is per namespace, so an item cannot name another namespace's cached vector, and adding a
text someone else stored costs what adding a new one costs. The same requests in two worlds, one where
another tenant stored the probed texts and one where nobody did, get the same answers (scores, ids,
errors) and the same embedding work; their timings agree within noise."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import statistics
import time

import numpy as np
import pytest

from tests.server_helpers import ALICE, BOB, TOKENS, client, memory_server

pytest.importorskip("fastapi", reason="the server tests need the 'serve' extra: pip install 'memrl[serve]'")

from memrl.memory.embedders.providers import HashingEmbedder  # noqa: E402
from memrl.memory.facade.memory import AsyncMemory  # noqa: E402
from memrl.memory.store.base import NewItem  # noqa: E402
from memrl.memory.store.validation import content_hash  # noqa: E402
from memrl.server.http import ServerThread, Tokens  # noqa: E402
from memrl.server.memory_api import create_app  # noqa: E402

SECRETS = [f"the launch code of site {i} is {1000 + 37 * i}" for i in range(6)]


class SlowEmbedder(HashingEmbedder):
    """The hashing embedder behind a model that takes 25 ms a call (a boundary fake: what makes a cache hit
    visible from outside), counting the texts it embeds."""

    def __init__(self) -> None:
        super().__init__(64)
        self.seen: list[str] = []

    def embed(self, texts):
        self.seen.extend(texts)
        time.sleep(0.025)
        return super().embed(texts)


#: Fields that differ between the two worlds whatever the content: clock times, and history sequence
#: numbers (one counter for the whole store: they count other namespaces' writes, never show their content).
VARYING = frozenset({"created_at", "updated_at", "at", "exported_at", "seq", "undone_by"})


def _without_times(value):
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in VARYING}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _bob_session(url: str) -> list:
    """What bob does and sees: adds (some texts alice may hold), searches, lists, errors, export."""
    b = client(url, BOB)
    seen = []
    for i, text in enumerate([*SECRETS[:3], "bob likes tea", SECRETS[3]]):
        r = b.post("/v1/namespaces/bob/memories", json={"content": text, "metadata": {"i": i}})
        seen.append((r.status_code, _without_times(r.json())))
    for q in [SECRETS[4], SECRETS[0], "launch code", "tea"]:
        for mode in ("hybrid", "dense", "bm25"):
            r = b.post("/v1/namespaces/bob/search", json={"query": q, "mode": mode, "top_k": 10})
            seen.append((r.status_code, _without_times(r.json())))
    for method, path, body in [
        (
            "POST",
            "/v1/namespaces/bob/memories",
            {"content": SECRETS[0], "memory_id": seen[0][1]["id"]},
        ),  # 409
        ("GET", "/v1/namespaces/bob/memories/nope", None),
        ("GET", "/v1/namespaces/bob/memories", None),
        ("GET", "/v1/namespaces/bob/history", None),
        (
            "POST",
            "/v1/namespaces/bob/memories",
            {"content": "x", "metadata": {"vector_key": "v:" + "0" * 64}},
        ),
    ]:
        r = b.request(method, path, json=body)
        seen.append((r.status_code, _without_times(r.json())))
    export = [_without_times(json.loads(x)) for x in b.get("/v1/namespaces/bob/export").text.splitlines()]
    return [*seen, export]


def test_no_observable_depends_on_another_namespace(new_db) -> None:
    results, work = [], []
    for alice_stores in (True, False):
        db = new_db()
        emb = SlowEmbedder()
        memory = AsyncMemory(db, embedder=emb)
        with ServerThread(create_app(memory, Tokens.parse(TOKENS))) as server:
            a = client(server.base_url, ALICE)
            if alice_stores:
                for text in SECRETS:
                    assert a.post("/v1/namespaces/alice/memories", json={"content": text}).status_code == 201
                a.post("/v1/namespaces/alice/search", json={"query": SECRETS[4]})
            emb.seen.clear()
            results.append(_bob_session(server.base_url))
            work.append(sorted(emb.seen))
    assert results[0] == results[1]
    assert work[0] == work[1] and set(SECRETS[:4]) <= set(work[0])  # bob's adds embed alice's texts too


def test_adding_a_text_someone_else_stored_takes_as_long_as_a_new_one(db_path) -> None:
    """The issue measured 1.8 ms to add a text another tenant had stored, 12.5 ms for a new one."""
    memory = AsyncMemory(db_path, embedder=SlowEmbedder())
    with ServerThread(create_app(memory, Tokens.parse(TOKENS))) as server:
        a, b = client(server.base_url, ALICE), client(server.base_url, BOB)
        stored = [f"alice's note number {i} about the harbour" for i in range(8)]
        fresh = [f"a note nobody wrote before, number {i}" for i in range(8)]
        for text in stored:
            a.post("/v1/namespaces/alice/memories", json={"content": text})

        def add(text: str) -> float:
            t0 = time.perf_counter()
            assert b.post("/v1/namespaces/bob/memories", json={"content": text}).status_code == 201
            return time.perf_counter() - t0

        times = {"stored": [], "fresh": []}
        for s, f in zip(stored, fresh, strict=True):  # interleaved: load on the machine hits both alike
            times["stored"].append(add(s))
            times["fresh"].append(add(f))
        med = {k: statistics.median(v) for k, v in times.items()}
        assert min(times["stored"]) > 0.02, times  # each paid the model: no hit in alice's cache
        assert abs(med["stored"] - med["fresh"]) < 0.5 * med["fresh"], med


def test_an_item_cannot_name_another_namespaces_vector(db_path) -> None:
    """``metadata.vector_key`` = the content hash of a guessed text gave bob alice's vector (dense 1.0 for a
    right guess). A content hash is refused as a vector key; a well-formed key of a vector alice gave names
    nothing in bob's cache."""
    with memory_server(db_path) as (url, memory):
        a, b = client(url, ALICE), client(url, BOB)
        a.post("/v1/namespaces/alice/memories", json={"content": SECRETS[0]})
        forged = {"content": "probe", "metadata": {"vector_key": content_hash(SECRETS[0])}}
        r = b.post("/v1/namespaces/bob/memories", json=forged)
        assert r.status_code == 422 and r.json()["error"]["field"] == "metadata", r.text
        hits = b.post("/v1/namespaces/bob/search", json={"query": SECRETS[0], "mode": "dense"}).json()
        assert hits == []

        given = NewItem("given vector", vector=np.random.default_rng(0).normal(size=128))
        key = asyncio.run(memory.add_many([given], namespace="alice"))[0].metadata["vector_key"]
        r = b.post(
            "/v1/namespaces/bob/memories", json={"content": "probe text", "metadata": {"vector_key": key}}
        )
        assert r.status_code == 201
        hit = b.post("/v1/namespaces/bob/search", json={"query": "probe text", "mode": "dense"}).json()[0]
        assert hit["dense_score"] == pytest.approx(1.0, abs=1e-5)  # its own text's vector, not alice's


async def test_clones_copy_vectors_resets_drop_them_and_scopes_follow_requests(db_path) -> None:
    from memrl.memory.index.dense import cache_scope

    emb = SlowEmbedder()
    m = AsyncMemory(db_path, embedder=emb)
    try:
        await m.add("Caroline likes jazz", namespace="a")
        await m.clone("a", "b")
        emb.seen.clear()
        assert (await m.search("Caroline likes jazz", namespace="b", mode="dense"))[
            0
        ].dense_score == pytest.approx(1.0)
        assert emb.seen == ["Caroline likes jazz"]  # the query only: the clone's item came with its vector
        with cache_scope("b"):  # what a tool embeds without naming a namespace goes to the request's one
            await m.index.vectors(["a text of b's"])
        assert await _scopes(m, "a text of b's") == ["b"]
        await m.reset(namespace="b")
        assert await _scopes(m, "Caroline likes jazz") == ["a"]  # a reset namespace keeps no vector behind
    finally:
        await m.close()


async def _scopes(m: AsyncMemory, text: str) -> list[str]:
    rows = m.store.read("SELECT scope FROM embeddings WHERE hash = ? ORDER BY scope", [content_hash(text)])
    return [r[0] for r in rows]


def test_an_old_sqlite_cache_is_split_per_namespace_without_forged_keys(tmp_path) -> None:
    """Migration 4: each namespace keeps the vectors of its own items; a row whose vector_key named another
    text's hash (the attack) does not carry that vector into its namespace."""
    from memrl.memory.backends.sqlite.migrations import MIGRATIONS, _split_sql

    db = tmp_path / "old.db"
    con = sqlite3.connect(db, isolation_level=None)
    for v, script in enumerate(MIGRATIONS[:3]):
        for stmt in _split_sql(script):
            con.execute(stmt)
        con.execute(f"PRAGMA user_version = {v + 1}")
    secret, blob = content_hash(SECRETS[0]), np.ones(4, dtype=np.float32).tobytes()
    rows = [("alice", "a1", SECRETS[0], "{}"), ("bob", "b1", "probe", json.dumps({"vector_key": secret}))]
    for seq, (ns, mid, text, meta) in enumerate(rows, 1):
        con.execute("INSERT INTO namespaces (name, created_at) VALUES (?, 0)", (ns,))
        con.execute("INSERT INTO memories (namespace, id, type, content, content_hash, metadata, created_at, "
                    "updated_at, seq) VALUES (?, ?, 'semantic', ?, ?, ?, 0, 0, ?)",
                    (ns, mid, text, content_hash(text), meta, seq))  # fmt: skip
    con.execute("INSERT INTO embeddings (model, hash, vector) VALUES ('m', ?, ?)", (secret, blob))
    con.execute("INSERT INTO embeddings (model, hash, vector) VALUES ('m', 'unused', ?)", (blob,))
    con.close()
    m = AsyncMemory(db, embedder="hashing:8")
    try:
        assert [tuple(r) for r in m.store.read("SELECT model, scope, hash FROM embeddings")] == [
            ("m", "alice", secret)
        ]
    finally:
        asyncio.run(m.close())


def test_an_old_postgres_cache_is_split_per_namespace_without_forged_keys(pg_server) -> None:
    """Postgres migration 2, as SQLite's migration 4."""
    import psycopg

    from memrl.memory.backends.postgres.store import migrations

    url = pg_server.create_database("memrl_v1_cache")
    secret = content_hash(SECRETS[0])
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                  "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")  # fmt: skip
        version, name, sql = migrations()[0]
        c.execute(sql)
        c.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name))
        for seq, (ns, mid, text, meta) in enumerate(
            [("alice", "a1", SECRETS[0], "{}"), ("bob", "b1", "probe", json.dumps({"vector_key": secret}))], 1
        ):
            c.execute("INSERT INTO namespaces (name, created_at) VALUES (%s, 0)", (ns,))
            c.execute("INSERT INTO embeddings (model, hash, vector) VALUES ('m', %s, '[1,1,1,1]') "
                      "ON CONFLICT DO NOTHING", (secret,))  # fmt: skip
            c.execute("INSERT INTO memories (namespace, id, type, content, content_hash, metadata, created_at, "
                      "updated_at, seq) VALUES (%s, %s, 'semantic', %s, %s, %s, 0, 0, %s)",
                      (ns, mid, text, content_hash(text), meta, seq))  # fmt: skip
        # before: the forged row got alice's vector too
        assert c.execute("SELECT count(*) FROM memory_vectors").fetchone()[0] == 2
    m = AsyncMemory(url, embedder="hashing:8")
    try:
        assert [tuple(r) for r in m.store.read("SELECT model, scope, hash FROM embeddings")] == [
            ("m", "alice", secret)
        ]
        assert [r[0] for r in m.store.read("SELECT namespace FROM memory_vectors")] == ["alice"]
    finally:
        asyncio.run(m.close())


async def test_term_counts_are_cached_per_clone_family_not_across_tenants(tmp_path, monkeypatch) -> None:
    """The in-process BM25 index caches each text's term counts (a clone's index is built without
    tokenizing): the cache is per clone family, so a search does not get faster because another tenant
    indexed the same text. Counted by wrapping the tokenizing function (its results are unchanged)."""
    import memrl.memory.index.lexical as lexical

    counted: list[str] = []
    real = lexical.term_counts

    def counting(text: str):
        counted.append(text)
        return real(text)

    monkeypatch.setattr(lexical, "term_counts", counting)
    m = AsyncMemory(tmp_path / "m.db", embedder=HashingEmbedder(64))
    try:
        await m.add(SECRETS[0], namespace="alice")
        await m.search("launch", namespace="alice", mode="bm25")
        await m.add(SECRETS[0], namespace="bob")
        counted.clear()
        await m.search("launch", namespace="bob", mode="bm25")
        assert counted == [SECRETS[0]]  # tokenized for bob: alice's counts are not bob's cache
        await m.clone("alice", "episode-1")
        counted.clear()
        assert (await m.search("launch", namespace="episode-1", mode="bm25"))[0].item.content == SECRETS[0]
        assert counted == []  # a clone shares its source's counts
    finally:
        await m.close()

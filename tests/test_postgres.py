"""What only the Postgres back-end does, on a real server (the store suite runs every other test on it too):
the same ranking as SQLite, per-namespace BM25 statistics, concurrent writers, migrations, clear errors."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import numpy as np
import pytest

from memrl.data import load_conversations
from memrl.errors import StoreError
from memrl.eval.retrieval import RetrievalConfig, build_conversation, namespace_of
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.store.base import NewItem


def fresh(pg) -> str:
    import psycopg

    name = f"t{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg.url(), autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}" TEMPLATE memrl_template')
    return pg.url(name)


async def test_every_mode_ranks_and_scores_as_on_sqlite(pg_server, tmp_path):
    """Same conversation, same questions: the same hits with the same scores on both back-ends (BM25 to
    1e-9, cosine-based scores to float32 precision)."""
    conv = load_conversations("sample", None)[0][0]
    cfg = RetrievalConfig(embedder="hashing")
    stores = [
        AsyncMemory(tmp_path / "m.db", embedder=HashingEmbedder(384)),
        AsyncMemory(fresh(pg_server), embedder=HashingEmbedder(384)),
    ]
    for m in stores:
        await build_conversation(m, conv, cfg)
    ns = namespace_of(conv)
    questions = [q.question for q in conv.questions]
    assert questions
    for options in (
        {},
        {"fusion": "rrf", "collapse": None},
        {"filters": {"speaker": "Lena"}, "types": ["episodic"]},
    ):
        for q in questions:
            for mode in ("bm25", "dense", "hybrid"):
                hits = [await m.search(q, namespace=ns, mode=mode, top_k=10, **options) for m in stores]
                assert [h.item.id for h in hits[0]] == [h.item.id for h in hits[1]], (q, mode)
                for a, b in zip(*hits, strict=True):
                    # cosines are float32 products: BLAS may round the last bit apart by matrix size
                    assert a.score == pytest.approx(b.score, rel=1e-6, abs=1e-9)
                    assert (a.bm25_score is None) == (b.bm25_score is None)
                    assert a.bm25_score is None or a.bm25_score == pytest.approx(b.bm25_score, rel=1e-9)
    for m in stores:
        await m.close()


async def test_one_namespaces_writes_change_neither_anothers_ranking_nor_its_scores(pg_server):
    m = AsyncMemory(fresh(pg_server), embedder=HashingEmbedder(64))
    texts = ["Alice adopted a greyhound", "Alice went hiking by the lake", "Bob plays cello"]
    a = await m.add_many([NewItem(t) for t in texts], namespace="tenant-a")
    await m.set_keys({a[0].id: "dog pet", a[2].id: "music pet"}, namespace="tenant-a")

    async def ranking() -> dict[str, list[tuple]]:
        out = {}
        for mode in ("bm25", "hybrid"):
            for q, keys in (("greyhound lake", 0.0), ("pet dog", 0.5)):
                hits = await m.search(q, namespace="tenant-a", mode=mode, keys=keys)
                out[f"{mode} {q}"] = [(h.item.id, h.score, h.bm25_score) for h in hits]
        return out

    before = await ranking()
    assert before["bm25 greyhound lake"][0][2] > 0 and before["bm25 pet dog"][0][0] == a[0].id
    # Another tenant writes a lot, all about the same words, items and keys: its own statistics change,
    # tenant-a's do not.
    b = await m.add_many([NewItem(f"greyhound {i} lake greyhound") for i in range(200)], namespace="tenant-b")
    await m.set_keys({it.id: "pet dog pet" for it in b}, namespace="tenant-b")
    assert await ranking() == before
    stats = dict(((r[0], r[1]), r[2]) for r in m.store.read("SELECT namespace, field, docs FROM lex_stats"))
    assert stats == {("tenant-a", 0): 3, ("tenant-a", 1): 2, ("tenant-b", 0): 200, ("tenant-b", 1): 200}
    before = {"bm25": before["bm25 greyhound lake"]}
    # and the idf really is the namespace's: in tenant-b "greyhound" is in every document (idf floored)
    b = await m.search("greyhound", namespace="tenant-b", mode="bm25", top_k=1)
    assert b[0].bm25_score < 1e-3 < before["bm25"][0][2]
    await m.close()


def test_writers_of_other_namespaces_run_while_one_namespace_is_locked(pg_server):
    url = fresh(pg_server)
    from memrl.memory.backends.postgres.store import PostgresStore

    store = PostgresStore(url, busy_timeout=30)
    holding, release, done = threading.Event(), threading.Event(), {}

    def hold_a():
        with store.transaction("a"):
            store.insert([NewItem("first in a")], "a")
            holding.set()
            release.wait(30)

    def write(ns: str):
        store.insert([NewItem(f"written in {ns}")], ns)
        done[ns] = time.monotonic()

    t = threading.Thread(target=hold_a)
    t.start()
    assert holding.wait(30)
    other, same = threading.Thread(target=write, args=("b",)), threading.Thread(target=write, args=("a",))
    other.start(), same.start()
    other.join(30)
    assert "b" in done and "a" not in done  # b went through; a waits for the lock
    assert store.count("b") == 1
    released = time.monotonic()
    release.set()
    t.join(30), same.join(30)
    assert done["a"] >= released and store.count("a") == 2
    seqs = [h.seq for h in store.history("a")]
    assert seqs == sorted(seqs) and [h.new["content"] for h in store.history("a")] == [
        "first in a",
        "written in a",
    ]
    store.close()


def test_a_namespace_locked_too_long_is_a_clear_error_and_nothing_is_written(pg_server):
    from memrl.memory.backends.postgres.store import PostgresStore

    url = fresh(pg_server)
    holder, waiter = PostgresStore(url), PostgresStore(url, busy_timeout=0.2)
    with holder.transaction("a"):
        with pytest.raises(StoreError, match="locked by another writer"):
            waiter.insert([NewItem("blocked")], "a")
        waiter.insert([NewItem("free")], "b")  # another namespace is not blocked
    assert waiter.count("a") == 0 and waiter.count("b") == 1
    holder.close(), waiter.close()


async def test_many_concurrent_writers_lose_nothing(pg_server):
    """16 writers (threads of one process, each its own facade on the shared database) into 4 namespaces:
    every item lands once, each namespace's history is in commit order, statistics and vectors agree."""
    url = fresh(pg_server)
    n_writers, per = 16, 25

    def writer(w: int) -> None:
        async def go():
            m = AsyncMemory(url, embedder=HashingEmbedder(32))
            for i in range(per):
                await m.add(f"writer {w} fact {i} about tea", namespace=f"ns{w % 4}")
            await m.close()

        asyncio.run(go())

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(n_writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    m = AsyncMemory(url, embedder=HashingEmbedder(32))
    for k in range(4):
        ns = f"ns{k}"
        assert await m.count(namespace=ns) == n_writers // 4 * per
        seqs = [h.seq for h in await m.history(namespace=ns)]
        assert len(seqs) == n_writers // 4 * per and seqs == sorted(seqs)
        hits = await m.search("tea", namespace=ns, mode="bm25", top_k=1000)
        assert len(hits) == n_writers // 4 * per
    assert m.store.read("SELECT sum(docs) FROM lex_stats")[0][0] == n_writers * per
    assert m.store.read("SELECT count(*) FROM memory_vectors")[0][0] == n_writers * per
    await m.close()


def test_migrations_are_recorded_and_a_newer_or_foreign_database_is_refused(pg_server):
    import psycopg

    from memrl.memory.backends.postgres.store import PostgresStore, migrations

    url = pg_server.create_database("mig")
    PostgresStore(url).close()
    PostgresStore(url).close()  # re-opening applies nothing twice
    with psycopg.connect(url, autocommit=True) as c:
        versions = [r[0] for r in c.execute("SELECT version FROM schema_migrations ORDER BY version")]
        assert versions == [v for v, _, _ in migrations()]
        c.execute("INSERT INTO schema_migrations (version, name) VALUES (9999, '9999_future.sql')")
    with pytest.raises(StoreError, match="newer than this memrl"):
        PostgresStore(url)
    other = pg_server.create_database("other_app")
    with psycopg.connect(other, autocommit=True) as c:
        c.execute("CREATE TABLE invoices (id int)")
    with pytest.raises(StoreError, match="another application"):
        PostgresStore(other)
    with psycopg.connect(other) as c:  # refused, and untouched
        assert [
            r[0]
            for r in c.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            )
        ] == ["invoices"]


def test_unreachable_server_is_a_clear_error_without_the_password():
    from memrl.memory.backends.postgres.local import free_port
    from memrl.memory.backends.postgres.store import PostgresStore

    with pytest.raises(StoreError) as e:
        PostgresStore(f"postgresql://u:s3cret@127.0.0.1:{free_port()}/x")
    assert "127.0.0.1" in str(e.value) and "s3cret" not in str(e.value)


async def test_in_process_matrix_over_postgres_equals_pgvector(pg_server):
    url = fresh(pg_server)
    server = AsyncMemory(url, embedder=HashingEmbedder(64))
    local = AsyncMemory(url, embedder=HashingEmbedder(64), dense_backend="numpy")
    await server.add_many([NewItem(f"fact {i} about {w}") for i in range(60) for w in ("tea", "jazz")])
    for q in ("tea 3", "jazz 17", "fact 42"):
        a = await server.search(q, mode="dense", top_k=10)
        b = await local.search(q, mode="dense", top_k=10)
        assert [(h.item.id, h.score) for h in a] == [(h.item.id, h.score) for h in b]
    await server.close(), await local.close()


def test_the_embedding_cache_is_read_by_its_key_before_any_analyze(pg_server):
    """A write batch reads the cache for its texts' hashes: one primary-key probe per hash, also while the
    table has grown since its last ANALYZE (the planner then read every vector of the namespace and
    filtered the hashes after), and the same vectors come back."""
    import hashlib

    from memrl.memory.backends.postgres.store import PostgresStore

    store = PostgresStore(fresh(pg_server))
    try:
        hashes = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(12000)]
        vec = np.arange(8, dtype=np.float32)
        store.put_vectors("m", {h: (vec + i).tobytes() for i, h in enumerate(hashes[:10000])}, "ns")
        store.put_vectors("m", {h: vec.tobytes() for h in hashes[:10]}, "other")
        asked = hashes[9990:10010]  # 10 cached in "ns", 10 not
        got = store.get_vectors("m", asked, "ns")
        assert sorted(got) == sorted(hashes[9990:10000])
        assert np.frombuffer(got[hashes[9995]], dtype=np.float32).tolist() == (vec + 9995).tolist()
        assert store.get_vectors("m", hashes[:3], "nobody") == {}
        import memrl.memory.backends.postgres.store as pgmod

        sql = pgmod._pg_sql(store.GET_VECTORS)
        with store.transaction() as c:
            plan = " ".join(r[0] for r in c.conn.execute("EXPLAIN ANALYZE " + sql, [asked, "ns", "m"]))
        assert "embeddings_pkey" in plan and "Rows Removed by Filter" not in plan, (
            plan
        )  # nothing read in vain
    finally:
        store.close()


async def test_schema_8_moves_old_postings_to_one_key_and_deletes_still_find_them(pg_server):
    """A database whose postings were written under schema 7 (two B-trees on lex_terms, no terms on
    lex_docs) is brought to schema 8 on open: the same BM25 hits and scores, every text's terms filled in,
    and a delete afterwards removes that item's postings (the trigger now finds them by the terms)."""
    import psycopg

    from memrl.memory.analysis.tokenizer import tokens

    url = fresh(pg_server)
    m = AsyncMemory(url, embedder=HashingEmbedder(64))
    texts = ["Alice adopted a greyhound", "Alice went hiking by the lake", "Bob plays cello by the lake"]
    a = await m.add_many([NewItem(t) for t in texts], namespace="t1")
    await m.add_many([NewItem(t + " again") for t in texts], namespace="t2")
    await m.set_keys({a[0].id: "dog pet lake"}, namespace="t1")

    async def bm25() -> list:
        return [
            [(h.item.id, h.bm25_score) for h in await m.search(q, namespace=ns, mode="bm25", keys=k)]
            for q in ("greyhound lake", "the lake", "pet")
            for ns in ("t1", "t2")
            for k in (0.0, 0.5)
        ]

    before = await bm25()
    await m.close()
    with psycopg.connect(url, autocommit=True) as c:  # back to schema 7's layout, as an older memrl left it
        c.execute("ALTER TABLE lex_docs DROP COLUMN terms")
        c.execute("ALTER TABLE lex_terms DROP CONSTRAINT lex_terms_pkey")
        c.execute("ALTER TABLE lex_terms ADD PRIMARY KEY (rid, field, term)")
        c.execute("CREATE INDEX lex_terms_lookup ON lex_terms (namespace, field, term) INCLUDE (rid, tf, dl)")
        c.execute("""CREATE OR REPLACE FUNCTION memrl_lex_stats_remove() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                UPDATE lex_stats s SET docs = s.docs - r.docs, tokens = s.tokens - r.tokens
                FROM (SELECT namespace, field, count(*) AS docs, sum(dl) AS tokens FROM removed
                      GROUP BY namespace, field) r
                WHERE s.namespace = r.namespace AND s.field = r.field;
                DELETE FROM lex_terms t USING removed r WHERE t.rid = r.rid AND t.field = r.field;
                RETURN NULL;
            END $$""")
        c.execute("DELETE FROM schema_migrations WHERE version = 8")
        n_terms = c.execute("SELECT count(*) FROM lex_terms").fetchone()[0]
    m = AsyncMemory(url, embedder=HashingEmbedder(64))  # opening migrates
    assert await bm25() == before
    rows = m.store.read(
        "SELECT d.terms = (SELECT array_agg(t.term ORDER BY t.term) FROM lex_terms t "
        "WHERE t.rid = d.rid AND t.field = d.field) FROM lex_docs d"
    )
    assert len(rows) == 7 and all(r[0] for r in rows)
    rid = m.store.read("SELECT rid FROM memories WHERE namespace = 't1' AND id = ?", [a[0].id])[0][0]
    mine = m.store.read("SELECT count(*) FROM lex_terms WHERE rid = ?", [rid])[0][0]
    assert mine == len(set(tokens(texts[0]))) + len(set(tokens("dog pet lake"))) > 0  # content's and keys'
    await m.delete(a[0].id, namespace="t1")
    assert m.store.read("SELECT count(*) FROM lex_terms WHERE rid = ? AND field = 0", [rid]) == [(0,)]
    assert m.store.read("SELECT count(*) FROM lex_terms")[0][0] < n_terms
    hits = await m.search("greyhound", namespace="t1", mode="bm25")
    assert a[0].id not in [h.item.id for h in hits]
    await m.close()

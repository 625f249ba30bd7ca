"""Postgres write batches while the planner's statistics are stale (issue 38): memrl/memory/backends/postgres/stats.py
refreshes them as a bulk fill grows the tables, and the embedding-cache trigger (migration 0006) finds a new
vector's items by an index probe even before any ANALYZE."""

from __future__ import annotations

import numpy as np
import pytest

from memrl.memory.store.base import NewItem
from tests.test_postgres import fresh

pytestmark = pytest.mark.usefixtures("pg_server")


def _store(pg_server, monkeypatch, min_rows: int):
    import psycopg

    from memrl.memory.backends.postgres import stats as pg_stats
    from memrl.memory.backends.postgres.store import PostgresStore

    monkeypatch.setattr(pg_stats, "MIN_ROWS", min_rows)
    url = fresh(pg_server)
    with psycopg.connect(url, autocommit=True) as c:  # only the store's own ANALYZE runs
        for table in pg_stats.TABLES.split(", "):
            c.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    return PostgresStore(url)


def _fill(store, start: int, end: int, batch: int = 250) -> None:
    for b in range(start, end, batch):
        store.insert(
            [NewItem(f"note {i} about item {i % 97}", id=f"m{i}") for i in range(b, min(end, b + batch))],
            "ns",
        )


def _rows_estimate(store) -> float:
    return store.read("SELECT reltuples FROM pg_class WHERE oid = 'memories'::regclass")[0][0]


def test_a_bulk_fill_refreshes_the_statistics_as_it_grows(pg_server, monkeypatch):
    store = _store(pg_server, monkeypatch, min_rows=1000)
    try:
        _fill(store, 0, 800)
        assert store.analyzed == 0 and _rows_estimate(store) <= 0  # below the minimum: never analyzed
        with pytest.raises(RuntimeError), store.transaction("ns"):  # a rolled-back batch counts for nothing
            store.insert([NewItem(f"gone {i}", id=f"g{i}") for i in range(500)], "ns")
            raise RuntimeError("abort")
        _fill(store, 800, 950)
        assert store.analyzed == 0
        _fill(store, 950, 1250)  # batches 950-1199 (past the minimum: analyzed at 1,200), 1200-1249
        assert store.analyzed == 1 and _rows_estimate(store) == 1200
        _fill(store, 1250, 2000)  # 800 since: past half of 1,200 but not the minimum
        assert store.analyzed == 1
        _fill(store, 2000, 2250)  # 1,050 since
        assert store.analyzed == 2 and _rows_estimate(store) == 2250
        _fill(store, 2250, 3250)  # 1,000 since: the minimum, but not half of 2,250
        assert store.analyzed == 2
        _fill(store, 3250, 3500)  # 1,250 since
        assert store.analyzed == 3 and _rows_estimate(store) == 3500
        # the tables a batch writes are analyzed with it
        stats = store.read("SELECT relname FROM pg_stat_user_tables WHERE last_analyze IS NOT NULL")
        assert {"memories", "history", "lex_terms", "lex_docs"} <= {r[0] for r in stats}
    finally:
        store.close()


def test_new_cache_vectors_find_their_items_by_index_before_any_analyze(pg_server, monkeypatch):
    """The trigger joining new cache rows to the items they belong to probes memories_vector_key per vector.
    With stale statistics it read the whole namespace on every write batch (through the expiry index, or a
    hash join over a scan of the namespace)."""
    from memrl.memory.store.validation import content_hash

    store = _store(pg_server, monkeypatch, min_rows=10**9)  # never analyzed
    try:
        _fill(store, 0, 3000, batch=500)
        texts = [f"note {i} about item {i % 97}" for i in range(0, 3000, 300)]
        vec = np.ones(8, dtype=np.float32).tobytes()
        with store.transaction("ns") as c:
            before = c.execute(
                "SELECT seq_tup_read + COALESCE(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables "
                "WHERE relname = 'memories'"
            ).fetchone()[0]
            store.put_vectors("other-model", {content_hash(t): vec for t in texts}, "ns")
            read = (
                c.execute(
                    "SELECT seq_tup_read + COALESCE(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables "
                    "WHERE relname = 'memories'"
                ).fetchone()[0]
                - before
            )
        got = store.read(
            "SELECT count(*) FROM memory_vectors WHERE model = 'other-model' AND namespace = 'ns'"
        )
        assert got[0][0] == len(texts)  # every item found
        assert read <= 3 * len(texts), read  # by its key, not by reading the namespace's 3,000 items
        assert store.analyzed == 0 and _rows_estimate(store) <= 0
    finally:
        store.close()


def test_the_expiry_index_holds_only_items_that_expire(pg_server, monkeypatch):
    """The partial index (migration 0006) is not a second index on `namespace` for every live item."""
    store = _store(pg_server, monkeypatch, min_rows=10**9)
    try:
        store.insert([NewItem("kept", id="a"), NewItem("due", id="b", metadata={"expires_at": 1.0})], "ns")
        pages = store.read(
            "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indexrelid = 'memories_expiry'::regclass"
        )[0][0]
        assert "jsonb_typeof" in pages.split("WHERE", 1)[1], pages
        assert store.expiry_due("ns")
    finally:
        store.close()


def test_a_failed_refresh_never_fails_the_committed_write(pg_server, monkeypatch):
    from memrl.errors import StoreError

    store = _store(pg_server, monkeypatch, min_rows=10)

    def broken() -> bool:
        raise StoreError("cannot reach the database (simulated)")

    monkeypatch.setattr(store, "analyze", broken)
    try:
        store.insert([NewItem(f"x {i}", id=f"x{i}") for i in range(20)], "ns")  # due: the refresh fails
        assert store.count("ns") == 20
    finally:
        store.close()

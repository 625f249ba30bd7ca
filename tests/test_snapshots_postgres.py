"""Snapshot files of a Postgres store (issue 59): the namespaces' terms and the items' facts, which search keeps in
the process and a new process used to rebuild from every row of the database (30 s for a first BM25 search at
a million items), are kept in this machine's cache (``$MEMRL_CACHE_DIR/index/<hash of the URL>/``) and
checked against the server's history like a SQLite store's files: a new process loads them, applies what
other clients wrote since, and searches exactly as one that rebuilds; the files of a database dropped and
made again at the same URL are rebuilt, never trusted. On a real Postgres server (the ``postgres`` extra)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.blocking import Memory
from memrl.memory.index import snapshot
from memrl.memory.index.packed import Packed
from memrl.memory.search.terms import TermIndex
from memrl.memory.store.indexing import IndexSupportMixin
from tests.test_snapshots_lexical import MIN, QUERIES, turns

psycopg = pytest.importorskip("psycopg")

pytestmark = pytest.mark.usefixtures("low_min")


@pytest.fixture
def low_min(monkeypatch, tmp_path):
    monkeypatch.setattr(TermIndex, "SNAPSHOT_MIN", MIN)
    monkeypatch.setenv("MEMRL_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def url(pg_server) -> str:
    return fresh(pg_server, "snapdb")


def fresh(pg, name: str) -> str:
    with psycopg.connect(pg.url(), autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}"')
        c.execute(f'CREATE DATABASE "{name}" TEMPLATE memrl_template')
    return pg.url(name)


def memory(url: str, facts_min: int = MIN) -> Memory:
    m = Memory(url, embedder=HashingEmbedder(64), namespace="alice")
    m.aio.index.facts.min_items = facts_min
    return m


def results(m: Memory) -> dict:
    """Every query's BM25 and hybrid hits (ids and scores) and the namespace's terms and facts."""
    out: dict = {}
    for q in QUERIES:
        for mode in ("bm25", "hybrid"):
            hits = m.search(q, mode=mode, top_k=10)
            out[q, mode] = [(h.item.id, h.score, h.bm25_score, h.dense_score) for h in hits]
    nt = m.aio.index.terms.get("alice", collapse="unit", speaker_key="speaker", tagger="rule")
    out["units"] = {
        k: (sorted(u.rids), u.session, dict(u.terms), sorted(u.entities)) for k, u in nt.units.items()
    }
    out["session_tf"], out["session_len"] = nt.session_tf, nt.session_len
    facts = m.aio.index.facts.get("alice", ("unit", "speaker", "date", "mentions_time"))
    out["facts"] = dict(facts.of.items())
    return out


def cache_files(cache: Path) -> list[Path]:
    return sorted((cache / "index").glob("*/*.snap"))


def rebuilt(url: str, monkeypatch) -> dict:
    """What a process that neither loads nor writes files finds (``MEMRL_SERVER_INDEX_FILES=0``): every
    cache file is left as it was."""
    cache = Path(os.environ["MEMRL_CACHE_DIR"])
    before = {f: f.stat().st_mtime_ns for f in cache_files(cache)}
    with monkeypatch.context() as mp:
        mp.setenv("MEMRL_SERVER_INDEX_FILES", "0")
        with memory(url) as m:
            got = results(m)
            # built from the database, not loaded
            assert [s.origin for _, s in m.aio.index.facts._cache.items()] == ["store"]
            assert not isinstance(
                m.aio.index.terms._cache.current("alice", ("rule", "unit", "speaker")).units, Packed
            )
    assert {f: f.stat().st_mtime_ns for f in cache_files(cache)} == before
    return got


@pytest.fixture
def read_rows(monkeypatch) -> dict:
    """How many rows the terms and the facts read from the store (a load reads only those written since)."""
    seen = {"unit_rows": 0, "signal_rows": 0}
    for name in seen:
        real = getattr(IndexSupportMixin, name)

        def counted(self, *a, _real=real, _name=name):
            rows = _real(self, *a)
            seen[_name] += len(rows)
            return rows

        monkeypatch.setattr(IndexSupportMixin, name, counted)
    return seen


def test_a_new_process_loads_the_files_and_catches_up_with_other_writers(
    url, tmp_path, monkeypatch, read_rows
):
    with memory(url) as m:
        m.add_many(turns(80))
        first = results(m)
    kept = cache_files(tmp_path / "cache")
    assert (
        len(kept) == 2
    )  # alice's terms and facts, in this machine's cache (BM25 postings live in the database)
    assert snapshot.snapshot_dir(m.aio.store.path) == kept[0].parent
    assert first == rebuilt(url, monkeypatch)

    # another client writes, deletes and edits meanwhile (no files of its own)
    with monkeypatch.context() as mp:
        mp.setenv("MEMRL_SERVER_INDEX_FILES", "off")
        with memory(url) as other:
            other.add_many(turns(5, seed=3, start=80))
            gone = other.search("tea in Lisbon", mode="bm25", top_k=1)[0].item.id
            other.delete(gone)
            edited = other.search("chess coffee", mode="bm25", top_k=1)[0].item.id
            other.update(edited, "Ann: chess and coffee in Oslo, 2024")

    read_rows.update(unit_rows=0, signal_rows=0)
    with memory(url) as m:
        loaded = results(m)
    assert 0 < read_rows["unit_rows"] <= 7 and 0 < read_rows["signal_rows"] <= 7  # what changed, not all 85
    assert gone not in {h[0] for q in QUERIES for h in loaded[q, "bm25"]}
    assert loaded == rebuilt(url, monkeypatch)


def test_the_files_of_a_database_made_again_at_the_same_url_are_not_trusted(url, pg_server, tmp_path, monkeypatch,
                                                                             read_rows):  # fmt: skip
    with memory(url) as m:
        m.add_many(turns(80))
        results(m)
    kept = {f: f.read_bytes() for f in cache_files(tmp_path / "cache")}
    assert len(kept) == 2
    # dropped and made again: the same URL, namespace, generation and seq numbers
    url = fresh(pg_server, "snapdb")
    with monkeypatch.context() as mp, memory(url) as m:
        mp.setenv("MEMRL_SERVER_INDEX_FILES", "0")
        m.add_many(turns(80, seed=5))
    for f, data in kept.items():  # the old database's files put back
        f.write_bytes(data)
    read_rows.update(unit_rows=0, signal_rows=0)
    with memory(url) as m:
        got = results(m)
    assert read_rows["unit_rows"] >= 80 and read_rows["signal_rows"] >= 80  # rebuilt from the database
    assert {h[0][:3] for q in QUERIES for h in got[q, "bm25"]} == {"i5-"}
    assert got == rebuilt(url, monkeypatch)

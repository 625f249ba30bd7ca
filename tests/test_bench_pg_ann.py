"""bench/pg_ann.py at a small size on a real Postgres server: the sweep runs through the store's own HNSW
statement, each ``ef_search`` is applied (pgvector returns at most ``ef_search`` rows from an HNSW scan),
and the JSON line carries every row."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("pgvector")


def test_pg_ann_sweep_small(capsys, pg_server):
    from bench import pg_ann
    from memrl.memory.index.dense import DenseIndexes

    before = DenseIndexes.ANN_MIN
    try:
        pg_ann.main(["--n", "400", "--ann-min", "100", "--queries", "6", "--warmup", "1", "--efs", "5,40",
                     "--pg-url", pg_server.url()])  # fmt: skip
    finally:
        DenseIndexes.ANN_MIN = before
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["n"] == 400 and out["insert_per_s"] > 0 and out["build_s"] >= 0
    assert [r["ef_search"] for r in out["sweep"]] == [5, 40]
    for r in out["sweep"]:
        assert 0 <= r["recall_at_10"] <= 1 and 0 < r["p50_ms"] <= r["p99_ms"]
    # ef_search 5 returns at most 5 of the 10 asked: recall at most 0.5; at 40, over 400 items, near exact
    assert out["sweep"][0]["recall_at_10"] <= 0.5
    assert out["sweep"][1]["recall_at_10"] >= 0.9
    assert out["memrl_dense"]["recall_at_10"] >= 0.9


def test_vector_ann_takes_ef_search(pg_server):
    from memrl.memory.embedders.providers import HashingEmbedder
    from memrl.memory.facade.blocking import Memory

    url = pg_server.create_database("pg_ann_ef")
    mem = Memory(url, embedder=HashingEmbedder(32), namespace="n")
    try:
        mem.add_many([f"item number {i} about topic {i % 7}" for i in range(120)])
        store = mem.store
        store.ensure_hnsw("n", mem.embedder.name, 32)
        q = np.ones(32, dtype=np.float32) / 32**0.5
        assert len(store.vector_ann("n", mem.embedder.name, 32, q, 30, None, None, ef_search=4)) <= 4
        # without one, ef_search is at least the fetch: the 30 asked come back
        assert len(store.vector_ann("n", mem.embedder.name, 32, q, 30, None, None)) == 30
    finally:
        mem.close()

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
                     "--m", "48", "--pg-url", pg_server.url()])  # fmt: skip
    finally:
        DenseIndexes.ANN_MIN = before
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # m 48 needs ef_construction 96 at least (pgvector refuses less): the default follows m
    assert out["n"] == 400 and out["insert_per_s"] > 0 and (out["m"], out["ef_construction"]) == (48, 96)
    assert [r["ef_search"] for r in out["sweep"]] == [5, 40]
    for r in out["sweep"]:
        assert 0 <= r["recall_at_10"] <= 1 and 0 < r["p50_ms"] <= r["p99_ms"]
    # ef_search 5 returns at most 5 of the 10 asked: recall at most 0.5; at 40, over 400 items, near exact
    assert out["sweep"][0]["recall_at_10"] <= 0.5
    assert out["sweep"][1]["recall_at_10"] >= 0.9
    dense = out["memrl_dense"]
    assert dense["recall_at_10"] >= 0.9
    # the statement alone was timed on the same queries, beside the search
    assert 0 < dense["statement"]["p50_ms"] <= dense["statement"]["p99_ms"]
    assert isinstance(dense["around_statement_p50_ms"], float)

    # --reuse: the database the run left is searched again without a second insert
    try:
        pg_ann.main(["--n", "400", "--ann-min", "100", "--queries", "4", "--warmup", "1", "--efs", "40",
                     "--m", "48", "--pg-url", pg_server.url(), "--reuse", "--passes", "2"])  # fmt: skip
        again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert again["reused"] is True and "insert_per_s" not in again
        first, second = again["memrl_dense_passes"]  # the same queries twice: the same hits, timed again
        assert again["memrl_dense"] == first and first["recall_at_10"] == second["recall_at_10"] >= 0.9
        assert second["p50_ms"] > 0 and second["statement"]["p50_ms"] > 0
        assert again["sweep"][0]["recall_at_10"] >= 0.9  # the same index, found again
        with pytest.raises(SystemExit, match="holds 400 items, not --n 500"):
            pg_ann.main(
                ["--n", "500", "--ann-min", "100", "--queries", "2", "--pg-url", pg_server.url(), "--reuse"]
            )
    finally:
        DenseIndexes.ANN_MIN = before
    with pytest.raises(SystemExit):
        pg_ann.main(["--n", "400", "--reuse"])  # a local server is thrown away: nothing to reuse
    with pytest.raises(SystemExit):  # a server the user runs keeps its own settings
        pg_ann.main(["--n", "400", "--pg-url", pg_server.url(), "--pg-setting", "shared_buffers=64MB"])


def test_a_local_server_takes_the_settings_asked(capsys, pg_server):  # pg_server: skips without binaries
    from bench import pg_ann
    from memrl.memory.index.dense import DenseIndexes

    before = DenseIndexes.ANN_MIN
    try:
        pg_ann.main(["--n", "200", "--ann-min", "100", "--queries", "2", "--warmup", "0", "--efs", "40",
                     "--pg-setting", "shared_buffers=48MB"])  # fmt: skip
    finally:
        DenseIndexes.ANN_MIN = before
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["shared_buffers"] == "48MB" and "memrl_dense_passes" not in out


def test_vector_ann_takes_ef_search(pg_server):
    from memrl.memory.backends.postgres import ann
    from memrl.memory.embedders.providers import HashingEmbedder
    from memrl.memory.facade.blocking import Memory
    from memrl.memory.store.base import NewItem

    url = pg_server.create_database("pg_ann_ef")
    mem = Memory(url, embedder=HashingEmbedder(32), namespace="n")
    try:
        # one item in ten is procedural: a type filter after the HNSW scan keeps a tenth of its rows
        mem.add_many([NewItem(f"item number {i} about topic {i % 7}", type="procedural" if i % 10 == 0
                              else "semantic") for i in range(1500)])  # fmt: skip
        store, model = mem.store, mem.embedder.name
        store.ensure_hnsw("n", model, 32)
        name = store.hnsw_name("n", model)
        (opts,) = store.read("SELECT reloptions FROM pg_class WHERE relname = ?", [name])[0]
        assert sorted(opts) == sorted([f"m={ann.HNSW_M}", f"ef_construction={ann.HNSW_EF_CONSTRUCTION}"])
        q = np.ones(32, dtype=np.float32) / 32**0.5
        assert len(store.vector_ann("n", model, 32, q, 30, None, None, ef_search=4)) <= 4
        # ef_search 40 scans 40 rows, about 4 of them procedural; the least ef_search (EF_MIN) finds 30
        rare = ["procedural"]
        assert len(store.vector_ann("n", model, 32, q, 30, rare, None, ef_search=40)) < 30
        assert len(store.vector_ann("n", model, 32, q, 30, rare, None)) == 30
    finally:
        mem.close()

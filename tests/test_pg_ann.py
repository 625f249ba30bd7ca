"""pgvector's HNSW on a real Postgres server: with a namespace's index forced on a small store, search gives
the exact path's ids and scores after every kind of write, filters never come back short, and the plans
read one namespace (EXPLAIN): the exact scan goes through the (model, namespace) btree, a large namespace
through its own partial HNSW index."""

from __future__ import annotations

import numpy as np
import pytest

from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.records.types import TYPE_CODE
from tests.test_ann import QUERIES, items
from tests.test_postgres import fresh

pytest.importorskip("pgvector")


def pair(url: str) -> tuple[AsyncMemory, AsyncMemory]:
    """A memory whose namespaces of 50 vectors or more get an HNSW index, and one searching exactly in
    process, on the same database."""
    server = AsyncMemory(url, embedder=HashingEmbedder(64), namespace="alice")
    server.index.ann_min = 50
    local = AsyncMemory(url, embedder=HashingEmbedder(64), dense_backend="numpy", namespace="alice")
    return server, local


async def same(server: AsyncMemory, local: AsyncMemory, ns: str = "alice") -> None:
    idx = await server.index.sync(ns)
    assert idx.hnsw_dim == 64 and server.store.has_hnsw(ns, server.embedder.name)
    ex = await local.index.sync(ns)
    for q in QUERIES:
        qv = (await server.embedder.aembed([q]))[0]
        for k in (3, 10):
            for types in (None, [TYPE_CODE["episodic"]]):
                for filt in (None, {"g": 1}, {"tenth": True}):
                    allowed = (
                        None
                        if filt is None
                        else np.asarray(server.store.allowed_rids(ns, filt), dtype=np.int64)
                    )
                    a = idx.top(qv, k, type_codes=types, allowed=allowed)
                    b = ex.top(qv, k, type_codes=types, allowed=allowed, backend="numpy")
                    assert a[0].tolist() == b[0].tolist(), (q, k, types, filt)
                    assert a[1].tolist() == b[1].tolist()


async def test_hnsw_equals_exact_after_every_write(pg_server):
    server, local = pair(fresh(pg_server))
    added = await server.add_many(items(120))
    await same(server, local)
    await server.update(added[3].id, "bob climbs a mountain by the river")
    await server.delete(added[4].id)
    await server.add("alice drinks tea in lisbon", type="episodic", metadata={"g": 1})
    await same(server, local)
    await server.undo(added[3].id)
    await server.restore(added[4].id)
    await same(server, local)
    await server.clone("alice", "episode")
    await server.add("the episode's own note about a dog", namespace="episode")
    await same(server, local, "episode")
    await server.import_lines(await server.export_lines(), namespace="imported")
    await same(server, local, "imported")
    await server.reset(namespace="episode")
    await server.add_many(items(60, seed=3), namespace="episode")
    await same(server, local, "episode")
    await server.close(), await local.close()


async def test_filters_never_come_back_short(pg_server):
    server, local = pair(fresh(pg_server))
    await server.add_many(items(400))
    idx = await server.index.sync("alice")
    ex = await local.index.sync("alice")
    qv = (await server.embedder.aembed(["alice lisbon tea"]))[0]
    rare = np.asarray(server.store.allowed_rids("alice", {"tenth": True}), dtype=np.int64)  # 40 of 400
    for types, allowed in (([TYPE_CODE["episodic"]], None), (None, rare), (None, rare[:3])):
        for k in (5, 40, 100):
            rids, _ = idx.top(qv, k, type_codes=types, allowed=allowed)
            want, _ = ex.top(qv, k, type_codes=types, allowed=allowed, backend="numpy")
            assert len(rids) == len(want) and set(rids.tolist()) <= set(ex.rids[: ex.n].tolist())
    await server.close(), await local.close()


async def test_plans_read_one_namespace(pg_server):
    server, local = pair(fresh(pg_server))
    server.index.ann_min = 300
    for i in range(20):
        await server.add_many(items(60, seed=i), namespace=f"tenant{i}")
    await server.add_many(items(400), namespace="big")
    for ns in ("tenant3", "big"):
        await server.index.sync(ns)
    with server.store.pool.connection() as c:
        c.execute("ANALYZE memory_vectors")
    qv = (await server.embedder.aembed(["tea"]))[0]
    model = server.embedder.name
    plan = "\n".join(server.store.vector_top("tenant3", model, qv, 40, None, None, explain=True))
    assert "Seq Scan on memory_vectors" not in plan and "memory_vectors_ns" in plan, plan
    assert not server.store.has_hnsw("tenant3", model) and server.store.has_hnsw("big", model)
    plan = "\n".join(server.store.vector_ann("big", model, 64, qv, 40, None, None, explain=True))
    assert server.store.hnsw_name("big", model) in plan and "Seq Scan" not in plan, plan
    await server.close(), await local.close()

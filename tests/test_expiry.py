"""Items that expire (``metadata["expires_at"]``, :mod:`memrl.memory.store.expiry`), on both back-ends: they leave
search at their expiry without costing a search any of its ``top_k`` hits, the sweep deletes them in
batches (in their history, restorable), writers running beside a sweep lose nothing, and the expiry index
is what finds them."""

from __future__ import annotations

import threading
import time

import pytest

from memrl.errors import NotFoundError, ValidationError
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.blocking import Memory
from memrl.memory.store.base import NewItem
from memrl.memory.store.expiry import expiry_time
from memrl.tools.memupdate import MemoryContext
from memrl.tools.service import SERVICE_TOOLS


def _ids(hits) -> list[str]:
    return [h.item.id for h in hits]


async def test_expired_items_leave_search_without_costing_hits(amem):
    past = time.time() - 5
    await amem.add_many([
        *[NewItem(f"the red kite flies over hill {i}", id=f"old{i}", metadata={"expires_at": past})
          for i in range(6)],
        *[NewItem(f"a red kite seen near the hill, note {i}", id=f"live{i}") for i in range(5)],
        NewItem("red kite on the hill tomorrow", id="later", metadata={"expires_at": time.time() + 3600}),
        NewItem("the weather was grey", id="other"),
    ])  # fmt: skip
    assert amem.store.expiry_due("alice")
    for mode in ("hybrid", "dense", "bm25"):
        hits = await amem.search("red kite over the hill", top_k=6, mode=mode)  # 6 live items match
        assert len(hits) == 6 and not any(i.startswith("old") for i in _ids(hits)), mode
        assert {f"live{i}" for i in range(5)} | {"later"} <= set(_ids(hits)), mode
    assert not amem.store.expiry_due("alice")
    with pytest.raises(NotFoundError, match="was deleted"):
        await amem.get("old0")
    entry = (await amem.history("old0"))[-1]
    assert entry.op == "EXPIRE" and entry.actor == "expiry"
    restored = await amem.restore("old0")  # an expired memory comes back like a deleted one...
    assert restored.metadata["expires_at"] == pytest.approx(past)
    assert "old0" not in _ids(await amem.search("red kite over the hill", top_k=20))  # ...and expires again
    await amem.restore("old1")
    await amem.update("old1", metadata={})  # restored and its expiry dropped: it stays
    assert "old1" in _ids(await amem.search("red kite over the hill", top_k=20))


async def test_add_takes_a_ttl_or_a_time_and_checks_them(amem):
    before = time.time()
    a = await amem.add("expires in an hour", ttl=3600)
    assert before + 3600 <= a.metadata["expires_at"] <= time.time() + 3600
    b = await amem.add("expires at new year", expires_at="2030-01-01T00:00:00Z")
    assert b.metadata["expires_at"] == 1893456000.0
    assert expiry_time("2030-01-01T00:00:00") == 1893456000.0  # a naive time is UTC
    for bad in (
        {"ttl": 0},
        {"ttl": -5},
        {"ttl": True},
        {"expires_at": "next week"},
        {"ttl": 5, "expires_at": 9e9},
    ):
        with pytest.raises(ValidationError):
            await amem.add("x", **bad)
    for bad in ("tomorrow", True, float("nan"), [1]):
        with pytest.raises(ValidationError, match="expires_at"):
            await amem.add("x", metadata={"expires_at": bad})
    ctx = MemoryContext(amem, namespace="alice", actor="api")
    res = await SERVICE_TOOLS.call(ctx, "add_memory", {"content": "from a client", "ttl": 60})
    assert res.ok and res.data["metadata"]["expires_at"] > time.time() + 50


async def test_sweep_of_the_whole_store_in_batches(amem):
    past = time.time() - 1
    for ns in ("a", "b"):
        await amem.add_many([NewItem(f"{ns} item {i}", metadata={"expires_at": past}) for i in range(9)]
                            + [NewItem(f"{ns} keeps {i}") for i in range(3)], namespace=ns)  # fmt: skip
    assert amem.store.expired_namespaces() == ["a", "b"]
    assert amem.store.sweep_expired(batch=4) == 18
    assert [await amem.count(namespace=ns) for ns in ("a", "b")] == [3, 3]
    assert await amem.sweep_expired() == 0


async def test_a_clone_keeps_its_items_expiry(amem):
    await amem.add("gone soon", id="g", metadata={"expires_at": time.time() + 0.3})
    await amem.add("stays", id="s")
    await amem.clone("alice", "copy")
    time.sleep(0.4)
    assert _ids(await amem.search("gone soon stays", namespace="copy", top_k=5)) == ["s"]
    assert _ids(await amem.search("gone soon stays", top_k=5)) == ["s"]


def test_writers_beside_a_sweep_lose_nothing(db_path):
    """One writer adds items (a third already expired, a third expiring within the run, a third never)
    while another connection sweeps in small batches and searches: afterwards every expired item is
    deleted, every other one is live, and no write failed."""
    errors: list[BaseException] = []
    expected: dict[str, float | None] = {}
    t_end = [0.0]  # the run's clock starts once the writer's store is open (slow on a loaded machine)

    def writer() -> None:
        try:
            with Memory(db_path, embedder=HashingEmbedder(64), namespace="alice") as m:
                i = 0
                t_end[0] = time.time() + 0.8
                while time.time() < t_end[0] or i < 36:
                    batch = []
                    for _ in range(6):
                        when = (time.time() - 1, time.time() + 0.3, None)[i % 3]
                        meta = {} if when is None else {"expires_at": when}
                        batch.append(NewItem(f"note {i} about the garden", id=f"n{i}", metadata=meta))
                        expected[f"n{i}"] = when
                        i += 1
                    m.add_many(batch)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    with Memory(db_path, embedder=HashingEmbedder(64), namespace="alice") as sweeper:
        sweeper.add("seed", id="seed")  # the store exists before both start
        th = threading.Thread(target=writer)
        th.start()
        swept = 0
        while th.is_alive():
            swept += sweeper.store.sweep_expired("alice", batch=5)
            sweeper.search("garden note", top_k=5)
        th.join()
        assert not errors, errors
        last = max((w for w in expected.values() if w is not None), default=0.0)
        time.sleep(max(0.0, last + 0.05 - time.time()))  # every "within the run" expiry has passed
        swept += sweeper.sweep_expired()
        now = time.time()
        live = {it.id for it in sweeper.list(limit=100_000)}
        for mid, when in expected.items():
            assert (mid in live) == (when is None or when > now), mid
        expired = sum(1 for w in expected.values() if w is not None and w <= now)
        logged = sweeper.store.read(
            "SELECT count(*) FROM history WHERE namespace = ? AND op = 'EXPIRE'", ("alice",)
        )
        assert logged[0][0] == expired and 0 < swept <= expired  # each deleted once (searches swept the rest)
        assert len(expected) >= 30


def test_the_expiry_index_finds_due_items(db_path, backend):
    with Memory(db_path, embedder=HashingEmbedder(64), namespace="alice") as m:
        m.add("x", metadata={"expires_at": 1.0})
        store = m.store
        sql = f"SELECT 1 FROM memories WHERE namespace = ? AND {store._due_where()} LIMIT 1"
        if backend == "sqlite":
            plan = " ".join(
                str(r[-1]) for r in store.read("EXPLAIN QUERY PLAN " + sql, ("alice", time.time()))
            )
        else:
            with store.transaction("alice") as c:
                c.execute("SET LOCAL enable_seqscan = off")
                plan = " ".join(r[0] for r in c.execute("EXPLAIN " + sql, ("alice", time.time())).fetchall())
        assert "memories_expiry" in plan, plan
        assert store.expiry_due("alice")

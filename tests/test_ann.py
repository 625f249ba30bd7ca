"""The ANN (HNSW) dense path on a real SQLite file: with the graph forced on a small store, its results equal
the exact path's (ids and scores) after every kind of write, filters never come back short, and a new
process loads the saved graph instead of rebuilding it (and rebuilds one that does not match)."""

from __future__ import annotations

import numpy as np
import pytest

from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.index import ann, ann_files
from memrl.memory.records.types import TYPE_CODE
from memrl.memory.store.base import NewItem

pytest.importorskip("faiss")

WORDS = "alice bob lisbon porto tea coffee hiking chess piano garden river mountain dog cat book film".split()
QUERIES = ["alice lisbon tea", "bob hiking mountain", "piano film book", "dog river garden", "chess coffee"]


def texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=5)) + f" note {seed}-{i}" for i in range(n)]


def items(n: int, seed: int = 0) -> list[NewItem]:
    types = ["semantic", "episodic", "semantic", "procedural"]
    return [
        NewItem(t, type=types[i % 4], metadata={"g": i % 5, "tenth": i % 10 == 0})
        for i, t in enumerate(texts(n, seed))
    ]


def memory(path, backend: str = "ann", **kw) -> AsyncMemory:
    m = AsyncMemory(path, embedder=HashingEmbedder(64), dense_backend=backend, namespace="alice")
    m.index.ann_min = kw.get("ann_min", m.index.ann_min)
    return m


async def assert_ann_is_exact(m: AsyncMemory, ns: str = "alice", exact: AsyncMemory | None = None) -> None:
    """Every query, k, type and metadata filter: ANN == exact, ids and scores (bit for bit)."""
    idx = await m.index.sync(ns)
    assert idx.ann is not None and not idx.ann.pending
    for q in QUERIES:
        qv = (await m.embedder.aembed([q]))[0]
        for k in (3, 10):
            for types in (None, [TYPE_CODE["episodic"]], [TYPE_CODE["semantic"], TYPE_CODE["core"]]):
                for filt in (None, {"g": 1}, {"tenth": True}):
                    allowed = (
                        None if filt is None else np.asarray(m.store.allowed_rids(ns, filt), dtype=np.int64)
                    )
                    got = idx.top(qv, k, type_codes=types, allowed=allowed, backend="ann")
                    want = idx.top(qv, k, type_codes=types, allowed=allowed, backend="numpy")
                    assert got[0].tolist() == want[0].tolist(), (q, k, types, filt)
                    assert got[1].tolist() == want[1].tolist()
    # and through search, against a memory on the same file that searches exactly (made when ``m`` was, so
    # that both have searched the same namespaces at the same times: search's other caches are the same)
    if exact is not None:
        for q in QUERIES:
            a = await m.search(q, namespace=ns, mode="dense", top_k=10)
            b = await exact.search(q, namespace=ns, mode="dense", top_k=10)
            assert [(h.item.id, h.score) for h in a] == [(h.item.id, h.score) for h in b]


@pytest.mark.parametrize("codes", ["sq8", "flat"])
async def test_ann_equals_exact_after_every_write(tmp_path, monkeypatch, codes):
    monkeypatch.setattr(ann.AnnGraph, "CODES", codes)
    m = memory(str(tmp_path / "m.db"))
    ex = memory(m.store.path, "numpy")
    added = await m.add_many(items(120))
    await assert_ann_is_exact(m, exact=ex)
    await m.add("alice drinks tea in lisbon every morning", type="episodic", metadata={"g": 1})
    await assert_ann_is_exact(m, exact=ex)
    await m.update(added[3].id, "bob climbs a mountain by the river")
    await assert_ann_is_exact(m, exact=ex)
    await m.delete(added[4].id)
    await m.delete(added[10].id)
    await assert_ann_is_exact(m, exact=ex)
    await m.restore(added[4].id)
    await assert_ann_is_exact(m, exact=ex)
    await m.undo(added[3].id)  # back to its first content
    await assert_ann_is_exact(m, exact=ex)
    await m.merge([added[5].id, added[6].id], "alice and bob play chess and piano")
    await assert_ann_is_exact(m, exact=ex)
    await m.undo()  # the merge, as a whole
    await assert_ann_is_exact(m, exact=ex)
    await m.add_many(items(40, seed=1))
    await assert_ann_is_exact(m, exact=ex)

    assert await m.clone("alice", "episode") == await m.count()
    await assert_ann_is_exact(m, "episode", ex)
    await m.add("the episode's own note about a dog", namespace="episode")
    await assert_ann_is_exact(m, "episode", ex)
    await assert_ann_is_exact(m, exact=ex)

    lines = await m.export_lines()
    await m.import_lines(lines, namespace="imported")
    await assert_ann_is_exact(m, "imported", ex)
    await m.add_many(items(30, seed=2), namespace="imported")
    await m.import_lines(lines, namespace="imported", overwrite=True)
    await assert_ann_is_exact(m, "imported", ex)

    await m.reset(namespace="episode")
    await m.add_many(items(50, seed=3), namespace="episode")
    await assert_ann_is_exact(m, "episode", ex)
    kind = type(m.index._indexes.current("alice").ann.index).__name__
    assert kind == {"sq8": "IndexHNSWSQ", "flat": "IndexHNSWFlat"}[codes]
    await m.close()
    await ex.close()


def test_8bit_codes_hold_their_vectors_within_a_step_and_no_other():
    """The load check of an 8-bit graph: each stored vector is within a quantization step of the one
    added (clipped to the trained range: a later vector outside it is stored at the edge); a vector moved
    by a few steps in one dimension is not the one stored."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    g = ann.AnnGraph(32)
    assert g.CODES == "sq8"
    g._add(np.arange(200), x[:200])
    g._add(np.arange(200, 300), 1.5 * x[200:])  # past the range the codes were trained on
    assert all(g.holds(i, v) for i, v in enumerate([*x[:200], *(1.5 * x[200:])]))
    moved = x[7].copy()
    moved[3] += 0.05
    assert not g.holds(7, moved) and not g.holds(7, x[8])


async def test_writes_of_another_process_are_followed(tmp_path):
    path = str(tmp_path / "m.db")
    m = memory(path)
    await m.add_many(items(100))
    await assert_ann_is_exact(m)
    other = memory(path, "numpy")
    gone = (await other.list())[:7]
    for it in gone:
        await other.delete(it.id)
    await other.add_many(items(25, seed=4))
    await other.update((await other.list())[0].id, "an edit made by the other process")
    await other.close()
    await assert_ann_is_exact(m)
    await m.close()


async def test_filters_never_come_back_short(tmp_path):
    m = memory(str(tmp_path / "m.db"))
    await m.add_many(items(1500))
    idx = await m.index.sync("alice")
    qv = (await m.embedder.aembed(["alice lisbon tea"]))[0]
    for share, filt in ((0.1, {"tenth": True}), (0.2, {"g": 3})):  # over-fetch
        allowed = np.asarray(m.store.allowed_rids("alice", filt), dtype=np.int64)
        assert len(allowed) == share * 1500
        for k in (1, 10, 100, 200):
            rids, scores = idx.top(qv, k, allowed=allowed, backend="ann")
            assert len(rids) == min(k, len(allowed)) and set(rids.tolist()) <= set(allowed.tolist())
            assert np.all(np.diff(scores) <= 0)
    allowed = idx.rids[: idx.n][::100].copy()  # 1% of the rows: the selective path, exact
    for k in (5, 50):
        got = idx.top(qv, k, allowed=allowed, backend="ann")
        want = idx.top(qv, k, allowed=allowed, backend="numpy")
        assert got[0].tolist() == want[0].tolist() and len(got[0]) == min(k, len(allowed))
    await m.close()


async def test_a_new_process_loads_the_graph(tmp_path, monkeypatch):
    path = str(tmp_path / "m.db")
    m = memory(path)
    await m.add_many(items(200))
    await assert_ann_is_exact(m)
    await m.add_many(items(5, seed=5))  # pending at close: flushed and saved then
    await m.search("tea", mode="dense")
    await m.close()
    assert list((tmp_path / "m.db.ann").glob("*.npz"))

    other = memory(path, "numpy")  # writes the saved graph has not seen
    await other.delete((await other.list())[0].id)
    await other.add_many(items(10, seed=6))
    await other.close()

    def no_build(*a, **k):
        raise AssertionError("rebuilt instead of loaded")

    with monkeypatch.context() as mp:
        mp.setattr(ann.AnnGraph, "build", classmethod(no_build))
        m2 = memory(path)
        await assert_ann_is_exact(m2)
        await m2.close()

    # a reset changes the generation: the file is not this namespace's any more, and is rebuilt
    m3 = memory(path)
    await m3.reset()
    await m3.add_many(items(60, seed=7))
    built = []
    real = ann.AnnGraph.build.__func__
    monkeypatch.setattr(ann.AnnGraph, "build", classmethod(lambda c, *a: built.append(1) or real(c, *a)))
    await assert_ann_is_exact(m3)
    assert built
    await m3.close()


async def test_a_file_of_another_database_is_not_trusted(tmp_path):
    a, b = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    for path, seed in ((a, 0), (b, 1)):  # same namespace, generation and sizes; other vectors
        m = memory(path)
        await m.add_many(items(80, seed))
        await m.search("tea", mode="dense")
        await m.close()
    (tmp_path / "b.db.ann").rename(tmp_path / "b.db.ann.own")
    (tmp_path / "a.db.ann").rename(tmp_path / "b.db.ann")
    m = memory(b)
    idx = await m.index.sync("alice")
    assert ann_files.agrees(idx.ann, idx.row_of, idx.matrix)  # rebuilt from b's own vectors
    await assert_ann_is_exact(m)
    await m.close()


async def test_the_graph_is_mapped_then_copied_before_it_grows_and_a_torn_save_is_rebuilt(tmp_path):
    path = str(tmp_path / "m.db")
    m = memory(path)
    await m.add_many(items(90))
    await m.search("tea", mode="dense")
    await m.close()
    (npz,) = (tmp_path / "m.db.ann").glob("*.npz")
    faiss_file = npz.with_suffix(".faiss")
    assert faiss_file.exists()

    m = memory(path)
    idx = await m.index.sync("alice")
    assert idx.ann.mapped  # loaded, not rebuilt: its vectors are the file's pages
    await m.add_many(items(4, seed=8))  # the first add copies the graph into memory (faiss would abort)
    idx = await m.index.sync("alice")
    assert not idx.ann.mapped and not idx.ann.pending
    await assert_ann_is_exact(m)
    await m.close()

    # a crash between the two renames of a save: a new index file beside the old .npz
    good = faiss_file.read_bytes()
    o = memory(str(tmp_path / "o.db"))
    await o.add_many(items(94, seed=9))
    await o.search("tea", mode="dense")
    await o.close()
    faiss_file.write_bytes(next((tmp_path / "o.db.ann").glob("*.faiss")).read_bytes())
    m = memory(path)
    idx = await m.index.sync("alice")
    assert not idx.ann.mapped  # rebuilt (and saved): the checksum named another file
    await assert_ann_is_exact(m)
    await m.close()
    saved = ann_files.load(npz, ns="alice", model=m.embedder.name, dim=64, generation=idx.generation)
    assert saved is not None and faiss_file.read_bytes() != good  # this database's graph, saved again


async def test_a_clone_of_a_mapped_graph_grows(tmp_path):
    """faiss aborts the process on an add to a graph that views its file: a clone copied from a mapped
    graph must be copied into memory first too (this test would kill the test run, not fail)."""
    path = str(tmp_path / "m.db")
    m = memory(path)
    await m.add_many(items(80))
    await m.search("tea", mode="dense")
    await m.close()
    m, ex = memory(path), memory(path, "numpy")
    assert (await m.index.sync("alice")).ann.mapped
    await m.clone("alice", "episode")
    await m.add_many(items(6, seed=4), namespace="episode")
    await assert_ann_is_exact(m, "episode", ex)
    await m.close()
    await ex.close()


async def test_a_format_1_graph_file_is_still_read(tmp_path):
    import json

    from memrl.memory.index.ann import require_faiss

    path = str(tmp_path / "m.db")
    m = memory(path)
    await m.add_many(items(70))
    idx = await m.index.sync("alice")
    g = idx.ann
    file = ann_files.graph_path(path, "alice", m.embedder.name)
    meta = {"format": 1, "ns": "alice", "model": m.embedder.name, "dim": g.dim, "generation": idx.generation,
            "seq": idx.seq}  # fmt: skip
    np.savez(file, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
             index=require_faiss().serialize_index(g.index), rids=g.rids,
             stale=np.array(sorted(g.stale), dtype=np.int64))  # fmt: skip
    file.with_suffix(".faiss").unlink()
    m.store.close()
    got = ann_files.load(file, ns="alice", model=m.embedder.name, dim=g.dim, generation=idx.generation)
    assert got is not None and got[1] == idx.seq and got[0].rids.tolist() == g.rids.tolist()
    assert not got[0].mapped


async def test_a_clone_copies_its_sources_graph(tmp_path, monkeypatch):
    path = str(tmp_path / "m.db")
    m, ex = memory(path), memory(path, "numpy")
    added = await m.add_many(items(150))
    await assert_ann_is_exact(m, exact=ex)
    await m.update(added[0].id, "an edit the source's graph has not seen yet")
    await m.delete(added[1].id)
    await m.clone("alice", "episode")
    await m.add("the source moves on after the clone", metadata={"g": 1})  # not in the clone

    def no_build(*a, **k):
        raise AssertionError("built instead of copied")

    monkeypatch.setattr(ann.AnnGraph, "build", classmethod(no_build))
    await assert_ann_is_exact(m, "episode", ex)
    await m.add("the clone's own note", namespace="episode")
    await assert_ann_is_exact(m, "episode", ex)
    await m.close(), await ex.close()


async def test_auto_uses_a_graph_from_the_threshold(tmp_path):
    m = memory(str(tmp_path / "m.db"), "auto", ann_min=100)
    await m.add_many(items(60))
    assert (await m.index.sync("alice")).ann is None
    await m.add_many(items(60, seed=1))
    assert (await m.index.sync("alice")).ann is not None
    await assert_ann_is_exact(m)
    await m.close()

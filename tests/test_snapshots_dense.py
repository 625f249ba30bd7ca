"""Dense matrices and search facts loaded from snapshot files (memrl.memory.index.dense_files,
memrl.memory.search.facts): after each kind of write made since the file was saved, a store opened anew
searches exactly as one rebuilt from the database (a copy of it with no files beside it); damaged, foreign
and outdated files are rebuilt, never trusted."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np

from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.index import snapshot
from memrl.memory.store.base import NewItem

WORDS = "alice bob lisbon porto tea coffee hiking chess piano garden river mountain dog cat book film".split()
QUERIES = ["alice lisbon tea", "When did Bob go hiking?", "piano film book in May 2023", "dog river garden"]
NS = "alice"


def items(n: int, seed: int = 0) -> list[NewItem]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        meta = {
            "speaker": ["Alice", "Bob"][i % 2],
            "unit": f"{seed}-{i // 2}",
            "date": f"2023-0{1 + i % 9}-02",
        }
        text = " ".join(rng.choice(WORDS, size=5)) + f" note {seed}-{i}"
        out.append(NewItem(text, type=["semantic", "episodic"][i % 2], session=f"s{i // 10}", metadata=meta))
    return out


def memory(path: Path | str) -> AsyncMemory:
    m = AsyncMemory(str(path), embedder=HashingEmbedder(64), namespace=NS)
    m.index.files.min_items = 1  # the tests' namespaces are small
    m.index.facts.min_items = 1
    return m


async def results(m: AsyncMemory, ns: str = NS) -> list:
    """Dense and default (hybrid) search of every query: ids and scores; and the index's vectors."""
    out = []
    for q in QUERIES:
        for mode in ("dense", "hybrid"):
            hits = await m.search(q, namespace=ns, mode=mode, top_k=8)
            out.append([(h.item.id, round(h.score, 12)) for h in hits])
    idx = await m.index.sync(ns)
    out.append(sorted((int(r), idx.matrix[row].tobytes()) for r, row in idx.row_of.items()))
    return out


def rebuilt_copy(path: Path, tmp: Path) -> Path:
    """A copy of the database with no snapshot files beside it (read whole from the store when opened)."""
    dst = tmp / f"rebuilt-{len(list(tmp.glob('rebuilt-*')))}.db"
    src, out = sqlite3.connect(path), sqlite3.connect(dst)
    src.backup(out)
    src.close()
    out.close()
    return dst


async def assert_as_rebuilt(path: Path, tmp: Path, *, loaded: bool | tuple[bool, bool], ns: str = NS) -> None:
    """A new memory on ``path`` searches as one on a rebuilt copy; ``loaded``: whether its dense index and
    its facts (one bool for both) came from their files."""
    m = memory(path)
    got = await results(m, ns)
    origins = ((await m.index.sync(ns)).origin, m.index.facts._cache[ns].origin)
    await m.close()
    want_loaded = loaded if isinstance(loaded, tuple) else (loaded, loaded)
    assert origins == tuple("snapshot" if x else "store" for x in want_loaded)
    r = memory(rebuilt_copy(path, tmp))
    want = await results(r, ns)
    assert (await r.index.sync(ns)).origin == "store"
    await r.close()
    assert got == want


async def saved_store(tmp_path: Path) -> tuple[Path, list]:
    path = tmp_path / "m.db"
    m = memory(path)
    added = await m.add_many(items(60))
    await results(m)  # read whole from the store: saved at once
    await m.close()
    assert len(list((tmp_path / "m.db.index").glob("*.snap"))) == 2  # the matrix and the facts
    return path, added


async def test_every_kind_of_write_after_the_save_is_brought_forward(tmp_path):
    path, added = await saved_store(tmp_path)
    writes = [
        lambda w: w.add("alice drinks tea in lisbon", type="episodic", metadata={"speaker": "Alice"}),
        lambda w: w.update(added[3].id, "bob climbs a mountain by the river"),
        lambda w: w.delete(added[4].id),
        lambda w: w.restore(added[4].id),
        lambda w: w.undo(added[3].id),
        lambda w: w.merge([added[5].id, added[6].id], "alice and bob play chess"),
        lambda w: w.undo(),
        lambda w: w.add_many(items(7, seed=1)),
    ]
    for write in writes:
        w = AsyncMemory(str(path), embedder=HashingEmbedder(64), namespace=NS)  # another process's writes
        await write(w)
        await w.close()
        await assert_as_rebuilt(path, tmp_path, loaded=True)

    # an import over the namespace and a reset replace it (a new generation): its files are not used
    w = memory(path)
    lines = await w.export_lines()
    await w.import_lines(lines, namespace="copy")
    await results(w, "copy")
    await w.close()
    await assert_as_rebuilt(path, tmp_path, loaded=True, ns="copy")
    w = memory(path)
    await w.import_lines(lines, namespace="copy", overwrite=True)
    await w.close()
    await assert_as_rebuilt(path, tmp_path, loaded=False, ns="copy")
    w = memory(path)
    await w.clone(NS, "copy", overwrite=True)
    await w.close()
    await assert_as_rebuilt(path, tmp_path, loaded=False, ns="copy")
    w = memory(path)
    await w.reset()
    await w.add_many(items(12, seed=2))
    await w.close()
    await assert_as_rebuilt(path, tmp_path, loaded=False)


async def test_writes_after_the_last_save_survive_a_crash(tmp_path):
    path, _ = await saved_store(tmp_path)
    m = memory(path)
    await results(m)
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "m.db.index").glob("*.snap")}
    await m.add_many(items(3, seed=3))  # 3 of 63 rows: under a tenth, so no save
    await results(m)
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "m.db.index").glob("*.snap")} == before
    m.store.close()  # the process dies: no close of the index, the files stay older than the store
    await assert_as_rebuilt(path, tmp_path, loaded=True)


async def test_damaged_foreign_and_outdated_files_are_rebuilt(tmp_path):
    path, _ = await saved_store(tmp_path)
    files = sorted((tmp_path / "m.db.index").glob("*.snap"), key=lambda p: p.stat().st_size)
    facts_file, dense_file = files
    good = {p: p.read_bytes() for p in files}

    def damage(p: Path, how: str) -> None:
        raw = bytearray(good[p])
        if how == "truncate":
            raw = raw[: len(raw) - 100]
        else:  # one flipped byte in the middle: the matrix's data, the facts' JSON
            raw[len(raw) // 2] ^= 0x40
        p.write_bytes(bytes(raw))

    for how in ("truncate", "flip"):
        for p in files:
            damage(p, how)
            await assert_as_rebuilt(path, tmp_path, loaded=(p != dense_file, p != facts_file))
            for q in files:  # put the good files back (the open above may have saved new ones)
                q.write_bytes(good[q])
    await assert_as_rebuilt(path, tmp_path, loaded=True)

    # a file of another database at this path: same namespace, sizes and history sequence numbers
    other = tmp_path / "other" / "m.db"
    other.parent.mkdir()
    o = memory(other)
    await o.add_many(items(60, seed=9))
    await results(o)
    await o.close()
    shutil.rmtree(tmp_path / "m.db.index")
    shutil.copytree(tmp_path / "other" / "m.db.index", tmp_path / "m.db.index")
    await assert_as_rebuilt(path, tmp_path, loaded=False)
    assert dense_file.exists() and facts_file.exists()  # rebuilt and saved again, this database's now


async def test_small_namespaces_get_no_file_and_a_read_only_place_breaks_nothing(tmp_path):
    path = tmp_path / "m.db"
    m = AsyncMemory(str(path), embedder=HashingEmbedder(64), namespace=NS)  # defaults: from 1000 items
    await m.add_many(items(60))
    await results(m)
    await m.close()
    assert not (tmp_path / "m.db.index").exists()
    (tmp_path / "m.db.index").write_text("not a folder")  # where the files would go cannot hold them
    m = memory(path)
    got = await results(m)
    await m.close()
    assert got and snapshot.read(tmp_path / "m.db.index" / "x.snap", {}) is None


CHILD = """
import asyncio, json, sys
from tests.test_snapshots_dense import memory, results
async def main():
    m = memory(sys.argv[1])
    got = await results(m)
    idx = await m.index.sync("alice")
    print(json.dumps({"source": idx.origin, "facts": m.index.facts._cache["alice"].origin,
                      "hits": [h for h in got[:-1]]}))
    m.store.close()  # no index close: a crash
asyncio.run(main())
"""


async def test_a_new_process_maps_the_files(tmp_path):
    path, _ = await saved_store(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, env=env,
                         check=True)  # fmt: skip
    child = json.loads(out.stdout.strip().splitlines()[-1])
    assert child["source"] == "snapshot" and child["facts"] == "snapshot"
    r = memory(rebuilt_copy(path, tmp_path))
    want = await results(r)
    await r.close()
    assert child["hits"] == [[list(h) for h in hits] for hits in want[:-1]]


async def test_files_no_process_can_load_are_removed_on_close(tmp_path):
    """Closing a store deletes the snapshot and graph files of a namespace that was dropped or reset (its
    generation moved on), unreadable files and a killed writer's old temporary files; the live namespace's
    files stay and load."""
    path = tmp_path / "m.db"
    m = memory(path)
    m.index.ann_min = 1  # a graph file too
    for ns in (NS, "bob", "carol"):
        await m.add_many(items(30, seed=len(ns)), namespace=ns)
        await results(m, ns)
    await m.close()
    index, ann = Path(f"{path}.index"), Path(f"{path}.ann")
    of = {
        ns: {f for f in index.glob("*.snap") if snapshot.head(f)["ns"] == ns} for ns in (NS, "bob", "carol")
    }
    assert all(of.values()) and len(list(ann.glob("*.npz"))) == 3
    junk = index / "junk.snap"
    junk.write_bytes(b"not a snapshot")
    old_tmp, new_tmp = index / "x.snap.99999.tmp", index / "y.snap.99998.tmp"
    for t in (old_tmp, new_tmp):
        t.write_bytes(b"partial")
    os.utime(old_tmp, (0, 0))
    torn, empty = ann / "torn.npz", ann / "empty.npz"  # a crash mid-save: close must not fail on them
    torn.write_bytes(b"PK\x03\x04 not a zip")
    empty.write_bytes(b"")
    m = memory(path)
    m.store.drop_namespace("bob")
    await m.reset(namespace="carol")
    await m.close()
    left = set(index.iterdir())
    assert of[NS] <= left and not (of["bob"] | of["carol"]) & left
    assert junk not in left and old_tmp not in left and new_tmp in left
    assert not torn.exists() and not empty.exists()
    graphs = [json.loads(np.load(f)["meta"].tobytes())["ns"] for f in ann.glob("*.npz")]
    assert graphs == [NS] and len(list(ann.glob("*.faiss"))) == 1
    await assert_as_rebuilt(path, tmp_path, loaded=True)

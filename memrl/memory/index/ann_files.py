"""The HNSW graphs of a store's dense indexes: built when a namespace wants one, kept in step, saved and loaded.

:class:`AnnGraphs` is part of :class:`~memrl.memory.index.dense.DenseIndexes`: after each sync of a namespace it
builds the graph (in a worker thread) when the backend wants one, adds the pending rows, and rebuilds a
worn graph. A graph lives in ``<db>.ann/`` beside the SQLite file (none for an in-memory store), per
namespace and model: the faiss index in a ``.faiss`` file, and an ``.npz`` with its rids, stale rids and
what makes it valid: the format, the namespace's generation (which only grows: a reset, a drop or a clone
over it changes it), the model and dimension, the history sequence number it reflects, and the ``.faiss``
file's checksum (XXH3-64). Both are written atomically (the index first) after a build, after a flush that
grew it by a tenth, and on close. A new process maps the index file instead of reading it (faiss's
``IO_FLAG_MMAP_IFC``: 0.06 s where reading and deserialising took 0.57 s at 100k vectors here; the graph is
copied into memory only before its first add), marks the rows changed since that number stale (or
pending), and checks a sample of the graph's vectors against the store's, so a file of another database
(or of an older life of this one) is rebuilt, never trusted. Format 1 files (the index inside the ``.npz``)
are still read.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from memrl.errors import ConfigError
from memrl.memory.index import snapshot
from memrl.memory.index.ann import AnnGraph, require_faiss

FORMAT = 2


class AnnGraphs:
    """The graph side of a :class:`~memrl.memory.index.dense.DenseIndexes` (``owner``)."""

    SAVE_AFTER = 0.1  # save after a flush that grew the graph by this share
    THREAD_AFTER = 1000  # pending rows added in a worker thread from this many

    def __init__(self, owner: Any) -> None:
        self.owner = owner
        self._faiss: bool | None = None
        self._clones: dict[str, str] = {}  # a clone -> its source, until the clone's first graph

    def forget(self, ns: str) -> None:
        self._clones.pop(ns, None)

    def cloned(self, src: str, dst: str) -> None:
        """``dst`` was just cloned from ``src``: its first graph is a copy of ``src``'s, not a build."""
        self._clones[dst] = src

    def wanted(self, n: int) -> bool:
        backend = self.owner.backend
        if backend == "ann":
            return True
        if backend != "auto" or n < self.owner.ann_min:
            return False
        if self._faiss is None:
            try:
                require_faiss()
                self._faiss = True
            except ConfigError:
                self._faiss = False
        return self._faiss

    def path(self, ns: str) -> Path | None:
        db = getattr(self.owner.store, "path", None)
        if not isinstance(db, str) or db.startswith(("postgres://", "postgresql://")):
            return None
        return graph_path(db, ns, self.owner.embedder.name)

    async def follow(self, ns: str, idx: Any) -> None:
        """After ``idx`` (namespace ``ns``) was synced: give it the graph it should have, up to date."""
        if not self.wanted(idx.n):
            if idx.ann is not None and idx.n < self.owner.ann_min // 2:
                idx.ann = None  # shrank well below the threshold: exact again
            return
        g = idx.ann
        if g is None:
            g = self._load(ns, idx)
        if g is None and ns in self._clones:
            g = self._copy(self._clones.pop(ns), ns, idx)
        if g is None or g.worn():
            idx.ann = None  # searches meanwhile are exact
            g = await asyncio.to_thread(
                AnnGraph.build, idx.dim, idx.rids[: idx.n].copy(), idx.matrix[: idx.n]
            )
            idx.ann = g
            await asyncio.to_thread(self._save, ns, idx)
            return
        idx.ann = g
        if g.pending:
            grew = len(g.pending)
            if grew >= self.THREAD_AFTER or g.mapped:  # faiss may not add and search one graph at once, and
                # a mapped graph is copied into memory first: exact search meanwhile
                idx.ann = None
                await asyncio.to_thread(g.flush, idx.row_of, idx.matrix)
                idx.ann = g
            else:
                g.flush(idx.row_of, idx.matrix)
            if grew >= self.SAVE_AFTER * len(g.rids):
                await asyncio.to_thread(self._save, ns, idx)

    def _load(self, ns: str, idx: Any) -> AnnGraph | None:
        path = self.path(ns)
        if path is None or not path.exists():
            return None
        got = load(path, ns=ns, model=self.owner.embedder.name, dim=idx.dim, generation=idx.generation)
        if got is None or got[1] > idx.seq:
            return None
        g, seq = got
        changes = self.owner.store.changes_since(ns, seq)
        for r in changes:
            g.changed(r.rid, live=r.rid in idx.row_of)
        if not agrees(g, idx.row_of, idx.matrix):
            return None
        g.saved = not changes
        return g

    def _copy(self, src: str, ns: str, idx: Any) -> AnnGraph | None:
        """``ns``'s graph as a copy of its clone source's (the same vectors under the clone's rids): graph
        positions whose item the clone lacks are dead, rows of the source changed since its graph was last
        in step are stale, and the clone's rows the graph lacks are pending."""
        sidx = self.owner._indexes.get(src)
        sg = getattr(sidx, "ann", None)
        if sg is None or sidx.generation != self.owner.store.generation(src):
            return None
        rid_of = self.owner.store.clone_rids(src, ns)
        rids = np.array([rid_of.get(r, -1 - i) for i, r in enumerate(sg.rids.tolist())], dtype=np.int64)
        g = AnnGraph(idx.dim, require_faiss().clone_index(sg.index), rids)
        g.mapped = sg.mapped  # a clone of a mapped index still views the file: copied before it grows
        changed = {r.rid for r in self.owner.store.changes_since(src, sidx.seq)}
        g.stale = {int(r) for r in rids if r < 0} | {rid_of[r] for r in sg.stale | changed if r in rid_of}
        g.pending = {r for r in idx.row_of if r not in g.placed}
        return g if agrees(g, idx.row_of, idx.matrix) else None

    def _save(self, ns: str, idx: Any) -> None:
        path = self.path(ns)
        if path is not None and idx.ann is not None and not idx.ann.pending:
            save(path, idx.ann, ns=ns, model=self.owner.embedder.name, generation=idx.generation, seq=idx.seq)

    def save_all(self, indexes: Mapping[str, Any]) -> None:
        for ns, idx in list(indexes.items()):
            g = getattr(idx, "ann", None)
            if g is not None and not g.saved:
                if g.pending:
                    g.flush(idx.row_of, idx.matrix)
                self._save(ns, idx)


def graph_path(db: str, ns: str, model: str) -> Path | None:
    """Where ``ns``'s graph of ``model`` lives for the SQLite file ``db`` (None for an in-memory store)."""
    if not db or db == ":memory:" or db.startswith("file::memory:"):
        return None
    key = hashlib.sha256(f"{ns}\0{model}".encode()).hexdigest()[:32]
    return Path(db + ".ann") / f"{key}.npz"


def prune(store: Any, now: float | None = None) -> list[Path]:
    """Delete the graph files beside ``store`` that no process can load again: those of a namespace's
    generation it no longer has (as :func:`memrl.memory.index.snapshot.prune` does for the snapshots),
    unreadable ones, and temporary or orphaned index files older than ``snapshot.TMP_AGE``."""
    from memrl.memory.index.snapshot import TMP_AGE

    probe = graph_path(getattr(store, "path", None) or "", "", "")
    if probe is None or not probe.parent.is_dir():
        return []
    now = time.time() if now is None else now
    gone: list[Path] = []
    for f in sorted(probe.parent.iterdir()):
        try:
            if ".tmp." in f.name or (f.suffix == ".faiss" and not f.with_suffix(".npz").exists()):
                drop = [f] if now - f.stat().st_mtime > TMP_AGE else []
            elif f.suffix == ".npz":
                try:
                    with np.load(f) as z:
                        meta = json.loads(z["meta"].tobytes())
                    gen = meta["generation"]
                    stale = not isinstance(gen, int) or gen < store.generation(meta["ns"])
                except Exception:  # noqa: BLE001 - an empty or torn file (EOFError, BadZipFile, ...): unloadable
                    stale = True
                drop = [f, index_path(f)] if stale else []
            else:
                continue
            for d in drop:
                if d.exists():
                    d.unlink()
                    gone.append(d)
        except OSError:
            continue
    return gone


def file_checksum(path: Path) -> int:
    """XXH3-64 of a file's bytes (through a map closed after: a 150 MB graph in 0.02 s when it is in the
    page cache; :func:`memrl.memory.index.snapshot.file_checksum`)."""
    return snapshot.file_checksum(path, 0, path.stat().st_size)


def index_path(path: Path) -> Path:
    return path.with_suffix(".faiss")


def save(path: Path, graph: AnnGraph, *, ns: str, model: str, generation: int, seq: int) -> None:
    """Write ``graph`` (flushed: nothing pending) atomically, with what makes it valid: the index file
    first, then the ``.npz`` naming its checksum (a crash between the two leaves a mismatch: rebuilt)."""
    faiss = require_faiss()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_index = path.with_name(f"{path.stem}.{os.getpid()}.tmp.faiss")
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
    try:
        faiss.write_index(graph.index, str(tmp_index))
        meta = {
            "format": FORMAT,
            "ns": ns,
            "model": model,
            "dim": graph.dim,
            "generation": generation,
            "seq": seq,
            "index_xxh3": file_checksum(tmp_index),
        }
        np.savez(
            tmp,
            meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
            rids=graph.rids,
            stale=np.array(sorted(graph.stale), dtype=np.int64),
        )
        os.replace(tmp_index, index_path(path))
        os.replace(tmp, path)
    finally:
        for t in (tmp_index, tmp):
            if t.exists():
                t.unlink()
    graph.saved = True


def load(path: Path, *, ns: str, model: str, dim: int, generation: int) -> tuple[AnnGraph, int] | None:
    """(graph, the seq it reflects) from ``path``, or None when there is none or it is not this namespace's
    current generation of this model. The caller still applies the changes since that seq."""
    faiss = require_faiss()
    try:
        with np.load(path) as f:
            meta = json.loads(f["meta"].tobytes())
            if (meta.get("ns"), meta.get("model"), meta.get("dim"), meta.get("generation")) != (
                ns,
                model,
                dim,
                generation,
            ):
                return None
            mapped = False
            if meta.get("format") == 1:  # the index inside the .npz
                index = faiss.deserialize_index(f["index"])
            elif meta.get("format") == FORMAT:
                graph_file = index_path(path)
                if file_checksum(graph_file) != meta["index_xxh3"]:
                    return None
                index = faiss.read_index(str(graph_file), faiss.IO_FLAG_MMAP_IFC)
                mapped = True
            else:
                return None
            g = AnnGraph(dim, index, f["rids"].astype(np.int64))
            g.mapped = mapped
            g.stale = set(f["stale"].tolist())
    except (
        OSError,
        ValueError,
        KeyError,
        RuntimeError,
        EOFError,
        zipfile.BadZipFile,
    ):  # torn or empty: rebuilt
        return None
    if g.index.ntotal != len(g.rids):
        return None
    g.saved = True
    return g, int(meta["seq"])


def agrees(graph: AnnGraph, row_of: dict[int, int], matrix: np.ndarray, sample: int = 256) -> bool:
    """Whether a sample of the graph's fresh (not stale) vectors equals the store's (within the codes'
    quantization step for 8-bit codes): a file written for another database of the same path, or one whose
    rows were rewritten, fails here."""
    n = len(graph.rids)
    if n == 0:
        return True
    # positions drawn from the whole graph, then the stale dropped (a list of a million fresh positions
    # cost 0.3 s at 1M); a worn graph (a fifth stale) is rebuilt anyway, so 4x the sample leaves enough
    drawn = np.random.default_rng(n).choice(n, size=min(4 * sample, n), replace=False).tolist()
    pick = [p for p in drawn if int(graph.rids[p]) not in graph.stale][:sample]
    if not pick:
        pick = [i for i, r in enumerate(graph.rids.tolist()) if r not in graph.stale][:sample]
        if not pick:
            return True
    for p in pick:
        row = row_of.get(int(graph.rids[p]))
        if row is None or not graph.holds(p, matrix[row]):
            return False
    return True

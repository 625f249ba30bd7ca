"""Exact dense search: per-namespace matrices of unit vectors that follow the store incrementally.

:class:`DenseIndex` holds one namespace's live vectors (brute force with numpy, or FAISS ``IndexFlatIP``).
:class:`DenseIndexes` keeps one per namespace in step with the database: every row carries the history
sequence number of its last change, so a search first applies the rows changed since the last one
(``WHERE seq > ?``), including rows written by other processes; a namespace whose rows were hard-deleted
(reset, dropped, overwritten by a clone) changes generation and is reloaded in one query.

Vectors come from the namespace's embedding cache (namespace, model, key): the key is the content hash,
so no text of a namespace is embedded twice, or, for an item added with a vector of its own
(``NewItem.vector``, e.g. a vector pooled from neighbouring turns), ``metadata["vector_key"]``. The cache
is per namespace so that nothing a namespace observes (a score, a cache hit, how long an add takes)
depends on another's content; a clone copies its source's vectors. A store opened with another embedder
has no such vector and embeds the item's text instead. Items with ``metadata["dense"] is False`` are lexical-only: BM25 sees
them, dense search does not, and nothing embeds them.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

from memrl.errors import ConfigError
from memrl.memory.embedders.base import Embedder
from memrl.memory.index.ann import ANN_BACKENDS, AnnGraph, ann_top, exact_scores
from memrl.memory.index.ann_files import AnnGraphs
from memrl.memory.index.dense_files import DenseFiles
from memrl.memory.records.types import TYPE_CODE
from memrl.memory.store.base import Store, content_hash
from memrl.memory.store.follow import Following
from memrl.memory.store.interface import ServerVectorIndex, check_dense_backend

#: The namespace whose cache :meth:`DenseIndexes.vectors` uses when a call names none ('' = the unscoped
#: cache, for texts of no namespace). The servers set it around each request (:func:`cache_scope`): a tool
#: that embeds a namespace's texts without naming it (MemUpdate's ``sample_memory``) stays in that cache.
_SCOPE: ContextVar[str] = ContextVar("memrl_cache_scope", default="")


@contextmanager
def cache_scope(ns: str) -> Iterator[None]:
    """Within this block, :meth:`DenseIndexes.vectors` without a namespace uses ``ns``'s cache."""
    token = _SCOPE.set(ns)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def vector_key(vector: np.ndarray) -> str:
    """Cache key of a caller-given vector (``v:`` + sha256 of its float32 bytes)."""
    return "v:" + hashlib.sha256(np.asarray(vector, dtype=np.float32).tobytes()).hexdigest()


class DenseIndex:
    """Unit vectors of one namespace's live items, with their rids and type codes."""

    def __init__(self, dim: int, generation: int) -> None:
        self.dim = dim
        self.generation = generation
        self.seq = 0
        self.n = 0
        self.matrix = np.zeros((0, dim), dtype=np.float32)
        self.rids = np.zeros(0, dtype=np.int64)
        self.types = np.zeros(0, dtype=np.int8)
        self.row_of: dict[int, int] = {}
        # snapshot files (memrl.memory.index.dense_files): the seq last saved (0: never), rows applied
        # since, and where the index came from ("store": read whole from the database, or "snapshot")
        self.saved_seq = 0
        self.unsaved = 0
        self.origin = "store"
        self._faiss: Any = None
        self.ann: AnnGraph | None = (
            None  # HNSW candidates (memrl.memory.index.ann), when the backend uses one
        )

    def _grow(self, need: int) -> None:
        cap = len(self.rids)
        if need <= cap:
            return
        # doubling below 64k rows, a quarter more above (a million 384-d rows are 1.5 GB: doubling would
        # hold 3 GB for one more row); amortised O(1) either way
        cap = max(need, 2 * cap if cap < 65_536 else cap + cap // 4, 256)
        m = np.zeros((cap, self.dim), dtype=np.float32)
        m[: self.n] = self.matrix[: self.n]
        r = np.zeros(cap, dtype=np.int64)
        r[: self.n] = self.rids[: self.n]
        t = np.zeros(cap, dtype=np.int8)
        t[: self.n] = self.types[: self.n]
        self.matrix, self.rids, self.types = m, r, t

    def upsert(self, rid: int, vector: np.ndarray, type_code: int) -> None:
        row = self.row_of.get(rid)
        if row is None:
            self._grow(self.n + 1)
            row = self.n
            self.n += 1
            self.row_of[rid] = row
        self.matrix[row] = vector
        self.rids[row] = rid
        self.types[row] = type_code
        self._faiss = None
        if self.ann is not None:
            self.ann.changed(rid, live=True)

    def remove(self, rid: int) -> None:
        row = self.row_of.pop(rid, None)
        if self.ann is not None:
            self.ann.changed(rid, live=False)
        if row is None:
            return
        last = self.n - 1
        if row != last:
            self.matrix[row] = self.matrix[last]
            self.rids[row] = self.rids[last]
            self.types[row] = self.types[last]
            self.row_of[int(self.rids[row])] = row
        self.n -= 1
        self._faiss = None

    def top(
        self,
        query: np.ndarray,
        k: int,
        *,
        type_codes: Sequence[int] | None = None,
        allowed: np.ndarray | None = None,
        backend: str = "numpy",
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best (rids, cosine scores), best first: exact, or from the ANN graph's candidates
        re-scored exactly (:func:`memrl.memory.index.ann.ann_top`) when this index has one and ``backend`` uses it."""
        if self.n == 0 or k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if backend == "faiss" and type_codes is None and allowed is None:
            return self._faiss_top(query, k)
        mask = None
        if type_codes is not None:
            mask = np.isin(self.types[: self.n], np.asarray(type_codes, dtype=np.int8))
        if allowed is not None:
            m2 = np.isin(self.rids[: self.n], allowed)
            mask = m2 if mask is None else mask & m2
        if self.ann is not None and backend in ANN_BACKENDS:
            return ann_top(self, query, k, mask)
        scores = exact_scores(self.matrix[: self.n], query)
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
            k = min(k, int(mask.sum()))
            if k == 0:
                return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if (
            k < self.n
        ):  # the k best, and every row tied with the k-th: ties go in row order, as on the ANN path
            kth = scores[np.argpartition(-scores, k - 1)[:k]].min()
            idx = np.flatnonzero(scores >= kth)
            idx = idx[np.argsort(-scores[idx], kind="stable")][:k]
        else:
            idx = np.argsort(-scores, kind="stable")
        return self.rids[idx], scores[idx]

    def vectors(self) -> dict[int, np.ndarray]:
        """Every indexed item's vector, by rid."""
        return {rid: self.matrix[row] for rid, row in self.row_of.items()}

    def cosines(self, rids: Sequence[int], query: np.ndarray) -> dict[int, float]:
        """Cosine with ``query`` of those of ``rids`` that have a vector here."""
        have = [r for r in rids if r in self.row_of]
        if not have:
            return {}
        sims = exact_scores(self.matrix[np.array([self.row_of[r] for r in have])], query)
        return dict(zip(have, sims.tolist(), strict=True))

    def _faiss_top(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        try:
            import faiss
        except ImportError as e:
            raise ConfigError("backend='faiss' needs `pip install memrl[faiss]`") from e
        if self._faiss is None:
            self._faiss = faiss.IndexFlatIP(self.dim)
            self._faiss.add(np.ascontiguousarray(self.matrix[: self.n]))
        scores, idx = self._faiss.search(query.reshape(1, -1).astype(np.float32), min(k, self.n))
        keep = idx[0] >= 0
        return self.rids[idx[0][keep]], scores[0][keep]


class DenseIndexes:
    """One :class:`DenseIndex` per namespace of a store, kept in step with it; the embedding cache.

    ``backend``: ``numpy`` or ``faiss`` (an exact in-process matrix per namespace, any store), ``ann`` (that
    matrix plus an HNSW graph whose candidates it re-scores: :mod:`memrl.memory.index.ann`), ``auto`` (exact below
    ``ann_min`` vectors in a namespace, ANN from there, exact if faiss is not installed), or ``pgvector``
    (the database searches: a store with ``server_vectors``, i.e. Postgres, hands out its own index)."""

    #: Vectors in a namespace from which ``auto`` uses a graph (bench/ann_choice.py, docs/results/store-and-scale.md): at
    #: 384 dimensions exact search takes 1.2 ms at 10k and 3.5 ms at 20k, an HNSW query with search's fetch
    #: 1.7 ms at 100k; below 20k exact is within 2 ms and needs no build (~0.46 ms a vector).
    ANN_MIN = 20_000

    def __init__(
        self, store: Store, embedder: Embedder, *, backend: str = "numpy", ann_min: int | None = None
    ) -> None:
        check_dense_backend(backend, store)
        self.store = store
        self.embedder = embedder
        self.backend = backend
        self.ann_min = self.ANN_MIN if ann_min is None else ann_min
        self._indexes: Following[Any] = Following(store, self._build)
        self._locks: dict[str, asyncio.Lock] = {}
        self.graphs = AnnGraphs(self)
        self.files = DenseFiles(self)

    # ------------------------------------------------------------------ embeddings (cached per namespace)
    async def vectors(self, texts: Sequence[str], ns: str | None = None) -> np.ndarray:
        """Unit vectors for ``texts``, embedding only those whose content hash is not cached yet, in the cache
        of namespace ``ns`` (default: the one :func:`cache_scope` names, else the unscoped cache ``''``)."""
        scope = _SCOPE.get() if ns is None else ns
        vecs, new = await self.embed(texts, scope)
        if new:  # a write: off the event loop
            await asyncio.to_thread(self.keep, scope, new)
        return vecs

    async def embed(self, texts: Sequence[str], ns: str) -> tuple[np.ndarray, dict[str, bytes]]:
        """Vectors for ``texts`` as namespace ``ns`` sees them, and the cache rows they need that are not
        written yet: the caller writes them with :meth:`keep` inside its own write transaction, so a
        refused write leaves no cache row behind."""
        return await self._by_key([(content_hash(t), t) for t in texts], ns)

    def keep(self, ns: str, rows: dict[str, bytes]) -> None:
        """Write cache rows from :meth:`embed` or :meth:`given` for namespace ``ns``."""
        self.store.put_vectors(self.embedder.name, rows, ns)

    async def _by_key(self, pairs: Sequence[tuple[str, str]], ns: str) -> tuple[np.ndarray, dict[str, bytes]]:
        """Vectors for ``(cache key, text)`` pairs in namespace ``ns``'s cache: the cached vector of the key,
        else the text's (its content hash), else one a caller embedded without a namespace (a builder's
        prefetch, in the unscoped cache), else a fresh embedding. Returns them with the rows ``ns``'s cache
        lacks (not written)."""
        model = self.embedder.name
        cached = self.store.get_vectors(model, [k for k, _ in pairs], ns)
        new: dict[str, bytes] = {}
        todo = [(k, t) for k, t in pairs if k not in cached]
        if todo:
            by_hash = {content_hash(t): t for _, t in todo}
            asked = {k for k, _ in pairs}  # a key that is the content hash was looked up already
            have = self.store.get_vectors(model, [h for h in by_hash if h not in asked], ns)
            missing = [h for h in by_hash if h not in have]
            if missing and ns:
                shared = self.store.get_vectors(model, missing, "")
                have.update(shared)
                new.update(shared)
                missing = [h for h in missing if h not in shared]
            if missing:
                fresh = await self.embedder.aembed([by_hash[h] for h in missing])
                blobs = {
                    h: np.asarray(v, dtype=np.float32).tobytes() for h, v in zip(missing, fresh, strict=True)
                }
                have.update(blobs)
                new.update(blobs)
            for k, t in todo:
                cached[k] = have[content_hash(t)]
        out = np.zeros((len(pairs), self.embedder.dim), dtype=np.float32)
        for i, (k, _) in enumerate(pairs):
            out[i] = np.frombuffer(cached[k], dtype=np.float32)
        return out, new

    def given(self, vector: Any) -> tuple[str, bytes]:
        """(cache key, normalised float32 bytes) of a caller-given vector for the current embedder."""
        v = np.asarray(vector, dtype=np.float32).reshape(-1)
        if v.shape[0] != self.embedder.dim:
            raise ConfigError(
                f"a given vector has {v.shape[0]} dimensions; the embedder has {self.embedder.dim}"
            )
        return vector_key(vector), (v / (np.linalg.norm(v) or 1.0)).tobytes()

    # ------------------------------------------------------------------ keeping the matrix in step
    async def sync(self, ns: str) -> DenseIndex:
        """The dense index of ``ns``, brought up to date with the database.

        One sync per namespace at a time: a second caller waits, so an older set of rows can never be
        applied after a newer one."""
        lock = self._locks.setdefault(ns, asyncio.Lock())
        async with lock:
            if self.backend == "pgvector":
                return await self._sync_server(ns)
            idx = self._indexes.current(ns)
            rows = self.store.changes_since(ns, idx.seq)
            if not rows:
                await self.graphs.follow(ns, idx)
                if self.files.due(idx):
                    await asyncio.to_thread(self.files.save, ns, idx)
                return idx
            live = [r for r in rows if r.dense]
            vecs = None
            if live:
                vecs, fresh = await self._by_key([(r.vector_key, r.content) for r in live], ns)
                if fresh:  # a write: off the event loop
                    await asyncio.to_thread(self.keep, ns, fresh)
            vi = 0
            for r in rows:
                if r.dense:
                    idx.upsert(r.rid, vecs[vi], TYPE_CODE[r.type])
                    vi += 1
                else:
                    idx.remove(r.rid)
                idx.seq = max(idx.seq, r.seq)
            idx.unsaved += len(rows)
            await self.graphs.follow(ns, idx)
            if self.files.due(idx):  # a write of the whole matrix: off the event loop
                await asyncio.to_thread(self.files.save, ns, idx)
            return idx

    async def _sync_server(self, ns: str) -> ServerVectorIndex:
        """The database's dense index of ``ns`` (``server_vectors`` back-ends), caught up: every live dense
        item changed since the last sync has a vector of this embedder in the database."""
        idx = self._indexes.current(ns)
        await idx.catch_up(self._by_key, self.keep, self.ann_min)
        return idx

    def _build(self, ns: str, generation: int, _key: Any) -> DenseIndex | ServerVectorIndex:
        """A new index of ``ns`` for ``generation``: the database's (``pgvector``) or an in-process one."""
        if self.backend == "pgvector":
            return self.store.vector_index(ns, self.embedder.name, self.embedder.dim, generation)
        return self._load(ns, generation)

    def _load(self, ns: str, generation: int) -> DenseIndex:
        """The index of ``ns`` from its snapshot file when it has a valid one (:mod:`.dense_files`), else
        fresh in one query (rows joined with their cached vectors, stacked at once). Rows whose vector is
        not cached are left to the incremental path (``seq`` stays below them)."""
        saved = self.files.load(ns, generation, DenseIndex)
        if saved is not None:
            return saved
        idx = DenseIndex(self.embedder.dim, generation)
        rows = self.store.dense_rows(ns, self.embedder.name)
        have = [r for r in rows if r[4] is not None and len(r[4]) == 4 * self.embedder.dim]
        missing_seq = min(
            (r[3] for r in rows if r[4] is None or len(r[4]) != 4 * self.embedder.dim), default=None
        )
        if have:
            idx._grow(len(have))
            idx.matrix[: len(have)] = np.frombuffer(b"".join(r[4] for r in have), dtype=np.float32).reshape(
                len(have), self.embedder.dim
            )
            idx.n = len(have)
            idx.rids[: idx.n] = [r[0] for r in have]
            idx.types[: idx.n] = [TYPE_CODE[r[1]] for r in have]
            idx.row_of = {r[0]: i for i, r in enumerate(have)}
        top = max((r[3] for r in rows), default=0)
        idx.seq = top if missing_seq is None else missing_seq - 1
        return idx

    def forget(self, ns: str) -> None:
        self._indexes.forget(ns)
        self.graphs.forget(ns)

    def close(self) -> None:
        """Save the graphs and matrices changed since they were last written (the next process loads, not
        rebuilds)."""
        self.graphs.save_all(self._indexes)
        self.files.save_all(self._indexes)

"""An approximate (HNSW) candidate graph over one namespace's dense vectors, and its file beside the store.

:class:`AnnGraph` only proposes candidates: :class:`~memrl.memory.index.dense.DenseIndex` re-scores them exactly
from its own matrix, so a hit's score is the exact path's to the bit, and a graph that lags the store is
never wrong, only less useful. The graph is faiss's HNSW (inner product; M 32, efConstruction 64) over 8-bit
scalar codes (``IndexHNSWSQ``; ``IndexHNSWFlat`` with ``AnnGraph.CODES = "flat"``), chosen by
``bench/ann_choice.py`` over faiss IVF and usearch (hnswlib has no wheel): figures in docs/store.md. faiss is optional (``pip install memrl[ann]``) and imported only when a graph is built.

The graph keeps positions -> rids. A rid written after the graph was built is *pending* until the next
:meth:`flush` adds it (HNSW adds incrementally); a rid whose vector changed or that was removed is *stale*:
its graph vector is wrong, so search scans the stale rids that are still live exactly and drops the dead
ones. When a fifth of the graph is stale, :meth:`worn` says to rebuild.

Building, following and persisting the graphs of a store is :mod:`memrl.memory.index.ann_files`.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from memrl.errors import ConfigError

#: Dense backends that use a graph: ``ann`` (always, for tests and benchmarks) and ``auto`` (when a
#: namespace holds at least ``DenseIndexes.ann_min`` vectors).
ANN_BACKENDS = ("ann", "auto")
#: A filter that leaves at most this share of the namespace is answered exactly over the allowed rows
#: (cheaper than over-fetching the graph, and never short).
SELECTIVE = 0.02


def exact_scores(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Cosines of unit rows with a unit query, each row's bits depending on that row alone.

    A BLAS matrix-vector product sums a row in an order that depends on where the row falls in its blocks,
    so the same row scores differently in the whole matrix and in a subset by the last bit, which reorders
    near-ties. numpy's einsum sums each row the same way wherever it is: the exact path, the ANN path's
    re-scoring and the server's candidates (:class:`~memrl.memory.index.dense.ServerIndex`) all score with it,
    and agree to the bit. It is as fast as the BLAS product here (memory-bound)."""
    return np.einsum("ij,j->i", matrix, query)


def require_faiss() -> Any:
    try:
        import faiss
    except ImportError as e:
        raise ConfigError("an ANN dense backend needs `pip install memrl[ann]` (faiss-cpu)") from e
    return faiss


class AnnGraph:
    """HNSW candidates over rids; see the module docstring."""

    M = 32
    #: Build depth (faiss ``efConstruction``). At 1M items (bench/store_data.py's vectors) a graph built at 64
    #: missed the target entirely for 3 of 100 queries at ``EF_SEARCH`` 400 (recall@10 0.939 / 0.970 on two
    #: seeds' queries); built at 128 it found every exact top 10 (1.0 / 1.0, and 1.0 on a third, held-out seed
    #: where 64 found 0.967) for 1.6x the build time (546 s against 333 s here): docs/results/store-and-scale.md,
    #: issue 59's seventh part. A graph loaded from its file keeps the depth it was built with.
    EF_CONSTRUCTION = 128
    #: The least search depth (faiss ``efSearch``; a deeper fetch searches deeper). At 1M items a top 10 found
    #: 0.87-0.92 of the exact top 10 at 64, 0.95-0.96 at 200, 0.97 at 400 for 0.5 ms more
    #: (runs/store/2026-12-02-ann-codes).
    EF_SEARCH = 400
    WORN = 0.2  # rebuild when this share of the graph is stale
    #: How a new graph stores its vectors: ``"sq8"`` (8-bit scalar codes, a quarter of float32's memory;
    #: the graph only proposes candidates, re-scored exactly) or ``"flat"`` (float32); environment variable
    #: ``MEMRL_ANN_CODES``. A graph loaded from its file keeps the codes it was built with.
    CODES = os.environ.get("MEMRL_ANN_CODES", "sq8")

    def __init__(self, dim: int, index: Any = None, rids: np.ndarray | None = None) -> None:
        faiss = require_faiss()
        self.dim = dim
        if index is None:
            if self.CODES == "sq8":
                index = faiss.IndexHNSWSQ(
                    dim, faiss.ScalarQuantizer.QT_8bit, self.M, faiss.METRIC_INNER_PRODUCT
                )
            elif self.CODES == "flat":
                index = faiss.IndexHNSWFlat(dim, self.M, faiss.METRIC_INNER_PRODUCT)
            else:
                raise ConfigError(f"unknown ANN codes {self.CODES!r}; use sq8 or flat")
            index.hnsw.efConstruction = self.EF_CONSTRUCTION
        self.index = index
        self.rids = np.zeros(0, dtype=np.int64) if rids is None else rids
        self.placed: set[int] = set(self.rids.tolist())
        self.pending: set[int] = set()
        self.stale: set[int] = set()
        self.saved = False  # the file on disk (if any) reflects this graph
        # loaded with its vectors memory-mapped from the file (read-only: faiss aborts the process on an
        # add to a mapped vector), made its own by :meth:`own` before the first add
        self.mapped = False

    @classmethod
    def build(cls, dim: int, rids: np.ndarray, matrix: np.ndarray) -> AnnGraph:
        g = cls(dim)
        g._add(rids, matrix)
        return g

    def own(self) -> None:
        """Copy a memory-mapped graph into memory (once), so it can grow."""
        if self.mapped:
            faiss = require_faiss()
            self.index = faiss.deserialize_index(faiss.serialize_index(self.index))
            self.mapped = False

    def _add(self, rids: np.ndarray, vectors: np.ndarray) -> None:
        if len(rids):
            self.own()
            vectors = np.ascontiguousarray(vectors, dtype=np.float32)
            if not self.index.is_trained:  # 8-bit codes: each dimension's range, from the first vectors
                self.index.train(vectors)
            self.index.add(vectors)
            self.rids = np.concatenate([self.rids, np.asarray(rids, dtype=np.int64)])
            self.placed.update(int(r) for r in rids)
        self.saved = False

    # ------------------------------------------------------------------ following the dense index
    def holds(self, pos: int, vector: np.ndarray) -> bool:
        """Whether the graph's vector at ``pos`` is ``vector``: bit for bit with float32 codes; with 8-bit
        codes within a quantization step of ``vector`` clipped to the range the codes were trained on (the
        graph stores a vector outside it at its edge)."""
        got = self.index.reconstruct(int(pos))
        faiss = require_faiss()
        storage = faiss.downcast_index(self.index.storage)
        if not isinstance(storage, faiss.IndexScalarQuantizer):
            return bool(np.array_equal(got, vector))
        trained = faiss.vector_to_array(storage.sq.trained)
        lo, span = (trained[: self.dim], trained[self.dim :]) if len(trained) == 2 * self.dim else trained[:2]
        step = span / 255
        return bool(np.all(np.abs(got - np.clip(vector, lo, lo + span)) <= step * 1.001 + 1e-6))

    def changed(self, rid: int, live: bool) -> None:
        """``rid`` was upserted (``live``) or removed in the dense index."""
        if rid in self.placed:
            self.stale.add(rid)
        elif live:
            self.pending.add(rid)
        else:
            self.pending.discard(rid)

    def flush(self, row_of: dict[int, int], matrix: np.ndarray) -> None:
        """Add the pending rids (those still live) to the graph."""
        todo = sorted(r for r in self.pending if r in row_of)
        self.pending.clear()
        if todo:
            self._add(np.array(todo, dtype=np.int64), matrix[[row_of[r] for r in todo]])

    def worn(self) -> bool:
        return len(self.stale) > self.WORN * max(len(self.rids), 1)

    # ------------------------------------------------------------------ search
    def candidates(self, query: np.ndarray, fetch: int) -> np.ndarray:
        """Up to ``fetch`` rids near ``query`` from the graph (some possibly stale), plus the pending and
        stale rids, which the graph cannot rank."""
        out = []
        if len(self.rids):
            faiss = require_faiss()
            params = faiss.SearchParametersHNSW()
            params.efSearch = max(self.EF_SEARCH, fetch)
            _, pos = self.index.search(
                query.reshape(1, -1).astype(np.float32), min(fetch, len(self.rids)), params=params
            )
            pos = pos[0][pos[0] >= 0]
            out.append(self.rids[pos])
        extra = self.pending | self.stale
        if extra:
            out.append(np.fromiter(extra, dtype=np.int64, count=len(extra)))
        return np.unique(np.concatenate(out)) if out else np.zeros(0, dtype=np.int64)


def ann_top(idx: Any, query: np.ndarray, k: int, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best (rids, scores) of a :class:`~memrl.memory.index.dense.DenseIndex` ``idx`` among the rows
    ``mask`` allows (all when None), from ``idx.ann``'s candidates re-scored exactly.

    Never fewer than ``min(k, allowed)``: the graph is scanned before filtering, so the fetch starts at
    ``(k + max(k, 30)) / selectivity`` and grows fourfold until ``k`` allowed live candidates are found;
    a selective filter (at most :data:`SELECTIVE` of the rows), or one still short after a fetch of the
    whole graph or of an eighth of the namespace, is answered exactly over the allowed rows instead."""
    n = idx.n
    allowed = n if mask is None else int(mask.sum())
    k = min(k, allowed)
    if k <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    if allowed <= SELECTIVE * n:
        return _scored(idx, np.flatnonzero(mask), query, k)
    fetch = int(np.ceil((k + max(k, 30)) * n / allowed))
    while True:
        cand = idx.ann.candidates(query, fetch)
        rows = np.fromiter((idx.row_of.get(r, -1) for r in cand.tolist()), dtype=np.int64, count=len(cand))
        rows = rows[rows >= 0]
        if mask is not None:
            rows = rows[mask[rows]]
        if len(rows) >= k:
            return _scored(idx, np.sort(rows), query, k)
        fetch *= 4
        if fetch > max(n // 8, len(idx.ann.rids)):  # the whole graph was asked for, or too much of it
            break
    rows = np.arange(n) if mask is None else np.flatnonzero(mask)
    return _scored(idx, rows, query, k)


def _scored(idx: Any, rows: np.ndarray, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of ``rows`` (ascending) by exact cosine, ties in row order as the exact path."""
    scores = exact_scores(idx.matrix[rows], query)
    order = np.argsort(-scores, kind="stable")[:k]
    return idx.rids[rows[order]], scores[order]

"""Dense search run by the database (pgvector): the interface of :class:`~memrl.memory.index.dense.DenseIndex`
that search uses, with no vectors kept in this process.

A namespace with fewer vectors than the threshold is scanned exactly over its own rows
(:meth:`~memrl.memory.backends.postgres.store.PostgresStore.vector_top`); a larger one gets its own HNSW index
(:mod:`memrl.memory.backends.postgres.ann`) whose candidates are over-fetched under filters and re-scored here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from memrl.memory.backends.postgres.ann import EF_MAX
from memrl.memory.index.ann import exact_scores
from memrl.memory.records.types import TYPE_NAME
from memrl.memory.store.interface import Embed


class PgVectorIndex:
    """Dense search run by the database (pgvector on :class:`~memrl.memory.backends.postgres.store.PostgresStore`): the
    interface of :class:`DenseIndex` that search uses, with no vectors kept in this process.

    pgvector sums a dot product in float32 one term after another, BLAS in blocks: scores differ in the last
    bit, which reorders near-ties. So the database picks the candidates (``MARGIN`` more than asked) and
    they are scored here as :class:`DenseIndex` scores them (:func:`~memrl.memory.index.ann.exact_scores`, ties by rid): the
    same ranking and the same scores on both back-ends."""

    MARGIN = 32

    def __init__(self, store: Any, ns: str, model: str, dim: int, generation: int) -> None:
        self.store, self.ns, self.model, self.dim, self.generation = store, ns, model, dim, generation
        self.seq = 0
        # the dimension of the namespace's HNSW index, when it has one
        self.hnsw_dim = dim if store.has_hnsw(ns, model) else 0

    async def catch_up(
        self, embed: Embed, keep: Callable[[str, dict[str, bytes]], None], ann_min: int
    ) -> None:
        """Make sure every live dense item of the namespace changed since the last call has a vector of this
        model in the database (triggers attach cached vectors; an item whose vector is not cached is
        embedded by ``embed``, as the in-process index would, and its cache rows written by ``keep``); build
        the namespace's HNSW index once it holds ``ann_min`` vectors."""
        store, ns, model = self.store, self.ns, self.model
        upto = store.max_seq(ns)
        if upto <= self.seq:
            return
        rows = store.vectors_missing(ns, model, self.seq, upto)
        if rows:
            vecs, fresh = await embed([(key, text) for _, _, key, text in rows], ns)
            keep(ns, fresh)
            store.put_item_vectors(ns, model, [(r[0], r[1], v) for r, v in zip(rows, vecs, strict=True)])
        self.seq = upto
        if not self.hnsw_dim and store.vector_count(ns, model) >= ann_min:
            await asyncio.to_thread(store.ensure_hnsw, ns, model, self.dim)
            self.hnsw_dim = self.dim

    def top(
        self,
        query: np.ndarray,
        k: int,
        *,
        type_codes: Sequence[int] | None = None,
        allowed: np.ndarray | None = None,
        backend: str = "pgvector",
    ) -> tuple[np.ndarray, np.ndarray]:
        if k <= 0 or (allowed is not None and len(allowed) == 0):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        types = None if type_codes is None else [TYPE_NAME[c] for c in type_codes]
        rows = self._ann(query, k, types, allowed) if self.hnsw_dim else None
        if rows is None:
            rows = self.store.vector_top(self.ns, self.model, query, k + self.MARGIN, types, allowed)
        if not rows:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        rows.sort(key=lambda r: r[0])
        rids = np.array([r for r, _ in rows], dtype=np.int64)
        scores = exact_scores(np.stack([v for _, v in rows]), query)
        order = np.argsort(-scores, kind="stable")[:k]
        return rids[order], scores[order]

    def _ann(self, query: np.ndarray, k: int, types: Any, allowed: Any) -> list[Any] | None:
        """``k`` + ``MARGIN`` candidates from the namespace's HNSW index, over-fetched fourfold while a filter
        leaves fewer than ``k``; None (scan exactly) when still short at pgvector's largest ``ef_search``,
        so a filtered search never comes back short for having scanned the index first."""
        want = k + self.MARGIN
        fetch = want if allowed is None and types is None else min(EF_MAX, 4 * want)
        while True:
            rows = self.store.vector_ann(self.ns, self.model, self.hnsw_dim, query, fetch, types, allowed)
            if len(rows) >= want:
                return rows
            if fetch >= EF_MAX:
                return rows if len(rows) >= k else None
            fetch = min(EF_MAX, 4 * fetch)

    def vectors(self) -> dict[int, np.ndarray]:
        return self.store.vector_rows(self.model, None, ns=self.ns)

    def cosines(self, rids: Sequence[int], query: np.ndarray) -> dict[int, float]:
        vecs = self.store.vector_rows(self.model, rids)
        if not vecs:
            return {}
        have = list(vecs)
        return dict(zip(have, exact_scores(np.stack([vecs[r] for r in have]), query).tolist(), strict=True))

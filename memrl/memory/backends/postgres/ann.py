"""pgvector's HNSW on Postgres: one partial index per large namespace and model, its candidates re-scored.

``memory_vectors.embedding`` has no fixed dimension (models differ), and an HNSW index needs one, so each
index is on the expression ``embedding::vector(DIM)``, partial on one model and one namespace
(``WHERE model = M AND namespace = N``). That is the partition the issue asks for: pgvector 0.6.2 (the one
``pgserver`` bundles) has no iterative index scans, so one index over all namespaces would return its
``hnsw.ef_search`` nearest vectors of any tenant and a namespace filter after it could leave fewer than
``k``; a namespace's own index never loses a row to the namespace filter. Type and metadata filters still
come after the scan: :class:`~memrl.memory.index.dense.ServerIndex` over-fetches (``ef_search`` grows up to
pgvector's 1,000) and falls back to the exact scan (:meth:`vector_top`) when still short, and re-scores the
candidates as the exact path does. A namespace below the threshold keeps the exact scan over the
``(model, namespace)`` btree, which reads that namespace only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

#: pgvector's largest ``hnsw.ef_search``.
EF_MAX = 1000
#: The least ``hnsw.ef_search`` a search runs with (a fetch above it searches wider), chosen at 1M items by
#: bench/pg_ann.py (docs/results/store-and-scale.md, 100 queries near stored vectors): with the index's m 32,
#: recall@10 against exact 0.936 at 400, 0.956 at 600, **0.966 at 800**, 0.967 at pgvector's largest (1,000);
#: with pgvector's default m 16 it was 0.94 at 1,000, and the store's old ef_search (its fetch, about 80)
#: found 56%. On a quiet machine, another build and queries of another seed: 0.951 at 800 (p50 of the
#: store's dense search 24.9 ms).
EF_MIN = 800
#: HNSW build parameters of a namespace's index: m 32 as the in-process graph (pgvector's default is 16),
#: ef_construction 64 (pgvector's and the graph's). An index built before keeps its own parameters.
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 64


def hnsw_params(m: int | None = None, ef_construction: int | None = None) -> tuple[int, int]:
    """(m, ef_construction) of an index build: :data:`HNSW_M` and :data:`HNSW_EF_CONSTRUCTION` unless given,
    the default ef_construction at least ``2 * m``, as pgvector requires."""
    m = HNSW_M if m is None else int(m)
    return m, max(HNSW_EF_CONSTRUCTION, 2 * m) if ef_construction is None else int(ef_construction)


class PgAnnMixin:
    """The HNSW side of :class:`~memrl.memory.backends.postgres.store.PostgresStore`."""

    pool: Any
    read: Any
    _errors: Any

    @staticmethod
    def hnsw_name(ns: str, model: str) -> str:
        return "memory_vectors_hnsw_" + hashlib.sha256(f"{model}\0{ns}".encode()).hexdigest()[:24]

    def vector_count(self, ns: str, model: str) -> int:
        return self.read(
            "SELECT count(*) FROM memory_vectors WHERE model = ? AND namespace = ?", [model, ns]
        )[0][0]

    def has_hnsw(self, ns: str, model: str) -> bool:
        rows = self.read(
            "SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(?)",
            [self.hnsw_name(ns, model)],
        )
        return bool(rows and rows[0][0])

    def ensure_hnsw(
        self, ns: str, model: str, dim: int, *, m: int | None = None, ef_construction: int | None = None
    ) -> None:
        """Build ``ns``'s HNSW index of ``model`` (``m`` and ``ef_construction`` as :func:`hnsw_params`
        resolves them) unless it exists. Blocks writers of ``memory_vectors`` while it builds (a plain CREATE INDEX); two processes
        asking at once build it once."""
        from psycopg import sql

        m, efc = hnsw_params(m, ef_construction)

        stmt = sql.SQL(
            "CREATE INDEX IF NOT EXISTS {name} ON memory_vectors USING hnsw ((embedding::vector({dim})) "
            "vector_ip_ops) WITH (m = {m}, ef_construction = {efc}) WHERE model = {model} AND namespace = {ns}"
        ).format(
            name=sql.Identifier(self.hnsw_name(ns, model)),
            dim=sql.Literal(int(dim)),
            m=sql.Literal(m),
            efc=sql.Literal(efc),
            model=sql.Literal(model),
            ns=sql.Literal(ns),
        )
        with self._errors(), self.pool.connection() as conn:
            conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 1))", (self.hnsw_name(ns, model),))
            try:
                conn.execute(stmt)
                conn.commit()
            finally:
                conn.execute(
                    "SELECT pg_advisory_unlock(hashtextextended(%s, 1))", (self.hnsw_name(ns, model),)
                )
                conn.commit()

    def vector_ann(
        self,
        ns: str,
        model: str,
        dim: int,
        query: np.ndarray,
        fetch: int,
        types: Sequence[str] | None,
        allowed: Any,
        *,
        ef_search: int | None = None,
        explain: bool = False,
    ) -> list[Any]:
        """Up to ``fetch`` (rid, vector) of ``ns`` from its HNSW index, nearest first, then filtered by
        ``types`` and ``allowed`` rids: possibly fewer than asked. ``hnsw.ef_search`` is ``ef_search`` when
        given, else ``fetch`` and at least :data:`EF_MIN`; at most :data:`EF_MAX`. ``explain``: the plan's
        lines instead."""
        from pgvector import Vector
        from psycopg import sql

        where, params = sql.SQL(""), []
        if types is not None:
            where += sql.SQL(" AND type = ANY(%s::text[])")
            params.append(list(types))
        if allowed is not None:
            where += sql.SQL(" AND rid = ANY(%s::bigint[])")
            params.append([int(r) for r in allowed])
        stmt = sql.SQL(
            "{explain}SELECT rid, embedding FROM memory_vectors WHERE model = {model} AND namespace = {ns}{where} "
            "ORDER BY embedding::vector({dim}) <#> %s LIMIT %s"
        ).format(
            explain=sql.SQL("EXPLAIN " if explain else ""),
            model=sql.Literal(model),
            ns=sql.Literal(ns),
            where=where,
            dim=sql.Literal(int(dim)),
        )
        params += [Vector(np.asarray(query, dtype=np.float32)), int(fetch)]
        with self._errors(), self.pool.connection() as conn, conn.transaction():
            # this statement is only sent for a namespace that has its index: keep the planner on it
            ef = int(ef_search) if ef_search is not None else max(EF_MIN, int(fetch))
            conn.execute(f"SET LOCAL hnsw.ef_search = {min(EF_MAX, max(1, ef))}")
            conn.execute("SET LOCAL enable_seqscan = off")
            conn.execute("SET LOCAL enable_sort = off")
            rows = conn.execute(stmt, params, binary=not explain).fetchall()
        if explain:
            return [r[0] for r in rows]
        return [(r[0], np.asarray(r[1].to_numpy(), dtype=np.float32)) for r in rows]

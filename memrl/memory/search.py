"""Hybrid search over the store: exact dense search + BM25 (SQLite FTS5), fused by reciprocal rank.

Dense search is exact brute force over a per-namespace matrix of unit vectors held in memory (or a FAISS
``IndexFlatIP`` when ``backend="faiss"``). The matrix follows the database incrementally: every row carries
the history sequence number of its last change, so a search first applies the rows changed since the last
one (``WHERE seq > ?``), including rows written by other processes. Vectors come from the embedding
cache (keyed by model and content hash), so no text is embedded twice.

Fusion is reciprocal rank fusion (Cormack et al. 2009): ``score = sum_r w_r / (k + rank_r)``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from memrl.errors import ConfigError, ValidationError
from memrl.memory.embedders import Embedder
from memrl.memory.store import SQLiteStore, content_hash
from memrl.memory.types import MemoryType, SearchHit

SearchMode = Literal["hybrid", "dense", "bm25"]

_TYPE_CODE = {t.value: i for i, t in enumerate(MemoryType)}
_TOKEN = re.compile(r"\w+", re.UNICODE)
#: Words too common to help BM25 (they only slow FTS5 down on large stores).
STOPWORDS = frozenset(
    "a an and are as at be by did do does for from had has have he her his how i in is it its me my of on or "
    "our she so that the their them they this to was we were what when where which who whom why will with "
    "you your".split()
)


def fts_query(text: str) -> str:
    """An FTS5 MATCH expression: the query's distinct non-stopword tokens, quoted, OR-ed together."""
    tokens = [t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]
    tokens = list(dict.fromkeys(tokens))
    return " OR ".join(f'"{t}"' for t in tokens)


def rrf(
    rankings: Sequence[Sequence[int]], *, k: int = 60, weights: Sequence[float] | None = None
) -> dict[int, float]:
    """Reciprocal rank fusion of ranked key lists (rank 1 first) into ``key -> fused score``."""
    weights = weights or [1.0] * len(rankings)
    scores: dict[int, float] = {}
    for ranking, w in zip(rankings, weights, strict=True):
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + w / (k + rank)
    return scores


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
        self.hash_of: dict[int, str] = {}
        self._faiss: Any = None

    def _grow(self, need: int) -> None:
        cap = len(self.rids)
        if need <= cap:
            return
        cap = max(need, 2 * cap, 256)
        m = np.zeros((cap, self.dim), dtype=np.float32)
        m[: self.n] = self.matrix[: self.n]
        r = np.zeros(cap, dtype=np.int64)
        r[: self.n] = self.rids[: self.n]
        t = np.zeros(cap, dtype=np.int8)
        t[: self.n] = self.types[: self.n]
        self.matrix, self.rids, self.types = m, r, t

    def upsert(self, rid: int, vector: np.ndarray, type_code: int, chash: str) -> None:
        row = self.row_of.get(rid)
        if row is None:
            self._grow(self.n + 1)
            row = self.n
            self.n += 1
            self.row_of[rid] = row
        self.matrix[row] = vector
        self.rids[row] = rid
        self.types[row] = type_code
        self.hash_of[rid] = chash
        self._faiss = None

    def remove(self, rid: int) -> None:
        row = self.row_of.pop(rid, None)
        self.hash_of.pop(rid, None)
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
        """The ``k`` best (rids, cosine scores), best first."""
        if self.n == 0 or k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if backend == "faiss" and type_codes is None and allowed is None:
            return self._faiss_top(query, k)
        scores = self.matrix[: self.n] @ query
        mask = None
        if type_codes is not None:
            mask = np.isin(self.types[: self.n], np.asarray(type_codes, dtype=np.int8))
        if allowed is not None:
            m2 = np.isin(self.rids[: self.n], allowed)
            mask = m2 if mask is None else mask & m2
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
            k = min(k, int(mask.sum()))
            if k == 0:
                return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if k < self.n:
            idx = np.argpartition(-scores, k - 1)[:k]
            idx = idx[np.argsort(-scores[idx], kind="stable")]
        else:
            idx = np.argsort(-scores, kind="stable")
        return self.rids[idx], scores[idx]

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


@dataclass(frozen=True)
class SearchOptions:
    """How a search runs. ``threshold`` is a minimum cosine similarity, applied in every mode."""

    mode: SearchMode = "hybrid"
    top_k: int = 10
    types: tuple[MemoryType, ...] | None = None
    filters: dict[str, Any] | None = None
    threshold: float | None = None
    candidates: int = 50  # depth of each ranked list before fusion
    rrf_k: int = 60
    weights: tuple[float, float] = (1.0, 1.0)  # (dense, bm25)


class SearchIndex:
    """Dense + lexical search over a :class:`SQLiteStore`, with the embedding cache in the same database."""

    def __init__(self, store: SQLiteStore, embedder: Embedder, *, backend: str = "numpy") -> None:
        if backend not in ("numpy", "faiss"):
            raise ConfigError(f"unknown dense backend {backend!r}; use 'numpy' or 'faiss'")
        self.store = store
        self.embedder = embedder
        self.backend = backend
        self._indexes: dict[str, DenseIndex] = {}

    # ------------------------------------------------------------------ embeddings (cached)
    async def vectors(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors for ``texts``, embedding only those whose content hash is not cached yet."""
        hashes = [content_hash(t) for t in texts]
        cached = self.store.get_vectors(self.embedder.name, hashes)
        missing = list(dict.fromkeys(h for h in hashes if h not in cached))
        if missing:
            text_of = dict(zip(hashes, texts, strict=True))
            fresh = await self.embedder.aembed([text_of[h] for h in missing])
            blobs = {
                h: np.asarray(v, dtype=np.float32).tobytes() for h, v in zip(missing, fresh, strict=True)
            }
            self.store.put_vectors(self.embedder.name, blobs)
            cached.update(blobs)
        out = np.zeros((len(texts), self.embedder.dim), dtype=np.float32)
        for i, h in enumerate(hashes):
            out[i] = np.frombuffer(cached[h], dtype=np.float32)
        return out

    # ------------------------------------------------------------------ keeping the matrix in step
    async def sync(self, ns: str) -> DenseIndex:
        gen = self.store.generation(ns)
        idx = self._indexes.get(ns)
        if idx is None or idx.generation != gen:
            idx = self._indexes[ns] = await self._load(ns, gen)
        rows = self.store.changes_since(ns, idx.seq)
        if not rows:
            return idx
        live = [r for r in rows if not r[3]]
        vecs = await self.vectors([r[6] for r in live]) if live else None
        vi = 0
        for rid, _id, mtype, deleted, chash, seq, _content in rows:
            if deleted:
                idx.remove(rid)
            else:
                idx.upsert(rid, vecs[vi], _TYPE_CODE[mtype], chash)
                vi += 1
            idx.seq = max(idx.seq, seq)
        return idx

    async def _load(self, ns: str, generation: int) -> DenseIndex:
        """A fresh index of ``ns`` in one query: live rows joined with their cached vectors, stacked at once.
        Rows whose vector is not cached yet are left to the incremental path (``seq`` stays below them)."""
        idx = DenseIndex(self.embedder.dim, generation)
        rows = self.store.live_vectors(ns, self.embedder.name)
        have = [r for r in rows if r[4] is not None]
        missing_seq = min((r[3] for r in rows if r[4] is None), default=None)
        if have:
            idx._grow(len(have))
            idx.matrix[: len(have)] = np.frombuffer(b"".join(r[4] for r in have), dtype=np.float32).reshape(
                len(have), self.embedder.dim
            )
            idx.n = len(have)
            idx.rids[: idx.n] = [r[0] for r in have]
            idx.types[: idx.n] = [_TYPE_CODE[r[1]] for r in have]
            idx.row_of = {r[0]: i for i, r in enumerate(have)}
            idx.hash_of = {r[0]: r[2] for r in have}
        top = max((r[3] for r in rows), default=0)
        # Replay from just below the first row without a vector (those get embedded by the caller).
        idx.seq = top if missing_seq is None else missing_seq - 1
        return idx

    def forget(self, ns: str) -> None:
        self._indexes.pop(ns, None)

    # ------------------------------------------------------------------ retrievers
    def bm25(self, ns: str, query: str, k: int, opts: SearchOptions) -> list[tuple[int, float]]:
        """(rid, bm25 score) best first; FTS5's bm25() is lower-is-better, we return its negation."""
        match = fts_query(query)
        if not match or k <= 0:
            return []
        where, params = "", []
        if opts.types:
            where += f" AND m.type IN ({','.join('?' * len(opts.types))})"
            params += [t.value for t in opts.types]
        mw, mp = self.store.metadata_where(opts.filters)
        # ORDER BY the FTS5 ``rank`` column (bm25 by default) lets FTS5 sort inside the virtual table, so the
        # join stops after k rows that pass the filters (no temp B-tree over every match).
        rows = self.store.read(
            "SELECT m.rid, memories_fts.rank FROM memories_fts JOIN memories m ON m.rid = memories_fts.rowid "
            f"WHERE memories_fts MATCH ? AND m.namespace = ? AND m.deleted = 0{where}{mw} "
            "ORDER BY memories_fts.rank LIMIT ?",
            [match, ns, *params, *mp, k],
        )
        return [(r[0], -r[1]) for r in rows]

    async def search(
        self, ns: str, query: str, opts: SearchOptions, *, query_vector: np.ndarray | None = None
    ) -> list[SearchHit]:
        if opts.top_k < 1:
            raise ValidationError(f"top_k must be at least 1, got {opts.top_k}")
        if opts.mode not in ("hybrid", "dense", "bm25"):
            raise ValidationError(f"unknown search mode {opts.mode!r}; use hybrid, dense or bm25")
        need_dense = opts.mode != "bm25" or opts.threshold is not None
        qv = None
        idx = None
        if need_dense:
            idx = await self.sync(ns)
            if query_vector is not None:
                qv = np.asarray(query_vector, dtype=np.float32).reshape(-1)
                qv = qv / (np.linalg.norm(qv) or 1.0)
            else:
                qv = (await self.embedder.aembed([query]))[0]
        allowed = (
            np.asarray(self.store.allowed_rids(ns, opts.filters), dtype=np.int64) if opts.filters else None
        )
        type_codes = [_TYPE_CODE[t.value] for t in opts.types] if opts.types else None
        depth = max(opts.candidates, opts.top_k)

        dense_rank: dict[int, int] = {}
        dense_score: dict[int, float] = {}
        bm25_rank: dict[int, int] = {}
        if opts.mode in ("dense", "hybrid"):
            rids, scores = idx.top(qv, depth, type_codes=type_codes, allowed=allowed, backend=self.backend)
            for rank, (rid, s) in enumerate(zip(rids.tolist(), scores.tolist(), strict=True), start=1):
                dense_rank[rid], dense_score[rid] = rank, s
        if opts.mode in ("bm25", "hybrid"):
            for rank, (rid, _s) in enumerate(self.bm25(ns, query, depth, opts), start=1):
                bm25_rank[rid] = rank

        if opts.mode == "dense":
            fused = dict(dense_score)
        elif opts.mode == "bm25":
            fused = {rid: 1.0 / rank for rid, rank in bm25_rank.items()}
        else:
            fused = rrf([list(dense_rank), list(bm25_rank)], k=opts.rrf_k, weights=opts.weights)

        if (
            qv is not None
        ):  # cosine for every candidate (bm25-only hits too), for the threshold and the report
            missing = [rid for rid in fused if rid not in dense_score and rid in idx.row_of]
            if missing:
                rows = np.array([idx.row_of[r] for r in missing])
                for rid, s in zip(missing, (idx.matrix[rows] @ qv).tolist(), strict=True):
                    dense_score[rid] = s
            if opts.threshold is not None:
                fused = {r: s for r, s in fused.items() if dense_score.get(r, -1.0) >= opts.threshold}

        best = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[: opts.top_k]
        items = self.store.get_many_by_rid([rid for rid, _ in best])
        return [
            SearchHit(
                item=items[rid],
                score=float(score),
                dense_score=dense_score.get(rid),
                bm25_rank=bm25_rank.get(rid),
                dense_rank=dense_rank.get(rid),
            )
            for rid, score in best
            if rid in items and not items[rid].deleted
        ]

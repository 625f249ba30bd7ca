"""Hybrid search over the store: exact dense search + BM25 (SQLite FTS5), fused, with query priors.

Dense search is exact brute force over a per-namespace matrix of unit vectors held in memory (or a FAISS
``IndexFlatIP`` when ``backend="faiss"``). The matrix follows the database incrementally: every row carries
the history sequence number of its last change, so a search first applies the rows changed since the last
one (``WHERE seq > ?``), including rows written by other processes. Vectors come from the embedding
cache (keyed by model and content hash), so no text is embedded twice.

Fusion is reciprocal rank fusion (Cormack et al. 2009): ``score = sum_r w_r / (k + rank_r)``, or a convex
combination of min-max normalised scores. Items whose metadata says ``{"dense": false}`` are lexical-only
(BM25 sees them, the dense index skips them and never embeds them): the ``raw`` builder stores a turn's
neighbour context that way. :class:`SearchOptions` lists the retrieval features (collapsing several items
of one unit into one hit, speaker and session priors); their defaults are the settings measured best on
LoCoMo by ``memrl eval retrieval --ablation``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from memrl.errors import ConfigError, ValidationError
from memrl.memory.embedders import Embedder
from memrl.memory.query import Facts, apply_priors, diversify, named_in
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


def convex(score_lists: Sequence[dict[Any, float]], weights: Sequence[float]) -> dict[Any, float]:
    """Convex combination of min-max normalised scores: ``sum_r w_r * (s - min_r) / (max_r - min_r)``.

    A key missing from a list gets 0 from it (as if it scored that list's minimum).
    """
    fused: dict[Any, float] = {}
    for scores, w in zip(score_lists, weights, strict=True):
        if not scores:
            continue
        lo, hi = min(scores.values()), max(scores.values())
        span = hi - lo
        for key, s in scores.items():
            fused[key] = fused.get(key, 0.0) + w * ((s - lo) / span if span > 0 else 1.0)
    for scores in score_lists:
        for key in scores:
            fused.setdefault(key, 0.0)
    return fused


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


Fusion = Literal["rrf", "convex"]


@dataclass(frozen=True)
class SearchOptions:
    """How a search runs. ``threshold`` is a minimum cosine similarity, applied in every mode.

    The defaults are the best settings measured on LoCoMo (``memrl eval retrieval --ablation``; knobs tuned on
    conversations 0-4). ``SearchOptions(**PLAIN)`` is the plain search of before: RRF (k=60, equal weights)
    over 50 candidates per list, no collapsing, no priors.

    Retrieval features (each can be switched off, which gives the plain behaviour):

    - ``collapse``: metadata key naming the unit an item represents (the ``raw`` builder's ``unit`` = turn
      id). Items of one unit are collapsed into one hit, in each ranked list before fusion (max-pooling),
      so a unit stored in several views counts once. Items without the key are never collapsed.
    - ``fusion``: ``rrf`` (``sum w / (rrf_k + rank)``) or ``convex`` (``sum w * minmax(score)`` over each
      list's candidates, missing = 0).
    - ``speaker_boost``: when the query names exactly one of the values of metadata ``speaker_key`` found
      among the candidates (whole word, any case), that speaker's items get ``speaker_boost`` times the
      best candidate's score added. Questions about a person are mostly answered by what they said.
    - ``strip_speaker``: when the query names exactly one of the namespace's speakers, BM25 runs without
      the name (every item of theirs carries it, so it matches everything they said; the speaker prior
      does that job).
    - ``date_boost``: when the query mentions a month and/or year ("in October 2023"), items whose
      metadata ``date_key`` (ISO) falls in it get ``date_boost`` times the best score added.
    - ``time_boost``: when the query asks about time ("When did...", "How long..."), items whose metadata
      ``time_key`` is true (the ``raw`` builder marks turns with a time expression) get ``time_boost``
      times the best score added.
    - ``prf_docs``: pseudo-relevance feedback for BM25: the ``prf_terms`` words most frequent in the top
      ``prf_docs`` hits (in at least two of them) expand the query; the expanded list's min-max normalised
      scores, times ``prf_weight``, are added to the original's. Off: +0.006 recall@10 on LoCoMo, within
      noise, for three times the BM25 search time.
    - ``diversity``: results are picked greedily; each already picked result from the same session
      lowers a candidate's score by ``diversity`` times the best score (questions that aggregate over
      the conversation have evidence in many sessions).
    - ``session_boost``: every item gets ``session_boost`` times its session's share of the candidates'
      total score (sum over the session's candidates / best session's sum) times the best score added:
      evidence clusters in sessions that match the query as a whole.
    """

    mode: SearchMode = "hybrid"
    top_k: int = 10
    types: tuple[MemoryType, ...] | None = None
    filters: dict[str, Any] | None = None
    threshold: float | None = None
    candidates: int = 100  # depth of each ranked list before fusion
    rrf_k: int = 60
    weights: tuple[float, float] = (0.3, 0.7)  # (dense, bm25)
    fusion: Fusion = "convex"
    collapse: str | None = "unit"
    speaker_key: str | None = "speaker"
    speaker_boost: float = 0.5
    strip_speaker: bool = True
    date_key: str | None = "date"
    date_boost: float = 0.2
    time_key: str | None = "mentions_time"
    time_boost: float = 0.4
    diversity: float = 0.0
    prf_docs: int = 0
    prf_terms: int = 8
    prf_weight: float = 0.3
    session_boost: float = 0.0


@dataclass
class _Facts:
    """Per-namespace cache of :meth:`SearchIndex._facts`: rid -> (unit, speaker, session, date, time)."""

    generation: int
    keys: tuple[Any, ...]
    seq: int = 0
    of: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    speakers: set[str] = field(default_factory=set)


#: Options that turn every retrieval feature off: plain RRF hybrid search (the baseline).
PLAIN: dict[str, Any] = {
    "candidates": 50,
    "rrf_k": 60,
    "weights": (1.0, 1.0),
    "fusion": "rrf",
    "collapse": None,
    "speaker_boost": 0.0,
    "strip_speaker": False,
    "date_boost": 0.0,
    "time_boost": 0.0,
    "diversity": 0.0,
    "session_boost": 0.0,
}


class SearchIndex:
    """Dense + lexical search over a :class:`SQLiteStore`, with the embedding cache in the same database."""

    def __init__(self, store: SQLiteStore, embedder: Embedder, *, backend: str = "numpy") -> None:
        if backend not in ("numpy", "faiss"):
            raise ConfigError(f"unknown dense backend {backend!r}; use 'numpy' or 'faiss'")
        self.store = store
        self.embedder = embedder
        self.backend = backend
        self._indexes: dict[str, DenseIndex] = {}
        self._fact_cache: dict[str, _Facts] = {}

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
        # Items with metadata {"dense": false} are lexical-only: never embedded, invisible to dense search.
        # Items with metadata {"dense_from": {id: weight}} get the normalised weighted sum of those items'
        # vectors (computed when they change) instead of an embedding of their own text.
        rows = self.store.read(
            "SELECT rid, id, type, deleted OR COALESCE(json_extract(metadata, '$.dense') = 0, 0), "
            "content_hash, seq, content, json_extract(metadata, '$.dense_from') "
            "FROM memories WHERE namespace = ? AND seq > ? ORDER BY seq",
            (ns, idx.seq),
        )
        if not rows:
            return idx
        plain = [r for r in rows if not r[3] and r[7] is None]
        vecs = dict(zip((r[0] for r in plain), await self.vectors([r[6] for r in plain]), strict=True))
        derived = [r for r in rows if not r[3] and r[7] is not None]
        if derived:
            vecs.update(await self._pooled(ns, [(r[0], r[7]) for r in derived]))
        for rid, _id, mtype, deleted, chash, seq, _content, _from in rows:
            if deleted or rid not in vecs:
                idx.remove(rid)
            else:
                idx.upsert(rid, vecs[rid], _TYPE_CODE[mtype], chash)
            idx.seq = max(idx.seq, seq)
        return idx

    async def _pooled(self, ns: str, derived: list[tuple[int, str]]) -> dict[int, np.ndarray]:
        """Vectors of ``dense_from`` items: sum of weight x vector of the named items of ``ns``, normalised.
        Names that do not resolve to a live item are skipped; an item left with nothing gets no vector."""
        specs = {}
        for rid, raw in derived:
            try:
                spec = json.loads(raw)
                specs[rid] = {str(k): float(w) for k, w in spec.items()}
            except (ValueError, TypeError, AttributeError):
                continue
        ids = sorted({i for spec in specs.values() for i in spec})
        content: dict[str, str] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            content.update(
                self.store.read(
                    f"SELECT id, content FROM memories WHERE namespace = ? AND deleted = 0 AND id IN "
                    f"({','.join('?' * len(chunk))})",
                    [ns, *chunk],
                )
            )
        known = [i for i in ids if i in content]
        base = dict(zip(known, await self.vectors([content[i] for i in known]), strict=True)) if known else {}
        out = {}
        for rid, spec in specs.items():
            acc = np.zeros(self.embedder.dim, dtype=np.float32)
            for i, w in spec.items():
                if i in base:
                    acc += w * base[i]
            norm = float(np.linalg.norm(acc))
            if norm > 0:
                out[rid] = acc / norm
        return out

    async def _load(self, ns: str, generation: int) -> DenseIndex:
        """A fresh index of ``ns`` in one query: live rows joined with their cached vectors, stacked at once.
        Rows whose vector is not cached yet are left to the incremental path (``seq`` stays below them)."""
        idx = DenseIndex(self.embedder.dim, generation)
        rows = self.store.live_vectors(ns, self.embedder.name)
        special = {  # lexical-only rows never get a vector; pooled ones are derived by the incremental path
            r[0]: bool(r[1])
            for r in self.store.read(
                "SELECT rid, json_extract(metadata, '$.dense_from') IS NOT NULL FROM memories WHERE namespace = ? "
                "AND deleted = 0 AND (json_extract(metadata, '$.dense') = 0 OR "
                "json_extract(metadata, '$.dense_from') IS NOT NULL)",
                (ns,),
            )
        }
        rows = [(*r[:4], None) if special.get(r[0]) else r for r in rows if special.get(r[0], True)]
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
        self._fact_cache.pop(ns, None)

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

    def _facts(self, ns: str, opts: SearchOptions) -> _Facts:
        """What search knows of each live item of ``ns`` besides its text (unit, speaker, session, date,
        mentions_time), kept in step with the store like the dense index (``seq > last``): one cheap query
        per search instead of reading metadata of every candidate."""
        keys = (opts.collapse, opts.speaker_key, opts.date_key, opts.time_key)
        gen = self.store.generation(ns)
        cache = self._fact_cache.get(ns)
        if cache is None or cache.generation != gen or cache.keys != keys:
            cache = self._fact_cache[ns] = _Facts(gen, keys)
        paths = ['$."' + str(k or "").replace('"', '""') + '"' for k in keys]
        rows = self.store.read(
            "SELECT rid, deleted, seq, json_extract(metadata, ?), json_extract(metadata, ?), session, "
            "json_extract(metadata, ?), json_extract(metadata, ?) FROM memories WHERE namespace = ? AND seq > ?",
            [*paths, ns, cache.seq],
        )
        for rid, deleted, seq, unit, speaker, session, date, when in rows:
            if deleted:
                cache.of.pop(rid, None)
            else:
                cache.of[rid] = (
                    unit if keys[0] else None,
                    speaker if keys[1] else None,
                    session,
                    date if keys[2] else None,
                    when if keys[3] else None,
                )
            cache.seq = max(cache.seq, seq)
        if rows:
            cache.speakers = {f[1] for f in cache.of.values() if isinstance(f[1], str)}
        return cache

    def _feedback(
        self, ns: str, query: str, ranked: list[tuple[int, float]], fetch: int, opts: SearchOptions
    ) -> list[tuple[int, float]]:
        """BM25 list re-scored with pseudo-relevance feedback (see :class:`SearchOptions` ``prf_docs``)."""
        top = [r for r, _ in ranked[: opts.prf_docs]]
        rows = self.store.read(f"SELECT content FROM memories WHERE rid IN ({','.join('?' * len(top))})", top)
        seen = set(_TOKEN.findall(query.lower()))
        df: dict[str, int] = {}
        for (text,) in rows:
            for w in {t for t in _TOKEN.findall(text.lower()) if len(t) > 2 and not t.isdigit()}:
                if w not in STOPWORDS and w not in seen:
                    df[w] = df.get(w, 0) + 1
        terms = [w for w, n in sorted(df.items(), key=lambda kv: (-kv[1], kv[0])) if n >= 2][: opts.prf_terms]
        if not terms:
            return ranked
        expanded = self.bm25(ns, query + " " + " ".join(terms), fetch, opts)
        fused = convex([dict(ranked), dict(expanded)], (1.0, opts.prf_weight))
        return sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:fetch]

    async def search(
        self, ns: str, query: str, opts: SearchOptions, *, query_vector: np.ndarray | None = None
    ) -> list[SearchHit]:
        if opts.top_k < 1:
            raise ValidationError(f"top_k must be at least 1, got {opts.top_k}")
        if opts.mode not in ("hybrid", "dense", "bm25"):
            raise ValidationError(f"unknown search mode {opts.mode!r}; use hybrid, dense or bm25")
        if opts.fusion not in ("rrf", "convex"):
            raise ValidationError(f"unknown fusion {opts.fusion!r}; use rrf or convex")
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
        fetch = 2 * depth if opts.collapse else depth  # collapsing removes duplicates: look deeper

        dense_list: list[tuple[int, float]] = []
        bm25_list: list[tuple[int, float]] = []
        if opts.mode in ("dense", "hybrid"):
            rids, scores = idx.top(qv, fetch, type_codes=type_codes, allowed=allowed, backend=self.backend)
            dense_list = list(zip(rids.tolist(), scores.tolist(), strict=True))
        if opts.mode in ("bm25", "hybrid"):
            bm25_query = query
            if opts.strip_speaker:  # every item of theirs carries the name: the speaker prior does its job
                named = named_in(query, self._facts(ns, opts).speakers)
                if len(named) == 1:
                    who = re.escape(next(iter(named)))
                    stripped = re.sub(r"\b" + who + r"(?:'s)?\b", " ", query, flags=re.IGNORECASE)
                    bm25_query = stripped if fts_query(stripped) else query
            bm25_list = self.bm25(ns, bm25_query, fetch, opts)
            if opts.prf_docs > 0 and bm25_list:
                bm25_list = self._feedback(ns, bm25_query, bm25_list, fetch, opts)

        # Group keys: an item's unit (collapse) or the item itself. Each list keeps a unit's best item.
        boosted = any(
            b > 0 for b in (opts.speaker_boost, opts.session_boost, opts.date_boost, opts.time_boost)
        )
        diverse = opts.diversity > 0
        info = self._facts(ns, opts).of if opts.collapse or boosted or diverse or opts.strip_speaker else {}

        def key(rid: int) -> Any:
            unit = info[rid][0] if rid in info else None
            return ("u", unit) if unit is not None else ("r", rid)

        def collapsed(ranked: list[tuple[int, float]]) -> dict[Any, tuple[int, int, float]]:
            out: dict[Any, tuple[int, int, float]] = {}  # key -> (rank, rid, score), best first
            for rid, score in ranked:
                k = key(rid)
                if k not in out:
                    out[k] = (len(out) + 1, rid, score)
                    if len(out) == depth:
                        break
            return out

        dense_c, bm25_c = collapsed(dense_list), collapsed(bm25_list)
        rep: dict[Any, int] = {k: v[1] for k, v in bm25_c.items()}
        rep.update({k: v[1] for k, v in dense_c.items()})
        dense_score = {rid: s for rid, s in dense_list}

        if opts.mode == "dense":
            fused = {k: v[2] for k, v in dense_c.items()}
        elif opts.mode == "bm25":
            fused = {k: v[2] for k, v in bm25_c.items()}
        elif opts.fusion == "rrf":
            fused = rrf([list(dense_c), list(bm25_c)], k=opts.rrf_k, weights=opts.weights)
        else:
            fused = convex(
                [{k: v[2] for k, v in dense_c.items()}, {k: v[2] for k, v in bm25_c.items()}], opts.weights
            )
        if boosted and fused:
            facts = {k: Facts(*info.get(rid, ())) for k, rid in rep.items()}
            fused = apply_priors(
                query, fused, facts, speaker=opts.speaker_boost, date=opts.date_boost,
                time=opts.time_boost, session=opts.session_boost,
            )  # fmt: skip

        if (
            qv is not None
        ):  # cosine for every candidate (bm25-only hits too), for the threshold and the report
            missing = [rid for rid in rep.values() if rid not in dense_score and rid in idx.row_of]
            if missing:
                rows = np.array([idx.row_of[r] for r in missing])
                for rid, s in zip(missing, (idx.matrix[rows] @ qv).tolist(), strict=True):
                    dense_score[rid] = s
            if opts.threshold is not None:
                fused = {k: s for k, s in fused.items() if dense_score.get(rep[k], -1.0) >= opts.threshold}

        best = sorted(fused.items(), key=lambda kv: (-kv[1], rep[kv[0]]))
        if diverse and best:
            best = diversify(
                best, {k: Facts(*info.get(rep[k], ())) for k, _ in best}, opts.top_k, opts.diversity
            )
        best = best[: opts.top_k]
        items = self.store.get_many_by_rid([rep[k] for k, _ in best])
        return [
            SearchHit(
                item=items[rep[k]],
                score=float(score),
                dense_score=dense_score.get(rep[k]),
                bm25_rank=bm25_c[k][0] if k in bm25_c else None,
                dense_rank=dense_c[k][0] if k in dense_c else None,
            )
            for k, score in best
            if rep[k] in items and not items[rep[k]].deleted
        ]

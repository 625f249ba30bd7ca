"""Hybrid search over the store: exact dense search + BM25 per namespace, fused, with query priors.

Dense search is exact brute force over per-namespace matrices kept in step with the database
(:mod:`memrl.memory.index.dense`); BM25 runs over per-namespace inverted indexes with the namespace's own
statistics (:mod:`memrl.memory.index.lexical`, FTS5's formula and Porter stemming); the two ranked lists are fused
(:mod:`memrl.memory.search.fusion`: reciprocal rank fusion, or a convex combination of min-max normalised
scores), then query priors may be added (:mod:`memrl.memory.analysis.query`: the speaker a question names, the
month it mentions, whether it asks *when*). :class:`SearchOptions` lists every feature; the defaults are
the settings measured best on LoCoMo by ``memrl eval retrieval --ablation`` (README), and
``SearchOptions(**PLAIN)`` is plain RRF hybrid search.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memrl import telemetry
from memrl.errors import ValidationError
from memrl.memory.analysis.query import asks_abstract, asks_aggregate, named_in
from memrl.memory.analysis.terms import content_terms
from memrl.memory.analysis.words import STOPWORDS, TOKEN, query_words, strip_question_words
from memrl.memory.embedders.base import Embedder
from memrl.memory.index import ann_files, snapshot
from memrl.memory.index.dense import DenseIndexes
from memrl.memory.index.packed import prefetch
from memrl.memory.records.types import TYPE_CODE, SearchHit
from memrl.memory.search.adaptive import dense_weight, features
from memrl.memory.search.expand import session_prior, session_scores, spread
from memrl.memory.search.facts import Facts, Signals
from memrl.memory.search.fusion import convex, rrf
from memrl.memory.search.options import PLAIN, Fusion, SearchMode, SearchOptions
from memrl.memory.search.priors import ItemSignals, apply_priors, diversify
from memrl.memory.search.rerank import Rescorer
from memrl.memory.search.terms import TermIndex
from memrl.memory.store.base import Store

__all__ = ["PLAIN", "Fusion", "SearchIndex", "SearchMode", "SearchOptions"]


@dataclass
class _Query:
    """What the modes of one search share (:meth:`SearchIndex.search_modes`): the query vector, the
    dense and BM25 lists (raw and collapsed by unit), the namespace's facts, terms and session scores."""

    query: str
    bm25_query: str = ""
    qv: np.ndarray | None = None
    idx: Any = None
    info: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    dense_list: list[tuple[int, float]] = field(default_factory=list)
    bm25_list: list[tuple[int, float]] = field(default_factory=list)
    dense_c: dict[Any, tuple[int, int, float]] = field(default_factory=dict)
    bm25_c: dict[Any, tuple[int, int, float]] = field(default_factory=dict)
    keys_list: list[tuple[int, float]] = field(default_factory=list)
    keys_c: dict[Any, tuple[int, int, float]] = field(default_factory=dict)
    terms: Any = None
    sessions: dict[Any, float] | None = None
    features: list[float] | None = None  # adaptive fusion's signals (memrl.memory.search.adaptive)

    def __post_init__(self) -> None:
        self.bm25_query = self.bm25_query or self.query

    def key(self, rid: int) -> Any:
        unit = self.info[rid][0] if rid in self.info else None
        return ("u", unit) if unit is not None else ("r", rid)

    def collapsed(self, ranked: list[tuple[int, float]], depth: int) -> dict[Any, tuple[int, int, float]]:
        """key -> (rank, rid, score) best first: each unit's best item, at most ``depth`` units."""
        out: dict[Any, tuple[int, int, float]] = {}
        for rid, score in ranked:
            k = self.key(rid)
            if k not in out:
                out[k] = (len(out) + 1, rid, score)
                if len(out) == depth:
                    break
        return out


class SearchIndex(DenseIndexes):
    """Hybrid search over a :class:`Store`: the dense indexes (:class:`DenseIndexes`), BM25 per namespace
    (the ranker the store hands out: Postgres ranks in the database, SQLite in-process postings), fusion
    and query priors."""

    def __init__(
        self, store: Store, embedder: Embedder, *, backend: str = "numpy", ann_min: int | None = None
    ) -> None:
        super().__init__(store, embedder, backend=backend, ann_min=ann_min)
        self.facts = Facts(store)
        self.terms = TermIndex(store)
        self.lexical = store.lexical_index()
        self.rescorer = Rescorer(self)

    def cloned(self, src: str, dst: str) -> None:
        """``dst`` was just cloned from ``src`` (its in-process caches may share ``src``'s)."""
        self.forget(dst)
        self.graphs.cloned(src, dst)
        self.lexical.cloned(src, dst)
        self.terms.cloned(src, dst)

    def close(self) -> None:
        """Save what a new process should load rather than rebuild: the ANN graphs and dense snapshots
        (:meth:`DenseIndexes.close`), the items' facts, the BM25 postings and the namespaces' terms
        (:mod:`memrl.memory.index.snapshot`)."""
        super().close()
        for part in (self.facts, self.lexical, self.terms):
            save = getattr(part, "save_snapshots", None)  # Postgres ranks in the database: nothing to save
            if save is not None:
                save()
        # what no process can load again (files of dropped, reset or replaced namespaces; a killed writer's)
        snapshot.prune(self.store)
        ann_files.prune(self.store)

    def forget(self, ns: str) -> None:
        super().forget(ns)
        self.facts.forget(ns)
        self.terms.forget(ns)
        self.lexical.forget(ns)
        self.rescorer.forget(ns)

    # ------------------------------------------------------------------ retrievers
    def bm25(
        self, ns: str, query: str, k: int, opts: SearchOptions, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """(rid, BM25 score) best first, higher is better, with the namespace's own statistics (the store's
        :class:`~memrl.memory.store.interface.LexicalRanker`), restricted to ``opts.types`` and ``allowed``
        rids (``opts.filters`` when not given)."""
        return self.lexical.top(ns, query, k, **self._restrict(ns, opts, allowed))

    def bm25_keys(
        self, ns: str, query: str, k: int, opts: SearchOptions, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """(rid, BM25 score over the item's retrieval keys) best first (:mod:`memrl.memory.store.keys`): the
        keys of live items of ``ns`` passing the same restrictions as :meth:`bm25`, with the namespace's keys
        statistics."""
        return self.lexical.top(ns, query, k, keys=True, **self._restrict(ns, opts, allowed))

    def _restrict(self, ns: str, opts: SearchOptions, allowed: np.ndarray | None) -> dict[str, Any]:
        """The type names and rids a lexical list may return."""
        if allowed is None and opts.filters:
            allowed = np.asarray(self.store.allowed_rids(ns, opts.filters), dtype=np.int64)
        return {"types": [t.value for t in opts.types] if opts.types else None, "allowed": allowed}

    def _facts(self, ns: str, opts: SearchOptions) -> Signals:
        """What search knows of each live item of ``ns`` besides its text (:mod:`memrl.memory.search.facts`)."""
        return self.facts.get(ns, (opts.collapse, opts.speaker_key, opts.date_key, opts.time_key))

    def _feedback(
        self,
        ns: str,
        query: str,
        ranked: list[tuple[int, float]],
        fetch: int,
        opts: SearchOptions,
        allowed: np.ndarray | None,
    ) -> list[tuple[int, float]]:
        """BM25 list re-scored with pseudo-relevance feedback (see :class:`SearchOptions` ``prf_docs``)."""
        top = [r for r, _ in ranked[: opts.prf_docs]]
        rows = [(text,) for _, text in self.store.texts_of(top)]
        seen = set(TOKEN.findall(query.lower()))
        df: dict[str, int] = {}
        for (text,) in rows:
            for w in {t for t in TOKEN.findall(text.lower()) if len(t) > 2 and not t.isdigit()}:
                if w not in STOPWORDS and w not in seen:
                    df[w] = df.get(w, 0) + 1
        terms = [w for w, n in sorted(df.items(), key=lambda kv: (-kv[1], kv[0])) if n >= 2][: opts.prf_terms]
        if not terms:
            return ranked
        expanded = self.bm25(ns, query + " " + " ".join(terms), fetch, opts, allowed)
        fused = convex([dict(ranked), dict(expanded)], (1.0, opts.prf_weight))
        return sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:fetch]

    async def search(
        self, ns: str, query: str, opts: SearchOptions, *, query_vector: np.ndarray | None = None
    ) -> list[SearchHit]:
        modes = await self.search_modes(ns, query, opts, (opts.mode,), query_vector=query_vector)
        return modes[opts.mode]

    async def search_modes(
        self,
        ns: str,
        query: str,
        opts: SearchOptions,
        modes: Sequence[str],
        *,
        query_vector: np.ndarray | None = None,
        trace: dict[str, Any] | None = None,
    ) -> dict[str, list[SearchHit]]:
        """The hits of one query in each of ``modes`` (``opts.mode`` is ignored): each mode's hits are
        exactly those of :meth:`search` in that mode, but what the modes share (the query vector, the dense
        and BM25 lists, the namespace's facts and session scores, one read of the hit items) is computed
        once. The retrieval evaluation searches every question in all three modes this way. A ``trace``
        dict receives the query's adaptive-fusion ``features`` (and, fusing adaptively, its ``dense_weight``)."""
        if opts.top_k < 1:
            raise ValidationError(f"top_k must be at least 1, got {opts.top_k}")
        for mode in modes:
            if mode not in ("hybrid", "dense", "bm25"):
                raise ValidationError(f"unknown search mode {mode!r}; use hybrid, dense or bm25")
        if opts.fusion not in ("rrf", "convex", "adaptive"):
            raise ValidationError(f"unknown fusion {opts.fusion!r}; use rrf, convex or adaptive")
        if opts.fusion == "adaptive" and not opts.fusion_model:
            raise ValidationError(
                "adaptive fusion needs fusion_model (memrl.memory.search.adaptive.load_model)"
            )
        modes = tuple(dict.fromkeys(modes))
        if self.store.expiry_due(ns):  # expired items leave the namespace before it is searched
            await asyncio.to_thread(self.store.sweep_expired, ns)  # a write: off the event loop
        q = _Query(query)
        if any(m != "bm25" for m in modes) or opts.threshold is not None:
            with telemetry.span("memrl.search.embed"):  # the namespace's index brought up to date, the query
                q.idx = await self.sync(ns)
                if query_vector is not None:
                    qv = np.asarray(query_vector, dtype=np.float32).reshape(-1)
                    q.qv = qv / (np.linalg.norm(qv) or 1.0)
                else:
                    q.qv = (await self.embedder.aembed([query]))[0]
        allowed = (
            np.asarray(self.store.allowed_rids(ns, opts.filters), dtype=np.int64) if opts.filters else None
        )
        type_codes = [TYPE_CODE[t.value] for t in opts.types] if opts.types else None
        depth = max(opts.candidates, opts.top_k)
        fetch = 2 * depth if opts.collapse else depth  # collapsing removes duplicates: look deeper
        boosted = any(
            b > 0 for b in (opts.speaker_boost, opts.session_boost, opts.date_boost, opts.time_boost)
        )
        facts = (
            self._facts(ns, opts)
            if opts.collapse
            or boosted
            or opts.diversity > 0
            or opts.aggregate_diversity > 0
            or opts.strip_speaker
            else None
        )
        q.info = facts.of if facts is not None else {}

        if any(m in ("dense", "hybrid") for m in modes):
            with telemetry.span("memrl.search.dense"):
                rids, scores = q.idx.top(
                    q.qv, fetch, type_codes=type_codes, allowed=allowed, backend=self.backend
                )
            q.dense_list = list(zip(rids.tolist(), scores.tolist(), strict=True))
        if any(m in ("bm25", "hybrid") for m in modes):
            with telemetry.span("memrl.search.bm25"):
                if opts.question_words:
                    q.bm25_query = strip_question_words(query)
                # every item of the speaker's carries the name: the speaker prior does its job
                if opts.strip_speaker:
                    named = named_in(query, facts.speakers)
                    if len(named) == 1:
                        who = re.escape(next(iter(named)))
                        stripped = re.sub(r"\b" + who + r"(?:'s)?\b", " ", q.bm25_query, flags=re.IGNORECASE)
                        q.bm25_query = stripped if query_words(stripped) else q.bm25_query
                q.bm25_list = self.bm25(ns, q.bm25_query, fetch, opts, allowed)
                if opts.prf_docs > 0 and q.bm25_list:
                    q.bm25_list = self._feedback(ns, q.bm25_query, q.bm25_list, fetch, opts, allowed)
                if opts.keys > 0:
                    q.keys_list = self.bm25_keys(ns, q.bm25_query, fetch, opts, allowed)
        # Group keys: an item's unit (collapse) or the item itself. Each list keeps a unit's best item.
        q.dense_c, q.bm25_c = q.collapsed(q.dense_list, depth), q.collapsed(q.bm25_list, depth)
        q.keys_c = q.collapsed(q.keys_list, depth)
        if (opts.fusion == "adaptive" and "hybrid" in modes) or trace is not None:
            names = facts.speakers if facts is not None else ()
            q.features = features(query, q.bm25_query, q.dense_c, q.bm25_c, names)
            if trace is not None:
                trace["features"] = q.features
                if opts.fusion == "adaptive":
                    trace["dense_weight"] = dense_weight(q.features, opts.fusion_model)

        with telemetry.span("memrl.search.rank"):  # fusion, query priors, re-scoring
            ranked = {mode: self._rank(ns, q, opts, mode, boosted) for mode in modes}
        with telemetry.span("memrl.search.fetch"):
            items = self.store.get_many_by_rid(
                list(dict.fromkeys(r for rk in ranked.values() for r in rk[0]))
            )
        return {
            mode: [
                SearchHit(
                    item=items[rid],
                    score=float(score),
                    dense_score=dense_score.get(rid),
                    bm25_rank=bm25_c[k][0] if k in bm25_c else None,
                    bm25_score=bm25_c[k][2] if k in bm25_c else None,
                    dense_rank=dense_c[k][0] if k in dense_c else None,
                )
                for rid, (k, score) in zip(rids, best, strict=True)
                if rid in items and not items[rid].deleted
            ]
            for mode, (rids, best, dense_score, dense_c, bm25_c) in ranked.items()
        }

    def _rank(self, ns: str, q: _Query, opts: SearchOptions, mode: str, boosted: bool) -> tuple[Any, ...]:
        """One mode's ranking from the shared lists: (item rids, [(key, score)] best first, cosine by rid,
        the mode's dense and BM25 lists by key)."""
        dense_c = q.dense_c if mode != "bm25" else {}
        bm25_c = q.bm25_c if mode != "dense" else {}
        keys_c = q.keys_c if mode != "dense" else {}
        rep: dict[Any, int] = {k: v[1] for k, v in keys_c.items()}
        rep.update({k: v[1] for k, v in bm25_c.items()})
        rep.update({k: v[1] for k, v in dense_c.items()})
        dense_score = {rid: s for rid, s in q.dense_list} if mode != "bm25" else {}
        info = q.info
        query = q.query
        bm25_query = q.bm25_query if mode != "dense" else query  # dense alone strips nothing
        # BM25 alone has no query vector unless a threshold asks for one (as when it is searched alone)
        qv = q.qv if mode != "bm25" or opts.threshold is not None else None
        idx = q.idx if qv is not None else None

        if mode == "dense":
            fused = {k: v[2] for k, v in dense_c.items()}
        elif mode == "bm25" and not keys_c:
            fused = {k: v[2] for k, v in bm25_c.items()}
        elif mode == "bm25":  # the keys view joins the BM25 list
            fused = convex([{k: v[2] for k, v in bm25_c.items()}, {k: v[2] for k, v in keys_c.items()}],
                           (1.0, opts.keys))  # fmt: skip
        else:
            weights = opts.weights
            if opts.abstract_weights is not None and asks_abstract(query):
                weights = opts.abstract_weights
            if opts.fusion == "adaptive":  # convex, with this query's weights
                w = dense_weight(q.features, opts.fusion_model)
                weights = (w, round(1.0 - w, 1))
            lists = [dense_c, bm25_c]
            if keys_c:
                lists, weights = [*lists, keys_c], (*weights, opts.keys)
            if opts.fusion == "rrf":
                fused = rrf([list(c) for c in lists], k=opts.rrf_k, weights=weights)
            else:
                fused = convex([{k: v[2] for k, v in c.items()} for c in lists], weights)
        if boosted and fused:
            prefetch(info, rep.values())
            facts = {k: ItemSignals(*info.get(rid, ())) for k, rid in rep.items()}
            fused = apply_priors(
                query, fused, facts, speaker=opts.speaker_boost, date=opts.date_boost,
                time=opts.time_boost, session=opts.session_boost,
            )  # fmt: skip
        if (opts.session_stage > 0 or opts.spread > 0) and fused and mode != "dense":
            if q.terms is None:
                q.terms = self.terms.get(
                    ns, collapse=opts.collapse, speaker_key=opts.speaker_key, tagger=opts.tagger
                )
            nt = q.terms
            if opts.session_stage > 0:
                if q.sessions is None:
                    q.sessions = session_scores(nt, content_terms(bm25_query))
                units = nt.units
                session_of = {k: u.session for k in fused if (u := units.get(k)) is not None}
                fused = session_prior(fused, session_of, q.sessions, opts.session_stage, opts.session_top)
            if opts.spread > 0:
                spread_out = spread(
                    nt,
                    fused,
                    weight=opts.spread,
                    seeds=opts.spread_seeds,
                    max_share=opts.spread_max_share,
                    seed_share=opts.spread_seed_share,
                )
                if opts.types or opts.filters:  # a reached unit may not pass them: re-score candidates only
                    spread_out = {k: v for k, v in spread_out.items() if k in fused}
                for k in spread_out:
                    if k not in rep:
                        rep[k] = min(nt.units[k].rids)
                fused = spread_out

        if (opts.date_fit > 0 or opts.window > 0 or opts.rerank) and fused:
            known = self._facts(ns, opts)
            fused = self.rescorer.apply(
                ns, query, qv, idx, fused, rep, known.of, opts, dense_c, bm25_c, bm25_query, seq=known.seq
            )
        # cosine for every candidate (bm25-only hits too), for the threshold and the report
        if qv is not None:
            missing = [rid for rid in rep.values() if rid not in dense_score]
            if missing:
                dense_score.update(idx.cosines(missing, qv))
            if opts.threshold is not None:
                fused = {k: s for k, s in fused.items() if dense_score.get(rep[k], -1.0) >= opts.threshold}

        best = sorted(fused.items(), key=lambda kv: (-kv[1], rep[kv[0]]))
        diversity = opts.diversity or (opts.aggregate_diversity if asks_aggregate(query) else 0.0)
        if diversity > 0 and best:
            best = diversify(
                best, {k: ItemSignals(*info.get(rep[k], ())) for k, _ in best}, opts.top_k, diversity
            )
        best = best[: opts.top_k]
        return [rep[k] for k, _ in best], best, dense_score, dense_c, bm25_c

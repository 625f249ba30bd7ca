"""Re-scoring search candidates with what the first ranking does not see: time fit, turn windows, and a
small learned reranker over every signal search has.

Three search options use it (:class:`memrl.memory.search.hybrid.SearchOptions`; off by default unless the
ablation showed a held-out gain: docs/results/retrieval.md):

- ``date_fit``: time-aware retrieval. When the question names dates (:func:`memrl.memory.analysis.dates.question_spans`:
  "on 13 October 2023", "in June", "the week before 9 June 2023"), candidates whose session date or
  resolved relative expressions ("last month" said in July = June) overlap them get ``date_fit`` times
  the best score added: a soft prior, never a filter.
- ``window``: a second dense view. Each candidate is also scored by the best cosine of its window (the
  turn and the turns just before and after it in its session, by insertion order); the window scores,
  min-max normalised over the candidates, times ``window`` times the best score, are added.
- ``rerank``: the ``rerank_depth`` best candidates are re-ordered by a logistic model
  (:mod:`memrl.memory.search.rerank_model`) over :data:`~memrl.memory.search.rerank_model.FEATURES` (fused score and rank, dense cosine and rank, BM25 score and rank, window cosine,
  session score and share of the candidates, speaker, date fit, when x time expression, query-term
  coverage, shared entities, neighbours among the first hits, length). ``rerank="locomo"`` is the model shipped in
  ``memrl/resources/rerank_locomo.json``, fitted on LoCoMo conversations 0-4 only by
  ``python -m bench.fit_rerank`` (reproducible: same data, same solver, no randomness); a path loads
  another fit; :func:`~memrl.memory.search.rerank_model.register` adds a model object in-process (the fitting script
  records features this way).

Everything here reads per-namespace facts search already keeps (:meth:`SearchIndex._facts`, the term
index, the dense matrix); turn texts are read only for the candidates' date spans, and cached.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memrl.memory.analysis.dates import Span, fits, parse_day, question_spans, turn_spans
from memrl.memory.analysis.query import asks_abstract, asks_when, named_in
from memrl.memory.analysis.terms import content_terms, rule_entities
from memrl.memory.index.packed import Packed, prefetch
from memrl.memory.search.expand import session_scores
from memrl.memory.search.facts import Rows
from memrl.memory.search.rerank_model import FEATURES, load
from memrl.memory.store.follow import Following


def _key(rid: int, unit: Any) -> tuple[str, Any]:
    """The unit key of item ``rid`` (what search ranks): its unit, else the item itself."""
    return ("u", unit) if unit is not None else ("r", rid)


@dataclass
class _Layout:
    """Per-namespace: each unit's items (in rid order), its session and its neighbours there; date spans of
    units whose text has been read. Kept in step with the store (``seq``): the items changed since, by this
    process or another, are moved (:meth:`place`); what an item is now is read from the search's facts
    (``facts``, bound at each search: up to date at ``seq``).

    Built in one pass over the facts (an append or two per item); a unit's neighbours (the units before
    and after it in its session, by first item) are read from its session's items when a search asks
    (:meth:`neighbours_of`). At a million items the eager build (every item placed, every session ordered)
    cost 24 s of a new process's first search; what a search reads is the neighbours of its candidates, a
    few hundred units."""

    generation: int
    collapse: str | None = None  # the collapse key the units were read with (SearchOptions.collapse)
    seq: int = 0
    facts: dict[int, tuple[Any, ...]] = field(default_factory=dict)  # rid -> (unit, speaker, session, ...)
    unit_rids: dict[Any, list[int]] = field(default_factory=dict)  # unit -> its items, in rid order
    by_session: dict[Any, list[int]] = field(default_factory=dict)  # session -> its items, in rid order
    spans: dict[Any, list[Span]] = field(default_factory=dict)
    _where: dict[int, tuple[Any, Any]] | None = (
        None  # rid -> (unit, session) as placed; made at the first move
    )

    def fill(self, facts: dict[int, tuple[Any, ...]]) -> None:
        """All of ``facts`` (an empty layout)."""
        self.facts = facts
        if isinstance(facts, Rows):  # loaded from a file: grouped from its columns
            self.unit_rids, self.by_session = facts.groups("unit"), facts.groups("session")
            return
        unit_rids, by_session = self.unit_rids, self.by_session
        for rid in sorted(facts):
            f = facts[rid]
            if f[0] is not None:
                unit_rids.setdefault(f[0], []).append(rid)
            if f[2] is not None:
                by_session.setdefault(f[2], []).append(rid)

    def rids_of(self, key: Any) -> list[int]:
        """The items of unit ``key`` in rid order (none when it is not a live unit)."""
        kind, value = key
        if kind == "u":
            return self.unit_rids.get(value, [])
        got = self.facts.get(value)
        return [value] if got is not None and got[0] is None else []

    def session_of(self, key: Any) -> Any:
        """A unit's session: its first item's."""
        rids = self.rids_of(key)
        return self.facts[rids[0]][2] if rids else None

    def neighbours_of(self, key: Any) -> tuple[Any, ...]:
        """The units just before and after ``key`` in its session (by first item): from its first item's
        place among the session's items (rid order), the nearest item either way that starts a unit (one
        without a unit, or its unit's first item). Nothing is cached: at a million items nearly every
        search reaches sessions no search read before, and ordering each whole session cost more than the
        few items read this way."""
        rids = self.rids_of(key)
        if not rids:
            return ()
        first = rids[0]
        session = self.facts[first][2]
        if session is None:
            return ()
        items = self.by_session.get(session, ())
        at = bisect_left(items, first)
        if at >= len(items) or items[at] != first:
            return ()
        before = next((k for j in range(at - 1, -1, -1) if (k := self._starts(items[j])) is not None), None)
        after = next(
            (k for j in range(at + 1, len(items)) if (k := self._starts(items[j])) is not None), None
        )
        return tuple(k for k in (before, after) if k is not None)

    def _starts(self, rid: int) -> Any:
        """The unit key item ``rid`` starts (its own when it has no unit), or None: its unit's first item is
        another."""
        unit = self.facts[rid][0]
        if unit is None:
            return ("r", rid)
        return ("u", unit) if self.unit_rids.get(unit, (None,))[0] == rid else None

    def prepare(self, keys: list[Any]) -> None:
        """Read at once the facts :meth:`neighbours_of` will read for ``keys``: their first items', then the
        items around each in its session (a file's facts are otherwise read one entry at a time)."""
        facts = self.facts
        if not isinstance(facts, Packed):
            return
        prefetch(facts, [v for kind, v in keys if kind == "r"])
        firsts = [rids[0] for k in keys if (rids := self.rids_of(k))]
        prefetch(facts, firsts)
        near = []
        for r in firsts:
            got = facts.get(r)
            items = self.by_session.get(got[2], ()) if got is not None and got[2] is not None else ()
            at = bisect_left(items, r)
            near.extend(items[max(0, at - 2) : at + 3])
        prefetch(facts, near)

    def place(self, rid: int, fact: tuple[Any, ...] | None) -> None:
        """Move ``rid`` to the unit and session its ``fact`` names (None: the item is gone)."""
        if self._where is None:  # where each item was placed: from the lists, once
            where: dict[int, tuple[Any, Any]] = {}
            for unit, rids in self.unit_rids.items():
                where.update(dict.fromkeys(rids, (unit, None)))
            for session, rids in self.by_session.items():
                for r in rids:
                    where[r] = (where.get(r, (None, None))[0], session)
            self._where = where
        self.spans.pop(("r", rid), None)
        old = self._where.pop(rid, None)
        if old is not None:
            unit, session = old
            for lists, k in ((self.unit_rids, unit), (self.by_session, session)):
                if k is not None:
                    rids = lists[k]
                    del rids[bisect_left(rids, rid)]
                    if not rids:
                        del lists[k]
            self.spans.pop(_key(rid, unit), None)
        if fact is None:
            return
        unit, session = fact[0], fact[2]
        if unit is not None or session is not None:
            self._where[rid] = (unit, session)
        for lists, k in ((self.unit_rids, unit), (self.by_session, session)):
            if k is not None:
                insort(lists.setdefault(k, []), rid)
        self.spans.pop(_key(rid, unit), None)


class Rescorer:
    """The date-fit, window and rerank steps of a :class:`memrl.memory.search.hybrid.SearchIndex` (one per index)."""

    def __init__(self, index: Any) -> None:
        self.index = index
        self._layouts: Following[_Layout] = Following(index.store, lambda ns, gen, key: _Layout(gen, key))

    def forget(self, ns: str) -> None:
        self._layouts.forget(ns)

    def layout(
        self, ns: str, facts: dict[int, tuple[Any, ...]], collapse: str | None = None, seq: int | None = None
    ) -> _Layout:
        """The namespace's units and their neighbours for ``facts`` (the search's view of the live items,
        up to date at ``seq``): built once, then only the items changed since the last call are moved."""
        fresh: list[_Layout] = []

        def build(generation: int) -> _Layout:
            lay = _Layout(generation, collapse)
            lay.fill(facts)
            lay.seq = seq or 0
            fresh.append(lay)
            return lay

        lay = self._layouts.current(ns, collapse, build=build)
        lay.facts = facts
        if fresh:
            return lay
        if seq is not None and seq > lay.seq:
            for rid in self.index.store.changed_rids(ns, lay.seq, seq):
                lay.place(rid, facts.get(rid))
            lay.seq = seq
        return lay

    def _spans(self, lay: _Layout, keys: list[Any], date_of: dict[Any, Any]) -> None:
        todo = [k for k in keys if k not in lay.spans and lay.rids_of(k)]
        if not todo:
            return
        first = {lay.rids_of(k)[0]: k for k in todo}
        for rid, text in self.index.store.texts_of(list(first), plain=True):
            k = first[rid]
            lay.spans[k] = turn_spans(text or "", parse_day(date_of.get(k)))

    def _cosines(self, idx: Any, qv: np.ndarray | None, lay: _Layout, keys: list[Any]) -> dict[Any, float]:
        if qv is None or idx is None:
            return {}
        # each key's first item that has a vector
        rids = {k: lay.rids_of(k) for k in keys}
        cos = idx.cosines(list(dict.fromkeys(r for rs in rids.values() for r in rs)), qv)
        out: dict[Any, float] = {}
        for k in keys:
            s = next((cos[r] for r in rids[k] if r in cos), None)
            if s is not None:
                out[k] = float(s)
        return out

    def apply(
        self,
        ns: str,
        query: str,
        qv: np.ndarray | None,
        idx: Any,
        fused: dict[Any, float],
        rep: dict[Any, int],
        facts: dict[int, tuple[Any, ...]],
        opts: Any,
        dense_c: dict[Any, tuple[int, int, float]],
        bm25_c: dict[Any, tuple[int, int, float]],
        bm25_query: str,
        seq: int | None = None,
    ) -> dict[Any, float]:
        """``fused`` after the date-fit prior, the window view and the reranker that ``opts`` turn on
        (``facts`` are up to date at the namespace's change ``seq``)."""
        if not fused:
            return fused
        lay = self.layout(ns, facts, opts.collapse, seq)
        top = max(fused.values())
        scale = top if top > 0 else 1.0
        out = dict(fused)
        wanted = question_spans(query) if (opts.date_fit > 0 or opts.rerank) else []
        prefetch(facts, rep.values())
        date_of = {k: facts[rid][3] for k, rid in rep.items() if rid in facts}
        fit: dict[Any, bool] = {}
        if wanted:
            keys = list(fused)
            self._spans(lay, keys, date_of)
            fit = {k: fits(wanted, lay.spans.get(k, ())) for k in keys}
            if opts.date_fit > 0:
                for k, ok in fit.items():
                    if ok:
                        out[k] += opts.date_fit * scale
        window: dict[Any, float] = {}
        own: dict[Any, float] = {}
        if (opts.window > 0 or opts.rerank) and qv is not None:
            keys = list(fused)
            lay.prepare(keys)
            nbrs = {k: lay.neighbours_of(k) for k in keys}
            cos = self._cosines(idx, qv, lay, list({*keys, *(n for nb in nbrs.values() for n in nb)}))
            own = {k: cos[k] for k in keys if k in cos}
            window = {k: max([cos[n] for n in nbrs[k] if n in cos], default=-1.0) for k in keys}
            if opts.window > 0 and own:
                best = {k: max(own[k], window[k]) for k in own}
                lo, hi = min(best.values()), max(best.values())
                for k, v in best.items():
                    out[k] += opts.window * scale * (v - lo) / ((hi - lo) or 1.0)
        if not opts.rerank:
            return out
        ranked = sorted(out.items(), key=lambda kv: -kv[1])[: opts.rerank_depth]
        keys = [k for k, _ in ranked]
        x = self.features(
            ns,
            query,
            keys,
            out,
            lay,
            facts,
            rep,
            own,
            window,
            fit,
            bool(wanted),
            dense_c,
            bm25_c,
            bm25_query,
            opts,
        )
        p = load(opts.rerank).score(x, keys, query, ns)
        chosen = set(keys)
        rest_top = max(max((v for k, v in out.items() if k not in chosen), default=0.0), 1e-9)
        # re-ordered candidates score 1 + p (in (1, 2)); the others keep their order below 1
        final = {k: 0.5 * max(v, 0.0) / rest_top for k, v in out.items() if k not in chosen}
        final.update({k: 1.0 + float(s) for k, s in zip(keys, p.tolist(), strict=True)})
        return final

    def features(
        self,
        ns: str,
        query: str,
        keys: list[Any],
        scores: dict[Any, float],
        lay: _Layout,
        facts: dict[int, tuple[Any, ...]],
        rep: dict[Any, int],
        own: dict[Any, float],
        window: dict[Any, float],
        fit: dict[Any, bool],
        date_asked: bool,
        dense_c: dict[Any, tuple[int, int, float]],
        bm25_c: dict[Any, tuple[int, int, float]],
        bm25_query: str,
        opts: Any,
    ) -> np.ndarray:
        """One row of :data:`FEATURES` per candidate in ``keys`` (best first)."""
        nt = self.index.terms.get(
            ns, collapse=opts.collapse, speaker_key=opts.speaker_key, tagger=opts.tagger
        )
        q_terms = set(content_terms(bm25_query))
        speakers = self.index._facts(ns, opts).speakers  # cached per namespace
        named = named_in(query, speakers)
        who = next(iter(named)) if len(named) == 1 else None
        q_ents = rule_entities(query, skip=speakers)
        sessions = session_scores(nt, q_terms)
        s_best = max(sessions.values(), default=0.0) or 1.0
        when, abstract = asks_when(query), asks_abstract(query)
        top = max(scores[k] for k in keys) or 1.0
        best_cos = max(own.values(), default=0.0)
        b_best = max((v[2] for v in bm25_c.values()), default=0.0) or 1.0
        first5 = set(keys[:5])
        mass: dict[Any, float] = {}
        for k in keys:
            sess = facts.get(rep.get(k, -1), (None,) * 5)[2]
            mass[sess] = mass.get(sess, 0.0) + max(scores[k], 0.0) / top
        best_mass = max(mass.values(), default=0.0) or 1.0
        rows = []
        depth = len(keys)
        for rank, k in enumerate(keys, start=1):
            f = facts.get(rep.get(k, -1), (None,) * 5)
            unit = nt.units.get(k)
            cos = own.get(k, 0.0)
            terms = unit.terms if unit is not None else {}
            rows.append([
                scores[k] / top,
                1.0 - math.log1p(rank) / math.log1p(depth),
                cos,
                cos - best_cos,
                1.0 / math.sqrt(dense_c[k][0]) if k in dense_c else 0.0,
                bm25_c[k][2] / b_best if k in bm25_c else 0.0,
                1.0 / math.sqrt(bm25_c[k][0]) if k in bm25_c else 0.0,
                max(window.get(k, -1.0), 0.0),
                sessions.get(unit.session, 0.0) / s_best if unit is not None else 0.0,
                float(who is not None and f[1] == who),
                float(fit.get(k, False)),
                float(date_asked),
                float(when and bool(f[4])),
                len(q_terms & set(terms)) / len(q_terms) if q_terms else 0.0,
                min(len(q_ents & unit.entities), 3) / 3 if unit is not None else 0.0,
                float(any(n in first5 for n in lay.neighbours_of(k))),
                math.log1p(sum(terms.values())) / 5,
                cos * float(abstract),
                mass.get(f[2], 0.0) / best_mass,
                float(when) * (bm25_c[k][2] / b_best if k in bm25_c else 0.0),
            ])  # fmt: skip
        return np.asarray(rows, dtype=np.float64).reshape(-1, len(FEATURES))

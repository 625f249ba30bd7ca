"""Retrieval steps that look past one item: sessions first, then the entity graph.

Both work on :class:`memrl.memory.search.terms.NamespaceTerms` and on fused scores keyed by unit (what
:mod:`memrl.memory.search.hybrid` ranks), and return scores to add, as shares of the best fused score, so they
compose with any fusion:

- :func:`session_scores`: two-stage retrieval. Each session is one document (the stemmed content words of
  all its turns); BM25 over those documents says which conversations-within-the-conversation the query is
  about, even when no single turn has all its words. Turns of the best sessions get a prior.
- :func:`spread`: spreading activation over the graph that links units sharing an entity (a person,
  place, title, number) besides the speakers: the first hits activate their entities, each entity passes
  its activation on to the other units naming it (one step of personalised PageRank on the bipartite
  unit-entity graph, weighted by the entity's idf). A question whose answer is spread over several turns
  ("Where has Melanie camped?") finds the turns that name the same things as the ones it found first.

Used by :meth:`memrl.memory.search.hybrid.SearchIndex.search` (``SearchOptions.session_stage``, ``spread``)::

    scores = session_scores(terms, content_terms(query))        # {session: bm25}
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Iterable
from typing import Any, TypeVar

from memrl.memory.search.terms import NamespaceTerms

K = TypeVar("K", bound=Hashable)
#: An entity named by more units than this is no link (its share of activation per unit is tiny anyway);
#: the cap bounds the cost of a search in a large namespace.
MAX_HOLDERS = 100


def session_scores(
    nt: NamespaceTerms, query_terms: Iterable[str], *, k1: float = 1.2, b: float = 0.75
) -> dict[Any, float]:
    """BM25 of each session (all its units' terms as one document) for the query's stemmed terms."""
    n = len(nt.session_len)
    if not n:
        return {}
    avg = sum(nt.session_len.values()) / n or 1.0
    out: dict[Any, float] = {}
    for t in dict.fromkeys(query_terms):
        having = nt.session_tf.get(t)
        if not having:
            continue
        idf = math.log(1 + (n - len(having) + 0.5) / (len(having) + 0.5))
        for s, tf in having.items():
            norm = tf * (k1 + 1) / (tf + k1 * (1 - b + b * nt.session_len[s] / avg))
            out[s] = out.get(s, 0.0) + idf * norm
    return out


def session_prior(
    fused: dict[K, float], session_of: dict[K, Any], scores: dict[Any, float], weight: float, top: int
) -> dict[K, float]:
    """``fused`` plus ``weight`` x best fused score x (session score / best session score) for units of
    the ``top`` best sessions (rank-based cut so one strong session does not flatten the rest)."""
    if not fused or not scores or weight <= 0:
        return dict(fused)
    # sorted(..., key=-score)[:top] without sorting every session (50,000 at a million items): ties keep
    # their order as in a stable sort
    best = heapq.nlargest(top, scores.items(), key=lambda kv: kv[1])
    hi = best[0][1] or 1.0
    share = {s: v / hi for s, v in best}
    scale = max(max(fused.values()), 1e-9)
    return {k: v + weight * scale * share.get(session_of.get(k), 0.0) for k, v in fused.items()}


def spread(
    nt: NamespaceTerms,
    fused: dict[Any, float],
    *,
    weight: float,
    seeds: int = 10,
    max_share: float = 0.05,
    seed_share: float = 1.0,
) -> dict[Any, float]:
    """``fused`` plus spreading activation from its ``seeds`` best units over shared entities.

    Each seed passes its (min-max normalised) score, split over its entities, to every entity; an entity
    passes its activation times its idf to each unit naming it, split over them (so an entity in many
    units passes little to each). Entities in more than ``max_share`` of the units (or :data:`MAX_HOLDERS`),
    or in one unit only, are not links. Units reached that were not candidates join the ranking with the spread score alone. The
    spread scores are scaled to ``weight`` x the best fused score.

    The seeds are at most ``seed_share`` of the units (at least one): in a small store the ``seeds`` best
    units are most of it, relevant or not, and what they activate is noise, not a reach beyond the hits."""
    if not fused or weight <= 0 or not nt.units:
        return dict(fused)
    n = len(nt.units)
    limit = min(max(2, int(max_share * n)), MAX_HOLDERS)
    seeds = min(seeds, max(1, int(seed_share * n)))
    top = sorted(fused.items(), key=lambda kv: -kv[1])[:seeds]
    lo = min(v for _, v in top)
    span = (top[0][1] - lo) or 1.0
    act: dict[str, float] = {}
    for key, score in top:
        unit = nt.units.get(key)
        if unit is None:
            continue
        links = [e for e in unit.entities if 1 < nt.holders(e) <= limit]
        for e in links:
            act[e] = act.get(e, 0.0) + (0.5 + 0.5 * (score - lo) / span) / len(links)
    reached: dict[Any, float] = {}
    for e, a in act.items():
        holders = nt.entity_units[e]
        pass_on = a * math.log(n / len(holders)) / len(holders)
        for key in holders:
            reached[key] = reached.get(key, 0.0) + pass_on
    hi = max(reached.values(), default=0.0)
    if hi <= 0:  # nothing reached, or only through entities every unit names (idf 0)
        return dict(fused)
    scale = max(max(fused.values()), 1e-9)
    out = dict(fused)
    for key, v in reached.items():
        out[key] = out.get(key, 0.0) + weight * scale * v / hi
    return out

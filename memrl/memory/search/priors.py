"""The priors search adds to fused scores from what a query says (:mod:`memrl.memory.analysis.query`) and what
it knows of each candidate besides its text (:class:`ItemSignals`: unit, speaker, session, date, whether it
mentions a time): :func:`apply_priors`, and the per-session :func:`diversify` re-ranking.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any, NamedTuple, TypeVar

from memrl.memory.analysis.query import asks_when, date_matches, mentioned_dates, speakers_meant

K = TypeVar("K", bound=Hashable)


class ItemSignals(NamedTuple):
    """What search knows about a candidate besides its score (from its metadata; ``None`` if absent)."""

    unit: Any = None
    speaker: Any = None
    session: Any = None
    date: Any = None
    mentions_time: Any = None


def apply_priors(
    query: str,
    fused: dict[K, float],
    facts: dict[K, ItemSignals],
    *,
    speaker: float = 0.0,
    date: float = 0.0,
    time: float = 0.0,
    session: float = 0.0,
) -> dict[K, float]:
    """Add query-dependent priors to fused scores, each a share of the best score (so any fusion works):

    - ``speaker``: the query is about exactly one of the candidates' speakers (:func:`speakers_meant`: it
      names them, or asks in the first person in a user/assistant chat): their candidates;
    - ``date``: the query mentions a month/year: candidates dated then;
    - ``time``: the query asks when: candidates that mention a time;
    - ``session``: every candidate, times its session's share of the candidates' total score.
    """
    if not fused:
        return {}
    top = max(fused.values())
    scale = top if top > 0 else 1.0
    out = dict(fused)
    if session > 0:
        per_session: dict[Any, float] = {}
        for k, s in fused.items():
            if facts[k].session is not None:
                per_session[facts[k].session] = per_session.get(facts[k].session, 0.0) + max(s, 0.0)
        best = max(per_session.values(), default=0.0)
        if best > 0:
            for k in out:
                out[k] += session * scale * per_session.get(facts[k].session, 0.0) / best
    if speaker > 0:
        named = speakers_meant(query, {f.speaker for f in facts.values() if isinstance(f.speaker, str)})
        if len(named) == 1:
            (who,) = named
            for k in out:
                if facts[k].speaker == who:
                    out[k] += speaker * scale
    if date > 0 and (wanted := mentioned_dates(query)):
        for k in out:
            if date_matches(facts[k].date, wanted):
                out[k] += date * scale
    if time > 0 and asks_when(query):
        for k in out:
            if facts[k].mentions_time:
                out[k] += time * scale
    return out


def diversify(
    ranked: list[tuple[K, float]], facts: dict[K, ItemSignals], top_k: int, diversity: float
) -> list[tuple[K, float]]:
    """Greedy re-ranking of ``(key, score)`` best first: each pick lowers the other candidates of its
    session by ``diversity`` times the best score. Returns at most ``top_k``."""
    penalty = diversity * max(abs(ranked[0][1]), 1e-9)
    picked: list[tuple[K, float]] = []
    per_session: dict[Any, int] = {}
    pool = ranked[: max(4 * top_k, top_k + 20)]
    while pool and len(picked) < top_k:
        best_i, best_s = 0, -math.inf
        for i, (k, s) in enumerate(pool):
            adj = s - penalty * per_session.get(facts[k].session, 0)
            if adj > best_s:
                best_i, best_s = i, adj
        k, s = pool.pop(best_i)
        if facts[k].session is not None:
            per_session[facts[k].session] = per_session.get(facts[k].session, 0) + 1
        picked.append((k, s))
    return picked

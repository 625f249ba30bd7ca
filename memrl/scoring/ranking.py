"""Retrieval metrics: recall@k, hit@k, session-level recall@k and NDCG@k of a ranked list of ids against a
question's gold evidence ids. Pure and cheap; re-exported by :mod:`memrl.scoring.metrics`::

    from memrl.scoring.metrics import ndcg_at_k, recall_at_k
    recall_at_k(["D1:2", "D3:1"], ["D3:1", "D4:4"], k=2)   # 0.5
    ndcg_at_k(["x", "a"], ["a"], k=2)                      # 1.0 (LongMemEval's discount, see below)

Convention: the evidence ids are de-duplicated; a question with no evidence has no recall, hit or NDCG
(``None``), so it must be excluded from the averages rather than counted as 0 or 1 (LoCoMo's official
script counts it as 1). ``k=None`` means "everything retrieved".

LongMemEval's retrieval figures (``src/retrieval/eval_utils.py`` of xiaowu0162/LongMemEval) at k are
``recall_any`` = :func:`hit_at_k`, ``recall_all`` = ``recall_at_k(...) == 1.0`` and ``ndcg_any`` =
:func:`ndcg_at_k`: binary relevance, its DCG (``rel_1 + sum_{i>=2} rel_i / log2(i)``) and an ideal DCG
from ``min(k, number of relevant ids)`` relevant ids at the top.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

__all__ = ["hit_at_k", "locomo_session_of", "ndcg_at_k", "recall_at_k", "session_recall_at_k"]


def _unique(ids: Iterable[Hashable]) -> list[Hashable]:
    return list(dict.fromkeys(ids))


def _top(retrieved_ids: Sequence[Hashable], k: int | None) -> list[Hashable]:
    if k is not None and k < 0:
        raise ValueError(f"k must be >= 0 or None, got {k}")
    return list(retrieved_ids if k is None else retrieved_ids[:k])


def recall_at_k(
    retrieved_ids: Sequence[Hashable], evidence_ids: Iterable[Hashable], k: int | None = None
) -> float | None:
    """Fraction of the (unique) evidence ids found among the first ``k`` retrieved ids; ``None`` if no evidence."""
    evidence = _unique(evidence_ids)
    if not evidence:
        return None
    top = set(_top(retrieved_ids, k))
    return sum(e in top for e in evidence) / len(evidence)


def hit_at_k(
    retrieved_ids: Sequence[Hashable], evidence_ids: Iterable[Hashable], k: int | None = None
) -> float | None:
    """1.0 if any evidence id is among the first ``k`` retrieved ids, else 0.0; ``None`` if no evidence."""
    evidence = _unique(evidence_ids)
    if not evidence:
        return None
    top = set(_top(retrieved_ids, k))
    return float(any(e in top for e in evidence))


_DIA_ID = re.compile(r"^D(\d+):(\d+)$")


def locomo_session_of(dia_id: str) -> int | None:
    """The session number of a LoCoMo dialogue id (``"D3:12"`` -> 3); ``None`` if malformed (``"D"``)."""
    m = _DIA_ID.match(str(dia_id).strip())
    return int(m.group(1)) if m else None


def session_recall_at_k(
    retrieved_ids: Sequence[Hashable],
    evidence_ids: Iterable[Hashable],
    session_of: Mapping[Hashable, Hashable] | Callable[[Hashable], Hashable | None],
    k: int | None = None,
) -> float | None:
    """Like :func:`recall_at_k`, but an evidence id counts as found when its *session* was retrieved.

    ``session_of`` maps an id (retrieved or evidence) to its session, as a mapping or a function (e.g.
    :func:`locomo_session_of`). Retrieved ids without a session are ignored; evidence ids without one
    are dropped (malformed evidence). As in the official script, recall is per evidence id (two evidence
    turns from one session weigh twice); ``None`` if no evidence id is left.
    """
    lookup = session_of.get if isinstance(session_of, Mapping) else session_of
    evidence_sessions = [s for s in (lookup(e) for e in _unique(evidence_ids)) if s is not None]
    if not evidence_sessions:
        return None
    top_sessions = {s for s in (lookup(r) for r in _top(retrieved_ids, k)) if s is not None}
    return sum(s in top_sessions for s in evidence_sessions) / len(evidence_sessions)


def _discount(rank: int) -> float:
    """LongMemEval's DCG weight of 1-based ``rank``: 1 for ranks 1 and 2, then ``1 / log2(rank)``.

    This is the original (Jarvelin-Kekalainen) form its ``dcg`` computes, ``rel[0] + sum(rel[1:] /
    log2(arange(2, n + 1)))``, not the ``1 / log2(rank + 1)`` of most libraries: a relevant id at rank 2
    weighs as much as one at rank 1.
    """
    return 1.0 if rank <= 2 else 1.0 / math.log2(rank)


def ndcg_at_k(
    retrieved_ids: Sequence[Hashable], relevant_ids: Iterable[Hashable], k: int | None = None
) -> float | None:
    """NDCG@k with binary relevance, as LongMemEval computes ``ndcg_any`` (see :func:`_discount`).

    DCG sums the discount of every rank among the first ``k`` that holds a relevant id; an id repeated
    in ``retrieved_ids`` earns nothing after its first rank (de-duplicate first to rank the distinct ids).
    The ideal DCG puts ``min(k, number of relevant ids)`` relevant ids at the top (all of them when
    ``k=None``). In [0, 1]; ``None`` if there is no relevant id.
    """
    relevant = set(_unique(relevant_ids))
    if not relevant:
        return None
    seen: set[Hashable] = set()
    dcg = 0.0
    for rank, r in enumerate(_top(retrieved_ids, k), 1):
        if r in relevant and r not in seen:
            dcg += _discount(rank)
        seen.add(r)
    n_ideal = len(relevant) if k is None else min(k, len(relevant))
    ideal = sum(_discount(rank) for rank in range(1, n_ideal + 1))
    return dcg / ideal if ideal else 0.0

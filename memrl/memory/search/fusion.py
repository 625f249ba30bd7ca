"""Score fusion: the part of hybrid search that combines ranked lists and needs no index.

- :func:`rrf`: reciprocal rank fusion (Cormack et al. 2009), ``sum_r w_r / (k + rank_r)``;
- :func:`convex`: a weighted sum of min-max normalised scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


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

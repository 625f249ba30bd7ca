"""Lexical query building and score fusion: the parts of hybrid search that need no index.

- :func:`fts_query`: an FTS5 MATCH expression from free text (stopwords dropped, tokens quoted, OR-ed);
- :func:`rrf`: reciprocal rank fusion (Cormack et al. 2009), ``sum_r w_r / (k + rank_r)``;
- :func:`convex`: a weighted sum of min-max normalised scores.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

TOKEN = re.compile(r"\w+", re.UNICODE)
#: Words too common to help BM25 (they only slow FTS5 down on large stores).
STOPWORDS = frozenset(
    "a an and are as at be by did do does for from had has have he her his how i in is it its me my of on or "
    "our she so that the their them they this to was we were what when where which who whom why will with "
    "you your".split()
)


#: Words that shape a question but say nothing of its answer ("What kind of ...", "Would X likely ...").
QUESTION_WORDS = frozenset(
    "would could should might likely probably kind kinds type types sort sorts ever some any based "
    "think thing things considered consider main particular specific".split()
)


def strip_question_words(text: str) -> str:
    """``text`` without :data:`QUESTION_WORDS` (whole words, any case), unless nothing else would remain."""
    kept = re.sub(r"\b(?:" + "|".join(sorted(QUESTION_WORDS)) + r")\b", " ", text, flags=re.IGNORECASE)
    return kept if fts_query(kept) else text


def fts_query(text: str) -> str:
    """An FTS5 MATCH expression: the query's distinct non-stopword tokens, quoted, OR-ed together."""
    tokens = [t for t in TOKEN.findall(text.lower()) if t not in STOPWORDS]
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

"""Adaptive fusion: the dense/BM25 weight of hybrid search chosen per query from what the two lists say.

A fixed convex fusion gives every query the same weights (0.4 dense / 0.6 BM25 by default): LoCoMo wants
lexical-heavy weights, LongMemEval dense-heavy ones. Here the
dense weight of one query is ``sigmoid(coef . features)``, rounded to a step of 0.1 in [0.1, 0.9], from
signals the search has computed anyway, before any prior (:func:`features`):

- ``overlap``: share of the two lists' top 10 that they agree on;
- ``dense_gap`` / ``bm25_gap``: how far each list's 10th score falls below its first (a peaked list has
  found something; a flat one has not), relative to the first;
- ``length``: the query's content words (BM25 query, capped at 15, over 15);
- ``named``: the query names one of the namespace's speakers; ``first_person``: it means the store's
  ``user`` (:func:`memrl.memory.analysis.query.speakers_meant`); ``when``: it asks about time.

Rounding to 0.1 keeps a fitted model scoreable exactly from nine fixed-weight runs (``bench/fusion_fit.py``
fits the coefficients on training items; ``python -m bench.search_defaults --lodo`` scores them on the data
sets they were not fitted on). ``SearchOptions(fusion="adaptive", fusion_model=coefs)`` turns it on;
:func:`load_model` reads a fitted model by name (``memrl/resources/fusion_NAME.json``) or path.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from memrl.memory.analysis.query import asks_when, named_in, speakers_meant
from memrl.memory.analysis.words import query_words

FEATURES: tuple[str, ...] = ("overlap", "dense_gap", "bm25_gap", "length", "named", "first_person", "when")
#: the dense weights a model can give (and the fixed-weight runs that score it exactly)
STEPS: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(1, 10))


def _gap(scores: Sequence[float]) -> float:
    if not scores or scores[0] <= 0:
        return 0.0
    return max(0.0, (scores[0] - scores[min(9, len(scores) - 1)]) / scores[0])


def features(
    query: str,
    bm25_query: str,
    dense: Mapping[Any, tuple[int, int, float]],
    bm25: Mapping[Any, tuple[int, int, float]],
    speakers: Iterable[str],
) -> list[float]:
    """The :data:`FEATURES` of one query; ``dense`` and ``bm25`` are its collapsed lists (key -> (rank, rid,
    score), best first), ``speakers`` the namespace's speakers."""
    top_d, top_b = list(dense)[:10], list(bm25)[:10]
    overlap = len(set(top_d) & set(top_b)) / 10.0
    names = set(speakers)
    named = len(named_in(query, names)) == 1
    first = not named and bool(speakers_meant(query, names))
    return [
        overlap,
        _gap([v[2] for v in dense.values()]),
        _gap([v[2] for v in bm25.values()]),
        min(len(query_words(bm25_query)), 15) / 15.0,
        float(named),
        float(first),
        float(asks_when(query)),
    ]


def dense_weight(feats: Sequence[float], coef: Sequence[float]) -> float:
    """The dense weight (BM25's is 1 minus it) of a query with ``feats``: ``coef`` is the bias, then one
    coefficient per feature; the result is rounded to :data:`STEPS`."""
    if len(coef) != len(FEATURES) + 1:
        raise ValueError(f"a fusion model has {len(FEATURES) + 1} coefficients (bias, {', '.join(FEATURES)})")
    z = coef[0] + sum(c * f for c, f in zip(coef[1:], feats, strict=True))
    w = 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))
    return STEPS[min(len(STEPS) - 1, max(0, round(w * 10) - 1))]  # round() as numpy's rint: half to even


def load_model(spec: str) -> tuple[float, ...]:
    """Coefficients of a fitted model: ``NAME`` (``memrl/resources/fusion_NAME.json``) or a JSON file's
    path (``{"coef": [...], ...}``, as ``bench/fusion_fit.py`` writes it)."""
    path = Path(spec)
    if not path.suffix:
        path = Path(__file__).resolve().parents[2] / "resources" / f"fusion_{spec}.json"
    if not path.is_file():
        raise FileNotFoundError(f"no fusion model {spec!r} (looked for {path})")
    coef = tuple(float(c) for c in json.loads(path.read_text())["coef"])
    if len(coef) != len(FEATURES) + 1:
        raise ValueError(f"{path}: expected {len(FEATURES) + 1} coefficients, got {len(coef)}")
    return coef

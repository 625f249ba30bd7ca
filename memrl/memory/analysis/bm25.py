"""The BM25 term weight, written once: FTS5's ``bm25()`` formula and constants, for every index that ranks.

The in-process index (:mod:`memrl.memory.index.lexical`, over numpy arrays), Postgres' exact re-scoring
(:mod:`memrl.memory.backends.postgres.lexical`, over floats) and Postgres' candidate query (SQL text built by
:func:`sql_weight`) all compute a term's contribution from these constants: k1 1.2, b 0.75, idf
``ln((N - n + 0.5) / (n + 0.5))`` floored at 1e-6 (a term in more than half the rows would otherwise score
negative). :func:`weight` runs the same float operations in the same order on a float or on an array, so both
Python paths give the same bits.
"""

from __future__ import annotations

import math
from typing import Any

K1, B = 1.2, 0.75
#: FTS5 floors a term's idf at this (a term in more than half the rows would otherwise score negative).
IDF_FLOOR = 1e-6


def idf(docs: int, df: int) -> float:
    """Inverse document frequency of a term found in ``df`` of ``docs`` texts, floored at :data:`IDF_FLOOR`."""
    value = math.log((docs - df + 0.5) / (df + 0.5))
    return value if value > 0 else IDF_FLOOR


def weight(term_idf: float, tf: Any, length: Any, avgdl: float) -> Any:
    """One term's BM25 contribution to a text of ``length`` tokens holding it ``tf`` times, in a namespace
    whose texts average ``avgdl`` tokens. ``tf`` and ``length`` may be floats or numpy arrays."""
    norm = K1 * (1 - B + B * length / avgdl) if avgdl > 0 else K1
    return term_idf * tf * (K1 + 1) / (tf + norm)


def sql_weight(tf: str, length: str, avgdl: str, docs: str, df: str) -> str:
    """:func:`idf` times :func:`weight` as a Postgres ``float8`` expression over the named columns (the
    database's candidates; re-scored exactly in Python afterwards)."""
    ln = f"ln(({docs} - {df} + 0.5) / ({df} + 0.5))"
    floor = f"{IDF_FLOOR!r}::float8"
    term_idf = f"(CASE WHEN {ln} > 0 THEN {ln} ELSE {floor} END)"
    k1, k1p1, one_b, b = (f"{v!r}::float8" for v in (K1, K1 + 1, 1 - B, B))
    return f"{term_idf} * (({tf} * {k1p1}) / ({tf} + {k1} * ({one_b} + {b} * {length} / {avgdl})))"

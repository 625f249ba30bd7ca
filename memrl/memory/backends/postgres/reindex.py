"""Re-index a Postgres store's BM25 postings when the analysis that wrote them is not this memrl's.

Postgres keeps each text's terms (``lex_terms``, :mod:`memrl.memory.backends.postgres.lexical`); SQLite's BM25
index is built in the process and has nothing to migrate. The terms depend on the stemmer
(:data:`memrl.memory.analysis.tokenizer.ANALYZER`): a store written with another one (before issue 59: NLTK's
Porter, which stems e.g. ``trekked`` to ``trek`` where Snowball's gives ``trekk``) would miss those words' hits,
silently. So when a store opens, ``meta``'s ``analyzer`` row is compared with this memrl's: a store without
the row (every store older than the row) or with another value has all its postings dropped and rebuilt from
the items and their retrieval keys, in one transaction that holds the postings tables (writers wait), and
the row is written; a new store only gets the row. Run once per store: about as long as tokenizing its texts
again and writing them (a minute or so per 100k items).
"""

from __future__ import annotations

from typing import Any

from memrl.memory.analysis.tokenizer import ANALYZER
from memrl.memory.backends.postgres.lexical import CONTENT, KEYS

BATCH = 5000  # rids re-indexed per statement group (bounds the rows held in Python)


def analyzer_of(store: Any) -> str | None:
    """The analyzer named in ``meta`` (None when the store predates the row)."""
    rows = store.read("SELECT value FROM meta WHERE key = 'analyzer'")
    return rows[0][0] if rows else None


def ensure_analyzer(store: Any) -> int:
    """Bring ``store``'s postings to :data:`ANALYZER` (module docstring); the number of texts re-indexed
    (0 when they were already, or the store held none)."""
    if analyzer_of(store) == ANALYZER:
        return 0
    with store.transaction() as c:
        c.execute("SELECT pg_advisory_xact_lock(7231988)")  # one re-indexing process at a time
        row = c.execute("SELECT value FROM meta WHERE key = 'analyzer'").fetchone()
        if row is not None and row[0] == ANALYZER:  # another process did it while we waited
            return 0
        c.execute("TRUNCATE lex_docs, lex_terms, lex_stats")  # holds the tables: writers wait
        done = 0
        for field, sql in (
            (CONTENT, "SELECT rid FROM memories WHERE deleted = 0 ORDER BY rid"),
            (KEYS, "SELECT rid FROM memory_keys ORDER BY rid"),
        ):
            rids = [r[0] for r in c.execute(sql).fetchall()]
            for i in range(0, len(rids), BATCH):
                chunk = rids[i : i + BATCH]
                (store._lex_changed if field == CONTENT else store._keys_changed)(chunk)
            done += len(rids)
        c.execute(
            "INSERT INTO meta (key, value) VALUES ('analyzer', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [ANALYZER],
        )
    return done

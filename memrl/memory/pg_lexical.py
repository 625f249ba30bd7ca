"""BM25 on Postgres: the lexical list of :class:`~memrl.memory.postgres.PostgresStore`, ranked as FTS5 ranks.

Each live item's content (field 0), and each item's retrieval keys (field 1), are analysed exactly as FTS5's
``porter unicode61`` tokenizer does (:mod:`memrl.memory.analyzer`) and stored as postings: ``lex_docs``
(one row per text: its length in tokens) and ``lex_terms`` (one row per distinct term: its frequency).
``lex_stats`` holds each namespace's document count and total length, kept by triggers on ``lex_docs``.

A query scores with FTS5's ``bm25()`` formula, term for term (k1 = 1.2, b = 0.75, idf
``ln((N - n + 0.5) / (n + 0.5))`` floored at 1e-6, each OR-ed query phrase counted apart), but ``N``, ``n``
and the average length are those of the namespace searched: one tenant's writes change neither another's
ranking nor its scores. The postings are written in the same transaction as the item, by the store's
write paths (``_lex_changed``, ``_keys_changed``, ``_lex_copy``); deletes follow by foreign keys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from memrl.memory.analyzer import analyze, query_terms

CONTENT, KEYS = 0, 1

#: FTS5's BM25 (fts5_aux.c): score = sum idf * (tf * (k1 + 1)) / (tf + k1 * (1 - b + b * dl / avgdl)), per
#: query phrase (``mult``: phrases that analyse to the same term count apart). One index scan per query term
#: (equality on the whole key, whatever the planner's statistics) gives both the term's document frequency
#: (the window count, before any filter, as FTS5's) and its hits.
_BM25 = """
WITH p AS MATERIALIZED (
    SELECT x.rid, x.term, x.tf, x.dl, count(*) OVER (PARTITION BY x.term)::float8 AS n
    FROM unnest(?::text[]) AS q(term) CROSS JOIN LATERAL (
        SELECT rid, term, tf, dl FROM lex_terms WHERE namespace = ? AND field = ? AND term = q.term
        OFFSET 0) x),  -- OFFSET 0: not flattened into a join, so each term is one index lookup
st AS MATERIALIZED (
    SELECT docs::float8 AS docs, tokens::float8 / GREATEST(docs, 1) AS avgdl FROM lex_stats
    WHERE namespace = ? AND field = ?),
q AS MATERIALIZED (SELECT term, count(*)::float8 AS mult FROM unnest(?::text[]) AS t(term) GROUP BY term)
SELECT p.rid, sum(q.mult * (CASE WHEN ln((st.docs - p.n + 0.5) / (p.n + 0.5)) > 0
                                 THEN ln((st.docs - p.n + 0.5) / (p.n + 0.5)) ELSE 1e-6::float8 END)
                  * ((p.tf * 2.2::float8) / (p.tf + 1.2::float8 * (0.25::float8 + 0.75::float8 * p.dl / st.avgdl))))
       AS score
FROM p JOIN q ON q.term = p.term CROSS JOIN st {join}
{where}
GROUP BY p.rid ORDER BY score DESC, p.rid LIMIT ?
"""


class PgLexicalMixin:
    """Lexical postings and BM25 for :class:`~memrl.memory.postgres.PostgresStore` (module docstring)."""

    read: Any
    _conn: Any

    def lexical(
        self, ns: str, query: str, k: int, *, keys: bool = False, where: str = "", params: Sequence[Any] = ()
    ) -> list[tuple[int, float]]:
        terms = query_terms(query)
        if not terms or k <= 0:
            return []
        field = KEYS if keys else CONTENT
        distinct = sorted(set(terms))
        # Filters need the item row; without them the postings alone answer (they hold live items only).
        join = "JOIN memories m ON m.rid = p.rid" if where else ""
        sql = _BM25.format(join=join, where=f"WHERE m.deleted = 0{where}" if where else "")
        rows = self.read(sql, [distinct, ns, field, ns, field, terms, *params, k])
        return [(r[0], float(r[1])) for r in rows]

    # ------------------------------------------------------------------ keeping the postings
    def _index(self, field: int, rows: Sequence[tuple[int, str, str]]) -> None:
        """Postings of ``rows`` (rid, namespace, text) for ``field``, inside the write transaction."""
        docs: list[list[Any]] = [[], [], []]
        terms: list[list[Any]] = [[], [], [], [], []]
        for rid, ns, text in rows:
            toks = analyze(text)
            docs[0].append(rid)
            docs[1].append(ns)
            docs[2].append(len(toks))
            for term, tf in Counter(toks).items():
                for col, v in zip(terms, (rid, ns, term, tf, len(toks)), strict=True):
                    col.append(v)
        if not docs[0]:
            return
        # COPY: several times faster than INSERT for the ~15 term rows of each item
        cur = self._conn.conn.cursor()
        with cur.copy("COPY lex_docs (rid, field, namespace, dl) FROM STDIN") as copy:
            for rid, ns, dl in zip(*docs, strict=True):
                copy.write_row((rid, field, ns, dl))
        with cur.copy("COPY lex_terms (rid, field, namespace, term, tf, dl) FROM STDIN") as copy:
            for rid, ns, term, tf, dl in zip(*terms, strict=True):
                copy.write_row((rid, field, ns, term, tf, dl))

    def _lex_changed(self, rids: Sequence[int]) -> None:
        """Re-index the content of ``rids`` (live ones only, as FTS5 indexes live items only)."""
        if not rids:
            return
        rids = list(rids)
        self._conn.execute("DELETE FROM lex_docs WHERE field = 0 AND rid = ANY(?::bigint[])", [rids])
        live = self._conn.execute(
            "SELECT rid, namespace, content FROM memories WHERE rid = ANY(?::bigint[]) AND deleted = 0",
            [rids],
        ).fetchall()
        self._index(CONTENT, live)

    def _keys_changed(self, rids: Sequence[int]) -> None:
        """Re-index the retrieval keys of ``rids`` (every keys row, as SQLite's keys FTS5 table does)."""
        if not rids:
            return
        rids = list(rids)
        self._conn.execute("DELETE FROM lex_docs WHERE field = 1 AND rid = ANY(?::bigint[])", [rids])
        rows = self._conn.execute(
            "SELECT k.rid, m.namespace, k.keys FROM memory_keys k JOIN memories m ON m.rid = k.rid "
            "WHERE k.rid = ANY(?::bigint[])",
            [rids],
        ).fetchall()
        self._index(KEYS, rows)

    def _lex_copy(self, src: str, dst: str) -> None:
        """Clone: copy the postings of ``src``'s live items to the rows of the same ids in ``dst``."""
        pairs = "FROM memories s JOIN memories d ON d.namespace = ? AND d.id = s.id WHERE s.namespace = ? AND s.deleted = 0"
        self._conn.execute(
            "INSERT INTO lex_docs (rid, field, namespace, dl) SELECT d.rid, x.field, d.namespace, x.dl "
            f"{pairs.replace('WHERE', 'JOIN lex_docs x ON x.rid = s.rid WHERE')}",
            [dst, src],
        )
        self._conn.execute(
            "INSERT INTO lex_terms (rid, field, namespace, term, tf, dl) "
            "SELECT d.rid, x.field, d.namespace, x.term, x.tf, x.dl "
            f"{pairs.replace('WHERE', 'JOIN lex_terms x ON x.rid = s.rid WHERE')}",
            [dst, src],
        )

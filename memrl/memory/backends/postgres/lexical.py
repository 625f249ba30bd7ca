"""BM25 on Postgres: the lexical list of :class:`~memrl.memory.backends.postgres.store.PostgresStore`, ranked as FTS5 ranks.

Each live item's content (field 0), and each item's retrieval keys (field 1), are analysed with the
tokenizer the in-process indexes use (:func:`memrl.memory.analysis.tokenizer.tokens`) and stored as postings: ``lex_docs``
(one row per text: its length in tokens and its distinct terms) and ``lex_terms`` (one row per distinct term:
its frequency, keyed in search order: namespace, field, term, rid).
``lex_stats`` holds each namespace's document count and total length, kept by triggers on ``lex_docs``.

A query scores as :class:`memrl.memory.index.lexical.LexicalIndex` scores (FTS5's ``bm25()`` formula: k1 = 1.2,
b = 0.75, idf ``ln((N - n + 0.5) / (n + 0.5))`` floored at 1e-6, each query term counted apart), with the
statistics of the namespace searched: one tenant's writes change neither another's ranking nor its scores.
The same hits and scores as the in-process index, computed in the database: no per-process copy of the
postings, nothing to rebuild when a worker starts. The postings are written in the same transaction as the item, by the store's
write paths (``_lex_changed``, ``_keys_changed``, ``_lex_copy``); deletes follow by foreign keys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from memrl.memory.analysis import bm25
from memrl.memory.analysis.tokenizer import query_terms, tokens

CONTENT, KEYS = 0, 1

#: Candidates by BM25 (k1 1.2, b 0.75, idf floored at 1e-6; each query term counted as often as the query
#: has it), with what re-scoring them needs: their terms, term frequencies and length, each term's document
#: frequency and the namespace's statistics. One index lookup per query term (equality on the whole key,
#: whatever the planner's statistics) gives a term's document frequency (the window count, before any
#: filter) and its hits.
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
SELECT p.rid, sum(q.mult * {weight}) AS score,
       array_agg(p.term), array_agg(p.tf), array_agg(p.n), min(p.dl), min(st.docs), min(st.avgdl)
FROM p JOIN q ON q.term = p.term CROSS JOIN st {join}
{where}
GROUP BY p.rid ORDER BY score DESC, p.rid LIMIT ?
""".replace("{weight}", bm25.sql_weight("p.tf", "p.dl", "st.avgdl", "st.docs", "p.n"))
#: Candidates fetched beyond k: the database's sum runs in another order than the in-process index's, so
#: scores may differ in the last bit; the candidates are re-scored here exactly as
#: :meth:`memrl.memory.index.lexical.LexicalIndex.scores` scores, and the k best kept.
MARGIN = 32


def rescore(terms: Sequence[str], rows: Sequence[Sequence[Any]], k: int) -> list[tuple[int, float]]:
    """The ``k`` best of ``rows`` (from :data:`_BM25`) scored as the in-process index does: the same float
    operations in the same order (query terms in query order, each added to 0.0), ties by lower rid."""
    out = []
    for rid, _, hit_terms, tfs, ns_, dl, docs, avgdl in rows:
        tf_of = dict(zip(hit_terms, tfs, strict=True))
        df_of = dict(zip(hit_terms, ns_, strict=True))
        n = int(docs)
        total = 0.0
        for term in terms:
            tf = tf_of.get(term)
            if tf is None:
                continue
            df = int(df_of[term])
            total += bm25.weight(bm25.idf(n, df), float(tf), float(dl), avgdl)
        out.append((int(rid), total))
    out.sort(key=lambda r: (-r[1], r[0]))
    return out[:k]


class PgLexicalRanker:
    """The :class:`~memrl.memory.store.interface.LexicalRanker` of a Postgres store: BM25 in the database
    (:meth:`PgLexicalMixin.lexical`); nothing is held in this process."""

    def __init__(self, store: PgLexicalMixin) -> None:
        self.store = store

    def top(
        self,
        ns: str,
        query: str,
        k: int,
        *,
        keys: bool = False,
        types: Sequence[str] | None = None,
        allowed: Any = None,
    ) -> list[tuple[int, float]]:
        return self.store.lexical(ns, query, k, keys=keys, types=types, allowed=allowed)

    def cloned(self, src: str, dst: str) -> None:
        """Nothing to share: a clone's postings are copied by the database."""

    def forget(self, ns: str) -> None:
        """Nothing held."""


class PgLexicalMixin:
    """Lexical postings and BM25 for :class:`~memrl.memory.backends.postgres.store.PostgresStore` (module docstring)."""

    read: Any
    _conn: Any

    def lexical(
        self,
        ns: str,
        query: str,
        k: int,
        *,
        keys: bool = False,
        types: Sequence[str] | None = None,
        allowed: Any = None,
    ) -> list[tuple[int, float]]:
        """The ``k`` best live items of ``ns`` by BM25 of ``query`` over their content, or over their
        retrieval keys (``keys``), best first as (rid, score), higher better; only items of ``types`` and
        rids in ``allowed`` when given. The statistics are the namespace's (all its indexed texts)."""
        terms = query_terms(query)
        if not terms or k <= 0 or (allowed is not None and len(allowed) == 0):
            return []
        field = KEYS if keys else CONTENT
        where, params = [], []
        if keys:  # keys postings cover deleted items too (their statistics count them): hits must be live
            where.append("m.deleted = 0")
        if types is not None:
            where.append("m.type = ANY(?::text[])")
            params.append(list(types))
        if allowed is not None:
            where.append("p.rid = ANY(?::bigint[])")
            params.append([int(r) for r in allowed])
        # The postings of content hold live items only: without restrictions they alone answer.
        join = "JOIN memories m ON m.rid = p.rid" if keys or types is not None else ""
        sql = _BM25.format(join=join, where=("WHERE " + " AND ".join(where)) if where else "")
        rows = self.read(sql, [sorted(set(terms)), ns, field, ns, field, terms, *params, k + MARGIN])
        return rescore(terms, rows, k)

    # ------------------------------------------------------------------ keeping the postings
    def _index(self, field: int, rows: Sequence[tuple[int, str, str]]) -> None:
        """Postings of ``rows`` (rid, namespace, text) for ``field``, inside the write transaction."""
        docs: list[tuple[int, str, int, list[str]]] = []
        terms: list[tuple[str, str, int, int, int]] = []
        for rid, ns, text in rows:
            toks = tokens(text)
            counts = Counter(toks)
            docs.append((rid, ns, len(toks), sorted(counts)))  # its terms: what the delete trigger looks up
            terms.extend((ns, term, rid, tf, len(toks)) for term, tf in counts.items())
        if not docs:
            return
        # In the postings' key order (namespace, term; the field is one per call): the rows of a term land
        # on the same few leaf pages one after another instead of one random page each (fewer pages
        # dirtied and logged per batch).
        terms.sort()
        # COPY: several times faster than INSERT for the ~15 term rows of each item
        cur = self._conn.conn.cursor()
        with cur.copy("COPY lex_docs (rid, field, namespace, dl, terms) FROM STDIN") as copy:
            copy.set_types(["bigint", "smallint", "text", "integer", "text[]"])
            for rid, ns, dl, names in docs:
                copy.write_row((rid, field, ns, dl, names))
        with cur.copy("COPY lex_terms (rid, field, namespace, term, tf, dl) FROM STDIN") as copy:
            for ns, term, rid, tf, dl in terms:
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
            "INSERT INTO lex_docs (rid, field, namespace, dl, terms) SELECT d.rid, x.field, d.namespace, x.dl, x.terms "
            f"{pairs.replace('WHERE', 'JOIN lex_docs x ON x.rid = s.rid WHERE')}",
            [dst, src],
        )
        self._conn.execute(
            "INSERT INTO lex_terms (rid, field, namespace, term, tf, dl) "
            "SELECT d.rid, x.field, d.namespace, x.term, x.tf, x.dl "
            f"{pairs.replace('WHERE', 'JOIN lex_terms x ON x.namespace = s.namespace AND x.rid = s.rid WHERE')}",
            [dst, src],
        )

"""What search indexes read from the store: changed rows, rows for dense search, filters, the vector cache.

:class:`IndexSupportMixin` is part of :class:`~memrl.memory.store.base.Store`. Dense indexes stay in step
with the database by asking for the rows changed since the history sequence number they last saw
(``changes_since``); vectors are cached per namespace, embedder model and content hash (``get_vectors``
/ ``put_vectors``), so nothing of a namespace is embedded twice and nothing crosses namespaces.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from memrl.memory.records.models import Filters, check


class Change(NamedTuple):
    """A row changed since some point, as dense search needs it."""

    rid: int
    type: str
    dense: bool  # live and not lexical-only
    vector_key: str  # embedding-cache key: metadata vector_key, else the content hash
    seq: int
    content: str
    live: bool = True  # not deleted (lexical search indexes every live row, lexical-only ones too)


def fact(raw: str | None) -> Any:
    """A metadata value read with ``json_raw`` as search uses it (an item's unit, speaker, date, time flag):
    a string, number or boolean, else None (absent, null, a list, an object). Read as JSON text and parsed
    here, so both back-ends give the same value and no stored value can break a search."""
    if raw is None:
        return None
    value = json.loads(raw)
    return value if isinstance(value, (str, int, float)) else None


class IndexSupportMixin:
    """Search-index support for :class:`~memrl.memory.store.base.Store`."""

    read: Any
    json_value: Any
    json_key: Any
    transaction: Any
    _conn: Any

    #: The embedding-cache key of a row: its own vector's key when it was added with one, else its content.
    _VECTOR_KEY = "COALESCE(json_extract(metadata, '$.vector_key'), content_hash)"
    #: Whether a row belongs in dense search: live and not lexical-only (metadata {"dense": false}).
    _DENSE = "(deleted = 0 AND COALESCE(json_extract(metadata, '$.dense'), 1) != 0)"

    def changes_since(self, ns: str, seq: int) -> list[Change]:
        """Rows of ``ns`` changed after history ``seq``, oldest change first (see :class:`Change`)."""
        return [
            Change(*r)
            for r in self.read(
                f"SELECT rid, type, {self._DENSE}, {self._VECTOR_KEY}, seq, content, deleted = 0 FROM memories "
                "WHERE namespace = ? AND seq > ? ORDER BY seq",
                (ns, seq),
            )
        ]

    def dense_rows(self, ns: str, model: str) -> list[tuple[int, str, str, int, bytes | None]]:
        """Rows of ``ns`` for dense search with their cached vector (or None): (rid, type, key, seq, vector)."""
        return [
            tuple(r)
            for r in self.read(
                f"SELECT m.rid, m.type, m.key, m.seq, e.vector FROM (SELECT rid, type, {self._VECTOR_KEY} AS key, "
                f"seq FROM memories WHERE namespace = ? AND {self._DENSE}) m "
                "LEFT JOIN embeddings e ON e.model = ? AND e.scope = ? AND e.hash = m.key",
                (ns, model, ns),
            )
        ]

    def signal_rows(self, ns: str, keys: Sequence[Any], seq: int) -> list[tuple[Any, ...]]:
        """Rows of ``ns`` changed after history ``seq`` with four metadata values as JSON text (read them with
        :func:`fact`): (rid, deleted, seq, keys[0], keys[1], session, keys[2], keys[3])."""
        j = self.json_raw("metadata")
        return self.read(
            f"SELECT rid, deleted, seq, {j}, {j}, session, {j}, {j} FROM memories WHERE namespace = ? AND seq > ?",
            [*(self.json_key(k) for k in keys[:2]), *(self.json_key(k) for k in keys[2:4]), ns, seq],
        )

    def unit_rows(self, ns: str, unit_key: Any, speaker_key: Any, seq: int) -> list[tuple[Any, ...]]:
        """Rows of ``ns`` changed after history ``seq``, oldest first, with their plain text
        (``metadata["text"]``, else the content): (rid, deleted, seq, unit JSON, session, text, speaker JSON)."""
        j = self.json_raw("metadata")
        return self.read(
            f"SELECT rid, deleted, seq, {j}, session, COALESCE({self.json_text('metadata', 'text')}, content), "
            f"{j} FROM memories WHERE namespace = ? AND seq > ? ORDER BY seq",
            [self.json_key(unit_key), self.json_key(speaker_key), ns, seq],
        )

    def changed_rids(self, ns: str, since: int, upto: int) -> list[int]:
        """rids of ``ns`` whose last change is after history ``since`` and at most ``upto``."""
        rows = self.read(
            "SELECT rid FROM memories WHERE namespace = ? AND seq > ? AND seq <= ?", (ns, since, upto)
        )
        return [r[0] for r in rows]

    def texts_of(self, rids: Sequence[int], *, plain: bool = False) -> list[tuple[int, str]]:
        """(rid, content) of rows ``rids`` (any namespace, in no set order); ``plain``: the text a reader is
        shown (``metadata["text"]`` when set) in place of the content."""
        if not rids:
            return []
        col = f"COALESCE({self.json_text('metadata', 'text')}, content)" if plain else "content"
        return [tuple(r) for r in self.read(
            f"SELECT rid, {col} FROM memories WHERE rid IN ({','.join('?' * len(rids))})", list(rids)
        )]  # fmt: skip

    def clone_rids(self, src: str, dst: str) -> dict[int, int]:
        """rid in ``src`` -> rid in ``dst`` of the items with the same id (a clone's copies)."""
        return dict(self.read(
            "SELECT s.rid, d.rid FROM memories s JOIN memories d ON d.namespace = ? AND d.id = s.id "
            "WHERE s.namespace = ?",
            (dst, src),
        ))  # fmt: skip

    def allowed_rids(self, ns: str, filters: dict[str, Any]) -> list[int]:
        """rids of live items whose metadata matches every ``key: value`` (a list value means any of)."""
        where, params = self.metadata_where(filters)
        return [
            r[0]
            for r in self.read(
                f"SELECT rid FROM memories m WHERE m.namespace = ? AND m.deleted = 0{where}", [ns, *params]
            )
        ]

    @staticmethod
    def metadata_where(filters: dict[str, Any] | None, alias: str = "m") -> tuple[str, list[Any]]:
        """SQL (``AND ...``) keeping the rows whose metadata matches every ``key: value`` of ``filters``: a
        list value means any of its values, ``None`` a JSON null. Keys are matched as they are (any
        character, quotes included: no JSON path is built from them). Filters are validated by
        :data:`memrl.memory.records.models.Filters` (422 naming the key when malformed)."""
        if not filters:
            return "", []
        filters = check("filters", filters, Filters)
        sql, params = [], []
        for key, value in filters.items():
            values = value if isinstance(value, list) else [value]
            if not values:
                sql.append("0")
                continue
            conds, vparams = [], []
            for v in values:
                if v is None:
                    conds.append("j.type = 'null'")
                elif isinstance(v, bool):  # JSON true/false, not the numbers 1/0
                    conds.append("j.type = ?")
                    vparams.append("true" if v else "false")
                else:
                    conds.append("(j.type IN ('integer', 'real', 'text') AND j.value = ?)")
                    vparams.append(v)
            sql.append(
                f"EXISTS (SELECT 1 FROM json_each({alias}.metadata) j WHERE j.key = ? AND ({' OR '.join(conds)}))"
            )
            params += [key, *vparams]
        return "".join(f" AND {s}" for s in sql), params

    # ------------------------------------------------------------------ embedding cache
    # One cache per namespace (``scope``; '' for vectors asked for without one): no observable of a
    # namespace (a score, a cache hit, how long an add takes) depends on what another namespace stored.
    def get_vectors(self, model: str, hashes: Sequence[str], scope: str) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        hashes = list(dict.fromkeys(hashes))
        for i in range(0, len(hashes), 500):
            chunk = hashes[i : i + 500]
            rows = self.read(
                "SELECT hash, vector FROM embeddings WHERE model = ? AND scope = ? AND hash IN "
                f"({','.join('?' * len(chunk))})",
                [model, scope, *chunk],
            )
            out.update({h: v for h, v in rows})
        return out

    def put_vectors(self, model: str, vectors: dict[str, bytes], scope: str) -> None:
        """Cache ``vectors`` (key -> float32 bytes) for namespace ``scope``; inside a caller's write
        transaction they are written with it (a refused write leaves none behind)."""
        if not vectors:
            return
        with self.transaction() as c:
            c.executemany(
                "INSERT INTO embeddings (model, scope, hash, vector) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [(model, scope, h, v) for h, v in vectors.items()],
            )

    def _copy_vectors(self, src: str, dst: str) -> None:
        """Inside ``clone_namespace``: the clone gets the cached vectors of the items it copied."""
        self._conn.execute(
            "INSERT INTO embeddings (model, scope, hash, vector) SELECT e.model, ?, e.hash, e.vector FROM embeddings e "
            f"WHERE e.scope = ? AND e.hash IN (SELECT {self._VECTOR_KEY} FROM memories WHERE namespace = ? "
            "AND deleted = 0) ON CONFLICT DO NOTHING",
            (dst, src, src),
        )

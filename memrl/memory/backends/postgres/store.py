"""The store on Postgres with pgvector: the same items, history, namespaces, keys and search as on SQLite.

Selected by URL (``AsyncMemory("postgresql://user@host/db")``, ``--db postgresql://...``). Everything above
the connection is :class:`~memrl.memory.store.base.Store`'s shared code; this module supplies what the back-end
interface asks for:

- a connection pool (``psycopg_pool``): many writers at once, from threads of one process or from many
  processes. A write transaction takes a transaction-scoped advisory lock per namespace it writes, so writers
  of one namespace take turns (its history sequence numbers commit in order, which the search caches rely
  on) while writers of different namespaces run in parallel;
- BM25 over per-namespace postings (:mod:`memrl.memory.backends.postgres.lexical`), ranked with FTS5's formula;
- dense search by pgvector over ``memory_vectors``, kept in step with the items by triggers
  (``dense_backend="pgvector"``, the default here), or the in-process matrix of SQLite (``"numpy"``);
- numbered SQL migrations (``memrl/memory/backends/postgres/sql/NNNN_name.sql``), applied on start under an
  advisory lock, recorded in ``schema_migrations`` (:mod:`memrl.memory.backends.postgres.migrations`).

Needs ``pip install 'memrl[postgres]'`` (psycopg 3, psycopg_pool, pgvector; ``pgserver`` bundles a server
for tests and benchmarks: :mod:`memrl.memory.backends.postgres.local`). See docs/postgres.md.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from memrl.errors import BusyError, ConfigError, StoreError
from memrl.memory.backends.postgres.ann import PgAnnMixin
from memrl.memory.backends.postgres.lexical import PgLexicalMixin, PgLexicalRanker
from memrl.memory.backends.postgres.migrations import migrate, migrations, pg_error
from memrl.memory.backends.postgres.reindex import ensure_analyzer
from memrl.memory.backends.postgres.stats import PgStatsMixin
from memrl.memory.backends.postgres.vectors import PgVectorIndex
from memrl.memory.backends.urls import is_postgres_url, redact
from memrl.memory.records.models import Filters, check
from memrl.memory.store.base import Store
from memrl.memory.store.nesting import Nesting, waited

__all__ = ["PostgresStore", "is_postgres_url", "migrations", "redact"]


@functools.lru_cache(maxsize=4096)
def _pg_sql(sql: str) -> str:
    """``?`` placeholders (the store's SQL) to psycopg's ``%s``."""
    return sql.replace("%", "%%").replace("?", "%s")


class _Tx(Nesting, threading.local):
    conn: Any = None
    locked: frozenset = frozenset()


class _Conn:
    """The current transaction's connection, taking the store's ``?`` SQL."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.conn.execute(_pg_sql(sql), list(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> Any:
        cur = self.conn.cursor()
        cur.executemany(_pg_sql(sql), [list(r) for r in rows])
        return cur


class PostgresStore(PgLexicalMixin, PgAnnMixin, PgStatsMixin, Store):
    """The store in a Postgres database (see the module docstring). Thread-safe; many processes may share it."""

    _NO_LIMIT = None
    server_vectors = True

    def lexical_index(self) -> PgLexicalRanker:
        """BM25 ranked in the database, over postings this store keeps (:mod:`.lexical`)."""
        return PgLexicalRanker(self)

    def vector_index(self, ns: str, model: str, dim: int, generation: int) -> PgVectorIndex:
        """pgvector search of ``ns`` (:mod:`.vectors`): an exact scan, or its own HNSW index once large."""
        return PgVectorIndex(self, ns, model, dim, generation)

    #: The cache rows of some hashes of one scope (:meth:`get_vectors`): params hashes, scope, model.
    GET_VECTORS = (
        "SELECT e.hash, e.vector FROM unnest(?::text[]) AS q(h) CROSS JOIN LATERAL (SELECT hash, vector "
        "FROM embeddings WHERE scope = ? AND hash = q.h AND model = ? OFFSET 0) e"
    )
    _VECTOR_KEY = "COALESCE(metadata::jsonb ->> 'vector_key', content_hash)"
    _DENSE = "(deleted = 0 AND COALESCE(metadata::jsonb -> 'dense', '1'::jsonb) NOT IN ('0'::jsonb, 'false'::jsonb))"

    def __init__(
        self,
        url: str,
        *,
        busy_timeout: float = 5.0,
        core_limit: int = 5000,
        max_content_chars: int = 10_000,
        pool_size: int = 16,
    ) -> None:
        try:
            import psycopg  # noqa: F401
            from pgvector.psycopg import register_vector
            from psycopg_pool import ConnectionPool
        except ImportError as e:
            raise ConfigError(f"a postgresql:// store needs `pip install 'memrl[postgres]'` ({e})") from e
        self.path = redact(url)
        self.core_limit = core_limit
        self.max_content_chars = max_content_chars
        self.busy_timeout = busy_timeout
        self._tx = _Tx()
        self._url = url
        with self._errors():
            self._migrate()

            def configure(conn: Any) -> None:
                register_vector(conn)

            self.pool = ConnectionPool(
                url, min_size=1, max_size=pool_size, kwargs={"autocommit": True}, configure=configure,
                open=True, timeout=max(busy_timeout, 5.0),
            )  # fmt: skip
            self.pool.wait()
        self._stats_init()
        with self._errors():
            ensure_analyzer(self)  # postings written by another stemmer are re-indexed (issue 59)

    # ------------------------------------------------------------------ plumbing
    @contextmanager
    def _errors(self) -> Iterator[None]:
        import psycopg

        try:
            yield
        except psycopg.errors.LockNotAvailable as e:
            raise BusyError(
                f"{self.path}: a namespace stayed locked by another writer longer than the busy timeout "
                f"({self.busy_timeout} s); retry, or raise busy_timeout"
            ) from e
        except psycopg.Error as e:
            raise pg_error(e, self.path) from e
        except Exception as e:
            if type(e).__module__.startswith("psycopg_pool"):
                raise StoreError(f"{self.path}: cannot reach the database ({e})") from e
            raise

    def _migrate(self) -> None:
        migrate(self._url, self.path)

    def close(self) -> None:
        self.pool.close()

    @property
    def _batch(self) -> str | None:  # type: ignore[override]
        return self._tx.batch

    @property
    def _conn(self) -> _Conn:
        if self._tx.conn is None:
            raise StoreError("internal: a write outside a transaction")  # pragma: no cover
        return _Conn(self._tx.conn)

    def _lock(self, conn: Any, names: Sequence[str]) -> None:
        todo = sorted(set(names) - self._tx.locked)  # sorted: two writers never wait on each other in a cycle
        for name in todo:
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (name,))
        self._tx.locked = self._tx.locked | set(todo)

    @contextmanager
    def transaction(self, ns: str | Sequence[str] | None = None, *, batch: bool = False) -> Iterator[_Conn]:
        names = [] if ns is None else [ns] if isinstance(ns, str) else list(ns)
        tx = self._tx
        if tx.depth:  # nested: join, locking any namespace not locked yet
            with self._errors():
                self._lock(tx.conn, names)
            with tx.level(batch):
                yield _Conn(tx.conn)
            return
        self._rolled_back()
        with self._errors(), self.pool.connection() as conn, conn.transaction():
            conn.execute(f"SET LOCAL lock_timeout = {int(waited(self.busy_timeout) * 1000)}")
            tx.conn, tx.locked = conn, frozenset()
            try:
                with tx.level(batch):
                    self._lock(conn, names)
                    yield _Conn(conn)
            finally:
                tx.conn, tx.locked = None, frozenset()
        self._committed()  # reached only when the transaction committed

    def read(self, sql: str, params: Sequence[Any] = (), *, binary: bool = False) -> list[Any]:
        """``binary``: results in Postgres' binary format (vectors load as numpy without text parsing)."""
        if self._tx.conn is not None:  # inside a transaction: see its writes
            with self._errors():
                return self._tx.conn.execute(_pg_sql(sql), list(params), binary=binary).fetchall()
        with self._errors(), self.pool.connection() as conn:
            return conn.execute(_pg_sql(sql), list(params), binary=binary).fetchall()

    # ------------------------------------------------------------------ SQL fragments
    def json_value(self, column: str) -> str:
        return f"(({column})::jsonb -> ?::text)"

    @staticmethod
    def json_key(key: Any) -> Any:
        return str(key or "")

    def expiry_sql(self) -> str:  # the expression of the expiry index (pg_migrations/0006_write_plans.sql)
        return (
            "(CASE WHEN jsonb_typeof(metadata::jsonb -> 'expires_at') = 'number' "
            "THEN (metadata::jsonb ->> 'expires_at')::double precision END)"
        )

    def _due_where(self) -> str:  # names the index's predicate, so the planner may use it (a partial index)
        return f"jsonb_typeof(metadata::jsonb -> 'expires_at') = 'number' AND {super()._due_where()}"

    def json_text(self, column: str, key: str) -> str:
        return f"CASE WHEN jsonb_typeof(({column})::jsonb -> '{key}') = 'string' THEN ({column})::jsonb ->> '{key}' END"

    def json_raw(self, column: str) -> str:
        return f"((({column})::jsonb -> ?::text)::text)"

    def metadata_where(self, filters: dict[str, Any] | None, alias: str = "m") -> tuple[str, list[Any]]:
        """As SQLite's (:meth:`IndexSupportMixin.metadata_where`): a value matches the metadata value of the
        same JSON type (``None`` a JSON null, ``True`` JSON true and not 1), compared as ``jsonb``."""
        if not filters:
            return "", []
        filters = check("filters", filters, Filters)
        terms, out = [], []
        for key, value in filters.items():
            vals = value if isinstance(value, list) else [value]
            if not vals:
                terms.append("FALSE")
                continue
            terms.append(f"{self.json_value(alias + '.metadata')} IN ({','.join('?::jsonb' for _ in vals)})")
            out += [self.json_key(key), *(json.dumps(v) for v in vals)]
        return "".join(f" AND {t}" for t in terms), out

    # ------------------------------------------------------------------ writes
    def _insert_rows(self, c: Any, ns: str, items: Sequence[Any], actor: str | None) -> list[int]:
        """As :meth:`Store._insert_rows` (history entries, then rows, in item order), by ``COPY``: the history
        seqs and row ids are drawn from their identity sequences first (one statement; the namespace's lock
        is held, so they follow commit order as the defaults would), then both tables are copied. Before,
        one ``INSERT ... SELECT FROM unnest(...)`` per table sent every column as an array, which psycopg
        builds in Python (its array dumper was a sixth of an insert's time)."""
        from memrl.memory.store.validation import content_hash

        if not items:
            return []
        self._wrote(len(items))
        drawn = c.execute(
            "SELECT nextval(pg_get_serial_sequence('history', 'seq')), "
            "nextval(pg_get_serial_sequence('memories', 'rid')) FROM generate_series(1, ?)",
            (len(items),),
        ).fetchall()
        seqs, rids = sorted(r[0] for r in drawn), sorted(r[1] for r in drawn)
        at = time.time()
        cur = c.conn.cursor()
        with cur.copy(
            "COPY history (seq, namespace, memory_id, op, old, new, at, actor, batch) FROM STDIN"
        ) as copy:
            for seq, it in zip(seqs, items, strict=True):
                copy.write_row(
                    (seq, ns, it.id, "ADD", None, json.dumps(it.to_dict()), at, actor, self._batch)
                )
        with cur.copy(
            "COPY memories (rid, namespace, id, type, content, content_hash, metadata, evidence, session, "
            "created_at, updated_at, deleted, seq) FROM STDIN"
        ) as copy:
            for rid, seq, it in zip(rids, seqs, items, strict=True):
                copy.write_row((rid, ns, it.id, it.type.value, it.content, content_hash(it.content),
                                json.dumps(it.metadata), json.dumps(list(it.evidence)), it.session,
                                it.created_at, it.updated_at, 0, seq))  # fmt: skip
        return rids

    # ------------------------------------------------------------------ vectors
    def get_vectors(self, model: str, hashes: Sequence[str], scope: str) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        hashes = list(dict.fromkeys(hashes))
        # One primary-key probe per hash (scope, hash, model), whatever the planner's statistics: with
        # `hash = ANY(...)` a table grown since its last ANALYZE was read as every row of the scope, the
        # hashes filtered after (all of a namespace's vectors read for each batch of inserts).
        for i in range(0, len(hashes), 5000):
            rows = self.read(self.GET_VECTORS, [hashes[i : i + 5000], scope, model], binary=True)
            out.update({h: _np(v).tobytes() for h, v in rows})
        return out

    def put_vectors(self, model: str, vectors: dict[str, bytes], scope: str) -> None:
        if not vectors:
            return
        from pgvector import Vector

        # one statement over arrays, the vectors in binary (%b: no float formatting): a statement a row cost
        # ~3 ms a vector even pipelined; in key order, so each statement's rows go to neighbouring pages of
        # the (scope, hash, model) key, not one random page a row
        hashes = sorted(vectors)
        with self.transaction() as c:
            for i in range(0, len(hashes), 2000):
                chunk = hashes[i : i + 2000]
                c.conn.execute(
                    "INSERT INTO embeddings (model, scope, hash, vector) SELECT %s, %s, h, v "
                    "FROM unnest(%s::text[], %b::vector[]) AS t(h, v) ON CONFLICT DO NOTHING",
                    [
                        model,
                        scope,
                        chunk,
                        [Vector(np.frombuffer(vectors[h], dtype=np.float32)) for h in chunk],
                    ],
                )

    def dense_rows(self, ns: str, model: str) -> list[tuple[int, str, str, int, bytes | None]]:
        return [
            (r[0], r[1], r[2], r[3], None if r[4] is None else _np(r[4]).tobytes())
            for r in self.read(
                f"SELECT m.rid, m.type, m.key, m.seq, e.vector FROM (SELECT rid, type, {self._VECTOR_KEY} AS key, "
                f"seq FROM memories WHERE namespace = ? AND {self._DENSE}) m "
                "LEFT JOIN embeddings e ON e.model = ? AND e.scope = ? AND e.hash = m.key",
                (ns, model, ns),
                binary=True,
            )
        ]

    def max_seq(self, ns: str) -> int:
        return self.read("SELECT COALESCE(MAX(seq), 0) FROM memories WHERE namespace = ?", (ns,))[0][0]

    def vectors_missing(self, ns: str, model: str, since: int, upto: int) -> list[tuple[int, str, str, str]]:
        """Live dense rows of ``ns`` changed in (since, upto] without a ``model`` vector: (rid, type, key,
        content)."""
        return [
            tuple(r)
            for r in self.read(
                f"SELECT m.rid, m.type, {self._VECTOR_KEY}, m.content FROM memories m WHERE m.namespace = ? "
                f"AND m.seq > ? AND m.seq <= ? AND {self._DENSE} AND NOT EXISTS "
                "(SELECT 1 FROM memory_vectors v WHERE v.model = ? AND v.rid = m.rid)",
                (ns, since, upto, model),
            )
        ]

    def put_item_vectors(self, ns: str, model: str, rows: Sequence[tuple[int, str, np.ndarray]]) -> None:
        """Vectors of items the cache could not give (embedded under another key): (rid, type, vector)."""
        from pgvector import Vector

        with self.transaction() as c:
            c.executemany(
                "INSERT INTO memory_vectors (rid, model, namespace, type, embedding) SELECT rid, ?, ?, ?, ? "
                "FROM memories WHERE rid = ? AND deleted = 0 ON CONFLICT DO NOTHING",
                [(model, ns, t, Vector(np.asarray(v, dtype=np.float32)), rid) for rid, t, v in rows],
            )

    def vector_top(
        self,
        ns: str,
        model: str,
        query: np.ndarray,
        k: int,
        types: Sequence[str] | None,
        allowed: Any,
        *,
        explain: bool = False,
    ) -> list[Any]:
        """pgvector's exact top ``k`` by inner product (unit vectors: cosine) among ``ns``'s live items, with
        their vectors: (rid, vector) best first. It reads ``ns``'s rows only, through the ``(model,
        namespace)`` btree. ``explain``: the plan's lines instead."""
        from pgvector import Vector

        q = Vector(np.asarray(query, dtype=np.float32))
        where, params = "", []
        if types is not None:
            where += " AND type = ANY(?::text[])"
            params.append(list(types))
        if allowed is not None:
            where += " AND rid = ANY(?::bigint[])"
            params.append([int(r) for r in allowed])
        rows = self.read(
            f"{'EXPLAIN ' if explain else ''}SELECT rid, embedding FROM memory_vectors WHERE model = ? "
            f"AND namespace = ?{where} ORDER BY embedding <#> ?, rid LIMIT ?",
            [model, ns, *params, q, k],
            binary=not explain,
        )
        if explain:
            return [r[0] for r in rows]
        return [(r[0], _np(r[1])) for r in rows]

    def vector_rows(
        self, model: str, rids: Sequence[int] | None, *, ns: str | None = None
    ) -> dict[int, np.ndarray]:
        """The ``model`` vectors of those of ``rids`` that have one (``rids`` None: all of namespace ``ns``)."""
        if rids is None:
            rows = self.read(
                "SELECT rid, embedding FROM memory_vectors WHERE model = ? AND namespace = ?",
                [model, ns],
                binary=True,
            )
            return {r[0]: _np(r[1]) for r in rows}
        if not rids:
            return {}
        rows = self.read(
            "SELECT rid, embedding FROM memory_vectors WHERE model = ? AND rid = ANY(?::bigint[])",
            [model, [int(r) for r in rids]],
            binary=True,
        )
        return {r[0]: _np(r[1]) for r in rows}


def _np(v: Any) -> np.ndarray:
    """A pgvector value as float32 numpy."""
    return np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v, dtype=np.float32)

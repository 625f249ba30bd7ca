"""The SQLite back-end of the store: one database file (or ``:memory:``), FTS5 for BM25.

:class:`SQLiteStore` supplies the back-end interface of :class:`~memrl.memory.store.Store`: one connection
behind a lock, ``BEGIN IMMEDIATE`` transactions (the file's one write lock, taken up front), the schema and
its migrations (:mod:`memrl.memory.schema`), and the lexical list by FTS5, whose triggers keep the index in
step with the items. Everything else is the shared :class:`~memrl.memory.store.Store`.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memrl.memory.fusion import fts_query
from memrl.memory.schema import connect, store_error
from memrl.memory.store import Store


class SQLiteStore(Store):
    """The store in one SQLite database (a file or ``:memory:``), BM25 by FTS5.

    Thread-safe (one connection behind a lock); several processes may share one file.
    """

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        busy_timeout: float = 5.0,
        core_limit: int = 5000,
        max_content_chars: int = 10_000,
    ) -> None:
        self.path = str(path)
        self.core_limit = core_limit
        self.max_content_chars = max_content_chars
        self._conn = connect(self.path, busy_timeout=busy_timeout)
        self._lock = threading.RLock()
        self._depth = 0
        self._batch: str | None = None

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def transaction(
        self, ns: str | Sequence[str] | None = None, *, batch: bool = False
    ) -> Iterator[sqlite3.Connection]:
        """One atomic write transaction; nested calls join the outer one. ``BEGIN IMMEDIATE`` takes the
        database's one write lock up front: ``ns`` needs no lock of its own.

        With ``batch=True`` every history entry written inside shares a batch id, so ``undo`` reverts
        them together.
        """
        with self._lock:
            outer = self._depth == 0
            if outer:
                try:
                    self._conn.execute("BEGIN IMMEDIATE")
                except sqlite3.Error as e:
                    raise store_error(e, self.path) from e
            opened_batch = batch and self._batch is None
            if opened_batch:
                self._batch = uuid.uuid4().hex
            self._depth += 1
            try:
                yield self._conn
            except BaseException:
                self._depth -= 1
                if opened_batch:
                    self._batch = None
                if outer:
                    self._conn.execute("ROLLBACK")
                raise
            self._depth -= 1
            if opened_batch:
                self._batch = None
            if outer:
                try:
                    self._conn.execute("COMMIT")
                except sqlite3.Error as e:
                    self._conn.execute("ROLLBACK")
                    raise store_error(e, self.path) from e

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as e:
                raise store_error(e, self.path) from e

    def lexical(
        self, ns: str, query: str, k: int, *, keys: bool = False, where: str = "", params: Sequence[Any] = ()
    ) -> list[tuple[int, float]]:
        table = "memory_keys_fts" if keys else "memories_fts"
        match = fts_query(query)
        if not match or k <= 0:
            return []
        # ORDER BY the FTS5 ``rank`` column (bm25 by default) lets FTS5 sort inside the virtual table, so the
        # join stops after k rows that pass the filters (no temp B-tree over every match).
        rows = self.read(
            f"SELECT m.rid, {table}.rank FROM {table} JOIN memories m ON m.rid = {table}.rowid "
            f"WHERE {table} MATCH ? AND m.namespace = ? AND m.deleted = 0{where} "
            f"ORDER BY {table}.rank LIMIT ?",
            [match, ns, *params, k],
        )
        return [(r[0], -r[1]) for r in rows]

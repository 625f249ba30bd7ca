"""The SQLite back-end of the store: one database file (or ``:memory:``).

:class:`SQLiteStore` supplies the back-end interface of :class:`~memrl.memory.store.Store`: one connection
behind a lock, ``BEGIN IMMEDIATE`` transactions (the file's one write lock, taken up front), and the schema
and its migrations (:mod:`memrl.memory.schema`). BM25 runs in the search process
(:mod:`memrl.memory.lexical`). Everything else is the shared :class:`~memrl.memory.store.Store`.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memrl.memory.schema import connect, store_error
from memrl.memory.store import Store


class SQLiteStore(Store):
    """The store in one SQLite database (a file or ``:memory:``).

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

"""The SQLite back-end of the store: one database file (or ``:memory:``).

:class:`SQLiteStore` supplies the back-end interface of :class:`~memrl.memory.store.base.Store`: one connection
behind a lock, ``BEGIN IMMEDIATE`` transactions (the file's one write lock, taken up front), and the schema
and its migrations (:mod:`memrl.memory.backends.sqlite.migrations`). BM25 runs in the search process
(:mod:`memrl.memory.index.lexical`). Everything else is the shared :class:`~memrl.memory.store.base.Store`.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memrl.errors import BusyError
from memrl.memory.backends.sqlite.migrations import connect, store_error
from memrl.memory.records.types import TYPE_CODE
from memrl.memory.store.base import Store
from memrl.memory.store.nesting import Nesting, waited

if TYPE_CHECKING:  # imported by the first search (it brings numpy): a store that only lists starts fast
    from memrl.memory.index.lexical import LexicalIndexes


def peek_items(path: str | Path, ns: str, ids: Sequence[str]) -> list[dict[str, Any]]:
    """Items ``ids`` of namespace ``ns`` in the SQLite file ``path``, read without opening a store (read-only,
    no migration, nothing created), in the order of ``ids``; [] when the file cannot be read. For pages that
    show what an evaluation run stored (the run's database may be older than this memrl)."""
    if not ids or not Path(path).exists():
        return []
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        marks = ",".join("?" * len(ids))
        got = {
            r[0]: {
                "id": r[0],
                "type": r[1],
                "content": r[2],
                "evidence": json.loads(r[3]),
                "deleted": bool(r[4]),
            }
            for r in con.execute(
                f"SELECT id, type, content, evidence, deleted FROM memories WHERE namespace = ? AND id IN ({marks})",
                [ns, *ids],
            )
        }
    except sqlite3.Error:
        return []
    finally:
        con.close()
    return [got[i] for i in ids if i in got]


class SQLiteStore(Store):
    """The store in one SQLite database (a file or ``:memory:``).

    Thread-safe: one connection behind a lock, which a writer waits for at most ``busy_timeout`` seconds
    (as it waits for another process's write lock), then gets :class:`~memrl.errors.BusyError`. A read
    that finds the connection busy (a long write in another thread, such as a server's import) reads the
    last committed state through a connection of its own instead of waiting (WAL readers never wait for
    the writer). Several processes may share one file.
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
        self.busy_timeout = busy_timeout
        self._conn = connect(self.path, busy_timeout=busy_timeout)
        self._lock = threading.RLock()
        self._tx = Nesting()
        self._local = threading.local()  # per-thread read connections (files only)
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()

    def lexical_index(self) -> LexicalIndexes:
        """BM25 in the search process: per-namespace postings that follow this store
        (:mod:`memrl.memory.index.lexical`)."""
        from memrl.memory.index.lexical import LexicalIndexes

        return LexicalIndexes(self, TYPE_CODE)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            with self._readers_lock:
                for r in self._readers:
                    r.close()
                self._readers.clear()

    def _acquire(self) -> float:
        """Take the connection's lock (a writer waits for it at most its busy timeout); returns that timeout."""
        wait = waited(self.busy_timeout)
        if not self._lock.acquire(timeout=max(wait, 0.001)):
            raise BusyError(
                f"{self.path} is busy with a long write of this process (an import?) for longer than the busy "
                f"timeout ({wait} s); retry, or raise busy_timeout"
            )
        return wait

    def _reader(self) -> sqlite3.Connection | None:
        """This thread's read-only connection to the file (None for ``:memory:``, which has one)."""
        if self.path == ":memory:":
            return None
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA query_only = ON")
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    @contextmanager
    def transaction(
        self, ns: str | Sequence[str] | None = None, *, batch: bool = False
    ) -> Iterator[sqlite3.Connection]:
        """One atomic write transaction; nested calls join the outer one. ``BEGIN IMMEDIATE`` takes the
        database's one write lock up front: ``ns`` needs no lock of its own.

        With ``batch=True`` every history entry written inside shares a batch id, so ``undo`` reverts
        them together.
        """
        wait = self._acquire()
        patient = wait != self.busy_timeout
        try:
            outer = self._tx.depth == 0
            if outer:
                try:
                    if patient:  # this context waits longer for the file's write lock (patience())
                        self._conn.execute(f"PRAGMA busy_timeout = {int(wait * 1000)}")
                    self._conn.execute("BEGIN IMMEDIATE")
                except sqlite3.Error as e:
                    raise store_error(e, self.path) from e
                finally:
                    if patient:
                        self._conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            try:
                with self._tx.level(batch):
                    yield self._conn
            except BaseException:
                if outer:
                    self._conn.execute("ROLLBACK")
                raise
            if outer:
                try:
                    self._conn.execute("COMMIT")
                except sqlite3.Error as e:
                    self._conn.execute("ROLLBACK")
                    raise store_error(e, self.path) from e
        finally:
            self._lock.release()

    @property
    def _batch(self) -> str | None:  # type: ignore[override]
        return self._tx.batch

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        conn = None
        if not self._lock.acquire(blocking=False):  # another thread is writing: read the last commit
            conn = self._reader()
            if conn is None:
                self._acquire()
        try:
            return (conn or self._conn).execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise store_error(e, self.path) from e
        finally:
            if conn is None:
                self._lock.release()

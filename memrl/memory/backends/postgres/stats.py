"""Planner statistics that keep up with bulk writes on Postgres (a mixin of :class:`~memrl.memory.backends.postgres.store.PostgresStore`).

Postgres plans each statement from the statistics ``ANALYZE`` gathered. Autovacuum refreshes them, but only
about a minute after a table starts growing (``autovacuum_naptime``) and then only once 10% of it has
changed: a store filled in bulk (an import, a benchmark, a new tenant's history) runs for that long on
statistics that say its tables are nearly empty. The planner then reads a whole namespace where an index
probe would do (issue 38: a development fill of the benchmark's items, timed per 10k, fell from about 3,400
to 500 items/s between 10k and 100k items with autovacuum off, and jumped from ~640 to ~4,300/s at 80k when
autovacuum's first ANALYZE came, with it on).

So the store counts the items its own commits add and, once they exceed :data:`GROWTH` of the table's size at
the last ``ANALYZE`` (and at least :data:`MIN_ROWS`), runs ``ANALYZE`` on the tables a write batch touches,
after the commit, outside any transaction. Geometric: about a dozen times on the way from empty to a million
items, a few hundred milliseconds each. One process at a time (an advisory lock; a process that finds
another analyzing skips and tries after its next commit).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

#: Analyze once the rows added since the last ANALYZE reach this fraction of the table's size then ...
GROWTH = 0.5
#: ... and at least this many (below it, reading a whole namespace costs less than the ANALYZE).
MIN_ROWS = 5000
#: The tables a write batch touches (items, their history, postings, cache, vectors, keys).
TABLES = "memories, history, lex_docs, lex_terms, lex_stats, embeddings, memory_vectors, memory_keys"
_LOCK = 7231988  # advisory lock key (pg_schema's migrations use 7231987)


class PgStatsMixin:
    """Counts committed inserts and runs ``ANALYZE`` when they outgrow the last statistics (module docstring)."""

    pool: Any
    _errors: Any

    def _stats_init(self) -> None:
        self._stats_lock = threading.Lock()
        self._added = 0  # rows committed by this process since the statistics were last refreshed
        self._pending = threading.local()  # rows written by the current thread's open transaction
        self._analyzed_rows = self._table_rows()
        self.analyzed = 0  # ANALYZE runs by this process (for tests and benchmarks)

    def _table_rows(self) -> int:
        with self._errors(), self.pool.connection() as conn:
            return _reltuples(conn)

    def _wrote(self, rows: int) -> None:
        """``rows`` items written inside the current transaction (counted when it commits)."""
        self._pending.rows = getattr(self._pending, "rows", 0) + rows

    def _rolled_back(self) -> None:
        self._pending.rows = 0

    def _committed(self) -> None:
        """After the outermost transaction commits: count its rows, and ANALYZE if they are many."""
        rows, self._pending.rows = getattr(self._pending, "rows", 0), 0
        if not rows:
            return
        with self._stats_lock:
            self._added += rows
            due = self._added >= max(MIN_ROWS, GROWTH * self._analyzed_rows)
            if due:
                self._added = 0
        if due:
            # the write has committed: a failed refresh must not read as a failed write
            try:
                self.analyze()
            except Exception as e:
                log.warning(
                    "ANALYZE after a bulk write failed (autovacuum will refresh the statistics): %s", e
                )

    def analyze(self) -> bool:
        """Refresh the planner statistics of the store's write tables now; False if another process is."""
        with self._errors(), self.pool.connection() as conn:
            if not conn.execute("SELECT pg_try_advisory_lock(%s)", (_LOCK,)).fetchone()[0]:
                with self._stats_lock:
                    self._added = max(self._added, MIN_ROWS)  # try again after the next commit
                return False
            try:
                conn.execute(f"ANALYZE {TABLES}")
                n = _reltuples(conn)
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK,))
        with self._stats_lock:
            self._analyzed_rows = n
            self.analyzed += 1
        return True


def _reltuples(conn: Any) -> int:
    """The planner's row count of ``memories`` as of its last ANALYZE (0 if never: Postgres says -1)."""
    n = conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'memories'::regclass").fetchone()[0]
    return max(int(n), 0)

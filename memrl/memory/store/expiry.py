"""Items that expire: ``metadata["expires_at"]`` (seconds since the epoch, UTC) and the sweep that deletes them.

An item whose ``expires_at`` has passed leaves search: :class:`~memrl.memory.search.hybrid.SearchIndex` asks
:meth:`ExpiryMixin.expiry_due` before each search of a namespace (one indexed lookup) and, when something
is due, :meth:`ExpiryMixin.sweep_expired` soft-deletes the namespace's expired items first (op ``EXPIRE``,
actor ``expiry``: in the item's history, restorable and undoable like any delete), so a search never
returns fewer than ``top_k`` hits because some were expired. ``get`` and ``list`` show an expired item
until a sweep has run: any search of its namespace, or ``Memory.sweep_expired()`` over the whole store.

The sweep works in batches (``batch`` items per write transaction, each re-checked inside it), so writers
of the namespace wait for at most one batch, and an item whose expiry was moved on by a writer between two
batches is left alone. Both back-ends index the expiry time of live items (SQLite migration 7, Postgres
``0005_expiry.sql``), so finding due items reads only those.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from datetime import datetime
from typing import Any

from memrl.datetimes import epoch_seconds
from memrl.errors import ValidationError

#: The metadata key holding an item's expiry time (seconds since the epoch, UTC).
EXPIRES_AT = "expires_at"
#: Items per write transaction of a sweep.
SWEEP_BATCH = 500


def expiry_time(expires_at: Any = None, ttl: Any = None, *, now: float | None = None) -> float | None:
    """An expiry time in seconds since the epoch from ``expires_at`` (seconds, a datetime, or an ISO 8601
    string; a naive one is UTC) or ``ttl`` (seconds from ``now``); None when neither is given."""
    if expires_at is not None and ttl is not None:
        raise ValidationError("give expires_at or ttl, not both", field="ttl")
    if ttl is not None:
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl) or ttl <= 0:
            raise ValidationError(f"ttl must be a positive number of seconds, got {ttl!r}", field="ttl")
        return (time.time() if now is None else now) + float(ttl)
    if expires_at is None:
        return None
    if isinstance(expires_at, str | datetime):
        try:
            return epoch_seconds(expires_at)
        except ValueError as e:
            raise ValidationError(
                f"expires_at must be seconds since the epoch or an ISO 8601 time, got {expires_at!r}",
                field="expires_at",
            ) from e
    return check_expiry(expires_at)


def check_expiry(value: Any) -> float:
    """``metadata["expires_at"]`` as stored: a finite number of seconds since the epoch."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(
            f"metadata.{EXPIRES_AT} must be a number of seconds since the epoch (UTC), got {value!r}; "
            "give expires_at= or ttl= to add() for datetimes and ISO strings",
            field=f"metadata.{EXPIRES_AT}",
        )
    return float(value)


class ExpiryMixin:
    """Finding and deleting expired items (a :class:`~memrl.memory.store.base.Store` mixin). A back-end gives
    the SQL of an item's expiry time as :meth:`expiry_sql` (the expression its index is built on)."""

    def expiry_sql(self) -> str:
        return "json_extract(metadata, '$.expires_at')"

    def _due_where(self) -> str:
        e = self.expiry_sql()
        return f"deleted = 0 AND {e} IS NOT NULL AND {e} <= ?"

    def expiry_due(self, ns: str, now: float | None = None) -> bool:
        """Whether a live item of ``ns`` has expired (one lookup in the expiry index)."""
        now = time.time() if now is None else now
        rows = self.read(
            f"SELECT 1 FROM memories WHERE namespace = ? AND {self._due_where()} LIMIT 1", (ns, now)
        )
        return bool(rows)

    def expired_namespaces(self, now: float | None = None) -> list[str]:
        """The namespaces holding a live expired item."""
        now = time.time() if now is None else now
        rows = self.read(f"SELECT DISTINCT namespace FROM memories WHERE {self._due_where()}", (now,))
        return sorted(r[0] for r in rows)

    def sweep_expired(
        self,
        ns: str | None = None,
        *,
        now: float | None = None,
        batch: int = SWEEP_BATCH,
        actor: str = "expiry",
    ) -> int:
        """Soft-delete the items of ``ns`` (every namespace when None) whose expiry is at or before ``now``,
        ``batch`` per write transaction; returns how many were deleted."""
        if batch < 1:
            raise ValidationError(f"batch must be at least 1, got {batch}", field="batch")
        now = time.time() if now is None else now
        total = 0
        for name in [ns] if ns is not None else self.expired_namespaces(now):
            while True:
                with self.transaction(name):
                    ids = [
                        r[0]
                        for r in self._conn.execute(
                            f"SELECT id FROM memories WHERE namespace = ? AND {self._due_where()} ORDER BY rid LIMIT ?",
                            (name, now, batch),
                        ).fetchall()
                    ]
                    for mid in ids:
                        old = self.get(name, mid)
                        new = replace(old, deleted=True, updated_at=time.time())
                        self._write_state(name, old, new, "EXPIRE", actor)
                total += len(ids)
                if len(ids) < batch:
                    break
        return total

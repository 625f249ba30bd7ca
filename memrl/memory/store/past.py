"""A namespace as it was at an earlier time, rebuilt from its history; and an item's earlier versions.

Every change is logged with full before/after snapshots (:mod:`memrl.memory.store.history`), so an update or a
delete never destroys the old text: ``state_at(store, ns, t)`` replays the log up to ``t`` (the last
snapshot of each item logged at or before ``t``; a deleted snapshot means the item was gone then), and
``versions(store, ns, id)`` lists the states an item had before each of its changes.

Cost: ``state_at`` reads every history entry of the namespace up to ``t`` (one query, O(changes)), and
a search ``as_of`` a time then indexes that state afresh in a private in-memory store
(:meth:`memrl.memory.facade.reads.ReadMethods.search`): fine for thousands of items, not a
temporal index. Items copied by ``clone`` carry no history; they count as present from their
``created_at`` on, in their current state (the best the log can tell).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from memrl.datetimes import epoch_seconds
from memrl.errors import NotFoundError, ValidationError
from memrl.memory.records.types import MemoryItem
from memrl.memory.store.history import CORE_ID

AsOf = float | int | str | datetime


def to_time(value: AsOf) -> float:
    """UNIX seconds of ``value``: a number, a numeric string, a ``datetime`` (naive means UTC) or an
    ISO-8601 string (``2026-05-01``, ``2026-05-01T12:00:00Z``, ``...+02:00``)."""
    if isinstance(value, bool):
        raise ValidationError("as_of: expected a time, got a boolean")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            pass
        try:
            return epoch_seconds(text)
        except ValueError:
            raise ValidationError(
                f"as_of: {value!r} is not a time; give UNIX seconds or ISO 8601 (2026-05-01T12:00:00Z)"
            ) from None
    if isinstance(value, datetime):
        return epoch_seconds(value)
    raise ValidationError(f"as_of: expected a time, got {type(value).__name__}")


def state_at(store: Any, ns: str, at: float, *, limit: int | None = None) -> dict[str, MemoryItem]:
    """``{id: item}`` of the items of ``ns`` that were live (not deleted) at time ``at``. ``limit``: the
    most history entries to replay (a bound on the work; more: :class:`ValidationError`, nothing read past
    it)."""
    sql = "SELECT memory_id, new FROM history WHERE namespace = ? AND at <= ? AND memory_id != ? ORDER BY seq"
    params: tuple[Any, ...] = (ns, at, CORE_ID)
    if limit is not None:
        sql, params = sql + " LIMIT ?", (*params, int(limit) + 1)
    rows = store.read(sql, params)
    if limit is not None and len(rows) > limit:
        raise ValidationError(
            f"as_of: namespace {ns!r} has more than {limit} changes to replay up to that time, more than one "
            "request may rebuild (the server's --max-as-of-changes); export the namespace and search it offline",
            field="as_of",
        )
    last: dict[str, Any] = {}
    for memory_id, new in rows:
        last[memory_id] = new
    logged = {r[0] for r in store.read("SELECT DISTINCT memory_id FROM history WHERE namespace = ?", (ns,))}
    out = {
        mid: MemoryItem.from_dict(json.loads(new))
        for mid, new in last.items()
        if new is not None and not json.loads(new).get("deleted")
    }
    for item in store.list(ns):  # cloned items: no history, present since their creation
        if item.id not in logged and item.created_at <= at:
            out[item.id] = item
    return out


def item_at(store: Any, ns: str, memory_id: str, at: float) -> MemoryItem:
    """The state of one item at time ``at``; :class:`NotFoundError` if it did not exist or was deleted."""
    store.check_text(memory_id, "memory_id")
    rows = store.read(
        "SELECT new FROM history WHERE namespace = ? AND memory_id = ? AND at <= ? ORDER BY seq DESC LIMIT 1",
        (ns, memory_id, at),
    )
    if rows:
        new = None if rows[0][0] is None else json.loads(rows[0][0])
        if new is not None and not new.get("deleted"):
            return MemoryItem.from_dict(new)
        raise NotFoundError(f"memory {memory_id!r} was deleted in namespace {ns!r} at that time")
    if not store.history(ns, memory_id, limit=1):  # no history at all: a cloned item
        item = store.get(ns, memory_id)
        if item.created_at <= at:
            return item
    raise NotFoundError(f"memory {memory_id!r} did not exist yet in namespace {ns!r} at that time")


def versions(store: Any, ns: str, memory_id: str) -> list[dict[str, Any]]:
    """The earlier versions of an item, oldest first: the state before each change that had one, with
    ``replaced_at`` (when that change happened), ``replaced_by`` (its op) and ``seq``."""
    return [
        {**e.old, "replaced_at": e.at, "replaced_by": e.op, "seq": e.seq}
        for e in store.history(ns, memory_id)
        if e.old is not None
    ]

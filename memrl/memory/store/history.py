"""The history side of the store: every change is recorded with before/after snapshots, and can be undone.

:class:`HistoryMixin` is part of :class:`~memrl.memory.store.base.Store` (it uses its connection,
transactions and item writes): ``history`` lists changes, ``undo`` reverts the latest change of an item
or of a namespace (a merge or a split, written as one batch, is undone as a whole), and ``rollback``
reverts everything after a point, which is how an interrupted build resumes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from memrl.errors import ConflictError, NotFoundError
from memrl.memory.records.types import CORE_ID, HistoryEntry, MemoryItem


class HistoryMixin:
    """History, undo and rollback for :class:`~memrl.memory.store.base.Store`."""

    _conn: Any
    _NO_LIMIT: Any
    check_text: Any

    @staticmethod
    def _row_to_entry(r: Sequence[Any]) -> HistoryEntry:
        return HistoryEntry(
            seq=r[0],
            namespace=r[1],
            memory_id=r[2],
            op=r[3],
            old=None if r[4] is None else json.loads(r[4]),
            new=None if r[5] is None else json.loads(r[5]),
            at=r[6],
            actor=r[7],
            undone=bool(r[9]),
        )

    _HISTORY_COLUMNS = "seq, namespace, memory_id, op, old, new, at, actor, batch, undone"

    def history(
        self, ns: str, memory_id: str | None = None, *, limit: int | None = None
    ) -> list[HistoryEntry]:
        """Changes of one item (or of the whole namespace), oldest first."""
        if memory_id is not None:
            self.check_text(memory_id, "memory_id")
        if memory_id is None:
            sql, params = f"SELECT {self._HISTORY_COLUMNS} FROM history WHERE namespace = ?", [ns]
        else:
            sql = f"SELECT {self._HISTORY_COLUMNS} FROM history WHERE namespace = ? AND memory_id = ?"
            params = [ns, memory_id]
        rows = self.read(
            sql + " ORDER BY seq DESC LIMIT ?", [*params, self._NO_LIMIT if limit is None else limit]
        )
        if memory_id is not None and not rows and memory_id != CORE_ID:
            self.get(ns, memory_id, include_deleted=True)  # raises NotFoundError for unknown ids
        return [self._row_to_entry(r) for r in reversed(rows)]

    def undo(self, ns: str, memory_id: str | None = None, *, actor: str | None = None) -> list[HistoryEntry]:
        """Revert the latest change of ``memory_id`` (or the latest change in ``ns``), with its whole batch.

        Returns the entries that were undone. Undo itself is recorded (op ``UNDO``) and is not undone by a
        later undo: repeated calls walk further back.
        """
        if memory_id is not None:
            self.check_text(memory_id, "memory_id")
        with self.transaction(ns) as c:
            where, params = "namespace = ? AND undone = 0 AND op != 'UNDO'", [ns]
            if memory_id is not None:
                where += " AND memory_id = ?"
                params.append(memory_id)
            row = c.execute(
                f"SELECT {self._HISTORY_COLUMNS} FROM history WHERE {where} ORDER BY seq DESC LIMIT 1", params
            ).fetchone()
            if row is None:
                what = f"memory {memory_id!r}" if memory_id else f"namespace {ns!r}"
                raise NotFoundError(f"nothing to undo for {what}")
            rows = [row]
            if row[8] is not None:  # the whole batch, newest first
                rows = c.execute(
                    f"SELECT {self._HISTORY_COLUMNS} FROM history WHERE namespace = ? AND batch = ? AND undone = 0 "
                    "ORDER BY seq DESC",
                    (ns, row[8]),
                ).fetchall()
            entries = [self._row_to_entry(r) for r in rows]
            for e in entries:
                later = c.execute(
                    "SELECT count(*) FROM history WHERE namespace = ? AND memory_id = ? AND seq > ? AND undone = 0 "
                    "AND op != 'UNDO' AND (batch IS NULL OR batch != ?)",
                    (ns, e.memory_id, e.seq, row[8] or ""),
                ).fetchone()[0]
                if later:
                    raise ConflictError(
                        f"cannot undo change {e.seq} of {e.memory_id!r}: it was changed again later; "
                        "undo the later changes first"
                    )
                # undone = the seq of the undo that reverted it (0: in effect), so a rollback to a point before
                # that undo can put the flag back (databases written before this kept 1)
                c.execute("UPDATE history SET undone = ? WHERE seq = ?", (self._revert(ns, e, actor), e.seq))
        return entries

    def undo_batch(self, ns: str, batch: str, *, actor: str | None = None) -> list[HistoryEntry]:
        """Revert every change of one batch (a job's writes), newest first, atomically; returns them.

        Refused whole (:class:`ConflictError` naming every such item) when a change outside the batch
        touched one of its items later: undoing would silently drop that later change."""
        with self.transaction(ns) as c:
            rows = c.execute(
                f"SELECT {self._HISTORY_COLUMNS} FROM history WHERE namespace = ? AND batch = ? AND undone = 0 "
                "AND op != 'UNDO' ORDER BY seq DESC",
                (ns, batch),
            ).fetchall()
            if not rows:
                raise NotFoundError(f"nothing to undo: batch {batch!r} has no change in effect in {ns!r}")
            entries = [self._row_to_entry(r) for r in rows]
            later = sorted(
                {
                    e.memory_id
                    for e in entries
                    if c.execute(
                        "SELECT count(*) FROM history WHERE namespace = ? AND memory_id = ? AND seq > ? "
                        "AND undone = 0 AND op != 'UNDO' AND (batch IS NULL OR batch != ?)",
                        (ns, e.memory_id, e.seq, batch),
                    ).fetchone()[0]
                }
            )
            if later:
                raise ConflictError(
                    f"cannot undo: {', '.join(repr(i) for i in later)} changed again later; undo those "
                    "changes first"
                )
            for e in entries:
                c.execute("UPDATE history SET undone = ? WHERE seq = ?", (self._revert(ns, e, actor), e.seq))
        return entries

    def seq_time(self, seq: int) -> float | None:
        """The time history row ``seq`` was recorded (None if there is none): with ``seq``, what names one
        point of this database's history (:func:`memrl.memory.index.snapshot.stamp`)."""
        rows = self.read("SELECT at FROM history WHERE seq = ?", (int(seq),))
        return float(rows[0][0]) if rows else None

    def last_seq(self, ns: str) -> int:
        """Sequence number of the latest change in ``ns`` (0 if none): a point to roll back to."""
        return self.read("SELECT COALESCE(MAX(seq), 0) FROM history WHERE namespace = ?", (ns,))[0][0]

    def rollback(self, ns: str, to_seq: int, *, actor: str | None = None) -> int:
        """Put ``ns`` back in the state it had right after change ``to_seq``, atomically; returns how many
        changes made after it were in effect (undone ones and undos do not count).

        Every item (and the core block) changed after ``to_seq`` gets the state recorded as ``old`` by its
        first change after that point: the state it had then, whatever happened later (updates, undos of
        changes made before or after the point, undos of undos). This is how an interrupted build resumes:
        the partial session is rolled back, then rebuilt.
        """
        with self.transaction(ns) as c:
            rows = c.execute(
                f"SELECT {self._HISTORY_COLUMNS} FROM history WHERE namespace = ? AND seq > ? ORDER BY seq",
                (ns, to_seq),
            ).fetchall()
            entries = [self._row_to_entry(r) for r in rows]
            first: dict[str, HistoryEntry] = {}
            for e in entries:
                first.setdefault(e.memory_id, e)
            last = max((self._revert(ns, e, actor) for e in reversed(list(first.values()))), default=0)
            if entries:
                c.execute(
                    "UPDATE history SET undone = ? WHERE namespace = ? AND seq > ? AND seq <= ? AND op != 'UNDO' "
                    "AND undone = 0",
                    (last, ns, to_seq, entries[-1].seq),
                )
                # changes made before the point but undone after it are in effect again, as they were then
                c.execute(
                    "UPDATE history SET undone = 0 WHERE namespace = ? AND seq <= ? AND undone > ?",
                    (ns, to_seq, to_seq),
                )
        return sum(1 for e in entries if not e.undone and e.op != "UNDO")

    def _revert(self, ns: str, e: HistoryEntry, actor: str | None) -> int:
        """Put the state before ``e`` back (logged as an ``UNDO`` change); returns that change's seq."""
        if e.memory_id == CORE_ID:
            old = (e.old or {}).get("content", "")
            now = self._conn.execute("SELECT content FROM core WHERE namespace = ?", (ns,)).fetchone()
            seq = self._log(ns, CORE_ID, "UNDO", {"content": now[0] if now else ""}, {"content": old}, actor)
            self._conn.execute(
                "UPDATE core SET content = ?, updated_at = ? WHERE namespace = ?", (old, time.time(), ns)
            )
            return seq
        cur = self.get(ns, e.memory_id, include_deleted=True)
        if e.old is None:  # undoing a creation: the item goes away (soft), as a delete would
            target = replace(cur, deleted=True, updated_at=time.time())
        else:
            target = MemoryItem.from_dict({**e.old, "updated_at": time.time()})
        self._write_state(ns, cur, target, "UNDO", actor)
        return self._conn.execute(
            "SELECT seq FROM memories WHERE namespace = ? AND id = ?", (ns, e.memory_id)
        ).fetchone()[0]

"""The embedded memory store: items, core memory, namespaces and an undoable history, in one SQLite file.

This layer is synchronous and knows nothing about embeddings beyond storing cached vectors; search lives
in :mod:`memrl.memory.search` and the user-facing API in :mod:`memrl.memory.facade`.

Every change writes a history entry holding full before/after snapshots, in the same transaction as the
change itself, so a crash never leaves a change without its history. Deletes are soft (recoverable);
``undo`` reverts the latest change of an item, or a whole batch (a merge or a split) at once.
Namespaces isolate users and RL episodes; ``clone_namespace`` copies one with a single SQL statement.

:class:`SQLiteStore` is assembled from one part per job: this module holds the connection, transactions and
item writes; :mod:`~memrl.memory.validation` the input checks, :mod:`~memrl.memory.history` history and
undo, :mod:`~memrl.memory.namespaces` namespaces and core memory, :mod:`~memrl.memory.indexing` what search
indexes read, and :mod:`~memrl.memory.transfer` export and import.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from memrl.errors import ConflictError, NotFoundError, ValidationError
from memrl.memory.history import CORE_ID, HistoryMixin
from memrl.memory.indexing import Change, IndexSupportMixin
from memrl.memory.keys import KeysMixin
from memrl.memory.namespaces import NamespaceMixin
from memrl.memory.schema import connect, store_error
from memrl.memory.schemas import MAX_OFFSET
from memrl.memory.types import MemoryItem, MemoryType
from memrl.memory.validation import CONTENT_DERIVED_KEYS, ValidationMixin, content_hash, new_id, strip_derived

__all__ = [
    "CONTENT_DERIVED_KEYS", "CORE_ID", "Change", "NewItem", "SQLiteStore", "content_hash", "new_id",
    "strip_derived",
]  # fmt: skip

_ITEM_COLUMNS = "id, namespace, type, content, metadata, evidence, session, created_at, updated_at, deleted"


@dataclass
class NewItem:
    """An item to insert. ``id`` is generated when not given.

    ``vector``: the item's dense vector, given by the caller instead of an embedding of its content (for
    the embedder in use; see :mod:`memrl.memory.dense`).
    """

    content: str
    type: MemoryType | str = MemoryType.SEMANTIC
    metadata: dict[str, Any] = field(default_factory=dict)
    evidence: Sequence[str] = ()
    session: str | None = None
    id: str | None = None
    vector: Any = None


class SQLiteStore(ValidationMixin, HistoryMixin, NamespaceMixin, IndexSupportMixin, KeysMixin):
    """Items, core memory, namespaces and history in one SQLite database (a file or ``:memory:``).

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

    # ------------------------------------------------------------------ plumbing
    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def transaction(self, *, batch: bool = False) -> Iterator[sqlite3.Connection]:
        """One atomic write transaction; nested calls join the outer one.

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

    def _log(self, ns: str, memory_id: str, op: str, old: Any, new: Any, actor: str | None) -> int:
        cur = self._conn.execute(
            "INSERT INTO history (namespace, memory_id, op, old, new, at, actor, batch) VALUES (?,?,?,?,?,?,?,?)",
            (
                ns,
                memory_id,
                op,
                None if old is None else json.dumps(old),
                None if new is None else json.dumps(new),
                time.time(),
                actor,
                self._batch,
            ),
        )
        return int(cur.lastrowid)

    # ------------------------------------------------------------------ items
    def validate(
        self, items: Sequence[NewItem]
    ) -> list[tuple[str | None, MemoryType, str, dict, tuple[str, ...], Any]]:
        """Check new items (type, content, metadata) without writing; raises :class:`ValidationError`.
        An item without an id gets one on insert (:meth:`_free_id`)."""
        prepared = []
        for it in items:
            if not isinstance(it, NewItem):
                raise ValidationError(f"expected NewItem or str, got {type(it).__name__}")
            prepared.append(
                (
                    None if it.id is None else self.check_id(it.id),  # None: chosen on insert (new_id)
                    self.check_type(it.type),
                    self.check_content(it.content),
                    self._check_metadata(it.metadata),
                    self.check_evidence(it.evidence or ()),
                    self.check_session(it.session),
                )
            )
        return prepared

    @staticmethod
    def _free_id(c: sqlite3.Connection, ns: str, content: str) -> str:
        """The first :func:`new_id` attempt not taken in ``ns`` (deleted rows included: a generated id
        never brings back a deleted memory's row)."""
        for attempt in range(1000):
            mid = new_id(ns, content, attempt)
            if (
                c.execute("SELECT 1 FROM memories WHERE namespace = ? AND id = ?", (ns, mid)).fetchone()
                is None
            ):
                return mid
        raise ValidationError(f"no free id for a new memory in namespace {ns!r}")  # pragma: no cover

    def insert(self, items: Sequence[NewItem], ns: str, *, actor: str | None = None) -> list[MemoryItem]:
        """Insert items atomically (all or none)."""
        return self.insert_valid(self.validate(items), ns, actor=actor)

    def insert_valid(
        self, prepared: Sequence[tuple], ns: str, *, actor: str | None = None
    ) -> list[MemoryItem]:
        """Insert what :meth:`validate` returned (so a caller that validated first does not pay twice)."""
        self._check_namespace(ns)
        out = []
        now = time.time()
        with self.transaction() as c:
            self._ensure_namespace(ns)
            for mid, mtype, content, meta, evidence, session in prepared:
                row = None  # a generated id is free by construction: no row to look up
                if mid is None:
                    mid = self._free_id(c, ns, content)
                else:
                    row = c.execute(
                        "SELECT deleted FROM memories WHERE namespace = ? AND id = ?", (ns, mid)
                    ).fetchone()
                item = MemoryItem(mid, ns, mtype, content, meta, evidence, session, now, now)
                if row is not None:
                    if not row[0]:
                        raise ConflictError(f"a memory with id {mid!r} already exists in namespace {ns!r}")
                    # The id of a deleted memory is taken again (a rolled-back build re-adding turn D1:3): the
                    # row comes back with the new content; its history keeps the deleted version.
                    self._write_state(ns, self.get(ns, mid, include_deleted=True), item, "ADD", actor)
                else:
                    seq = self._log(ns, mid, "ADD", None, item.to_dict(), actor)
                    c.execute(
                        "INSERT INTO memories (namespace, id, type, content, content_hash, metadata, evidence, "
                        "session, created_at, updated_at, deleted, seq) VALUES (?,?,?,?,?,?,?,?,?,?,0,?)",
                        (ns, mid, mtype.value, content, content_hash(content), json.dumps(meta),
                         json.dumps(list(evidence)), session, now, now, seq),
                    )  # fmt: skip
                out.append(item)
        return out

    @staticmethod
    def _row_to_item(r: Sequence[Any]) -> MemoryItem:
        return MemoryItem(
            id=r[0],
            namespace=r[1],
            type=MemoryType(r[2]),
            content=r[3],
            metadata=json.loads(r[4]),
            evidence=tuple(json.loads(r[5])),
            session=r[6],
            created_at=r[7],
            updated_at=r[8],
            deleted=bool(r[9]),
        )

    def get(self, ns: str, memory_id: str, *, include_deleted: bool = False) -> MemoryItem:
        if not isinstance(memory_id, str):
            raise ValidationError(f"memory id must be a string, got {type(memory_id).__name__}")
        rows = self.read(
            f"SELECT {_ITEM_COLUMNS} FROM memories WHERE namespace = ? AND id = ?", (ns, memory_id)
        )
        if not rows or (rows[0][9] and not include_deleted):
            state = "was deleted" if rows else "does not exist"
            raise NotFoundError(f"memory {memory_id!r} {state} in namespace {ns!r}")
        return self._row_to_item(rows[0])

    def get_many_by_rid(self, rids: Sequence[int]) -> dict[int, MemoryItem]:
        if not rids:
            return {}
        marks = ",".join("?" * len(rids))
        rows = self.read(f"SELECT rid, {_ITEM_COLUMNS} FROM memories WHERE rid IN ({marks})", list(rids))
        return {r[0]: self._row_to_item(r[1:]) for r in rows}

    def list(
        self,
        ns: str,
        *,
        types: Sequence[MemoryType | str] | None = None,
        include_deleted: bool = False,
        limit: int | None = None,
        offset: int = 0,
        newest_first: bool = False,
    ) -> list[MemoryItem]:
        if not (isinstance(offset, int) and 0 <= offset <= MAX_OFFSET):
            raise ValidationError(
                f"offset must be an integer from 0 to {MAX_OFFSET}, got {offset!r}", field="offset"
            )
        if limit is not None and not (isinstance(limit, int) and 0 <= limit <= MAX_OFFSET):
            raise ValidationError(
                f"limit must be an integer from 0 to {MAX_OFFSET}, got {limit!r}", field="limit"
            )
        where, params = ["namespace = ?"], [ns]
        if not include_deleted:
            where.append("deleted = 0")
        if types:
            tv = [self.check_type(t).value for t in types]
            where.append(f"type IN ({','.join('?' * len(tv))})")
            params += tv
        order = "DESC" if newest_first else "ASC"
        sql = f"SELECT {_ITEM_COLUMNS} FROM memories WHERE {' AND '.join(where)} ORDER BY created_at {order}, rid {order}"
        sql += " LIMIT ? OFFSET ?"
        params += [-1 if limit is None else int(limit), int(offset)]
        return [self._row_to_item(r) for r in self.read(sql, params)]

    def count(self, ns: str, *, types: Sequence[MemoryType | str] | None = None) -> int:
        where, params = "namespace = ? AND deleted = 0", [ns]
        if types:
            tv = [self.check_type(t).value for t in types]
            where += f" AND type IN ({','.join('?' * len(tv))})"
            params += tv
        return self.read(f"SELECT count(*) FROM memories WHERE {where}", params)[0][0]

    def _write_state(
        self, ns: str, old: MemoryItem, new: MemoryItem, op: str, actor: str | None
    ) -> MemoryItem:
        seq = self._log(ns, old.id, op, old.to_dict(), new.to_dict(), actor)
        self._conn.execute(
            "UPDATE memories SET type = ?, content = ?, content_hash = ?, metadata = ?, evidence = ?, session = ?, "
            "updated_at = ?, deleted = ?, seq = ? WHERE namespace = ? AND id = ?",
            (new.type.value, new.content, content_hash(new.content), json.dumps(new.metadata),
             json.dumps(list(new.evidence)), new.session, new.updated_at, int(new.deleted), seq, ns, old.id),
        )  # fmt: skip
        return new

    def update(
        self,
        ns: str,
        memory_id: str,
        *,
        content: str | None = None,
        type: MemoryType | str | None = None,
        metadata: dict[str, Any] | None = None,
        evidence: Sequence[str] | None = None,
        session: str | None = None,
        op: str = "UPDATE",
        actor: str | None = None,
    ) -> MemoryItem:
        """Replace fields of a live item; the previous version is kept in its history. A call that changes
        nothing (no field given, or every given field equal to the current one) writes nothing and
        returns the item as it is."""
        with self.transaction():
            old = self.get(ns, memory_id)
            meta = old.metadata if metadata is None else self._check_metadata(metadata)
            if content is not None and content != old.content:
                meta = strip_derived(meta)
            new = MemoryItem(
                id=old.id,
                namespace=ns,
                type=old.type if type is None else self.check_type(type),
                content=old.content if content is None else self.check_content(content),
                metadata=meta,
                evidence=old.evidence if evidence is None else self.check_evidence(evidence),
                session=old.session if session is None else self.check_session(session),
                created_at=old.created_at,
                updated_at=old.updated_at,
            )
            if new == old:
                return old
            return self._write_state(ns, old, replace(new, updated_at=time.time()), op, actor)

    def delete(
        self,
        ns: str,
        memory_id: str,
        *,
        op: str = "DELETE",
        reason: str | None = None,
        actor: str | None = None,
    ) -> MemoryItem:
        """Soft-delete: the item leaves search and listings but can be restored or undone.

        A ``reason`` is kept in the deleted version's metadata (``delete_reason``)."""
        with self.transaction():
            old = self.get(ns, memory_id)
            meta = old.metadata if reason is None else {**old.metadata, "delete_reason": str(reason)}
            new = replace(old, deleted=True, metadata=meta, updated_at=time.time())
            return self._write_state(ns, old, new, op, actor)

    def restore(self, ns: str, memory_id: str, *, actor: str | None = None) -> MemoryItem:
        with self.transaction():
            old = self.get(ns, memory_id, include_deleted=True)
            if not old.deleted:
                raise ValidationError(f"memory {memory_id!r} is not deleted")
            new = replace(old, deleted=False, updated_at=time.time())
            return self._write_state(ns, old, new, "RESTORE", actor)

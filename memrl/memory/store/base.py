"""The memory store: items, core memory, namespaces and an undoable history, over SQL any back-end runs.

This layer is synchronous and knows nothing about embeddings beyond storing cached vectors; search lives
in :mod:`memrl.memory.search.hybrid` and the user-facing API in :mod:`memrl.memory.facade.memory`.

Every change writes a history entry holding full before/after snapshots, in the same transaction as the
change itself, so a crash never leaves a change without its history. Deletes are soft (recoverable);
``undo`` reverts the latest change of an item, or a whole batch (a merge or a split) at once.
Namespaces isolate users and RL episodes; ``clone_namespace`` copies one with a single SQL statement.

:class:`Store` is assembled from one part per job: this module holds the back-end interface and the item
writes; :mod:`~memrl.memory.store.validation` the input checks, :mod:`~memrl.memory.store.history` history and
undo, :mod:`~memrl.memory.store.namespaces` namespaces and core memory, :mod:`~memrl.memory.store.indexing` what search
indexes read, :mod:`~memrl.memory.store.keys` retrieval keys, and :mod:`~memrl.memory.store.transfer` export and import.
The back-ends: :class:`~memrl.memory.backends.sqlite.store.SQLiteStore` (one file, the default) and
:class:`~memrl.memory.backends.postgres.store.PostgresStore` (Postgres with pgvector, by URL).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from memrl.errors import ConflictError, NotFoundError, ValidationError
from memrl.memory.records.models import MAX_OFFSET
from memrl.memory.records.types import MemoryItem, MemoryType
from memrl.memory.store.expiry import ExpiryMixin
from memrl.memory.store.history import CORE_ID, HistoryMixin
from memrl.memory.store.indexing import Change, IndexSupportMixin
from memrl.memory.store.interface import Backend
from memrl.memory.store.keys import KeysMixin
from memrl.memory.store.namespaces import NamespaceMixin
from memrl.memory.store.validation import (
    CONTENT_DERIVED_KEYS,
    ValidationMixin,
    content_hash,
    new_id,
    strip_derived,
)

__all__ = [
    "CONTENT_DERIVED_KEYS", "CORE_ID", "Change", "NewItem", "Store", "content_hash", "new_id",
    "strip_derived",
]  # fmt: skip

_ITEM_COLUMNS = "id, namespace, type, content, metadata, evidence, session, created_at, updated_at, deleted"


@dataclass
class NewItem:
    """An item to insert. ``id`` is generated when not given.

    ``vector``: the item's dense vector, given by the caller instead of an embedding of its content (for
    the embedder in use; see :mod:`memrl.memory.index.dense`).
    """

    content: str
    type: MemoryType | str = MemoryType.SEMANTIC
    metadata: dict[str, Any] = field(default_factory=dict)
    evidence: Sequence[str] = ()
    session: str | None = None
    id: str | None = None
    vector: Any = None


class Store(
    Backend, ValidationMixin, HistoryMixin, NamespaceMixin, IndexSupportMixin, KeysMixin, ExpiryMixin
):
    """Items, core memory, namespaces and history, written once over SQL both back-ends run.

    A back-end (:class:`~memrl.memory.backends.sqlite.store.SQLiteStore`, :class:`~memrl.memory.backends.postgres.store.PostgresStore`)
    implements :class:`~memrl.memory.store.interface.Backend` (connection and transactions, and the indexes
    it hands to search) and may respell the few SQL fragments whose spelling differs (JSON access, "no
    limit", the dense-row expressions of :class:`~memrl.memory.store.indexing.IndexSupportMixin`, metadata
    filters). A back-end that ranks BM25 in the database keeps its postings through the ``_lex_changed``,
    ``_keys_changed`` and ``_lex_copy`` hooks (no-ops here). Everything else (items,
    history and undo, namespaces, keys, transfer, and all of search's ranking) is shared.
    """

    #: The LIMIT parameter meaning "no limit".
    _NO_LIMIT: Any = -1
    path: str
    _batch: str | None

    # ------------------------------------------------------------------ SQL fragments a back-end may respell
    def json_value(self, column: str) -> str:
        """SQL for the JSON value of ``column`` (a JSON text) at a key given as one parameter
        (:meth:`json_key`)."""
        return f"json_extract({column}, ?)"

    @staticmethod
    def json_key(key: Any) -> Any:
        return '$."' + str(key or "").replace('"', '""') + '"'

    def json_text(self, column: str, key: str) -> str:
        """SQL for the text at constant ``key`` of JSON ``column``: NULL when absent or not a JSON string."""
        return f"CASE json_type({column}, '$.{key}') WHEN 'text' THEN json_extract({column}, '$.{key}') END"

    def json_raw(self, column: str) -> str:
        """SQL for the JSON text of ``column``'s value at a key given as one parameter (:meth:`json_key`;
        NULL or ``null`` when absent): the same text on every back-end, read with
        :func:`~memrl.memory.store.indexing.fact`."""
        return f"json_quote(json_extract({column}, ?))"

    def _lex_changed(self, rids: Sequence[int]) -> None:
        """Inside a write transaction: the content or the deleted flag of rows ``rids`` changed."""

    def _log(self, ns: str, memory_id: str, op: str, old: Any, new: Any, actor: str | None) -> int:
        cur = self._conn.execute(
            "INSERT INTO history (namespace, memory_id, op, old, new, at, actor, batch) VALUES (?,?,?,?,?,?,?,?) "
            "RETURNING seq",
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
        return int(cur.fetchone()[0])

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
    def _free_id(c: Any, ns: str, content: str, taken: set[str], start: int = 0) -> str:
        """The first :func:`new_id` attempt from ``start`` not taken in ``ns`` (deleted rows included: a
        generated id never brings back a deleted memory's row) nor in ``taken`` (this call's)."""
        for attempt in range(start, 1000):
            mid = new_id(ns, content, attempt)
            if mid not in taken and (
                c.execute("SELECT 1 FROM memories WHERE namespace = ? AND id = ?", (ns, mid)).fetchone()
                is None
            ):
                return mid
        raise ValidationError(f"no free id for a new memory in namespace {ns!r}")  # pragma: no cover

    def _existing(self, c: Any, ns: str, ids: Sequence[str]) -> dict[str, int]:
        """``{id: deleted}`` of the rows of ``ns`` among ``ids``."""
        out: dict[str, int] = {}
        ids = list(dict.fromkeys(ids))
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            rows = c.execute(
                f"SELECT id, deleted FROM memories WHERE namespace = ? AND id IN ({','.join('?' * len(chunk))})",
                [ns, *chunk],
            ).fetchall()
            out.update({r[0]: r[1] for r in rows})
        return out

    def insert(self, items: Sequence[NewItem], ns: str, *, actor: str | None = None) -> list[MemoryItem]:
        """Insert items atomically (all or none)."""
        return self.insert_valid(self.validate(items), ns, actor=actor)

    def insert_valid(
        self, prepared: Sequence[tuple], ns: str, *, actor: str | None = None
    ) -> list[MemoryItem]:
        """Insert what :meth:`validate` returned (so a caller that validated first does not pay twice).

        Set-based: the ids are checked in one query, the history entries and rows of new items are
        written by one multi-row statement each (per 200 items), in item order; an item taking back the id
        of a deleted memory is written on its own, in its place in that order."""
        self._check_namespace(ns)
        out: list[MemoryItem] = []
        now = time.time()
        with self.transaction(ns) as c:
            self._ensure_namespace(ns)
            given = self._existing(c, ns, [p[0] for p in prepared if p[0] is not None])
            # generated ids: the first attempt of all of them checked at once; a taken one tries further
            first = {i: new_id(ns, p[2], 0) for i, p in enumerate(prepared) if p[0] is None}
            busy = self._existing(c, ns, list(first.values()))
            taken: set[str] = set()
            rids: list[int] = []
            pending: list[MemoryItem] = []
            for i, (mid, mtype, content, meta, evidence, session) in enumerate(prepared):
                if mid is None:
                    mid = first[i]
                    if mid in busy or mid in taken:
                        mid = self._free_id(c, ns, content, taken, start=1)
                elif mid in taken or (mid in given and not given[mid]):
                    raise ConflictError(f"a memory with id {mid!r} already exists in namespace {ns!r}")
                item = MemoryItem(mid, ns, mtype, content, meta, evidence, session, now, now)
                taken.add(mid)
                if mid in given:
                    # The id of a deleted memory is taken again (a rolled-back build re-adding turn D1:3): the
                    # row comes back with the new content; its history keeps the deleted version.
                    rids += self._insert_rows(c, ns, pending, actor)
                    pending = []
                    self._write_state(ns, self.get(ns, mid, include_deleted=True), item, "ADD", actor)
                else:
                    pending.append(item)
                out.append(item)
            rids += self._insert_rows(c, ns, pending, actor)
            self._lex_changed(rids)
        return out

    def _insert_rows(self, c: Any, ns: str, items: Sequence[MemoryItem], actor: str | None) -> list[int]:
        """History entries (op ADD) and rows of new ``items``, in order; returns their rids."""
        rids: list[int] = []
        for i in range(0, len(items), 200):
            chunk = items[i : i + 200]
            at = time.time()
            hist = [
                (ns, it.id, "ADD", None, json.dumps(it.to_dict()), at, actor, self._batch) for it in chunk
            ]
            seq_of = dict(
                (r[1], r[0])
                for r in c.execute(
                    "INSERT INTO history (namespace, memory_id, op, old, new, at, actor, batch) VALUES "
                    + ",".join(["(?,?,?,?,?,?,?,?)"] * len(chunk))
                    + " RETURNING seq, memory_id",
                    [v for h in hist for v in h],
                ).fetchall()
            )
            rows = [
                (ns, it.id, it.type.value, it.content, content_hash(it.content), json.dumps(it.metadata),
                 json.dumps(list(it.evidence)), it.session, it.created_at, it.updated_at, seq_of[it.id])
                for it in chunk
            ]  # fmt: skip
            rid_of = dict(
                (r[1], r[0])
                for r in c.execute(
                    "INSERT INTO memories (namespace, id, type, content, content_hash, metadata, evidence, "
                    "session, created_at, updated_at, deleted, seq) VALUES "
                    + ",".join(["(?,?,?,?,?,?,?,?,?,?,0,?)"] * len(chunk))
                    + " RETURNING rid, id",
                    [v for r in rows for v in r],
                ).fetchall()
            )
            rids += [rid_of[it.id] for it in chunk]
        return rids

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
        self.check_text(memory_id, "memory_id")
        rows = self.read(
            f"SELECT {_ITEM_COLUMNS} FROM memories WHERE namespace = ? AND id = ?", (ns, memory_id)
        )
        if not rows or (rows[0][9] and not include_deleted):
            state = "was deleted" if rows else "does not exist"
            raise NotFoundError(f"memory {memory_id!r} {state} in namespace {ns!r}")
        return self._row_to_item(rows[0])

    def find_content(self, ns: str, content: str, type: MemoryType | str) -> str | None:
        """The id of a live memory of ``type`` in ``ns`` whose content is exactly ``content``, if any."""
        rows = self.read(
            "SELECT id FROM memories WHERE namespace = ? AND type = ? AND content_hash = ? AND deleted = 0 "
            "ORDER BY rid LIMIT 1",
            (ns, MemoryType.parse(type).value, content_hash(content)),
        )
        return rows[0][0] if rows else None

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
        params += [self._NO_LIMIT if limit is None else int(limit), int(offset)]
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
        row = self._conn.execute(
            "UPDATE memories SET type = ?, content = ?, content_hash = ?, metadata = ?, evidence = ?, session = ?, "
            "updated_at = ?, deleted = ?, seq = ? WHERE namespace = ? AND id = ? RETURNING rid",
            (new.type.value, new.content, content_hash(new.content), json.dumps(new.metadata),
             json.dumps(list(new.evidence)), new.session, new.updated_at, int(new.deleted), seq, ns, old.id),
        ).fetchone()  # fmt: skip
        if old.content != new.content or old.deleted != new.deleted:
            self._lex_changed([row[0]])
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
        with self.transaction(ns):
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
        with self.transaction(ns):
            old = self.get(ns, memory_id)
            meta = old.metadata if reason is None else {**old.metadata, "delete_reason": str(reason)}
            new = replace(old, deleted=True, metadata=meta, updated_at=time.time())
            return self._write_state(ns, old, new, op, actor)

    def restore(self, ns: str, memory_id: str, *, actor: str | None = None) -> MemoryItem:
        with self.transaction(ns):
            old = self.get(ns, memory_id, include_deleted=True)
            if not old.deleted:
                raise ValidationError(f"memory {memory_id!r} is not deleted")
            new = replace(old, deleted=False, updated_at=time.time())
            return self._write_state(ns, old, new, "RESTORE", actor)

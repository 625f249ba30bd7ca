"""The embedded memory store: items, core memory, namespaces and an undoable history, in one SQLite file.

This layer is synchronous and knows nothing about embeddings beyond storing cached vectors; search lives
in :mod:`memrl.memory.search` and the user-facing API in :mod:`memrl.memory.facade`.

Every change writes a history entry holding full before/after snapshots, in the same transaction as the
change itself, so a crash never leaves a change without its history. Deletes are soft (recoverable);
``undo`` reverts the latest change of an item, or a whole batch (a merge or a split) at once.
Namespaces isolate users and RL episodes; ``clone_namespace`` copies one with a single SQL statement.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from memrl.errors import NotFoundError, ValidationError
from memrl.memory.history import CORE_ID, HistoryMixin
from memrl.memory.schema import connect, store_error
from memrl.memory.types import ITEM_TYPES, MemoryItem, MemoryType

_ITEM_COLUMNS = "id, namespace, type, content, metadata, evidence, session, created_at, updated_at, deleted"


#: Metadata a builder derives from an item's content (its plain text beside an indexed text, its own vector,
#: being lexical-only): an edit of the content makes them wrong, so they are dropped with it.
CONTENT_DERIVED_KEYS = ("text", "vector_key", "dense")


def strip_derived(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if k not in CONTENT_DERIVED_KEYS}


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def new_id() -> str:
    """A short random id (48 bits): cheap for a model to copy, collision-checked by the UNIQUE key."""
    return uuid.uuid4().hex[:12]


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


class Change(NamedTuple):
    """A row changed since some point, as dense search needs it."""

    rid: int
    type: str
    dense: bool  # live and not lexical-only
    vector_key: str  # embedding-cache key: metadata vector_key, else the content hash
    seq: int
    content: str


class SQLiteStore(HistoryMixin):
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

    # ------------------------------------------------------------------ validation
    def check_content(self, content: Any) -> str:
        if not isinstance(content, str):
            raise ValidationError(f"content must be a string, got {type(content).__name__}")
        if not content.strip():
            raise ValidationError("content is empty")
        if len(content) > self.max_content_chars:
            raise ValidationError(
                f"content has {len(content)} characters, more than the limit of {self.max_content_chars}; "
                "split it into smaller memories"
            )
        return content

    @staticmethod
    def check_type(value: MemoryType | str) -> MemoryType:
        try:
            t = MemoryType.parse(value)
        except ValueError as e:
            raise ValidationError(str(e)) from None
        if t not in ITEM_TYPES:
            raise ValidationError(
                "core memory is one text block per namespace, not an item: use the core memory operations "
                f"(append/replace/rewrite); item types are {', '.join(x.value for x in ITEM_TYPES)}"
            )
        return t

    @staticmethod
    def _check_namespace(ns: Any) -> str:
        if not isinstance(ns, str) or not ns or len(ns) > 200:
            raise ValidationError(
                f"namespace must be a non-empty string of at most 200 characters, got {ns!r}"
            )
        return ns

    @staticmethod
    def _check_metadata(metadata: Any) -> dict[str, Any]:
        if metadata is None:
            return {}
        if not isinstance(metadata, dict):
            raise ValidationError(f"metadata must be a JSON object (dict), got {type(metadata).__name__}")
        try:
            json.dumps(metadata)
        except (TypeError, ValueError) as e:
            raise ValidationError(f"metadata is not JSON-serialisable: {e}") from None
        return metadata

    # ------------------------------------------------------------------ namespaces
    def _ensure_namespace(self, ns: str) -> None:
        self._conn.execute(
            "INSERT OR IGNORE INTO namespaces (name, created_at) VALUES (?, ?)", (ns, time.time())
        )

    def namespaces(self) -> list[dict[str, Any]]:
        """Namespaces holding anything (items, deleted ones included, or core memory), with live item counts.

        A dropped namespace keeps its row (its generation counter must only grow, so caches of other
        processes notice) but is not listed."""
        rows = self.read(
            "SELECT n.name, n.parent, n.created_at, "
            "(SELECT count(*) FROM memories m WHERE m.namespace = n.name AND m.deleted = 0) "
            "FROM namespaces n WHERE EXISTS (SELECT 1 FROM memories m WHERE m.namespace = n.name) "
            "OR EXISTS (SELECT 1 FROM core c WHERE c.namespace = n.name) ORDER BY n.name"
        )
        return [{"name": r[0], "parent": r[1], "created_at": r[2], "items": r[3]} for r in rows]

    def generation(self, ns: str) -> int:
        rows = self.read("SELECT generation FROM namespaces WHERE name = ?", (ns,))
        return rows[0][0] if rows else -1

    def clone_namespace(self, src: str, dst: str, *, overwrite: bool = False) -> int:
        """Copy the live items and core memory of ``src`` into ``dst`` (ids kept); returns the item count.

        History is not copied: the clone's history starts empty. Cost is one INSERT ... SELECT.
        """
        self._check_namespace(dst)
        with self.transaction() as c:
            if not c.execute("SELECT 1 FROM namespaces WHERE name = ?", (src,)).fetchone():
                raise NotFoundError(f"namespace {src!r} does not exist")
            if c.execute("SELECT 1 FROM namespaces WHERE name = ?", (dst,)).fetchone():
                if not overwrite:
                    raise ValidationError(
                        f"namespace {dst!r} already exists (pass overwrite=True to replace it)"
                    )
                self._drop(dst)
            c.execute(
                "INSERT INTO namespaces (name, parent, created_at, generation) VALUES (?, ?, ?, "
                "COALESCE((SELECT generation FROM namespaces WHERE name = ?), 0) + 1) "
                "ON CONFLICT(name) DO UPDATE SET parent = excluded.parent, generation = excluded.generation",
                (dst, src, time.time(), dst),
            )
            n = c.execute(
                "INSERT INTO memories (namespace, id, type, content, content_hash, metadata, evidence, session, "
                "created_at, updated_at, deleted, seq) SELECT ?, id, type, content, content_hash, metadata, "
                "evidence, session, created_at, updated_at, 0, seq FROM memories "
                "WHERE namespace = ? AND deleted = 0",
                (dst, src),
            ).rowcount
            c.execute(
                "INSERT INTO core (namespace, content, char_limit, updated_at) "
                "SELECT ?, content, char_limit, updated_at FROM core WHERE namespace = ?",
                (dst, src),
            )
        return n

    def _drop(self, ns: str) -> int:
        c = self._conn
        n = c.execute("DELETE FROM memories WHERE namespace = ?", (ns,)).rowcount
        c.execute("DELETE FROM history WHERE namespace = ?", (ns,))
        c.execute("DELETE FROM core WHERE namespace = ?", (ns,))
        c.execute("UPDATE namespaces SET generation = generation + 1 WHERE name = ?", (ns,))
        return n

    def drop_namespace(self, ns: str) -> int:
        """Hard-delete every item, the core memory and the history of ``ns``. Not undoable."""
        with self.transaction():
            return self._drop(ns)

    # ------------------------------------------------------------------ items
    def validate(
        self, items: Sequence[NewItem]
    ) -> list[tuple[str, MemoryType, str, dict, tuple[str, ...], Any]]:
        """Check new items (type, content, metadata) without writing; raises :class:`ValidationError`."""
        prepared = []
        for it in items:
            if not isinstance(it, NewItem):
                raise ValidationError(f"expected NewItem or str, got {type(it).__name__}")
            prepared.append(
                (
                    it.id or new_id(),
                    self.check_type(it.type),
                    self.check_content(it.content),
                    self._check_metadata(it.metadata),
                    tuple(str(e) for e in it.evidence or ()),
                    it.session,
                )
            )
        return prepared

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
                item = MemoryItem(mid, ns, mtype, content, meta, evidence, session, now, now)
                row = c.execute(
                    "SELECT deleted FROM memories WHERE namespace = ? AND id = ?", (ns, mid)
                ).fetchone()
                if row is not None:
                    if not row[0]:
                        raise ValidationError(f"a memory with id {mid!r} already exists in namespace {ns!r}")
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
        """Replace fields of a live item; the previous version is kept in its history."""
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
                evidence=old.evidence if evidence is None else tuple(str(e) for e in evidence),
                session=old.session if session is None else session,
                created_at=old.created_at,
                updated_at=time.time(),
            )
            return self._write_state(ns, old, new, op, actor)

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

    # ------------------------------------------------------------------ core memory
    def get_core(self, ns: str) -> str:
        rows = self.read("SELECT content FROM core WHERE namespace = ?", (ns,))
        return rows[0][0] if rows else ""

    def set_core(self, ns: str, content: str, *, op: str = "CORE_REWRITE", actor: str | None = None) -> str:
        """Replace the core memory block of ``ns``; refused (nothing changes) above the character limit."""
        return self.modify_core(ns, lambda _old: content, op=op, actor=actor)

    def modify_core(
        self, ns: str, change: Callable[[str], str], *, op: str = "CORE_REWRITE", actor: str | None = None
    ) -> str:
        """Read the core memory of ``ns``, compute its new text with ``change`` and write it, in one write
        transaction (two writers appending at once both land). ``change`` may raise to refuse."""
        self._check_namespace(ns)
        with self.transaction() as c:
            old = self.get_core(ns)
            content = change(old)
            if not isinstance(content, str):
                raise ValidationError(f"core memory must be a string, got {type(content).__name__}")
            if len(content) > self.core_limit:
                raise ValidationError(
                    f"core memory would have {len(content)} characters, more than its limit of "
                    f"{self.core_limit}; rewrite it shorter (compress) instead"
                )
            self._ensure_namespace(ns)
            self._log(ns, CORE_ID, op, {"content": old}, {"content": content}, actor)
            c.execute(
                "INSERT INTO core (namespace, content, char_limit, updated_at) VALUES (?,?,?,?) "
                "ON CONFLICT(namespace) DO UPDATE SET content = excluded.content, updated_at = excluded.updated_at",
                (ns, content, self.core_limit, time.time()),
            )
        return content

    # ------------------------------------------------------------------ sync support for search indexes
    #: The embedding-cache key of a row: its own vector's key when it was added with one, else its content.
    _VECTOR_KEY = "COALESCE(json_extract(metadata, '$.vector_key'), content_hash)"
    #: Whether a row belongs in dense search: live and not lexical-only (metadata {"dense": false}).
    _DENSE = "(deleted = 0 AND COALESCE(json_extract(metadata, '$.dense'), 1) != 0)"

    def changes_since(self, ns: str, seq: int) -> list[Change]:
        """Rows of ``ns`` changed after history ``seq``, oldest change first (see :class:`Change`)."""
        return [
            Change(*r)
            for r in self.read(
                f"SELECT rid, type, {self._DENSE}, {self._VECTOR_KEY}, seq, content FROM memories "
                "WHERE namespace = ? AND seq > ? ORDER BY seq",
                (ns, seq),
            )
        ]

    def dense_rows(self, ns: str, model: str) -> list[tuple[int, str, str, int, bytes | None]]:
        """Rows of ``ns`` for dense search with their cached vector (or None): (rid, type, key, seq, vector)."""
        return [
            tuple(r)
            for r in self.read(
                f"SELECT m.rid, m.type, m.key, m.seq, e.vector FROM (SELECT rid, type, {self._VECTOR_KEY} AS key, "
                f"seq FROM memories WHERE namespace = ? AND {self._DENSE}) m "
                "LEFT JOIN embeddings e ON e.model = ? AND e.hash = m.key",
                (ns, model),
            )
        ]

    def allowed_rids(self, ns: str, filters: dict[str, Any]) -> list[int]:
        """rids of live items whose metadata matches every ``key: value`` (a list value means any of)."""
        where, params = self.metadata_where(filters)
        return [
            r[0]
            for r in self.read(
                f"SELECT rid FROM memories m WHERE m.namespace = ? AND m.deleted = 0{where}", [ns, *params]
            )
        ]

    @staticmethod
    def metadata_where(filters: dict[str, Any] | None, alias: str = "m") -> tuple[str, list[Any]]:
        if not filters:
            return "", []
        if not isinstance(filters, dict):
            raise ValidationError("filters must be a dict of metadata key -> value (or list of values)")
        sql, params = [], []
        for key, value in filters.items():
            col = f"json_extract({alias}.metadata, ?)"
            kparams = ['$."' + str(key).replace('"', '""') + '"']
            if isinstance(value, (list, tuple, set)):
                vals = list(value)
                if not vals:
                    sql.append("0")
                    continue
                sql.append(f"{col} IN ({','.join('?' * len(vals))})")
                params += kparams + vals
            else:
                sql.append(f"{col} = ?")
                params += [*kparams, value]
        return "".join(f" AND {s}" for s in sql), params

    # ------------------------------------------------------------------ embedding cache
    def get_vectors(self, model: str, hashes: Sequence[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        hashes = list(dict.fromkeys(hashes))
        for i in range(0, len(hashes), 500):
            chunk = hashes[i : i + 500]
            rows = self.read(
                f"SELECT hash, vector FROM embeddings WHERE model = ? AND hash IN ({','.join('?' * len(chunk))})",
                [model, *chunk],
            )
            out.update({h: v for h, v in rows})
        return out

    def put_vectors(self, model: str, vectors: dict[str, bytes]) -> None:
        with self.transaction() as c:
            c.executemany(
                "INSERT OR IGNORE INTO embeddings (model, hash, vector) VALUES (?, ?, ?)",
                [(model, h, v) for h, v in vectors.items()],
            )

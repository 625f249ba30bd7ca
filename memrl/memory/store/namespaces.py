"""Namespaces and their core memory blocks: the per-user (or per-episode) side of the store.

:class:`NamespaceMixin` is part of :class:`~memrl.memory.store.base.Store` (it uses its connection,
transactions and history log): list namespaces, clone one (how an RL episode starts from a copy), drop
one, and read or change a namespace's core memory block (versioned in the history under ``CORE_ID``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from memrl.errors import ConflictError, NotFoundError, ValidationError
from memrl.memory.store.history import CORE_ID
from memrl.memory.store.keys import copy_keys_sql


class NamespaceMixin:
    """Namespaces and core memory for :class:`~memrl.memory.store.base.Store`."""

    _conn: Any
    core_limit: int
    check_text: Any
    _check_namespace: Any
    _copy_vectors: Any

    def _lex_copy(self, src: str, dst: str) -> None:
        """Inside ``clone_namespace``, after the items were copied: copy what the back-end indexes lexically
        (a back-end with its own postings; nothing to do otherwise)."""

    def _ensure_namespace(self, ns: str) -> None:
        self._conn.execute(
            "INSERT INTO namespaces (name, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
            (ns, time.time()),
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

        History is not copied: the clone's history starts empty. Cost is one INSERT ... SELECT. A clone
        onto itself is refused (with ``overwrite`` it would drop ``src`` before copying it: nothing left).
        """
        self._check_namespace(src)
        self._check_namespace(dst)
        if src == dst:
            raise ValidationError(
                f"cannot clone namespace {src!r} onto itself; choose another target", field="target"
            )
        with self.transaction((src, dst)) as c:
            if not c.execute("SELECT 1 FROM namespaces WHERE name = ?", (src,)).fetchone():
                raise NotFoundError(f"namespace {src!r} does not exist")
            if c.execute("SELECT 1 FROM namespaces WHERE name = ?", (dst,)).fetchone():
                if not overwrite:
                    raise ConflictError(
                        f"namespace {dst!r} already exists (pass overwrite=True to replace it)"
                    )
                self._drop(dst)
            c.execute(
                "INSERT INTO namespaces (name, parent, created_at, generation) VALUES (?, ?, ?, "
                "COALESCE((SELECT generation FROM namespaces WHERE name = ?), 0) + 1) "
                "ON CONFLICT(name) DO UPDATE SET parent = excluded.parent, generation = excluded.generation",
                (dst, src, time.time(), dst),
            )
            self._copy_vectors(
                src, dst
            )  # first: on Postgres the copied rows then find their vectors as inserted
            n = c.execute(
                "INSERT INTO memories (namespace, id, type, content, content_hash, metadata, evidence, session, "
                "created_at, updated_at, deleted, seq) SELECT ?, id, type, content, content_hash, metadata, "
                "evidence, session, created_at, updated_at, 0, seq FROM memories "
                "WHERE namespace = ? AND deleted = 0",
                (dst, src),
            ).rowcount
            c.execute(copy_keys_sql(), (dst, src))
            self._lex_copy(src, dst)
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
        c.execute("DELETE FROM embeddings WHERE scope = ?", (ns,))
        c.execute("UPDATE namespaces SET generation = generation + 1 WHERE name = ?", (ns,))
        return n

    def drop_namespace(self, ns: str) -> int:
        """Hard-delete every item, the core memory, the history and the cached vectors of ``ns``. Not
        undoable."""
        with self.transaction(ns):
            return self._drop(ns)

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
        with self.transaction(ns) as c:
            old = self.get_core(ns)
            content = change(old)
            self.check_text(content, "core memory")
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

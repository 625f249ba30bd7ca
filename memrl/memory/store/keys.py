"""Retrieval keys: extra text that search indexes for an item without changing the item.

A builder (or any caller) may attach *keys* to a stored item: words a reader would search it by that its
text does not contain (the people, places, topics and dates it is about, synonyms, a resolved date).
Keys live in their own table; search indexes them per namespace (:mod:`memrl.memory.index.lexical`, Porter
stemming like the items'), so they are a second lexical view of the item: search runs BM25 over them as a
separate list, fused with weight
:class:`~memrl.memory.search.hybrid.SearchOptions` ``keys`` (0, the default, leaves search as it was and reads
nothing). The item's content, history and vector are untouched. Keys describe one text: editing an
item's content drops its keys; hard deletes drop them too (cascade), soft-deleted items leave search
with their keys; ``clone_namespace`` copies them.

This module knows nothing of LLMs: :mod:`memrl.agents.enrich` writes keys with one, any builder may
write its own::

    store.set_keys("alice", {"D1:3": "Lisbon, Portugal, moving, relocation, May 2023"})
    store.get_keys("alice", ["D1:3"])        # {"D1:3": "Lisbon, ..."}
    store.keyed_ids("alice")                 # ids that have keys (an interrupted pass resumes from here)
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from memrl.errors import NotFoundError, ValidationError

#: Longest keys text accepted per item (characters).
MAX_KEYS_CHARS = 2000


class KeysMixin:
    """Retrieval keys of :class:`~memrl.memory.store.base.Store` (see the module docstring)."""

    read: Any
    transaction: Any
    check_text: Any

    def _keys_changed(self, rids: Sequence[int]) -> None:
        """Inside a write transaction: the keys of rows ``rids`` changed (for a back-end with its own postings)."""

    def set_keys(self, ns: str, keys: Mapping[str, str]) -> int:
        """Attach keys text to live items of ``ns`` (``{item id: text}``), replacing their old keys; an
        empty text removes them. Raises :class:`NotFoundError` naming an id that is not a live item (and
        sets nothing). Returns how many items now have keys from this call."""
        if not isinstance(keys, Mapping):
            raise ValidationError("keys must be a mapping of item id -> keys text")
        for mid, text in keys.items():
            self.check_text(mid, "memory_id")
            self.check_text(text, f"keys of {mid!r}", max_chars=MAX_KEYS_CHARS)
        if not keys:
            return 0
        ids = list(keys)
        rid_of: dict[str, int] = {}
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            rows = self.read(
                f"SELECT id, rid FROM memories WHERE namespace = ? AND deleted = 0 AND id IN ({','.join('?' * len(chunk))})",
                [ns, *chunk],
            )
            rid_of.update({r[0]: r[1] for r in rows})
        missing = [i for i in ids if i not in rid_of]
        if missing:
            raise NotFoundError(f"no live memory {missing[0]!r} in namespace {ns!r} to attach keys to")
        now = time.time()
        put = [(rid_of[i], t.strip(), now) for i, t in keys.items() if t.strip()]
        with self.transaction(ns) as c:
            c.executemany("DELETE FROM memory_keys WHERE rid = ?", [(rid_of[i],) for i in ids])
            c.executemany("INSERT INTO memory_keys (rid, keys, updated_at) VALUES (?, ?, ?)", put)
            self._keys_changed([rid_of[i] for i in ids])
        return len(put)

    def get_keys(self, ns: str, ids: Sequence[str] | None = None) -> dict[str, str]:
        """``{item id: keys text}`` of the items of ``ns`` that have keys (only ``ids`` when given)."""
        sql = "SELECT m.id, k.keys FROM memory_keys k JOIN memories m ON m.rid = k.rid WHERE m.namespace = ?"
        if ids is None:
            return {r[0]: r[1] for r in self.read(sql, [ns])}
        out: dict[str, str] = {}
        ids = list(ids)
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            rows = self.read(sql + f" AND m.id IN ({','.join('?' * len(chunk))})", [ns, *chunk])
            out.update({r[0]: r[1] for r in rows})
        return out

    def keys_rows(self, ns: str) -> list[tuple[int, str]]:
        """(rid, keys text) of every keyed item of ``ns`` (deleted ones too: search filters by liveness)."""
        return [
            (r[0], r[1])
            for r in self.read(
                "SELECT k.rid, k.keys FROM memory_keys k JOIN memories m ON m.rid = k.rid WHERE m.namespace = ?",
                [ns],
            )
        ]

    def keys_state(self, ns: str) -> tuple[int, int]:
        """(generation, keys version) of ``ns``: the version grows with every change of its keys."""
        rows = self.read("SELECT generation, keys_version FROM namespaces WHERE name = ?", [ns])
        return (rows[0][0], rows[0][1]) if rows else (-1, 0)

    def keyed_ids(self, ns: str) -> set[str]:
        """Ids of the items of ``ns`` that have keys."""
        return set(self.get_keys(ns))


def copy_keys_sql() -> str:
    """SQL copying the keys of namespace (second parameter)'s live items to the same ids in namespace (first
    parameter): clone."""
    return (
        "INSERT INTO memory_keys (rid, keys, updated_at) SELECT d.rid, k.keys, k.updated_at FROM memories s "
        "JOIN memory_keys k ON k.rid = s.rid JOIN memories d ON d.namespace = ? AND d.id = s.id "
        "WHERE s.namespace = ? AND s.deleted = 0"
    )

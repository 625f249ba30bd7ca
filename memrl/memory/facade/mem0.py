"""The calls mem0 users make first, on :class:`~memrl.memory.facade.memory.AsyncMemory`::

    m.add([{"role": "user", "name": "Alice", "content": "I moved to Lisbon"}], user_id="alice")
    m.search("where does Alice live", user_id="alice", limit=3)
    m.get_all(user_id="alice")
    m.delete_all(user_id="alice")          # one change: m.undo(user_id="alice") brings them all back

- ``add`` with a list of chat messages (OpenAI's format: ``name`` is the speaker, content is text or a list
  of text parts) stores each message as an episodic memory ("Alice: I moved to Lisbon"), or, with
  ``infer=True`` or when the memory has a job writer (``infer=None``, the default), runs ``remember`` and
  returns its job; ``infer=False`` always stores the turns.
- ``get_all``: the namespace's memories, oldest first (``limit``, ``type``).
- ``delete_all``: soft-deletes every memory of the namespace in one history batch, so one ``undo`` reverts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memrl.errors import ConfigError
from memrl.memory.jobs.table import Job, check_messages
from memrl.memory.records.types import MemoryItem, MemoryType
from memrl.memory.store.base import NewItem


def types_of(type: Any, types: Sequence[Any] | None) -> Sequence[Any] | None:
    """One memory type (``type=``, the name everywhere) or several (``types=``) as the store's filter."""
    if type is None:
        return types
    one = [type] if isinstance(type, (str, MemoryType)) else list(type)
    return [*one, *(types or ())]


class Mem0Methods:
    """mem0's names on AsyncMemory (a mixin: it supplies ``ns``, ``store``, ``writer``, ``add_many``,
    ``remember`` and ``list``)."""

    async def _add_messages(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        namespace: str | None,
        user_id: str | None,
        type: MemoryType | str | None,
        metadata: dict[str, Any] | None,
        session: str | None,
        actor: str | None,
        infer: bool | None,
    ) -> list[MemoryItem] | Job:
        msgs = check_messages(messages)
        writer = getattr(self, "writer", None)
        if infer or (infer is None and writer is not None):
            if writer is None:
                raise ConfigError(
                    "add(messages, infer=True) runs remember, and this memory has no job writer: pass "
                    "AsyncMemory(path, writer=job_writer(...)) (memrl.agents.jobs), or infer=False to store the turns"
                )
            return await self.remember(msgs, namespace=namespace, user_id=user_id)  # type: ignore[attr-defined]
        items = []
        for m in msgs:
            who = m.get("speaker") or m["role"]
            meta = {
                "role": m["role"],
                "speaker": who,
                **({"timestamp": m["timestamp"]} if "timestamp" in m else {}),
            }
            meta.update(metadata or {})
            items.append(NewItem(f"{who}: {m['content']}", type or MemoryType.EPISODIC, meta, (), session))
        return await self.add_many(items, namespace=namespace, user_id=user_id, actor=actor)  # type: ignore[attr-defined]

    async def get_all(
        self,
        *,
        namespace: str | None = None,
        user_id: str | None = None,
        type: MemoryType | str | None = None,
        limit: int | None = 100,
    ) -> list[MemoryItem]:
        """The namespace's memories, oldest first (at most ``limit``; ``type``: only that type)."""
        return await self.list(namespace=namespace, user_id=user_id, types=types_of(type, None), limit=limit)  # type: ignore[attr-defined]

    async def delete_all(
        self, *, namespace: str | None = None, user_id: str | None = None, actor: str | None = None
    ) -> int:
        """Soft-delete every memory of the namespace as one change (``undo(user_id=...)`` reverts it whole);
        returns how many. Core memory is kept. ``reset`` is the hard delete."""
        ns = self.ns(namespace, user_id)  # type: ignore[attr-defined]
        store = self.store  # type: ignore[attr-defined]
        with store.transaction(ns, batch=True):
            ids = [it.id for it in store.list(ns)]
            for mid in ids:
                store.delete(ns, mid, reason="delete_all", actor=actor)
        return len(ids)

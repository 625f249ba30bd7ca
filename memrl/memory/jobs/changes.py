"""A job's changes: what an agent did to a scratch clone, as events, and putting them on the namespace at once.

An agent job (:mod:`memrl.agents.jobs`) never writes into its namespace while it runs: it writes into a
clone (:func:`~memrl.memory.jobs.table.scratch_name`), whose state right after cloning is the job's :class:`Base`.
When the agent is done, :func:`diff` compares the clone with that base, item by item and core memory, and
names each change as an event (``added``, ``updated``, ``merged``, ``deleted``; the clone's history says
which operation made it). :func:`commit` writes those changes into the namespace in one transaction and
one history batch, together with the job's row, so

- a job that fails, is cancelled or is killed mid-way left no write in its namespace (there was none),
- a dry run is the same job without the commit,
- ``undo_batch(ns, job.batch)`` reverts exactly that job, and is refused (naming the items) when a later
  change touched one of them,
- a change another client made to one of the job's items while it ran is not overwritten: the commit is
  refused (:class:`~memrl.errors.ConflictError` naming the items) and nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memrl.errors import ConflictError, NotFoundError
from memrl.memory.jobs.table import JobTable
from memrl.memory.records.types import MemoryItem
from memrl.memory.store.base import NewItem, Store
from memrl.memory.store.history import CORE_ID

#: The fields that make two versions of an item the same memory (times and namespace aside).
_FIELDS = ("type", "content", "metadata", "evidence", "session")


def _same(a: MemoryItem, b: MemoryItem) -> bool:
    return all(getattr(a, f) == getattr(b, f) for f in _FIELDS)


@dataclass
class Base:
    """The scratch clone right after cloning: the namespace as the job found it."""

    items: dict[str, MemoryItem]
    core: str

    @classmethod
    def of(cls, store: Store, scratch: str) -> Base:
        return cls({it.id: it for it in store.list(scratch)}, store.get_core(scratch))


def start_scratch(store: Store, ns: str, scratch: str) -> Base:
    """Clone ``ns`` into ``scratch`` (replacing a leftover) and return its base (empty for a new namespace)."""
    try:
        store.clone_namespace(ns, scratch, overwrite=True)
    except NotFoundError:  # a namespace's first job
        store.drop_namespace(scratch)
    return Base.of(store, scratch)


def _last_ops(store: Store, scratch: str) -> dict[str, str]:
    return {e.memory_id: e.op for e in store.history(scratch)}


def _kind(op: str | None, default: str) -> str:
    return "merged" if op == "MERGE" else default


def diff(store: Store, scratch: str, base: Base) -> list[dict[str, Any]]:
    """The events from ``base`` to the clone's state now: one per changed item (and core memory), in id order
    (core first). Each has ``event``, ``id``, ``type``, ``before`` and ``after`` (texts; None when absent)
    and ``op``, the clone's last operation on it."""
    ops = _last_ops(store, scratch)
    now = {it.id: it for it in store.list(scratch)}
    events: list[dict[str, Any]] = []
    core = store.get_core(scratch)
    if core != base.core:
        events.append({"event": "updated" if base.core else "added", "id": CORE_ID, "type": "core",
                       "before": base.core or None, "after": core, "op": ops.get(CORE_ID)})  # fmt: skip
    for mid in sorted(set(now) | set(base.items)):
        old, new = base.items.get(mid), now.get(mid)
        if old is None and new is not None:
            kind = _kind(ops.get(mid), "added")
        elif new is None and old is not None:
            kind = _kind(ops.get(mid), "deleted")
        elif old is not None and new is not None and not _same(old, new):
            kind = _kind(ops.get(mid), "updated")
        else:
            continue
        item = new or old
        assert item is not None
        events.append({"event": kind, "id": mid, "type": item.type.value,
                       "before": old.content if old else None, "after": new.content if new else None,
                       "op": ops.get(mid)})  # fmt: skip
    return events


def commit(
    store: Store,
    table: JobTable,
    job_id: str,
    ns: str,
    scratch: str,
    base: Base,
    events: list[dict[str, Any]],
    result: dict[str, Any],
    *,
    actor: str,
    owner: str | None = None,
) -> str | None:
    """Write ``events`` (from :func:`diff`) into ``ns`` and mark the job succeeded, in one transaction and
    one history batch; returns the batch id (None when nothing changed). Raises :class:`ConflictError`,
    writing nothing, when an item the job changed was changed by someone else since the job started, or when
    the job is no longer ``owner``'s running job (another process cancelled it or failed it as dead)."""
    if not events:
        with store.transaction(ns):
            table.require_running(job_id, owner)
            table.finish(job_id, "succeeded", result=result)
        return None
    with store.transaction((ns, scratch), batch=True) as c:
        batch = store._batch
        table.require_running(job_id, owner)
        live = {
            it.id: it for it in store.list(ns, include_deleted=True) if it.id in {e["id"] for e in events}
        }
        moved = []
        for e in events:
            mid = e["id"]
            if mid == CORE_ID:
                if store.get_core(ns) != base.core:
                    moved.append(mid)
                continue
            old, cur = base.items.get(mid), live.get(mid)
            if old is None:
                if cur is not None and not cur.deleted:
                    moved.append(mid)
            elif cur is None or cur.deleted or not _same(cur, old):
                moved.append(mid)
        if moved:
            raise ConflictError(
                f"the job's changes were not applied: {', '.join(repr(m) for m in moved)} changed in {ns!r} "
                "while the job ran; run it again"
            )
        now = {it.id: it for it in store.list(scratch)}
        keys, added = [], []
        for e in events:
            mid, op = e["id"], e["op"]
            new = now.get(mid)
            if mid == CORE_ID:
                store.set_core(ns, e["after"], op=op or "CORE_REWRITE", actor=actor)
            elif e["before"] is None:
                assert new is not None
                added.append(NewItem(new.content, new.type, new.metadata, new.evidence, new.session, mid))
                keys.append(new.metadata.get("vector_key") or None)
            elif new is None:
                store.delete(ns, mid, op=op if op in ("DELETE", "MERGE") else "DELETE", actor=actor)
            else:
                store.update(ns, mid, content=new.content, type=new.type, metadata=new.metadata,
                             evidence=new.evidence, session=new.session, op=op or "UPDATE", actor=actor)  # fmt: skip
                keys.append(new.metadata.get("vector_key") or None)
        if added:  # one insert for the new items (a raw conversation adds thousands)
            store.insert(added, ns, actor=actor)
        given = [k for k in keys if k]
        if given:  # vectors the agent gave (not embeddings of the content) move with their items
            c.execute(
                "INSERT INTO embeddings (scope, hash, model, vector) SELECT ?, hash, model, vector FROM embeddings "
                f"WHERE scope = ? AND hash IN ({','.join('?' * len(given))}) ON CONFLICT DO NOTHING",
                [ns, scratch, *given],
            )
        table.finish(job_id, "succeeded", result=result, batch=batch)
    return batch

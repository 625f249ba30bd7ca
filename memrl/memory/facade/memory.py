"""The user-facing memory API, mem0-style: ``add``, ``search``, ``get``, ``update``, ``delete``, ``history``.

``AsyncMemory`` is the implementation; ``Memory`` (:mod:`memrl.memory.facade.blocking`) is a thin synchronous wrapper
that runs it on a private event-loop thread (so it also works inside Jupyter or another running loop)::

    from memrl import Memory
    m = Memory("memories.db")                      # or Memory() for an in-memory store,
                                                   # or Memory("postgresql://user@host/db")
    m.add("Alice moved to Lisbon in May 2023", user_id="alice", type="episodic")
    for hit in m.search("Where does Alice live?", user_id="alice"):
        print(hit.score, hit.item.content)

Writes run their transaction on a worker thread (``asyncio.to_thread``): a store locked by another
writer holds that thread for its busy timeout, never the caller's event loop. Every change is recorded
(``history``) and can be reverted (``undo``); deletes are recoverable
(``restore``); an updated or deleted fact stays queryable: ``search``/``get`` ``as_of`` an earlier time,
``versions`` of an item (:mod:`memrl.memory.facade.reads`). Namespaces (alias ``user_id``) isolate users
and RL episodes; ``clone`` copies one.

Given a job ``writer`` (``writer=job_writer(spec)`` from :mod:`memrl.agents.jobs`), the agents write too:
``remember(messages, user_id=...)`` builds memories from a conversation, ``maintain`` and ``read`` run
MemUpdate and MemAgent (:mod:`memrl.memory.facade.writes`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from memrl import telemetry
from memrl.errors import StoreError, ValidationError
from memrl.memory.backends import is_postgres_url, open_store
from memrl.memory.embedders.base import Embedder
from memrl.memory.embedders.providers import create_embedder
from memrl.memory.facade.mem0 import Mem0Methods
from memrl.memory.facade.reads import ReadMethods
from memrl.memory.facade.writes import JobMethods
from memrl.memory.jobs.table import JobWriter
from memrl.memory.records.types import MemoryItem, MemoryType
from memrl.memory.store.base import NewItem, strip_derived
from memrl.memory.store.expiry import EXPIRES_AT, expiry_time
from memrl.memory.store.interface import check_dense_backend
from memrl.memory.store.transfer import export_namespace, import_namespace

if TYPE_CHECKING:  # built on first use: a memory that only lists, gets or reads history never imports search
    from memrl.memory.search.hybrid import SearchIndex

T = TypeVar("T")


class AsyncMemory(ReadMethods, JobMethods, Mem0Methods):
    """Long-term memory over one store (a SQLite file, or Postgres by URL), with hybrid search. See the module
    docstring. ``dense_backend``: ``auto`` (pgvector on Postgres; on SQLite exact below
    ``DenseIndexes.ANN_MIN`` vectors in a namespace, an HNSW graph above), ``numpy``, ``faiss``, ``ann`` or
    ``pgvector``. ``writer``: what runs ``remember``/``maintain``/``read`` (a
    :class:`~memrl.memory.jobs.table.JobWriter`, e.g. ``memrl.agents.jobs.job_writer(spec)``).
    ``max_as_of_changes``: the most history entries a search ``as_of`` a time may replay (None: no bound;
    a server sets one)."""

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        embedder: str | Embedder | None = None,
        namespace: str = "default",
        core_limit: int = 5000,
        max_content_chars: int = 10_000,
        busy_timeout: float = 5.0,
        dense_backend: str = "auto",
        writer: JobWriter | None = None,
        max_as_of_changes: int | None = None,
    ) -> None:
        self.store = open_store(
            path, busy_timeout=busy_timeout, core_limit=core_limit, max_content_chars=max_content_chars
        )
        if dense_backend == "auto" and is_postgres_url(path):
            dense_backend = "pgvector"
        self.embedder = create_embedder(embedder)
        check_dense_backend(dense_backend, self.store)
        self._dense_backend = dense_backend
        self._index: SearchIndex | None = None
        self._index_lock = threading.Lock()
        self.namespace = namespace
        self.max_as_of_changes = max_as_of_changes  # the most history entries one as_of search replays
        self.writer = writer
        if writer is not None:
            writer.attach(self)

    @property
    def index(self) -> SearchIndex:
        """The hybrid search index over the store (:class:`~memrl.memory.search.hybrid.SearchIndex`), built on
        first use: search brings numpy and the indexes, which ``memrl memory list`` never needs."""
        if self._index is None:
            with self._index_lock:
                if self._index is None:
                    from memrl.memory.search.hybrid import SearchIndex

                    self._index = SearchIndex(self.store, self.embedder, backend=self._dense_backend)
        return self._index

    def ns(self, namespace: str | None = None, user_id: str | None = None) -> str:
        """The namespace a call acts on: ``namespace``, else ``user_id``, else the default."""
        if namespace is not None and user_id is not None and namespace != user_id:
            raise ValidationError("pass namespace or user_id, not two different values")
        return self.store._check_namespace(namespace or user_id or self.namespace)

    async def close(self) -> None:
        if self.writer is not None:  # its running jobs end cancelled, nothing of theirs applied
            await self.writer.close()
        if self._index is not None:
            self._index.close()  # saves the ANN graphs changed since their last save
        self.store.close()

    # ------------------------------------------------------------------ write
    async def add(
        self,
        content: str | Sequence[dict[str, Any]],
        *,
        namespace: str | None = None,
        user_id: str | None = None,
        type: MemoryType | str | None = None,
        metadata: dict[str, Any] | None = None,
        evidence: Sequence[str] = (),
        session: str | None = None,
        id: str | None = None,
        actor: str | None = None,
        expires_at: Any = None,
        ttl: float | None = None,
        infer: bool | None = None,
    ) -> Any:
        """Store one memory and return it (with its new id; ``type`` defaults to semantic). ``expires_at``
        (seconds since the epoch, a datetime or an ISO 8601 time) or ``ttl`` (seconds from now): the memory
        leaves search then (:mod:`memrl.memory.store.expiry`; kept as ``metadata["expires_at"]``).

        ``content`` a list of chat messages, as mem0 takes them (:mod:`memrl.memory.facade.mem0`): each is
        stored as an episodic turn (the list of items comes back), or ``remember`` runs on them (its job comes
        back) with ``infer=True`` or, by default, when the memory has a job writer."""
        if not isinstance(content, (str, bytes)) and isinstance(content, Sequence):
            return await self._add_messages(content, namespace=namespace, user_id=user_id, type=type,
                                            metadata=metadata, session=session, actor=actor, infer=infer)  # fmt: skip
        type = MemoryType.SEMANTIC if type is None else type
        meta = {} if metadata is None else metadata
        when = expiry_time(expires_at, ttl)
        if when is not None:  # a bad ``metadata`` is the store's to reject (it says why)
            meta = {**meta, EXPIRES_AT: when} if isinstance(meta, dict) else meta
        item = NewItem(content, type, meta, tuple(evidence), session, id)
        return (await self.add_many([item], namespace=namespace, user_id=user_id, actor=actor))[0]

    async def sweep_expired(self, *, namespace: str | None = None, user_id: str | None = None) -> int:
        """Soft-delete every expired memory (of one namespace, or of the whole store when neither
        ``namespace`` nor ``user_id`` is given) in batches; returns how many. Searches do it for their own
        namespace; this is for ``get``/``list`` and for a periodic clean-up."""
        ns = self.ns(namespace, user_id) if namespace is not None or user_id is not None else None
        return await asyncio.to_thread(self.store.sweep_expired, ns)

    async def add_many(
        self,
        items: Sequence[NewItem | str],
        *,
        namespace: str | None = None,
        user_id: str | None = None,
        actor: str | None = None,
    ) -> list[MemoryItem]:
        """Store several memories atomically (all or none). Embeddings are computed (or found in the
        namespace's cache) first, and cached in the same transaction as the items."""
        ns = self.ns(namespace, user_id)
        new = [NewItem(it) if isinstance(it, str) else it for it in items]
        prepared = self.store.validate(new)
        rows: dict[str, bytes] = {}
        for i, it in enumerate(new):
            if it.vector is not None:  # the caller's own vector, cached under a key of its own
                key, blob = self.index.given(it.vector)
                rows[key] = blob
                mid, mtype, content, meta, evidence, session = prepared[i]
                prepared[i] = (mid, mtype, content, {**meta, "vector_key": key}, evidence, session)
        embed = [
            p[2]
            for it, p in zip(new, prepared, strict=True)
            if it.vector is None and p[3].get("dense") is not False
        ]

        def write() -> list[MemoryItem]:
            with self.store.transaction(ns):
                self.index.keep(ns, rows)
                return self.store.insert_valid(prepared, ns, actor=actor)

        with telemetry.memory_span("create_memory", ns, {"memrl.memory.count": len(new)}):
            if embed:  # lexical-only items ({"dense": false}) are never embedded
                rows.update((await self.index.embed(embed, ns))[1])
            return await asyncio.to_thread(write)

    async def update(
        self,
        memory_id: str,
        content: str | None = None,
        *,
        namespace: str | None = None,
        user_id: str | None = None,
        type: MemoryType | str | None = None,
        metadata: dict[str, Any] | None = None,
        evidence: Sequence[str] | None = None,
        actor: str | None = None,
        op: str = "UPDATE",
    ) -> MemoryItem:
        """Replace the content (and/or type, metadata, evidence) of a memory; the old version stays in history."""
        ns = self.ns(namespace, user_id)
        rows: dict[str, bytes] = {}

        def write() -> MemoryItem:
            with self.store.transaction(ns):
                self.index.keep(ns, rows)
                return self.store.update(
                    ns, memory_id, content=content, type=type, metadata=metadata, evidence=evidence, op=op,
                    actor=actor,
                )  # fmt: skip

        with telemetry.memory_span("update_memory", ns, {telemetry.RECORD_ID: memory_id}):
            if content is not None:
                self.store.check_content(content)
                rows = (await self.index.embed([content], ns))[1]
            return await asyncio.to_thread(write)

    async def delete(
        self,
        memory_id: str,
        *,
        namespace: str | None = None,
        user_id: str | None = None,
        reason: str | None = None,
        actor: str | None = None,
    ) -> MemoryItem:
        """Delete a memory (recoverable with ``restore`` or ``undo``)."""
        ns = self.ns(namespace, user_id)
        with telemetry.memory_span("delete_memory", ns, {telemetry.RECORD_ID: memory_id}):
            return await asyncio.to_thread(self.store.delete, ns, memory_id, reason=reason, actor=actor)

    async def restore(
        self,
        memory_id: str,
        *,
        namespace: str | None = None,
        user_id: str | None = None,
        actor: str | None = None,
    ) -> MemoryItem:
        ns = self.ns(namespace, user_id)
        with telemetry.memory_span(
            "update_memory", ns, {telemetry.RECORD_ID: memory_id, "memrl.memory.op": "restore"}
        ):
            return await asyncio.to_thread(self.store.restore, ns, memory_id, actor=actor)

    async def merge(
        self,
        memory_ids: Sequence[str],
        content: str | None = None,
        *,
        namespace: str | None = None,
        type: MemoryType | str | None = None,
        metadata: dict[str, Any] | None = None,
        evidence: Sequence[str] = (),
        actor: str | None = None,
    ) -> MemoryItem:
        """Merge memories into one: the first is rewritten to ``content`` (default: the contents joined by
        newlines), the others are deleted. The merged memory cites the sources' evidence and ``evidence``.
        One batch: a single ``undo`` reverts all of it."""
        ns = self.ns(namespace)
        ids = list(dict.fromkeys(memory_ids))
        if len(ids) < 2:
            raise ValidationError("merge needs at least two distinct memory ids")
        sources = [self.store.get(ns, i) for i in ids]
        text = content if content else "\n".join(s.content for s in sources)
        self.store.check_content(text)
        rows = (await self.index.embed([text], ns))[1]
        evidence = tuple(dict.fromkeys([*(e for s in sources for e in s.evidence), *evidence]))
        meta = {k: v for s in reversed(sources) for k, v in s.metadata.items()}
        meta.update(metadata or {}, merged_from=ids)

        def write() -> MemoryItem:
            with self.store.transaction(ns, batch=True):
                self._unchanged(ns, sources)
                self.index.keep(ns, rows)
                merged = self.store.update(
                    ns,
                    ids[0],
                    content=text,
                    type=type,
                    metadata=meta,
                    evidence=evidence,
                    op="MERGE",
                    actor=actor,
                )
                for other in ids[1:]:
                    self.store.delete(ns, other, op="MERGE", actor=actor)
            return merged

        return await asyncio.to_thread(write)

    async def split(
        self,
        memory_id: str,
        parts: Sequence[str],
        *,
        namespace: str | None = None,
        actor: str | None = None,
    ) -> list[MemoryItem]:
        """Split a memory into ``parts``: it keeps the first, new memories take the rest. One batch."""
        ns = self.ns(namespace)
        parts = [p for p in parts if isinstance(p, str) and p.strip()]
        if len(parts) < 2:
            raise ValidationError("split needs at least two non-empty parts")
        for p in parts:
            self.store.check_content(p)
        src = self.store.get(ns, memory_id)
        rows = (await self.index.embed(parts, ns))[1]
        meta = {**strip_derived(src.metadata), "split_from": src.id}

        def write() -> list[MemoryItem]:
            with self.store.transaction(ns, batch=True):
                self._unchanged(ns, [src])
                self.index.keep(ns, rows)
                first = self.store.update(
                    ns, src.id, content=parts[0], metadata=meta, op="SPLIT", actor=actor
                )
                rest = self.store.insert(
                    [NewItem(p, src.type, dict(meta), src.evidence, src.session) for p in parts[1:]],
                    ns,
                    actor=actor,
                )
            return [first, *rest]

        return await asyncio.to_thread(write)

    def _unchanged(self, ns: str, items: Sequence[MemoryItem]) -> None:
        """Inside a write transaction: refuse if any of ``items`` changed since it was read (another writer
        edited it while this call was embedding), so its edit is not overwritten with stale text."""
        for it in items:
            now = self.store.get(ns, it.id)
            if now.updated_at != it.updated_at or now.content != it.content:
                raise StoreError(
                    f"memory {it.id!r} was changed by another writer meanwhile; nothing was changed, retry"
                )

    # ------------------------------------------------------------------ namespaces
    async def reset(self, *, namespace: str | None = None, user_id: str | None = None) -> int:
        """Hard-delete everything in a namespace (items, core memory, history). Not undoable."""
        ns = self.ns(namespace, user_id)
        n = await asyncio.to_thread(self.store.drop_namespace, ns)
        self.index.forget(ns)
        return n

    async def clone(self, src: str, dst: str, *, overwrite: bool = False) -> int:
        """Copy namespace ``src`` to ``dst`` (ids kept): how an RL episode starts from the initial memory."""
        with telemetry.memory_span("create_memory_store", dst, {"memrl.memory.clone_of": src}):
            n = await asyncio.to_thread(self.store.clone_namespace, src, dst, overwrite=overwrite)
            self.index.cloned(src, dst)
        return n

    async def namespaces(self) -> list[dict[str, Any]]:
        return self.store.namespaces()

    async def export_lines(self, *, namespace: str | None = None, user_id: str | None = None) -> list[dict]:
        """A lossless export of a namespace (items, core memory, history) as JSONL-ready dicts."""
        return list(export_namespace(self.store, self.ns(namespace, user_id)))

    async def import_lines(
        self,
        lines: Iterable[str | dict[str, Any]] | BinaryIO,
        *,
        namespace: str | None = None,
        overwrite: bool = False,
    ) -> dict[str, Any]:
        """Import an export (text lines, dicts, or a file opened in binary mode) into ``namespace`` (default:
        the exported one), atomically; returns ``{"namespace", "items", "history", "core"}``."""
        counts = await asyncio.to_thread(
            import_namespace, self.store, lines, namespace=namespace, overwrite=overwrite
        )
        self.index.forget(counts["namespace"])
        return counts

    # ------------------------------------------------------------------ core memory
    async def core(self, *, namespace: str | None = None, user_id: str | None = None) -> str:
        """The core memory block (persona/user facts always shown to the model)."""
        return self.store.get_core(self.ns(namespace, user_id))

    async def core_append(self, text: str, *, namespace: str | None = None, actor: str | None = None) -> str:
        def append(current: str) -> str:
            return f"{current}\n{text}" if current else text

        ns = self.ns(namespace)
        return await asyncio.to_thread(self.store.modify_core, ns, append, op="CORE_APPEND", actor=actor)

    async def core_replace(
        self, old_text: str, new_text: str, *, namespace: str | None = None, actor: str | None = None
    ) -> str:
        def replace(current: str) -> str:
            if not old_text or old_text not in current:
                raise ValidationError(
                    "old_text does not occur in core memory; copy it exactly, or use REWRITE"
                )
            return current.replace(old_text, new_text)

        ns = self.ns(namespace)
        return await asyncio.to_thread(self.store.modify_core, ns, replace, op="CORE_REPLACE", actor=actor)

    async def core_rewrite(self, text: str, *, namespace: str | None = None, actor: str | None = None) -> str:
        ns = self.ns(namespace)
        return await asyncio.to_thread(self.store.set_core, ns, text, op="CORE_REWRITE", actor=actor)

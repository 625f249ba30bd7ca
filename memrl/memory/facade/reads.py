"""The read side of :class:`~memrl.memory.facade.memory.AsyncMemory`: get, list, count, search, retrieval keys,
history, earlier versions and undo, now or ``as_of`` an earlier time.

An update or delete keeps the old version (:mod:`memrl.memory.store.history`), so a contradiction resolved by
an agent (``"Alice lives in Lisbon"`` updated to ``"... Porto"``) never erases what was believed before::

    m.search("Where does Alice live?", user_id="alice", as_of="2026-05-01T12:00:00Z")  # finds Lisbon
    m.get(item_id, user_id="alice", as_of=before_the_job)       # the item as it was then
    m.versions(item_id, user_id="alice")                        # its earlier versions, oldest first

``as_of`` (UNIX seconds, a ``datetime`` or ISO 8601) rebuilds the namespace from its history
(:mod:`memrl.memory.store.past`) and searches that state in a private in-memory store, with the same embedder
(vectors come from the namespace's cache) and the same options: its cost grows with the namespace's
history, so it suits inspection and audits, not a hot path. Retrieval keys (:mod:`memrl.memory.store.keys`) are
not versioned: a search ``as_of`` a time ranks without them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from memrl import telemetry
from memrl.memory.backends import open_store
from memrl.memory.facade.mem0 import types_of
from memrl.memory.records.types import HistoryEntry, MemoryItem, MemoryType, SearchHit
from memrl.memory.store.base import NewItem
from memrl.memory.store.past import AsOf, item_at, state_at, to_time, versions
from memrl.memory.store.validation import content_hash, strip_derived

if TYPE_CHECKING:  # search is imported by the first search (get, list and history start without it)
    from memrl.memory.search.hybrid import SearchIndex, SearchMode, SearchOptions


class ReadMethods:
    """The read methods of :class:`~memrl.memory.facade.memory.AsyncMemory` (a mixin: it supplies ``ns``,
    ``store``, ``embedder`` and ``index``)."""

    store: Any
    embedder: Any
    index: SearchIndex

    def ns(self, namespace: str | None = None, user_id: str | None = None) -> str:  # pragma: no cover
        raise NotImplementedError

    async def get(
        self,
        memory_id: str,
        *,
        namespace: str | None = None,
        user_id: str | None = None,
        include_deleted: bool = False,
        as_of: AsOf | None = None,
    ) -> MemoryItem:
        """One memory; ``as_of`` a time: as it was then (:class:`NotFoundError` if it did not exist yet or
        was deleted then)."""
        ns = self.ns(namespace, user_id)
        if as_of is not None:
            return item_at(self.store, ns, memory_id, to_time(as_of))
        return self.store.get(ns, memory_id, include_deleted=include_deleted)

    async def list(
        self,
        *,
        namespace: str | None = None,
        user_id: str | None = None,
        types: Sequence[MemoryType | str] | None = None,
        limit: int | None = None,
        offset: int = 0,
        newest_first: bool = False,
        include_deleted: bool = False,
        type: MemoryType | str | None = None,
    ) -> list[MemoryItem]:
        return self.store.list(
            self.ns(namespace, user_id),
            types=types_of(type, types),
            limit=limit,
            offset=offset,
            newest_first=newest_first,
            include_deleted=include_deleted,
        )

    async def count(
        self,
        *,
        namespace: str | None = None,
        user_id: str | None = None,
        types: Sequence[MemoryType | str] | None = None,
    ) -> int:
        return self.store.count(self.ns(namespace, user_id), types=types)

    async def search(
        self,
        query: str,
        *,
        namespace: str | None = None,
        user_id: str | None = None,
        top_k: int = 10,
        types: Sequence[MemoryType | str] | None = None,
        filters: dict[str, Any] | None = None,
        threshold: float | None = None,
        mode: SearchMode = "hybrid",
        query_vector: Any = None,
        as_of: AsOf | None = None,
        limit: int | None = None,
        type: MemoryType | str | None = None,
        **options: Any,
    ) -> list[SearchHit]:
        """Best ``top_k`` memories for ``query`` (``limit``: mem0's name for it). ``mode``: hybrid (default),
        dense or bm25.

        ``type`` (one) or ``types`` and ``filters`` (metadata key -> value, or list of values) restrict the
        candidates; ``threshold`` is a minimum cosine similarity of query and memory, whatever the mode.
        Extra ``options`` go to :class:`SearchOptions`. ``as_of`` a time: search the namespace as it was then
        (see the module docstring for the cost).

        A hit's ``score`` depends on the mode: ``dense``, the cosine similarity (-1 to 1); ``bm25``, the BM25
        weight (0 and up, unbounded: it grows with rare query words); ``hybrid``, the fused score (the two
        lists' scores combined by weight, see :class:`SearchOptions`). Query priors (a named speaker, a
        date) add to it in every mode, so a score may exceed 1: compare scores within one search only, and
        filter with ``threshold`` (always a cosine). Each hit also carries ``dense_score`` (the cosine) and
        ``bm25_score`` where the mode computed them.
        """
        if limit is not None:
            top_k = limit
        types = types_of(type, types)
        self.store.check_text(query, "query")
        parsed_types = None
        if types:
            parsed_types = tuple(self.store.check_type(t) for t in types)
        from memrl.memory.search.hybrid import SearchOptions

        opts = SearchOptions(
            mode=mode, top_k=top_k, types=parsed_types, filters=filters, threshold=threshold, **options
        )
        ns = self.ns(namespace, user_id)
        attrs = {
            "memrl.search.mode": mode,
            "memrl.search.top_k": top_k,
            "memrl.search.as_of": as_of is not None,
        }
        with telemetry.memory_span("search_memory", ns, attrs) as span:
            if as_of is not None:
                hits = await self._search_past(ns, query, opts, to_time(as_of), query_vector)
            else:
                hits = await self.index.search(ns, query, opts, query_vector=query_vector)
            span.set_attribute("memrl.search.hits", len(hits))
        return hits

    async def _search_past(
        self, ns: str, query: str, opts: SearchOptions, at: float, query_vector: Any
    ) -> list[SearchHit]:
        """Search the state of ``ns`` at ``at``, indexed afresh in a private in-memory store."""
        past = state_at(self.store, ns, at, limit=getattr(self, "max_as_of_changes", None))
        if not past:
            return []
        items = list(past.values())
        dense = [it for it in items if it.metadata.get("dense") is not False]
        # the namespace's cached vectors (of the old texts too); only a never-cached text is embedded
        keys = [(it.metadata.get("vector_key") or content_hash(it.content), it.content) for it in dense]
        vecs = (await self.index._by_key(keys, ns))[0] if dense else []
        vec_of = {it.id: v for it, v in zip(dense, vecs, strict=True)}
        tmp = open_store(":memory:", max_content_chars=max(len(it.content) for it in items) + 1)
        try:
            from memrl.memory.search.hybrid import SearchIndex

            index = SearchIndex(tmp, self.embedder)
            new = []
            for it in items:
                meta = strip_derived(it.metadata)
                if it.metadata.get("dense") is False:
                    meta["dense"] = False
                new.append(
                    NewItem(it.content, it.type, meta, it.evidence, it.session, it.id, vec_of.get(it.id))
                )
            rows, prepared = {}, tmp.validate(new)
            for i, it in enumerate(new):
                if it.vector is not None:
                    key, blob = index.given(it.vector)
                    rows[key] = blob
                    prepared[i] = (*prepared[i][:3], {**prepared[i][3], "vector_key": key}, *prepared[i][4:])
            with tmp.transaction(ns):
                index.keep(ns, rows)
                tmp.insert_valid(prepared, ns)
            hits = await index.search(ns, query, opts, query_vector=query_vector)
        finally:
            tmp.close()
        # the items as they were (ids, times, metadata), not the private copies
        return [_with_item(h, past[h.item.id]) for h in hits]

    async def set_keys(
        self, keys: dict[str, str], *, namespace: str | None = None, user_id: str | None = None
    ) -> int:
        """Attach retrieval keys (``{item id: text}``; empty text removes) to items: extra words search
        finds them by, as a separate BM25 view (``search(..., keys=WEIGHT)``; :mod:`memrl.memory.store.keys`)."""
        return await asyncio.to_thread(self.store.set_keys, self.ns(namespace, user_id), keys)

    async def get_keys(
        self, ids: Sequence[str] | None = None, *, namespace: str | None = None, user_id: str | None = None
    ) -> dict[str, str]:
        """``{item id: keys text}`` of the items that have retrieval keys (only ``ids`` when given)."""
        return self.store.get_keys(self.ns(namespace, user_id), ids)

    # ------------------------------------------------------------------ history
    async def history(
        self, memory_id: str | None = None, *, namespace: str | None = None, user_id: str | None = None
    ) -> list[HistoryEntry]:
        """Every change of a memory (or of the namespace), oldest first, with old and new content."""
        return self.store.history(self.ns(namespace, user_id), memory_id)

    async def versions(
        self, memory_id: str, *, namespace: str | None = None, user_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The earlier versions of a memory, oldest first (item dicts with ``replaced_at``, ``replaced_by``:
        when and by which change each stopped being current)."""
        return versions(self.store, self.ns(namespace, user_id), memory_id)

    async def undo(
        self, memory_id: str | None = None, *, namespace: str | None = None, user_id: str | None = None
    ) -> list[HistoryEntry]:
        """Revert the latest change of a memory (or of the namespace); returns what was undone."""
        ns = self.ns(namespace, user_id)
        with telemetry.memory_span(
            "update_memory", ns, {telemetry.RECORD_ID: memory_id, "memrl.memory.op": "undo"}
        ):
            return await asyncio.to_thread(self.store.undo, ns, memory_id)


def _with_item(hit: SearchHit, item: MemoryItem) -> SearchHit:
    return SearchHit(item, hit.score, hit.dense_score, hit.bm25_rank, hit.dense_rank, hit.bm25_score)

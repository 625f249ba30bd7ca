"""What each MemBuilder agent is shown of the memory before a session.

``context="full"`` (the original) shows every agent core memory and every item; ``context="retrieved"``
shows core memory plus the ``context_k`` items *of the agent's own type* most relevant to the session:
the store is searched with windows of ``query_turns`` turns, the hit lists are fused by reciprocal rank
and deduplicated (UPDATE and MERGE only act on items of the agent's own type, so that is all they need).
``filters`` (metadata key -> value) narrows both to the items carrying them: the ``union`` builder's notes
agents see their own notes, not the raw turns stored beside them in the same namespace.

    views = await memory_views(memory, ns, session, core, config, types)
    text, ids_shown, own_ids = views[MemoryType.EPISODIC]
"""

from __future__ import annotations

from typing import Any

from memrl.agents.membuilder import prompts as P
from memrl.agents.membuilder.config import MemBuilderConfig
from memrl.data.types import Session
from memrl.memory import AsyncMemory
from memrl.memory.records import ITEM_TYPES, MemoryItem, MemoryType
from memrl.memory.search import rrf

__all__ = ["RRF_K", "memory_views", "own_items", "relevant_items"]

RRF_K = 60


async def own_items(
    memory: AsyncMemory, ns: str, mtype: MemoryType, filters: dict[str, Any] | None = None
) -> list[MemoryItem]:
    """Every live item of ``mtype`` (carrying ``filters`` in its metadata, where given)."""
    rows = await memory.list(namespace=ns, types=[mtype])
    if not filters:
        return rows
    return [i for i in rows if all(i.metadata.get(k) == v for k, v in filters.items())]


async def relevant_items(
    memory: AsyncMemory,
    ns: str,
    mtype: MemoryType,
    session: Session,
    config: MemBuilderConfig,
    filters: dict[str, Any] | None = None,
) -> list:
    """The ``context_k`` items of ``mtype`` most relevant to the session (RRF over turn windows)."""
    k = config.context_k
    if filters:
        every = await own_items(memory, ns, mtype, filters)
        if len(every) <= k:
            return every
    elif await memory.count(namespace=ns, types=[mtype]) <= k:
        return await memory.list(namespace=ns, types=[mtype])
    step = config.query_turns
    turns = session.turns
    queries = [" ".join(t.render() for t in turns[i : i + step]) for i in range(0, len(turns), step)]
    vectors = await memory.embedder.aembed(queries)
    rankings: list[list[str]] = []
    items: dict[str, MemoryItem] = {}
    for q, v in zip(queries, vectors, strict=True):
        hits = await memory.search(q, namespace=ns, types=[mtype], top_k=k, query_vector=v, filters=filters)
        rankings.append([h.item.id for h in hits])
        items.update((h.item.id, h.item) for h in hits)
    fused = rrf(rankings, k=RRF_K)
    best = sorted(fused, key=lambda i: -fused[i])[:k]
    return [items[i] for i in best]


async def memory_views(
    memory: AsyncMemory,
    ns: str,
    session: Session,
    core: str,
    config: MemBuilderConfig,
    types: tuple[MemoryType, ...],
    filters: dict[str, Any] | None = None,
) -> dict[MemoryType, tuple[str, list[str], list[str]]]:
    """What each agent is shown of the pre-session memory: (text, ids of every item shown, ids of the
    items of its own type shown)."""
    if config.context == "full":
        items = {t: await own_items(memory, ns, t, filters) for t in ITEM_TYPES}
        text = P.memory_block(core, items)
        ids = [i.id for rows in items.values() for i in rows]
        return {t: (text, ids, [i.id for i in items.get(t, [])]) for t in types}
    views = {}
    for t in types:
        if t is MemoryType.CORE:
            views[t] = (P.memory_block(core, {}), [], [])
            continue
        rows = await relevant_items(memory, ns, t, session, config, filters)
        total = (
            len(await own_items(memory, ns, t, filters))
            if filters
            else await memory.count(namespace=ns, types=[t])
        )
        note = {t: f"the {len(rows)} of {total} most related to this session"} if len(rows) < total else {}
        ids = [i.id for i in rows]
        views[t] = (P.memory_block(core, {t: rows}, note=note), ids, ids)
    return views

"""The memory-service operations as typed tools: add, search, get, list, update, restore, history, undo.

Like MemUpdate's tools (:mod:`memrl.tools.memupdate`), each is one typed async function whose argument
model and JSON schema are derived from its signature and docstring (:mod:`memrl.tools.base`). The REST
API (:mod:`memrl.server.memory_api`) builds its request models and OpenAPI document from these same
tools, and the MCP server (:mod:`memrl.server.mcp_server`) lists them with these same schemas, so an
operation is written once for models, HTTP clients and MCP clients alike.

Each returns a :class:`~memrl.tools.base.ToolResult` whose ``content`` is text for a model and whose
``data`` is the JSON an HTTP client gets (items as :meth:`MemoryItem.to_dict`, hits with their dense,
BM25 and fused scores, history entries with old and new snapshots).

    ctx = MemoryContext(memory, namespace="alice", actor="api")
    result = await SERVICE_TOOLS.call(ctx, "search_memories", {"query": "Lisbon", "mode": "bm25"})
"""

from __future__ import annotations

import logging
from typing import Annotated, Literal

from pydantic import Field

from memrl.memory.records import (
    DEFAULT_TYPE,
    Evidence,
    Filters,
    ItemType,
    MemoryId,
    Metadata,
    Offset,
    Session,
)
from memrl.memory.records import Content as Text
from memrl.tools.base import ToolResult, Toolset, tool
from memrl.tools.memupdate import MemoryContext, Query, format_item

log = logging.getLogger(__name__)
SearchMode = Literal["hybrid", "dense", "bm25"]
AsOf = Annotated[
    float | Annotated[str, Field(max_length=64)],
    Field(description="a past time: UNIX seconds or ISO 8601 (2026-05-01T12:00:00Z)"),
]

ExpiresAt = Annotated[
    float | Annotated[str, Field(max_length=64)],
    Field(description="UNIX seconds or ISO 8601 (2026-05-01T12:00:00Z)"),
]

__all__ = ["SERVICE_TOOLS", "SearchMode"]


#: The note a result carries when a request spelled the memory type the old way.
MEMORY_TYPE_DEPRECATED = "memory_type is deprecated: send type (the same values)"


def _type_of(type: str | None, memory_type: str | None) -> tuple[str | None, str]:
    """The memory type a request names (``type``; the deprecated ``memory_type`` still accepted), and the
    note to add to the result's text (empty unless the old name was used)."""
    if memory_type is None:
        return type, ""
    log.warning(MEMORY_TYPE_DEPRECATED)
    return (type or memory_type), f" ({MEMORY_TYPE_DEPRECATED}.)"


@tool
async def add_memory(
    ctx: MemoryContext,
    content: Text,
    type: ItemType = DEFAULT_TYPE,
    memory_type: ItemType | None = None,
    metadata: Metadata | None = None,
    evidence: Evidence | None = None,
    session: Session | None = None,
    memory_id: MemoryId | None = None,
    expires_at: ExpiresAt | None = None,
    ttl: Annotated[float, Field(gt=0, le=3.2e9)] | None = None,
) -> ToolResult:
    """Store one new memory and return it with its id.

    Args:
        content: The text of the memory.
        type: episodic (events with dates), semantic (facts) or procedural (how-to).
        memory_type: Deprecated: the old name of type.
        metadata: Extra fields stored with the memory (a JSON object), usable as search filters.
        evidence: Ids of the source turns or documents the memory comes from.
        session: The session the memory was made in.
        memory_id: An id to use instead of a generated one.
        expires_at: When the memory leaves search (UNIX seconds or ISO 8601); kept as metadata.expires_at.
        ttl: Seconds from now after which the memory leaves search (instead of expires_at).
    """
    mtype, note = _type_of(type if memory_type is None or type != DEFAULT_TYPE else None, memory_type)
    item = await ctx.memory.add(
        content, namespace=ctx.namespace, type=mtype, metadata=metadata or {}, evidence=evidence or (),
        session=session, id=memory_id, actor=ctx.actor, expires_at=expires_at, ttl=ttl,
    )  # fmt: skip
    return ToolResult(True, f"Created memory {item.id}.{note}", data=item.to_dict())


@tool
async def search_memories(
    ctx: MemoryContext,
    query: Query,
    top_k: Annotated[int, Field(ge=1, le=100)] = 10,
    mode: SearchMode = "hybrid",
    types: Annotated[list[ItemType], Field(max_length=3)] | None = None,
    limit: Annotated[int, Field(ge=1, le=100)] | None = None,
    type: ItemType | None = None,
    filters: Filters | None = None,
    threshold: Annotated[float, Field(ge=-1.0, le=1.0)] | None = None,
    as_of: AsOf | None = None,
    include_history: bool = False,
) -> ToolResult:
    """Search memories; each hit carries its fused score and the dense and BM25 scores and ranks behind it.

    Args:
        query: What to look for, in natural language.
        top_k: How many hits to return (1-100).
        mode: hybrid (dense + BM25, fused), dense or bm25.
        types: Only search memories of these types.
        limit: mem0's name for top_k (wins when both are given).
        type: Only search memories of this type.
        filters: Metadata conditions, key -> value (or a list of accepted values; null matches null).
        threshold: Minimum cosine similarity between query and memory (-1 to 1).
        as_of: Search the memories as they were at this time (updated and deleted ones included as they were).
        include_history: Give each hit its earlier versions (oldest first).
    """
    hits = await ctx.memory.search(
        query,
        namespace=ctx.namespace,
        top_k=limit or top_k,
        mode=mode,
        types=[*(types or ()), *([type] if type else [])] or None,
        filters=filters,
        threshold=threshold,
        as_of=as_of,
    )
    text = "\n".join(format_item(h.item, h.score) for h in hits) or "No memories matched the query."
    data = [h.to_dict() for h in hits]
    if include_history:
        for d in data:
            d["history"] = await ctx.memory.versions(d["id"], namespace=ctx.namespace)
    return ToolResult(True, text, data=data)


@tool
async def get_memory(
    ctx: MemoryContext,
    memory_id: MemoryId,
    include_deleted: bool = False,
    as_of: AsOf | None = None,
    include_history: bool = False,
) -> ToolResult:
    """Show one memory.

    Args:
        memory_id: The id of the memory.
        include_deleted: Also show it if it was deleted.
        as_of: Show it as it was at this time.
        include_history: Also list its earlier versions (oldest first).
    """
    m = ctx.memory
    item = await m.get(memory_id, namespace=ctx.namespace, include_deleted=include_deleted, as_of=as_of)
    data, text = item.to_dict(), format_item(item)
    if include_history:
        data["history"] = await m.versions(memory_id, namespace=ctx.namespace)
        text += "".join(f"\nearlier ({v['replaced_by']}): {v['content']!r}" for v in data["history"])
    return ToolResult(True, text, data=data)


@tool
async def list_memories(
    ctx: MemoryContext,
    types: Annotated[list[ItemType], Field(max_length=3)] | None = None,
    include_deleted: bool = False,
    limit: Annotated[int, Field(ge=1, le=1000)] = 100,
    offset: Offset = 0,
) -> ToolResult:
    """List memories, oldest first, a page at a time.

    Args:
        types: Only memories of these types.
        include_deleted: Include deleted memories (marked deleted).
        limit: Page size (1-1000).
        offset: How many to skip.
    """
    m, ns = ctx.memory, ctx.namespace
    items = m.store.list(ns, types=types, include_deleted=include_deleted, limit=limit, offset=offset)
    total = m.store.count(ns, types=types)
    text = "\n".join(format_item(i) for i in items) or "No memories."
    return ToolResult(True, text, data={"items": [i.to_dict() for i in items], "total": total})


@tool
async def update_memory(
    ctx: MemoryContext,
    memory_id: MemoryId,
    content: Text | None = None,
    type: ItemType | None = None,
    metadata: Metadata | None = None,
    evidence: Evidence | None = None,
    memory_type: ItemType | None = None,
) -> ToolResult:
    """Change a memory; fields not given stay as they are, and the old version is kept in its history. A
    change that changes nothing records nothing.

    Args:
        memory_id: The id of the memory to change.
        content: Its new text.
        type: Its new type.
        metadata: Its new metadata (replaces the old object).
        evidence: Its new evidence ids.
        memory_type: Deprecated: the old name of type.
    """
    mtype, note = _type_of(type, memory_type)
    item = await ctx.memory.update(
        memory_id, content, namespace=ctx.namespace, type=mtype, metadata=metadata, evidence=evidence,
        actor=ctx.actor,
    )  # fmt: skip
    return ToolResult(True, f"Updated memory {item.id}.{note}", data=item.to_dict())


@tool
async def restore_memory(ctx: MemoryContext, memory_id: MemoryId) -> ToolResult:
    """Bring back a deleted memory.

    Args:
        memory_id: The id of the deleted memory.
    """
    item = await ctx.memory.restore(memory_id, namespace=ctx.namespace, actor=ctx.actor)
    return ToolResult(True, f"Restored memory {item.id}.", data=item.to_dict())


@tool
async def memory_history(
    ctx: MemoryContext,
    memory_id: MemoryId | None = None,
    limit: Annotated[int, Field(ge=1, le=10_000)] = 1000,
) -> ToolResult:
    """Every change of a memory (or, without memory_id, of the whole namespace), oldest first.

    Args:
        memory_id: The memory whose changes to show; omit for the namespace's.
        limit: At most this many of the latest changes.
    """
    entries = ctx.memory.store.history(ctx.namespace, memory_id, limit=limit)
    lines = [
        f"#{e.seq} {e.op} {e.memory_id}: {e.old_content!r} -> {e.new_content!r}"
        + (" (undone)" if e.undone else "")
        for e in entries
    ]
    return ToolResult(True, "\n".join(lines) or "No changes.", data=[e.to_dict() for e in entries])


@tool
async def undo_change(ctx: MemoryContext, memory_id: MemoryId | None = None) -> ToolResult:
    """Revert the latest change of a memory (or of the namespace); a merge or split is undone as a whole.

    Args:
        memory_id: The memory whose latest change to revert; omit for the namespace's latest change.
    """
    entries = ctx.memory.store.undo(ctx.namespace, memory_id, actor=ctx.actor)
    text = "\n".join(f"Undid #{e.seq} {e.op} of {e.memory_id}." for e in entries)
    return ToolResult(True, text, data=[e.to_dict() for e in entries])


SERVICE_TOOLS = Toolset(
    [add_memory, search_memories, get_memory, list_memories, update_memory, restore_memory, memory_history,
     undo_change]
)  # fmt: skip

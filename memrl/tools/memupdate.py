"""MemUpdate's six memory tools, all real: search, manage (create/update), delete, sample, merge, split.

Each is a typed async function; its function-calling schema is derived from it (``TOOL.schema``).
They act on one namespace of an :class:`~memrl.memory.facade.memory.AsyncMemory` through a
:class:`MemoryContext`. Every change is recorded in the store's history (actor = ``ctx.actor``), so an
episode's edits can be audited and undone. In the original MemUpdate, delete/merge/split were mocks.

    ctx = MemoryContext(memory, namespace="episode-7")
    result = await MEMUPDATE_TOOLS.call(ctx, "search_memory", '{"query": "Caroline job"}')
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from memrl.datetimes import DATE_KEYS, parse_date, shown_date
from memrl.memory import AsyncMemory
from memrl.memory.records import MemoryItem, shown_text
from memrl.tools.base import ToolResult, Toolset, tool
from memrl.tools.splitting import SPLITTERS, limit_parts, lost_words

ItemType = Literal["episodic", "semantic", "procedural"]
#: Bounds on free text a model writes: with constrained decoding, an unbounded string can run until the token
#: budget cuts the call off (seen with the 135M model); these keep every call finishable.
#: The longest memory a tool writes (characters): a merge whose joined text would be longer is refused.
MAX_ITEM_CHARS = 2000
Query = Annotated[str, Field(min_length=1, max_length=300)]
Content = Annotated[str, Field(min_length=1, max_length=MAX_ITEM_CHARS)]
Reason = Annotated[str, Field(max_length=300)]
MemoryId = Annotated[str, Field(min_length=1, max_length=64)]


@dataclass
class MemoryContext:
    """What a tool acts on: one namespace of a memory, with the acting agent's name and a seeded RNG.
    ``speakers``: the names a memory's ``speaker`` metadata may take (empty: any one short name)."""

    memory: AsyncMemory
    namespace: str
    actor: str = "agent"
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    max_item_chars: int = MAX_ITEM_CHARS
    speakers: tuple[str, ...] = ()


#: Metadata keys the store and its builders derive (search reads some of them: ``unit`` collapses hits,
#: ``mentions_time`` boosts *when* questions, ``vector_key`` names a cached vector): a tool call may not set
#: them. The keys a reader is shown (:data:`memrl.memory.records.reading.READER_KEYS`) are checked apart.
DERIVED_KEYS = ("unit", "mentions_time", "vector_key", "source", "merge_strategy", "session", "memory_id")


def metadata_problem(metadata: dict[str, Any] | None, speakers: tuple[str, ...] = ()) -> str | None:
    """Why a model may not store this metadata (None: it may). What a reader is shown or search ranks by
    is not free text: ``text`` (shown in place of the content) and the derived keys are refused, a date
    (``date``, ``date_text``) must be one date, and ``speaker`` one of the conversation's speakers. Without
    this, a memory could carry every month and year of a decade as its "date" and be read as if it said
    when something happened, or claim a time mention to be ranked first for every *when* question."""
    for key, value in (metadata or {}).items():
        if key == "text" or key in DERIVED_KEYS:
            return f"metadata key {key!r} is set by the system, not by a tool call (put facts in content)"
        if key in DATE_KEYS and (not isinstance(value, str) or len(value) > 64 or parse_date(value) is None):
            return (
                f"metadata {key!r} must be one date (like '2023-05-08' or '1:56 pm on 8 May, 2023'), "
                f"got {str(value)[:60]!r}"
            )
        if key == "speaker":
            ok = value in speakers if speakers else isinstance(value, str) and 0 < len(value) <= 40
            if not ok or not isinstance(value, str) or len(value.split()) > 3:
                names = f" (one of {', '.join(speakers)})" if speakers else ""
                return f"metadata 'speaker' must be the name of one speaker{names}, got {str(value)[:60]!r}"
    return None


def item_date(item: MemoryItem) -> str | None:
    """The date a reader is shown with a memory: its metadata's ``date_text``, else ``date``, only when it
    parses as one date, in one canonical form (:func:`memrl.datetimes.shown_date`). Free text stored under
    a date key is never shown: a reader is not handed a list of every month of a decade as "the date"."""
    return shown_date(item.metadata)


def reader_text(item: MemoryItem) -> str:
    """A memory as an answering model reads it (:func:`memrl.memory.records.reading.shown_text`, the line
    :func:`memrl.scoring.answer.format_memories` shows): its date first, then its text."""
    return shown_text(item)


def joined_text(items: list[MemoryItem]) -> str:
    """The memories joined into one text that keeps what a reader saw: each part after the first is led by
    its own date when it differs from the first's (the merged memory keeps the first one's date)."""
    first = item_date(items[0]) if items else None
    lines = [items[0].content] if items else []
    for it in items[1:]:
        date = item_date(it)
        lines.append(f"[{date}] {it.content}" if date and date != first else it.content)
    return "\n".join(lines)


def format_item(item: MemoryItem, score: float | None = None) -> str:
    """One line per memory, as the model sees it: ``[id] (type, date) content``."""
    tags = [item.type.value]
    date = item.metadata.get("date")
    if isinstance(date, str) and parse_date(date) is not None:
        tags.append(date)
    head = f"[{item.id}] ({', '.join(tags)})"
    if score is not None:
        head += f" score={score:.3f}"
    return f"{head} {item.content}"


def _listing(items: list[MemoryItem], empty: str) -> str:
    return "\n".join(format_item(i) for i in items) if items else empty


@tool
async def search_memory(
    ctx: MemoryContext,
    query: Query,
    top_k: Annotated[int, Field(ge=1, le=50)] = 5,
    memory_type: ItemType | None = None,
    similarity_threshold: Annotated[float, Field(ge=-1.0, le=1.0)] | None = None,
) -> ToolResult:
    """Search the memory database for memories relevant to a query (hybrid semantic + keyword search).

    Args:
        query: What to look for, in natural language.
        top_k: How many memories to return (1-50).
        memory_type: Only search memories of this type.
        similarity_threshold: Only return memories at least this similar to the query (cosine, -1 to 1).
    """
    hits = await ctx.memory.search(
        query,
        namespace=ctx.namespace,
        top_k=top_k,
        types=[memory_type] if memory_type else None,
        threshold=similarity_threshold,
    )
    text = "\n".join(format_item(h.item) for h in hits) if hits else "No memories matched the query."
    return ToolResult(True, text, data=[{"id": h.item.id, "score": h.score} for h in hits])


@tool
async def manage_memory(
    ctx: MemoryContext,
    operation: Literal["create", "update"],
    content: Content,
    memory_type: ItemType | None = None,
    metadata: dict[str, Any] | None = None,
    memory_id: MemoryId | None = None,
) -> ToolResult:
    """Create a new memory, or replace the content of an existing one (its old version is kept in history).

    Args:
        operation: "create" for a new memory, "update" to rewrite the memory given by memory_id.
        content: The full text of the memory.
        memory_type: episodic (events with dates), semantic (facts about people and things) or procedural
            (how-to). Default: episodic for a new memory; an update keeps the memory's type.
        metadata: Optional extra fields to store with the memory (a JSON object); an update adds them to
            the memory's existing fields.
        memory_id: The id of the memory to update (required for "update").
    """
    problem = metadata_problem(metadata, ctx.speakers)
    if problem is not None:
        return ToolResult(False, f"Error in manage_memory: {problem}. Nothing was changed.", error=problem)
    if operation == "create":
        if memory_id:
            return ToolResult(False, "Error in manage_memory: do not pass memory_id with operation 'create'. "
                              "Nothing was changed.", error="memory_id given for create")  # fmt: skip
        item = await ctx.memory.add(
            content, namespace=ctx.namespace, type=memory_type or "episodic", metadata=metadata or {},
            actor=ctx.actor,
        )  # fmt: skip
        return ToolResult(True, f"Created memory {item.id}.", data={"id": item.id})
    if not memory_id:
        return ToolResult(False, "Error in manage_memory: operation 'update' needs memory_id (copy it from a "
                          "search or sample result). Nothing was changed.", error="missing memory_id")  # fmt: skip
    old = await ctx.memory.get(memory_id, namespace=ctx.namespace)
    merged = None if metadata is None else {**old.metadata, **metadata}
    item = await ctx.memory.update(
        memory_id, content, namespace=ctx.namespace, type=memory_type, metadata=merged, actor=ctx.actor
    )
    return ToolResult(True, f"Updated memory {item.id}.", data={"id": item.id})


@tool
async def delete_memory(ctx: MemoryContext, memory_id: MemoryId, reason: Reason | None = None) -> ToolResult:
    """Delete a memory that is wrong, redundant or useless (it can be restored later).

    Args:
        memory_id: The id of the memory to delete.
        reason: Why it should go.
    """
    await ctx.memory.delete(memory_id, namespace=ctx.namespace, reason=reason, actor=ctx.actor)
    return ToolResult(True, f"Deleted memory {memory_id}.", data={"id": memory_id})


def _diverse(vectors: np.ndarray, k: int, start: int) -> list[int]:
    """Greedy farthest-point selection (max-min cosine distance), from a seeded start."""
    chosen = [start]
    best = vectors @ vectors[start]
    while len(chosen) < min(k, len(vectors)):
        best[chosen] = np.inf
        nxt = int(np.argmin(best))
        chosen.append(nxt)
        best = np.maximum(best, vectors @ vectors[nxt])
    return chosen


@tool
async def sample_memory(
    ctx: MemoryContext,
    k: Annotated[int, Field(ge=1, le=50)] = 5,
    memory_type: ItemType | None = None,
    strategy: Literal["random", "diverse", "recent"] = "random",
) -> ToolResult:
    """Look at a sample of stored memories, to find duplicates, errors or gaps.

    Args:
        k: How many memories to show (1-50).
        memory_type: Only sample memories of this type.
        strategy: random; diverse (as different from each other as possible); recent (last changed first).
    """
    items = await ctx.memory.list(namespace=ctx.namespace, types=[memory_type] if memory_type else None)
    if strategy == "recent":
        picked = sorted(items, key=lambda i: (i.updated_at, i.id), reverse=True)[:k]
    elif strategy == "random" or len(items) <= k:
        picked = ctx.rng.sample(items, min(k, len(items)))
    else:
        vecs = await ctx.memory.index.vectors([i.content for i in items])
        picked = [items[j] for j in _diverse(vecs, k, ctx.rng.randrange(len(items)))]
    return ToolResult(True, _listing(picked, "The memory is empty."), data=[i.id for i in picked])


@tool
async def merge_memory(
    ctx: MemoryContext,
    memory_ids: Annotated[list[MemoryId], Field(min_length=2, max_length=5)],
    content: Content | None = None,
    strategy: Literal["summarize", "concatenate", "extract_common"] = "concatenate",
) -> ToolResult:
    """Merge 2-5 memories into one: the first keeps the merged text, the others are deleted.

    Args:
        memory_ids: The ids of the memories to merge (2 to 5).
        content: The merged memory, written by you (summarised or with the common facts extracted, as the
            strategy says). Without it the memories are joined (each with its date), which must fit one
            memory (2000 characters).
        strategy: How you merged them: summarize, concatenate or extract_common (recorded with the memory).
    """
    strategy = strategy if content else "concatenate"
    text = content
    if not content:
        ids = list(dict.fromkeys(memory_ids))
        sources = [await ctx.memory.get(i, namespace=ctx.namespace) for i in ids]
        joined = joined_text(sources)  # the sources' dates stay in the text: a merge loses nothing
        if len(joined) > ctx.max_item_chars:
            return ToolResult(
                False,
                f"Error in merge_memory: the {len(ids)} memories joined are {len(joined)} characters, over the "
                f"{ctx.max_item_chars}-character limit of one memory. Merge fewer memories, or write the merged "
                "memory yourself in `content` (keep every fact). Nothing was changed.",
                error="merged memory too long",
            )
        text = joined
    item = await ctx.memory.merge(
        memory_ids,
        text,
        namespace=ctx.namespace,
        metadata={"merge_strategy": strategy},
        actor=ctx.actor,
    )
    note = "" if content else " (no content given: concatenated)"
    return ToolResult(True, f"Merged {len(memory_ids)} memories into {item.id}{note}.", data={"id": item.id})


@tool
async def split_memory(
    ctx: MemoryContext,
    memory_id: MemoryId,
    parts: Annotated[list[Content], Field(min_length=2, max_length=10)] | None = None,
    split_criteria: Literal["sentence", "speaker", "date"] = "sentence",
    max_parts: Annotated[int, Field(ge=2, le=10)] = 5,
) -> ToolResult:
    """Split a memory that mixes several facts or events into separate memories.

    Args:
        memory_id: The id of the memory to split.
        parts: The new memories, written by you; together they must keep every word of the memory. Without
            them the text is cut by split_criteria.
        split_criteria: How to cut when no parts are given: by sentence, by speaker ("Name:" lines) or by date.
        max_parts: At most this many memories result (2-10).
    """
    item = await ctx.memory.get(memory_id, namespace=ctx.namespace)
    if parts is None:
        parts = limit_parts(SPLITTERS[split_criteria](item.content), max_parts)
        if len(parts) < 2:
            return ToolResult(
                False,
                f"Error in split_memory: memory {memory_id} has only one {split_criteria} part, so it cannot be "
                "split that way; pass the parts yourself or try another split_criteria. Nothing was changed.",
                error="nothing to split",
            )
    else:
        parts = limit_parts(parts, max_parts, sep="\n")
        lost = lost_words(item.content, parts)
        if lost:
            return ToolResult(
                False,
                f"Error in split_memory: the parts leave out words of memory {memory_id}: {', '.join(lost[:10])}. "
                "A split keeps all of the memory's text, spread over the parts; to rewrite or shorten a memory, "
                "use manage_memory with operation 'update'. Nothing was changed.",
                error="split drops content",
            )
    if any(len(p) > ctx.max_item_chars for p in parts):
        return ToolResult(
            False,
            f"Error in split_memory: a part is over the {ctx.max_item_chars}-character limit of one memory; "
            "split into more parts. Nothing was changed.",
            error="part too long",
        )
    items = await ctx.memory.split(memory_id, parts, namespace=ctx.namespace, actor=ctx.actor)
    ids = [i.id for i in items]
    return ToolResult(True, f"Split memory {memory_id} into {len(ids)}: {', '.join(ids)}.", data={"ids": ids})


MEMUPDATE_TOOLS = Toolset(
    [search_memory, manage_memory, delete_memory, sample_memory, merge_memory, split_memory]
)

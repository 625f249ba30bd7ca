"""The records the memory store keeps: memory items, history entries, search hits.

A memory item is one piece of long-term memory (REFERENCE.md sections 1-2): typed as episodic, semantic
or procedural (core memory is a single text block per namespace, kept apart: see ``CoreMemory``), with
the turn ids it came from (evidence), the session it was written in, and timestamps.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class MemoryType(str, enum.Enum):
    """The four memory types of MemBuilder; MemUpdate's items use the same names."""

    CORE = "core"
    EPISODIC = "episodic"
    SEMANTIC = "semantic"
    PROCEDURAL = "procedural"

    @classmethod
    def parse(cls, value: str | MemoryType) -> MemoryType:
        if isinstance(value, MemoryType):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            allowed = ", ".join(t.value for t in cls)
            raise ValueError(f"unknown memory type {value!r}; expected one of: {allowed}") from None


#: Types stored as individual items (core memory is one block per namespace).
ITEM_TYPES: tuple[MemoryType, ...] = (MemoryType.EPISODIC, MemoryType.SEMANTIC, MemoryType.PROCEDURAL)
#: A memory type as the indexes store it (one byte a row), and back.
TYPE_CODE = {t.value: i for i, t in enumerate(MemoryType)}
TYPE_NAME = {i: t for t, i in TYPE_CODE.items()}
#: History id under which a namespace's core memory block is versioned.
CORE_ID = "__core__"


@dataclass(frozen=True)
class MemoryItem:
    """One stored memory. ``created_at``/``updated_at`` are UNIX seconds (UTC)."""

    id: str
    namespace: str
    type: MemoryType
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)
    evidence: tuple[str, ...] = ()
    session: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    deleted: bool = False

    def to_dict(self) -> dict[str, Any]:
        # Written out (not dataclasses.asdict, which deep-copies): this runs for every history entry.
        return {
            "id": self.id,
            "namespace": self.namespace,
            "type": self.type.value,
            "content": self.content,
            "metadata": self.metadata,
            "evidence": list(self.evidence),
            "session": self.session,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "deleted": self.deleted,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MemoryItem:
        return cls(
            id=d["id"],
            namespace=d["namespace"],
            type=MemoryType.parse(d["type"]),
            content=d["content"],
            metadata=dict(d.get("metadata") or {}),
            evidence=tuple(d.get("evidence") or ()),
            session=d.get("session"),
            created_at=float(d.get("created_at") or 0.0),
            updated_at=float(d.get("updated_at") or 0.0),
            deleted=bool(d.get("deleted", False)),
        )


@dataclass(frozen=True)
class HistoryEntry:
    """One recorded change. ``old``/``new`` are full item snapshots (``None`` where absent)."""

    seq: int
    memory_id: str
    namespace: str
    op: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    at: float
    actor: str | None = None
    undone: bool = False

    @property
    def old_content(self) -> str | None:
        return None if self.old is None else self.old.get("content")

    @property
    def new_content(self) -> str | None:
        return None if self.new is None else self.new.get("content")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["old_content"] = self.old_content
        d["new_content"] = self.new_content
        return d


@dataclass(frozen=True)
class SearchHit:
    """A search result: the item, its fused score, and the per-retriever details that produced it."""

    item: MemoryItem
    score: float
    dense_score: float | None = None
    bm25_rank: int | None = None
    dense_rank: int | None = None
    bm25_score: float | None = None  # FTS5 bm25, negated (higher is better); None if not a BM25 hit

    def to_dict(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "dense_score": self.dense_score,
            "bm25_score": self.bm25_score,
            "bm25_rank": self.bm25_rank,
            "dense_rank": self.dense_rank,
            **self.item.to_dict(),
        }

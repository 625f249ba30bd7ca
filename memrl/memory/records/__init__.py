"""What the store keeps: memory items, history entries and search hits (:mod:`.types`), the rule for every
stored value (:mod:`.values`), the validation models of everything that enters the store (:mod:`.models`),
and what a reader is shown of an item (:mod:`.reading`). Imports nothing else of memrl.memory. The models (pydantic, a fifth of a second to import) load on first
use, so ``memrl memory --help`` does not pay for them.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from memrl.memory.records.models import (
        DEFAULT_TYPE,
        Content,
        Evidence,
        Filters,
        ItemType,
        MemoryId,
        Metadata,
        Name,
        Offset,
        Session,
        check,
    )  # fmt: skip
from memrl.memory.records.reading import READER_KEYS, shown_text
from memrl.memory.records.types import (
    CORE_ID,
    ITEM_TYPES,
    TYPE_CODE,
    TYPE_NAME,
    HistoryEntry,
    MemoryItem,
    MemoryType,
    SearchHit,
)  # fmt: skip

__all__ = [
    "CORE_ID", "DEFAULT_TYPE", "ITEM_TYPES", "READER_KEYS", "TYPE_CODE", "TYPE_NAME", "Content", "Evidence",
    "Filters", "HistoryEntry", "ItemType", "MemoryId", "MemoryItem", "MemoryType", "Metadata", "Name", "Offset",
    "SearchHit", "Session", "check", "shown_text",
]  # fmt: skip

_MODELS = frozenset(
    "DEFAULT_TYPE Content Evidence Filters ItemType MemoryId Metadata Name Offset Session check".split()
)


def __getattr__(name: str) -> Any:
    if name in _MODELS:
        from memrl.memory.records import models

        return getattr(models, name)
    raise AttributeError(f"module 'memrl.memory.records' has no attribute {name!r}")

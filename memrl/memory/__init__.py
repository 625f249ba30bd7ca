"""memrl.memory: long-term memory for LLM agents, a store with hybrid search and an undoable history.

This package's interface is what this module exports; code outside memrl.memory imports it from here (or
from a sub-package's ``__init__``), never from a sub-package's modules. The sub-packages, bottom first
(each imports only those before it; tests/test_layers.py holds the order, docs/design.md explains it):

- ``records``: items, history entries, search hits, stored values and their validation;
- ``analysis``: words, tokens and stems, BM25's weight, what a question asks and when things happened;
- ``embedders``: texts to unit vectors;
- ``store``: the store base every back-end implements (history, namespaces, keys, expiry, export/import);
- ``jobs`` and ``index``: agent jobs on a namespace; the in-process dense, ANN and BM25 indexes;
- ``backends``: SQLite and Postgres (:func:`open_store`);
- ``search``: hybrid search, its options, fusion, priors, expansion and re-scoring;
- ``facade``: :class:`AsyncMemory` and :class:`Memory`.

Names are imported on first use, so ``import memrl.memory`` costs nothing. The flat module paths of
earlier releases (``memrl.memory.types``, ``memrl.memory.sync``, ...) still import, with a
``DeprecationWarning`` (:mod:`memrl.memory._moved`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from memrl.memory import _moved

if TYPE_CHECKING:  # the same names as _EXPORTS (tests/test_memory_surface.py checks they agree)
    from memrl.memory.backends import is_postgres_url, open_store
    from memrl.memory.embedders import Embedder, HashingEmbedder, create_embedder
    from memrl.memory.facade import AsyncMemory, Memory
    from memrl.memory.jobs import Job, JobWriter
    from memrl.memory.records import ITEM_TYPES, HistoryEntry, MemoryItem, MemoryType, SearchHit, shown_text
    from memrl.memory.search import PLAIN, SearchOptions
    from memrl.memory.store import NewItem, Store

_moved.install()

#: name -> the sub-package that defines it.
_EXPORTS = {
    "AsyncMemory": "facade", "Memory": "facade",
    "open_store": "backends", "is_postgres_url": "backends",
    "Embedder": "embedders", "HashingEmbedder": "embedders", "create_embedder": "embedders",
    "Job": "jobs", "JobWriter": "jobs",
    "ITEM_TYPES": "records", "HistoryEntry": "records", "MemoryItem": "records", "MemoryType": "records",
    "SearchHit": "records", "shown_text": "records",
    "PLAIN": "search", "SearchOptions": "search",
    "NewItem": "store", "Store": "store",
}  # fmt: skip

__all__ = [
    "ITEM_TYPES", "PLAIN", "AsyncMemory", "Embedder", "HashingEmbedder", "HistoryEntry", "Job", "JobWriter",
    "Memory", "MemoryItem", "MemoryType", "NewItem", "SearchHit", "SearchOptions", "Store", "create_embedder",
    "is_postgres_url", "open_store", "shown_text",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    package = _EXPORTS.get(name)
    if package is None:
        raise AttributeError(f"module 'memrl.memory' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{package}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])

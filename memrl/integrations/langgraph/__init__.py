"""memrl as LangGraph's long-term memory store (``pip install 'memrl[langgraph]'``): :class:`MemrlStore`, a
``langgraph.store.base.BaseStore`` over a memrl ``Memory`` or ``AsyncMemory`` (:mod:`.store`), with
namespace tuples and keys mapped reversibly onto memrl's names (:mod:`.naming`) and values kept whole
(:mod:`.items`). Imported on first use, so ``import memrl.integrations.langgraph`` needs no LangGraph;
``MemrlStore`` without it says which extra to install. Guide: docs/integrations.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MemrlStore"]


def __getattr__(name: str) -> Any:
    if name == "MemrlStore":
        from memrl.integrations.langgraph.store import MemrlStore

        return MemrlStore
    raise AttributeError(f"module 'memrl.integrations.langgraph' has no attribute {name!r}")

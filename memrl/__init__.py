"""memrl: LLM long-term memory agents (build, update, read) trained with reinforcement learning.

The public entry points are imported lazily so that ``import memrl`` stays cheap and has no side effects::

    from memrl import Memory            # sync, mem0-like facade over the store (SQLite, or Postgres by URL)
    from memrl import AsyncMemory       # the async core it wraps
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["AsyncMemory", "Memory", "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from memrl.memory import AsyncMemory, Memory


def __getattr__(name: str) -> Any:
    if name in ("AsyncMemory", "Memory"):
        import memrl.memory

        return getattr(memrl.memory, name)
    raise AttributeError(f"module 'memrl' has no attribute {name!r}")

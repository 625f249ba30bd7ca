"""The store's back-ends: SQLite (:mod:`memrl.memory.backends.sqlite`, embedded, the default) and Postgres with
pgvector (:mod:`memrl.memory.backends.postgres`, by URL). Code above the back-ends opens a store with
:func:`open_store` and never imports a back-end module: each back-end implements the interface of
:class:`memrl.memory.store.Store` and hands out its own lexical and vector indexes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memrl.memory.backends.urls import is_postgres_url, redact
from memrl.memory.store.base import Store

__all__ = ["is_postgres_url", "open_store", "peek_items", "redact"]


def peek_items(path: str | Path, ns: str, ids: Sequence[str]) -> list[dict[str, Any]]:
    """Items ``ids`` of ``ns`` in a SQLite file, read-only and without opening a store
    (:func:`memrl.memory.backends.sqlite.store.peek_items`)."""
    from memrl.memory.backends.sqlite.store import peek_items

    return peek_items(path, ns, ids)


def open_store(path: str | Path = ":memory:", **options: Any) -> Store:
    """The store at ``path``: a ``postgresql://`` URL opens :class:`~memrl.memory.backends.postgres.PostgresStore`,
    anything else a SQLite file (or ``:memory:``). ``options``: ``busy_timeout``, ``core_limit``,
    ``max_content_chars`` (and ``pool_size`` for Postgres)."""
    if is_postgres_url(path):
        from memrl.memory.backends.postgres.store import PostgresStore

        return PostgresStore(str(path), **options)
    from memrl.memory.backends.sqlite.store import SQLiteStore

    options.pop("pool_size", None)
    return SQLiteStore(path, **options)

"""The back-end interface: what a back-end (:mod:`memrl.memory.backends`) must supply for the shared
:class:`~memrl.memory.store.base.Store` and for search, declared in one place.

A back-end gives the store its connection and transactions (``close``, ``transaction``, ``read``) and hands
out its own indexes: :meth:`Backend.lexical_index` (a :class:`LexicalRanker`: SQLite's is the in-process
postings of :mod:`memrl.memory.index.lexical`, Postgres ranks BM25 in the database) and, where the database
searches vectors itself (``server_vectors``), :meth:`Backend.vector_index` (a :class:`VectorIndex` per
namespace). Search asks for these and never tells back-ends apart by what attributes they have.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from memrl.errors import ConfigError

if TYPE_CHECKING:  # annotations only: opening a store does not import numpy (`memrl memory list` starts fast)
    import numpy as np

#: Vectors of ``(cache key, text)`` pairs in a namespace's embedding cache, and the cache rows it lacks.
Embed = Callable[[Sequence[tuple[str, str]], str], Awaitable[tuple["np.ndarray", dict[str, bytes]]]]


class LexicalRanker(Protocol):
    """BM25 over a store's namespaces, each with its own statistics."""

    def top(
        self,
        ns: str,
        query: str,
        k: int,
        *,
        keys: bool = False,
        types: Sequence[str] | None = None,
        allowed: np.ndarray | None = None,
    ) -> list[tuple[int, float]]:
        """The ``k`` best live items of ``ns`` as (rid, BM25 score), best first (ties: lower rid), over their
        content or, with ``keys``, their retrieval keys; only items of ``types`` and rids in ``allowed``."""
        ...

    def cloned(self, src: str, dst: str) -> None:
        """``dst`` was just cloned from ``src`` (it may share ``src``'s cached analysis)."""
        ...

    def forget(self, ns: str) -> None:
        """``ns`` was replaced (reset, import): what is held of it goes."""
        ...


class VectorIndex(Protocol):
    """One namespace's dense search, as search uses it (an in-process matrix or the database's)."""

    generation: int
    seq: int

    def top(
        self,
        query: np.ndarray,
        k: int,
        *,
        type_codes: Sequence[int] | None = None,
        allowed: np.ndarray | None = None,
        backend: str = "numpy",
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def cosines(self, rids: Sequence[int], query: np.ndarray) -> dict[int, float]: ...

    def vectors(self) -> dict[int, np.ndarray]: ...


class ServerVectorIndex(VectorIndex, Protocol):
    """A :class:`VectorIndex` whose vectors the database holds: it catches up with the namespace's changes
    by writing the vectors the database lacks (``embed`` gives them from the embedding cache)."""

    async def catch_up(
        self, embed: Embed, keep: Callable[[str, dict[str, bytes]], None], ann_min: int
    ) -> None: ...


class Backend:
    """What each back-end implements (a base of :class:`~memrl.memory.store.base.Store`)."""

    #: Whether the database searches this store's vectors itself (the ``pgvector`` dense backend).
    server_vectors: bool = False

    def close(self) -> None:
        raise NotImplementedError

    def transaction(self, ns: str | Sequence[str] | None = None, *, batch: bool = False) -> Any:
        """Context manager: one atomic write transaction (nested calls join the outer one), yielding a
        connection whose ``execute(sql, params)`` takes ``?`` placeholders. ``ns``: the namespace(s) it
        writes; a back-end with concurrent writers serialises writers of one namespace (so the history
        sequence numbers of a namespace commit in order) and lets other namespaces' writers run. ``batch``:
        the writes share one batch id (undone together)."""
        raise NotImplementedError

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows of one query (``?`` placeholders); inside a transaction it sees that transaction's writes."""
        raise NotImplementedError

    def lexical_index(self) -> LexicalRanker:
        """A new BM25 ranker over this store (one per search index)."""
        raise NotImplementedError

    def vector_index(self, ns: str, model: str, dim: int, generation: int) -> ServerVectorIndex:
        """The database's dense search of ``ns`` with the vectors of embedder ``model`` (``dim`` wide)."""
        raise ConfigError("dense backend 'pgvector' needs a postgresql:// store")


#: The dense backends search knows (:class:`memrl.memory.index.DenseIndexes`).
DENSE_BACKENDS = ("numpy", "faiss", "pgvector", "ann", "auto")


def check_dense_backend(backend: str, store: Backend) -> None:
    """A :class:`ConfigError` when search cannot run ``backend`` on ``store``: checked when a memory opens,
    before its search index is built (on first use)."""
    if backend not in DENSE_BACKENDS:
        raise ConfigError(
            f"unknown dense backend {backend!r}; use 'auto', 'numpy', 'faiss', 'ann' or 'pgvector'"
        )
    if backend == "pgvector" and not store.server_vectors:
        raise ConfigError("dense backend 'pgvector' needs a postgresql:// store")

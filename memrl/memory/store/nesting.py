"""Nested write transactions and their batch id, written once for every back-end; and how long a call may
wait for a busy store (:func:`patience`).

A store's ``transaction()`` may be entered again inside itself (a write that calls another write): the
inner call joins the outer transaction. ``transaction(batch=True)`` gives every history entry written
inside one batch id, so ``undo_batch`` reverts them together; the id is opened by the outermost call that
asks for one and closed with it. :class:`Nesting` keeps that state (per store on SQLite, whose one
connection is behind a lock; per thread on Postgres, whose threads hold their own connections).

    >>> n = Nesting()
    >>> with n.level(batch=True) as outer:
    ...     with n.level(batch=True) as inner:
    ...         same = n.batch is not None
    >>> outer, inner, same, n.depth, n.batch
    (True, False, True, 0, None)
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar


class Nesting:
    """How deep the current write transaction is, and the batch id its history entries carry."""

    depth: int = 0
    batch: str | None = None

    @contextmanager
    def level(self, batch: bool = False) -> Iterator[bool]:
        """One level deeper for the body, which is told whether it is the outermost level; a batch id is
        opened here when ``batch`` asks for one and none is open. Both are undone on the way out, on an
        error too."""
        opened = batch and self.batch is None
        if opened:
            self.batch = uuid.uuid4().hex
        self.depth += 1
        try:
            yield self.depth == 1
        finally:
            self.depth -= 1
            if opened:
                self.batch = None


#: A longer wait for a busy store than the store's own ``busy_timeout``, for the calls of one context
#: (:func:`patience`); None: the store's own.
_PATIENCE: ContextVar[float | None] = ContextVar("memrl_store_patience", default=None)


@contextmanager
def patience(seconds: float) -> Iterator[None]:
    """Let the store calls made in this block (threads started from it too: ``asyncio.to_thread`` copies
    the context) wait up to ``seconds`` for a lock another writer holds, instead of the store's
    ``busy_timeout``: for work nobody waits on, such as an agent job writing into its scratch clone."""
    token = _PATIENCE.set(seconds)
    try:
        yield
    finally:
        _PATIENCE.reset(token)


def waited(default: float) -> float:
    """How long a store call may wait for a busy store here: :func:`patience`'s, else ``default``."""
    chosen = _PATIENCE.get()
    return default if chosen is None else max(chosen, default)

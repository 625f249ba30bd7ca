"""Errors, named by the boundary they come from.

Every error memrl raises on purpose derives from :class:`MemrlError`, so callers can catch one type.
Messages say what was wrong and, where possible, how to fix it (which file, record and field).
"""

from __future__ import annotations


class MemrlError(Exception):
    """Base class of every error memrl raises on purpose."""


class StoreError(MemrlError):
    """The memory store could not do what was asked (locked, corrupt, or misused database)."""


class NotFoundError(StoreError, KeyError):
    """A memory id (or namespace) does not exist."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain.
        return str(self.args[0]) if self.args else "not found"


class BusyError(StoreError):
    """The database stayed locked by another writer longer than the busy timeout: retrying later works."""


class ValidationError(MemrlError, ValueError):
    """An argument has the wrong type, value or size. ``field``: the offending field's name, when known."""

    def __init__(self, message: str = "", *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class ConflictError(ValidationError):
    """The request is valid but clashes with the current state: the id or namespace already exists, or
    the change to undo was changed again later."""


class ToolError(MemrlError):
    """A tool call was malformed or could not be carried out. Its message is shown to the model."""


class DataError(MemrlError):
    """A data file is missing or malformed. The message names the file, record and field."""


class ProviderError(MemrlError):
    """An LLM or embedding provider failed (after retries), or returned something unusable."""


class ConfigError(MemrlError, ValueError):
    """A configuration is inconsistent. The message says how to fix it."""


def is_infrastructure(error: BaseException) -> bool:
    """True for a failure of the machinery rather than of the caller's request: a provider (LLM, embedder,
    reward server) that failed, or a store that is locked, corrupt or unreachable. A missing id is the
    caller's mistake (``NotFoundError``); a bad argument too (``ValidationError``).

    Agents must not show such a failure to the model as a tool error, and trainers must never score it:
    the rollout is marked failed and left out of its group (an outage would otherwise teach the policy).
    """
    if isinstance(error, ProviderError):
        return True
    return isinstance(error, StoreError) and not isinstance(error, NotFoundError)

"""Errors, named by the boundary they come from.

Every error memrl raises on purpose derives from :class:`MemrlError`, so callers can catch one type.
Messages say what was wrong and, where possible, how to fix it (which file, record and field).
"""

from __future__ import annotations

import re


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


class LimitError(MemrlError):
    """A per-tenant limit is reached (queued jobs or bytes, waits, requests in flight): nothing was done,
    the same request works once the tenant's earlier ones are through. ``retry_after``: seconds to wait."""

    def __init__(self, message: str = "", *, retry_after: float = 1.0, field: str | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.field = field


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


#: What a public message shows instead of a file path, a URL or host, or a SQL statement.
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"),;]+", re.IGNORECASE)
_HOST = re.compile(
    r"\b(?:host|server at|server on)\s*=?\s*\"?[\w.-]+\"?(?:,\s*port\s*\d+)?|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|"
    r"\blocalhost(?::\d+)?\b|\[[0-9a-f]*:[0-9a-f:]+\](?::\d+)?",
    re.IGNORECASE,
)
_PATH = re.compile(r"(?:(?<=\s)|(?<=^)|(?<=['\"(]))(?:~|[A-Za-z]:)?(?:[/\\][\w.@+-]+){2,}[/\\]?")
_SQL = re.compile(  # lower case: SQL keywords in any case
    r"\b(?:select\s.*?\bfrom|insert\s+into|update\s+\w+\s+set|delete\s+from|(?:create|alter|drop)\s+(?:table|index)|"
    r"pragma\s+\w+|line\s+\d+:)\b[^;\n]*",
    re.DOTALL | re.IGNORECASE,
)


def public_message(message: str | BaseException, known: tuple[str, ...] = ()) -> str:
    """``message`` fit for a client (an HTTP answer, a job's error or events): the store's own name and
    every ``known`` string (a path or URL) replaced by "the store", and any other file path, URL, host or
    SQL statement left out. The full text stays in the process's log."""
    text = str(message)
    for secret in sorted((k for k in known if k and k != ":memory:"), key=len, reverse=True):
        text = text.replace(secret, "the store")
    text = _URL.sub("<url>", text)
    text = _SQL.sub("<sql>", text)
    text = _HOST.sub("<host>", text)
    return _PATH.sub("<path>", text)

"""Which back-end a store's address names, and an address fit to print (no password)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

URL_PREFIXES = ("postgresql://", "postgres://")


def is_postgres_url(path: Any) -> bool:
    return isinstance(path, str) and path.startswith(URL_PREFIXES)


def redact(url: str) -> str:
    """``url`` without its password, in the user part or as a ``password=`` parameter (for messages and the
    start banner)."""
    parts = urlsplit(url)
    if parts.password is not None:
        parts = parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1))
    query = re.sub(r"(^|&)(password=)[^&]*", r"\1\2***", parts.query, flags=re.IGNORECASE)
    return urlunsplit(parts._replace(query=query))

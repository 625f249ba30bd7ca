"""A LangGraph item as a memrl item, and back; LangGraph's filters, applied to values.

A LangGraph value (a JSON object) is kept whole in the memrl item's metadata, under ``langgraph``
(``key``: the LangGraph key, ``value``, ``created_at``: when this key was last created, ``ttl``: its
time to live in minutes), so it comes back exactly as it was put (memrl's metadata round-trips JSON; its
rule for stored values applies: no NUL, 64-bit integers, finite floats, :mod:`memrl.memory.records`). The
item's content is what search reads: the texts at the index paths (LangGraph's own path syntax, ``$``: the
whole value as JSON) joined by newlines, cut to the store's content limit; an item put with
``index=False`` (or whose paths find no text) has its value's JSON as content, is never embedded, and is
marked ``langgraph_indexed: false`` so a search with a query does not rank it (LangGraph appends such items
after the ranked ones, without a score, as :class:`~langgraph.store.memory.InMemoryStore` does).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from memrl.errors import ValidationError

META = "langgraph"
INDEXED = "langgraph_indexed"
EXPIRES_AT = "expires_at"  # memrl's expiry key (memrl.memory.store.expiry)

__all__ = ["INDEXED", "META", "content_of", "matches", "metadata_of", "parts_of"]


def search_text(value: dict[str, Any], paths: list[str] | None) -> str:
    """The texts LangGraph would embed for ``value`` at ``paths`` (None or ``["$"]``: the whole value)."""
    from langgraph.store.base import get_text_at_path, tokenize_path

    texts: list[str] = []
    for path in paths or ["$"]:
        texts += get_text_at_path(value, path if path == "$" else tokenize_path(path))
    return "\n".join(t for t in texts if t.strip())


def content_of(value: dict[str, Any], paths: list[str] | None, indexed: bool, limit: int) -> tuple[str, bool]:
    """(the item's content, whether search ranks it)."""
    text = search_text(value, paths) if indexed else ""
    if not text:
        text, indexed = json.dumps(value, ensure_ascii=False, sort_keys=True), False
    return text[:limit], indexed


def metadata_of(
    key: str, value: dict[str, Any], created_at: float, indexed: bool, ttl: float | None, now: float
) -> dict[str, Any]:
    """The memrl metadata of an item (``ttl`` in minutes; memrl's ``expires_at`` set from it)."""
    meta: dict[str, Any] = {META: {"key": key, "value": value, "created_at": created_at}, INDEXED: indexed}
    if not indexed:
        meta["dense"] = False  # never embedded (memrl's lexical-only flag)
    if ttl is not None:
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl) or ttl <= 0:
            raise ValidationError(f"ttl must be a positive number of minutes, got {ttl!r}", field="ttl")
        meta[META]["ttl"] = float(ttl)
        meta[EXPIRES_AT] = now + 60.0 * float(ttl)
    return meta


def check_value(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValidationError(
            f"a LangGraph value must be a mapping (a JSON object), got {type(value).__name__}"
        )
    return dict(value)


def parts_of(item: Any) -> dict[str, Any] | None:
    """The LangGraph half of a memrl item's metadata, or None if the item was not put by this store."""
    meta = item.metadata.get(META)
    return meta if isinstance(meta, dict) and "key" in meta and "value" in meta else None


def expired(item: Any, now: float | None = None) -> bool:
    when = item.metadata.get(EXPIRES_AT)
    return isinstance(when, int | float) and when <= (time.time() if now is None else now)


def utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


# ---------------------------------------------------------------- filters (LangGraph's semantics)
_OPS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def matches(value: dict[str, Any], filter: dict[str, Any] | None) -> bool:
    """Whether ``value`` passes a LangGraph filter: field -> value (nested objects and lists compared
    element-wise) or -> ``{"$eq"|"$ne"|"$gt"|"$gte"|"$lt"|"$lte": x}``."""
    return not filter or all(_compare(value.get(k), f) for k, f in filter.items())


def _compare(have: Any, want: Any) -> bool:
    if isinstance(want, dict):
        if any(k.startswith("$") for k in want):
            return all(_operator(have, op, x) for op, x in want.items())
        return isinstance(have, dict) and all(_compare(have.get(k), v) for k, v in want.items())
    if isinstance(want, list | tuple):
        return (
            isinstance(have, list | tuple)
            and len(have) == len(want)
            and all(_compare(h, w) for h, w in zip(have, want, strict=True))
        )
    return have == want


def _operator(have: Any, op: str, x: Any) -> bool:
    if op not in _OPS:
        raise ValidationError(
            f"unsupported filter operator {op!r}; use one of {', '.join(_OPS)}", field="filter"
        )
    if op == "$eq":
        return have == x
    if op == "$ne":
        return have != x
    try:
        a, b = float(have), float(x)
    except (TypeError, ValueError):
        return False  # a missing or non-numeric field is not greater or smaller than anything
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]

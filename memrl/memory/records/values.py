"""What a stored value may be: one rule for every string and JSON value the store keeps, on both back-ends.

:mod:`memrl.memory.records.models` builds its types from these checks, so the rule holds wherever a value comes in
(the Python API, REST, MCP, an import). A value that passes is stored the same way by SQLite and Postgres
and stays readable, searchable, exportable and importable:

- **text**: valid Unicode that UTF-8 can encode (no lone surrogate such as ``"\\ud800"``: JSON can escape
  one, UTF-8 cannot encode it, and every later read of the row would fail), without NUL (Postgres text and
  ``jsonb`` cannot hold it; SQLite could, so both refuse it to give the same answer);
- **numbers**: integers in the signed 64-bit range (SQLite's; a larger one became a float there and an
  exact number on Postgres, and overflowed as a query parameter), floats finite (JSON has no NaN or
  infinity; Postgres' ``jsonb`` refuses them);
- **JSON values** (metadata): null, booleans, those numbers, text, lists and objects with text keys, at
  most :data:`MAX_DEPTH` levels deep;
- **timestamps**: finite seconds from 1970 to the end of year 9999 (what a date can show);
- **ids**: names of the form ``__name__`` are the store's own (``__core__`` versions core memory in the
  history): an item cannot take one.

Each ``*_problem`` function returns what is wrong (a phrase to follow the field's name) or None.
"""

from __future__ import annotations

import math
import re
from typing import Any

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
#: Deepest nesting of lists and objects in a metadata value.
MAX_DEPTH = 20
#: Longest key of a metadata object, at any depth.
MAX_KEY_CHARS = 200
#: Latest timestamp accepted: 9999-12-31 23:59:59 UTC.
MAX_TIMESTAMP = 253_402_300_799.0
_RESERVED_ID = re.compile(r"^__.*__$", re.DOTALL)


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as text (NUL, a lone surrogate), or None."""
    if "\x00" in value:
        return "contains a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"contains a lone surrogate ({value[e.start]!r} at {e.start}), which UTF-8 cannot encode"
    return None


def number_problem(value: Any) -> str | None:
    """Why the int or float ``value`` cannot be stored, or None (booleans are fine)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and not INT_MIN <= value <= INT_MAX:
        return f"integer {_short(value)} is outside the 64-bit range ({INT_MIN} to {INT_MAX})"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    return None


def json_problem(value: Any, path: str = "", depth: int = 0) -> str | None:
    """Why ``value`` is not a storable JSON value (naming where inside it, e.g. ``a.b[2]``), or None."""
    where = f" at {path}" if path else ""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        p = number_problem(value)
        return None if p is None else p + where
    if isinstance(value, str):
        p = text_problem(value)
        return None if p is None else p + where
    if isinstance(value, (list, tuple, dict)) and depth >= MAX_DEPTH:
        return f"is nested deeper than {MAX_DEPTH} levels{where}"
    if isinstance(value, (list, tuple)):
        for i, x in enumerate(value):
            p = json_problem(x, f"{path}[{i}]", depth + 1)
            if p is not None:
                return p
        return None
    if isinstance(value, dict):
        for k, x in value.items():
            if not isinstance(k, str):
                return f"has a key {_short(k)} that is not a string{where}"
            p = text_problem(k) or (
                f"is longer than {MAX_KEY_CHARS} characters" if len(k) > MAX_KEY_CHARS else None
            )
            if p is not None:
                return f"has a key that {p}{where}"
            p = json_problem(x, f"{path}.{k}" if path else k, depth + 1)
            if p is not None:
                return p
        return None
    return f"is not JSON-serialisable (a {type(value).__name__} value{where})"


def timestamp_problem(value: float) -> str | None:
    if not math.isfinite(value) or not 0 <= value <= MAX_TIMESTAMP:
        return f"{_short(value)} is not a time in seconds from 1970 to the year 9999"
    return None


def reserved_id(value: str) -> bool:
    """Whether ``value`` is one of the store's own ids (``__name__``), which no item may take."""
    return bool(_RESERVED_ID.match(value))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."

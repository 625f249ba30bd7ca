"""Shared parsing helpers for the loaders: reading JSON files, locating records for errors, dates.

Every loader reports malformed input as :class:`memrl.errors.DataError` whose message names the file,
the record and the field, e.g. ``locomo10.json: sample 'conv-26' qa[12]: field 'question' missing``.
:class:`Where` builds that prefix as a loader descends into a file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memrl.datetimes import parse_date
from memrl.errors import DataError

__all__ = ["Where", "as_text", "parse_date", "read_json", "read_json_records"]

_TYPE_NAMES = {str: "a string", int: "an integer", list: "a list", dict: "an object", bool: "a boolean"}


class Where:
    """A location in a data file (file name plus record path), used to word error messages."""

    def __init__(self, file: str | Path, *parts: str) -> None:
        self.file = str(file)
        self.parts = parts

    def __truediv__(self, part: str) -> Where:
        return Where(self.file, *self.parts, part)

    def __str__(self) -> str:
        return ": ".join((self.file, " ".join(self.parts))) if self.parts else self.file

    def error(self, message: str) -> DataError:
        return DataError(f"{self}: {message}")

    def require(self, record: Any, key: str, kind: type | tuple[type, ...] | None = None) -> Any:
        """``record[key]``, or a :class:`DataError` naming this place if it is missing or of the wrong type."""
        if not isinstance(record, Mapping):
            raise self.error(f"expected an object with field {key!r}, got {_describe(record)}")
        if key not in record:
            raise self.error(f"field {key!r} missing")
        value = record[key]
        if kind is not None and not isinstance(value, kind):
            raise self.error(f"field {key!r} should be {_kind_name(kind)}, got {_describe(value)}")
        return value

    def expect(self, value: Any, kind: type | tuple[type, ...], what: str) -> Any:
        """``value`` if it is of ``kind``, else a :class:`DataError` saying what was expected."""
        if not isinstance(value, kind):
            raise self.error(f"{what} should be {_kind_name(kind)}, got {_describe(value)}")
        return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '...' if len(text) > 40 else text}"


def read_json(path: str | Path, *, hint: str = "") -> Any:
    """Parse a JSON file; a missing or unparsable file is a :class:`DataError` naming it."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found" + (f" ({hint})" if hint else ""))
    try:
        with path.open(encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_json_records(path: str | Path) -> list[Any]:
    """Read a JSON list of records or a JSON-lines file (one record per line), whichever it is."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
        records = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise DataError(f"{path}: line {n} is not valid JSON ({e.msg})") from None
        return records
    if isinstance(data, dict):  # a one-record JSON-lines file parses as an object
        return [data]
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a list of records, got {_describe(data)}")
    return data


def write_json_records(records: list[Any], path: str | Path) -> Path:
    """Write records as JSON lines if ``path`` ends in ``.jsonl``, else as one JSON list."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        if path.suffix == ".jsonl":
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        else:
            json.dump(records, f, ensure_ascii=False)
    return path


def as_text(value: Any) -> str:
    """An answer as text: data sets store some answers as numbers."""
    return (
        value
        if isinstance(value, str)
        else json.dumps(value)
        if isinstance(value, (list, dict))
        else str(value)
    )

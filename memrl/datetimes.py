"""Dates as the data sets write them, and as a reader is shown them.

:func:`parse_date` reads the formats of the supported data sets (LoCoMo's ``"1:56 pm on 8 May, 2023"``,
LongMemEval's ``"2023/05/20 (Sat) 02:21"``, PerLTQA's ``"May 12, 2022"``, ISO). :func:`shown_date` is the
one rule for the date a reader sees beside a memory (the answering prompt, MemUpdate's reward, the tools'
listings): a date stored in a memory's metadata is shown only when it parses as one date, and then in one
canonical form, so free text stored under a date key (every month and year of a decade, say) is never
shown to a reader as if it were a date.

    >>> shown_date({"date_text": "1:56 pm on 8 May, 2023"})
    '1:56 pm on 8 May, 2023'
    >>> shown_date({"date": "2023-05-08"})
    '8 May 2023'
    >>> shown_date({"date_text": "January February March 2019 2020 2021"}) is None
    True
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

__all__ = ["DATE_KEYS", "epoch_seconds", "format_date", "parse_date", "shown_date"]


def epoch_seconds(value: str | datetime) -> float:
    """UNIX seconds of an instant: an ISO 8601 string (``2026-05-01``, ``2026-05-01T12:00:00Z``,
    ``...+02:00``; ``Z`` or ``z`` for UTC) or a ``datetime``; a naive one is UTC. The one time parser of the
    store (``as_of`` times, expiry times). Raises ValueError for a string that is not ISO 8601.

        >>> epoch_seconds("1970-01-02"), epoch_seconds("1970-01-01T01:00:00+01:00")
        (86400.0, 0.0)
    """
    if isinstance(value, str):
        value = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()


#: Metadata keys that carry a memory's date, in the order a reader's date is taken from.
DATE_KEYS = ("date_text", "date")

_MONTHS = {
    m: i
    for i, names in enumerate(
        [
            ("jan", "january"),
            ("feb", "february"),
            ("mar", "march"),
            ("apr", "april"),
            ("may",),
            ("jun", "june"),
            ("jul", "july"),
            ("aug", "august"),
            ("sep", "sept", "september"),
            ("oct", "october"),
            ("nov", "november"),
            ("dec", "december"),
        ],
        1,
    )
    for m in names
}

# LoCoMo: "1:56 pm on 8 May, 2023"
_LOCOMO_DATE = re.compile(
    r"\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*", re.IGNORECASE
)
# LongMemEval: "2023/05/20 (Sat) 02:21"
_SLASH_DATE = re.compile(r"\s*(\d{4})/(\d{1,2})/(\d{1,2})(?:\s*\([A-Za-z]+\))?(?:\s+(\d{1,2}):(\d{2}))?\s*")
# PerLTQA: "May 12, 2022"
_MONTH_DAY_YEAR = re.compile(r"\s*([A-Za-z]+)\.?\s+(\d{1,2}),?\s+(\d{4})\s*")
# LoCoMo's event summaries and format_date without a time: "8 May, 2023", "8 May 2023"
_DAY_MONTH_YEAR = re.compile(r"\s*(\d{1,2})\s+([A-Za-z]+)\.?,?\s+(\d{4})\s*")


def _build(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime | None:
    try:
        return datetime(year, month, day, hour, minute)
    except ValueError:
        return None


def parse_date(text: str | None) -> datetime | None:
    """Parse the date formats of the supported data sets; ``None`` if ``text`` is none of them."""
    if not text or not isinstance(text, str):
        return None
    return _parse(text)


@functools.lru_cache(maxsize=4096)  # the same few dates recur in every listing of a memory
def _parse(text: str) -> datetime | None:
    if m := _LOCOMO_DATE.fullmatch(text):
        hour, minute, ampm, day, month, year = m.groups()
        h = int(hour) % 12 + (12 if ampm.lower() == "p" else 0)
        mon = _MONTHS.get(month.lower())
        return None if mon is None else _build(int(year), mon, int(day), h, int(minute))
    if m := _SLASH_DATE.fullmatch(text):
        year, month, day, hour, minute = m.groups()
        return _build(int(year), int(month), int(day), int(hour or 0), int(minute or 0))
    if m := _MONTH_DAY_YEAR.fullmatch(text):
        month, day, year = m.groups()
        mon = _MONTHS.get(month.lower())
        return None if mon is None else _build(int(year), mon, int(day))
    if m := _DAY_MONTH_YEAR.fullmatch(text):
        day, month, year = m.groups()
        mon = _MONTHS.get(month.lower())
        return None if mon is None else _build(int(year), mon, int(day))
    try:  # ISO-like: "2022-05-12 10:00", "2022-05-12"
        return datetime.fromisoformat(text.strip())
    except ValueError:
        return None


def format_date(when: datetime) -> str:
    """A date in LoCoMo's style: ``"1:56 pm on 8 May, 2023"`` with a time of day, ``"8 May 2023"`` without
    (midnight is taken for "no time")."""
    if when.hour or when.minute:
        h = when.hour % 12 or 12
        return (
            f"{h}:{when.minute:02d} {'am' if when.hour < 12 else 'pm'} on {when.day} {when:%B}, {when.year}"
        )
    return f"{when.day} {when:%B} {when.year}"


def shown_date(metadata: Mapping[str, Any] | None) -> str | None:
    """The date a reader is shown for a memory with this metadata: the first of :data:`DATE_KEYS` that
    parses as one date (:func:`parse_date`), in :func:`format_date`'s form; ``None`` when none does."""
    for key in DATE_KEYS:
        value = (metadata or {}).get(key)
        when = parse_date(value) if isinstance(value, str) and len(value) <= 64 else None
        if when is not None:
            return format_date(when)
    return None

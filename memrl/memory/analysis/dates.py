"""When things happened: date spans a question asks about, and the spans a stored turn talks about.

Time-aware retrieval (search option ``date_fit``, :mod:`memrl.memory.search.rerank`) compares the two: a turn
*fits* a question when one of its spans overlaps one of the question's. Rules only (no model, no
dateparser): they cover the forms LoCoMo questions use.

- :func:`question_spans`: absolute dates ("on 13 October, 2023", "October 13, 2023", "in May 2023",
  "in 2022", "in June" = June of any year) and anchored relative ones ("the week before 9 June 2023",
  "last weekend before April 10, 2023", "two days after 3 May 2023", "the Friday before 14 August 2023").
  A bare "last year" in a question has no anchor (search does not know when it is asked) and is skipped.
- :func:`turn_spans`: the session's date, plus what the turn's relative expressions point at from it
  ("yesterday", "last week", "last weekend", "two weeks ago", "last month", "last year", "last Friday",
  "next month", "3 years ago") and the absolute dates it names::

    >>> from datetime import date
    >>> question_spans("What did Melanie do the week before 9 June 2023?")
    [Span(lo=datetime.date(2023, 6, 1), hi=datetime.date(2023, 6, 9), any_year=False)]
    >>> [s.lo.isoformat() for s in turn_spans("We went camping last month!", date(2023, 7, 3))]
    ['2023-07-03', '2023-06-01']
    >>> fits(question_spans("When did Melanie go camping in June?"), turn_spans("camping last month", date(2023, 7, 3)))
    True
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date, timedelta
from typing import NamedTuple

from memrl.memory.analysis.query import _MONTH


class Span(NamedTuple):
    """Days ``lo`` to ``hi`` inclusive; ``any_year``: only month and day count ("in June")."""

    lo: date
    hi: date
    any_year: bool = False


_NUM = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
        "eight": 8, "nine": 9, "ten": 10, "a couple of": 2, "a few": 3, "couple of": 2, "few": 3}  # fmt: skip
_N = r"(?P<n>\d{1,2}|a couple of|couple of|a few|few|an?|one|two|three|four|five|six|seven|eight|nine|ten)"
_MON = "|".join(sorted(_MONTH, key=len, reverse=True))
_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
_DAY = r"(?P<d>\d{1,2})(?:st|nd|rd|th)?"
# A full date: "13 October, 2023", "October 13, 2023", "13 Oct 2023".
_FULL = re.compile(
    rf"\b(?:{_DAY}\s+(?P<m1>{_MON})\.?|(?P<m2>{_MON})\.?\s+(?P<d2>\d{{1,2}})(?:st|nd|rd|th)?),?\s+(?P<y>(?:19|20)\d\d)\b",
    re.IGNORECASE,
)
_MONTH_YEAR = re.compile(rf"\b(?P<m>{_MON})\.?,?\s+(?P<y>(?:19|20)\d\d)\b", re.IGNORECASE)
_YEAR = re.compile(r"\b(?:in|of|during|since|from|year)\s+(?P<y>(?:19|20)\d\d)\b", re.IGNORECASE)
# "in June" (any year): a full month name after a preposition ("may" only as "in May").
_MONTH_ALONE = re.compile(
    r"\b(?:in|during|since|of|early|late|mid|last|this|next)\s+(?P<m>january|february|march|april|may|june|july"
    r"|august|september|october|november|december)\b(?!\s*\d)",
    re.IGNORECASE,
)
_UNIT = r"(?P<unit>days?|nights?|weeks?|weekends?|months?|years?|monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_ANCHORED = re.compile(
    rf"\b(?:(?:the|last|{_N})\s+)?{_UNIT}\s+(?P<dir>before|after|prior to)\s+(?P<rest>.{{6,30}})",
    re.IGNORECASE,
)
_AGO = re.compile(rf"\b{_N}\s+(?P<unit>days?|weeks?|months?|years?)\s+ago\b", re.IGNORECASE)
_LAST = re.compile(
    r"\b(?P<which>last|past|this|next)\s+(?P<unit>night|week|weekend|month|year|summer|winter|spring|fall"
    r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b",
    re.IGNORECASE,
)
_SIMPLE = re.compile(
    r"\b(?P<w>yesterday|today|tonight|tomorrow|the other day|recently|lately)\b", re.IGNORECASE
)
_SEASONS = {"spring": (3, 5), "summer": (6, 8), "fall": (9, 11), "winter": (12, 2)}


def _num(word: str) -> int:
    word = word.lower()
    return int(word) if word.isdigit() else _NUM.get(word, 1)


def _month_span(year: int, month: int) -> Span:
    nxt = date(year + (month == 12), month % 12 + 1, 1)
    return Span(date(year, month, 1), nxt - timedelta(days=1))


def _add_months(d: date, months: int) -> tuple[int, int]:
    k = d.year * 12 + d.month - 1 + months
    return k // 12, k % 12 + 1


def _day(y: str, m: str, d: str) -> date | None:
    try:
        return date(int(y), _MONTH[m.lower().rstrip(".")], int(d))
    except ValueError:
        return None


def _full_dates(text: str) -> list[tuple[int, int, date]]:
    """(start, end, day) of every full date in ``text``."""
    out = []
    for m in _FULL.finditer(text):
        day = _day(m["y"], m["m1"] or m["m2"], m["d"] or m["d2"])
        if day is not None:
            out.append((m.start(), m.end(), day))
    return out


def absolute_spans(text: str) -> list[Span]:
    """Spans of the dates ``text`` names outright: full dates, month + year, "in 2022", "in June"."""
    spans: list[Span] = []
    taken: list[tuple[int, int]] = []
    for start, end, day in _full_dates(text):
        spans.append(Span(day, day))
        taken.append((start, end))

    def free(m: re.Match[str]) -> bool:
        return not any(s <= m.start("y" if "y" in m.groupdict() else "m") < e for s, e in taken)

    for m in _MONTH_YEAR.finditer(text):
        if free(m):
            spans.append(_month_span(int(m["y"]), _MONTH[m["m"].lower()]))
            taken.append((m.start(), m.end()))
    for m in _YEAR.finditer(text):
        if free(m):
            y = int(m["y"])
            spans.append(Span(date(y, 1, 1), date(y, 12, 31)))
    for m in _MONTH_ALONE.finditer(text):
        if free(m):
            s = _month_span(2000, _MONTH[m["m"].lower()])
            spans.append(Span(s.lo, s.hi, any_year=True))
    return spans


def _window(unit: str, n: int) -> int:
    """Days a "N <unit> before/after" reaches."""
    unit = unit.lower().rstrip("s")
    return {"day": n, "night": n, "week": 7 * n, "weekend": 7 * n, "month": 31 * n, "year": 366 * n}.get(
        unit, 7
    )


def question_spans(query: str) -> list[Span]:
    """The spans a question asks about: absolute dates, and anchored relative ones ("the week before
    9 June 2023" = the 8 days up to it), without repeats, in order."""
    spans: list[Span] = []
    anchored: set[date] = set()
    for m in _ANCHORED.finditer(query):
        found = _full_dates(m["rest"])
        if not found or found[0][0] > 2:
            continue
        anchor = found[0][2]
        anchored.add(anchor)
        reach = _window(m["unit"], _num(m["n"]) if m["n"] else 1) + 1
        if m["dir"].lower() == "after":
            spans.append(Span(anchor, anchor + timedelta(days=reach)))
        else:
            spans.append(Span(anchor - timedelta(days=reach), anchor))
    for s in absolute_spans(query):
        if not (s.lo == s.hi and s.lo in anchored) and s not in spans:
            spans.append(s)
    return spans


def _previous_weekday(d: date, weekday: int, strictly: bool = True) -> date:
    back = (d.weekday() - weekday) % 7
    return d - timedelta(days=back or (7 if strictly else 0))


def relative_spans(text: str, when: date) -> list[Span]:
    """What the relative time expressions of ``text``, said on ``when``, point at."""
    spans: list[Span] = []
    for m in _SIMPLE.finditer(text):
        w = m["w"].lower()
        if w == "yesterday":
            spans.append(Span(when - timedelta(days=1), when - timedelta(days=1)))
        elif w == "tomorrow":
            spans.append(Span(when + timedelta(days=1), when + timedelta(days=1)))
        elif w in ("the other day", "recently", "lately"):
            spans.append(Span(when - timedelta(days=21), when))
    for m in _AGO.finditer(text):
        n, unit = _num(m["n"]), m["unit"].lower().rstrip("s")
        if unit == "day":
            spans.append(Span(when - timedelta(days=n), when - timedelta(days=n)))
        elif unit == "week":
            mid = when - timedelta(days=7 * n)
            spans.append(Span(mid - timedelta(days=4), mid + timedelta(days=4)))
        elif unit == "month":
            spans.append(_month_span(*_add_months(when, -n)))
        else:
            spans.append(Span(date(when.year - n, 1, 1), date(when.year - n, 12, 31)))
    for m in _LAST.finditer(text):
        which, unit = m["which"].lower(), m["unit"].lower()
        step = {"last": -1, "past": -1, "this": 0, "next": 1}[which]
        if unit == "night":
            spans.append(Span(when - timedelta(days=1), when))
        elif unit in ("week", "weekend"):
            lo = when + timedelta(days=7 * step - (when.weekday() if step else 0))
            spans.append(Span(lo - timedelta(days=3 if step < 0 else 0), lo + timedelta(days=9)))
        elif unit == "month":
            spans.append(_month_span(*_add_months(when, step)))
        elif unit == "year":
            y = when.year + step
            spans.append(Span(date(y, 1, 1), date(y, 12, 31)))
        elif unit in _SEASONS:
            first, last = _SEASONS[unit]
            if step < 0:  # the last one that is over: this year's if it ended before ``when``
                y = when.year - (when.month <= last or first > last)
            else:  # this one, or the next one not yet begun
                y = when.year + (step > 0 and when.month >= first)
            end_year = y + (last < first)
            hi = _month_span(end_year, last).hi
            spans.append(Span(date(y, first, 1), hi))
        else:  # a weekday: the one before (last/this) or after (next) the day it is said
            wd = _WEEKDAYS.index(unit)
            if step > 0:
                ahead = (wd - when.weekday()) % 7 or 7
                day = when + timedelta(days=ahead)
            else:
                day = _previous_weekday(when, wd)
            spans.append(Span(day, day))
    return spans


def turn_spans(text: str, when: date | None) -> list[Span]:
    """The spans a turn said on ``when`` (its session's date) is about: that day, where its relative
    expressions point from it, and the dates it names."""
    spans = [Span(when, when)] if when is not None else []
    if when is not None:
        spans += relative_spans(text, when)
    return spans + absolute_spans(text)


def parse_day(iso: object) -> date | None:
    """The day of an ISO date or datetime string ("2023-05-08T13:56:00"), else ``None``."""
    if not isinstance(iso, str) or len(iso) < 10:
        return None
    try:
        return date.fromisoformat(iso[:10])
    except ValueError:
        return None


def _yearless(s: Span) -> list[tuple[int, int]]:
    """Day-of-year ranges of a span with the year ignored (split where it crosses the year end)."""
    if (s.hi - s.lo).days >= 365:
        return [(1, 366)]
    lo = date(2000, s.lo.month, s.lo.day).timetuple().tm_yday
    hi = date(2000, s.hi.month, s.hi.day).timetuple().tm_yday
    return [(lo, hi)] if lo <= hi else [(lo, 366), (1, hi)]


def _overlap(a: Span, b: Span) -> bool:
    if a.any_year or b.any_year:
        return any(x0 <= y1 and y0 <= x1 for x0, x1 in _yearless(a) for y0, y1 in _yearless(b))
    return a.lo <= b.hi and b.lo <= a.hi


def fits(wanted: Iterable[Span], spans: Iterable[Span]) -> bool:
    """Whether any of a turn's ``spans`` overlaps any ``wanted`` span of the question."""
    spans = list(spans)
    return any(_overlap(w, s) for w in wanted for s in spans)

"""What a search query says besides its words (the people it names, the months or years it mentions,
whether it asks *when*), and whether stored text places something in time.

Search turns these into priors (:mod:`memrl.memory.search.priors`; :class:`memrl.memory.search.hybrid.SearchOptions` ``speaker_boost``,
``date_boost``, ``time_boost``): a question about Caroline is mostly answered by what Caroline said, one
about "October 2023" by what was said in sessions of that month, and a "When did..." question by a turn
with a time expression ("last Saturday"). No model is involved::

    >>> named_in("What did Caroline's kids paint?", ["Caroline", "Melanie"])
    {'Caroline'}
    >>> mentioned_dates("What setback did Melanie face in October 2023?")
    [(2023, 10)]
    >>> asks_when("How long has Caroline had her friends?"), mentions_time("I ran a race last Saturday")
    (True, True)
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

MONTHS = "january february march april may june july august september october november december".split()
_MONTH = {m: i for i, m in enumerate(MONTHS, start=1)}
_MONTH.update({m[:3]: i for m, i in list(_MONTH.items())})
_MONTH["sept"] = 9
# "may" is also a verb: only read it as a month next to a day or a year ("May 2023", "8 May", "in May,").
_DATE = re.compile(
    r"\b(?:(?P<month>" + "|".join(sorted(_MONTH, key=len, reverse=True)) + r")\.?"
    r"(?:\s+\d{1,2}(?:st|nd|rd|th)?)?(?:,?\s+(?P<year>(?:19|20)\d\d))?)\b"
    r"|\b(?P<lone_year>(?:19|20)\d\d)\b",
    re.IGNORECASE,
)


#: Words that place an event in time (most evidence turns of LoCoMo's temporal questions have one).
TIME_EXPRESSION = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|last|next|ago|recently|soon|since|weekend|week|month|year|years"
    r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    + "|".join(m for m in MONTHS if m != "may")
    + r"|(?:19|20)\d\d)\b",
    re.IGNORECASE,
)
_ASKS_WHEN = re.compile(
    r"^\s*when\b|\bhow long\b|\b(?:which|what) (?:year|month|date|day|week)\b|\bhow many (?:years|months|"
    r"weeks|days)\b|\bwhat time\b",
    re.IGNORECASE,
)


_ASKS_ABSTRACT = re.compile(
    r"^\s*(?:would|could|might|is it likely|based on)\b|\blikely\b|\b(?:what|how) (?:might|would)\b",
    re.IGNORECASE,
)


def asks_abstract(query: str) -> bool:
    """Whether the query asks for an inference rather than a fact ("Would Caroline likely ...?", "Based on
    ..., what might ...?"): its answer rarely repeats its words, so meaning (dense search) matters more
    than words (BM25)."""
    return _ASKS_ABSTRACT.search(query) is not None


def mentions_time(text: str) -> bool:
    """Whether ``text`` has a time expression ("yesterday", "last week", "in 2022", "on Friday", ...)."""
    return TIME_EXPRESSION.search(text) is not None


def asks_when(query: str) -> bool:
    """Whether the query asks about time ("When did...", "How long...", "Which year...")."""
    return _ASKS_WHEN.search(query) is not None


_AGGREGATES = re.compile(
    r"\b(how many|how much|in total|total|different|all the|every|each of|so far)\b", re.IGNORECASE
)


def asks_aggregate(query: str) -> bool:
    """Whether the query gathers several facts ("How many doctors did I visit?", "the total amount I
    spent", "all the books"): its evidence tends to lie in several sessions."""
    return _AGGREGATES.search(query) is not None


def named_in(query: str, names: Iterable[str]) -> set[str]:
    """The ``names`` that occur in ``query`` as whole words, ignoring case ("Caroline's" names Caroline)."""
    low = query.lower()
    return {n for n in names if n and re.search(r"\b" + re.escape(n.lower()) + r"\b", low)}


_FIRST_PERSON = re.compile(r"\b(i|me|my|mine|myself)\b|\bi['’](m|ve|d|ll)\b", re.IGNORECASE)
#: Speaker names that stand for the person talking to an assistant (LongMemEval's and chat logs' roles).
USER_SPEAKERS = ("user",)


def speakers_meant(query: str, names: Iterable[str]) -> set[str]:
    """The speakers a query is about: the ``names`` it names (:func:`named_in`); when it names none and
    speaks in the first person ("What did I buy?", "my therapist"), the user of a user/assistant chat (a
    speaker called ``user``): a question put to an assistant's memory in the first person is about what
    its user said. Without such a speaker (LoCoMo's two named people) a first-person question means no one.

    >>> sorted(speakers_meant("How often do I see my therapist?", ["user", "assistant"]))
    ['user']
    >>> speakers_meant("How often do I see my therapist?", ["Caroline", "Melanie"])
    set()
    """
    names = [n for n in names if n]
    named = named_in(query, names)
    if named or not _FIRST_PERSON.search(query):
        return named
    return {n for n in names if n.lower() in USER_SPEAKERS}


def mentioned_dates(query: str) -> list[tuple[int | None, int | None]]:
    """``(year, month)`` pairs the query mentions (either may be ``None``), in order, without repeats.

    Month names count when written out in full or abbreviated (``Oct``); "may" and the three-letter forms
    count only next to a day or a year, or after "in"/"on"/"of"/"since"/"during" (so "may I" is no month).
    """
    out: list[tuple[int | None, int | None]] = []
    for m in _DATE.finditer(query):
        if m["lone_year"]:
            found: tuple[int | None, int | None] = (int(m["lone_year"]), None)
        else:
            word = m["month"].lower()
            exact = m.group(0).lower().strip(" .,")
            ambiguous = word == "may" or len(word) <= 4 and word not in ("june", "july")
            before = query[: m.start()].lower().split()[-1:]
            if ambiguous and exact == word and before not in (["in"], ["on"], ["of"], ["since"], ["during"]):
                continue
            found = (int(m["year"]) if m["year"] else None, _MONTH[word])
        if found not in out:
            out.append(found)
    return out


def date_matches(iso: str | None, wanted: Iterable[tuple[int | None, int | None]]) -> bool:
    """Whether an ISO date (``"2023-10-13T..."``) falls in one of the ``(year, month)`` pairs."""
    if not iso or len(iso) < 7 or not iso[:4].isdigit() or not iso[5:7].isdigit():
        return False
    year, month = int(iso[:4]), int(iso[5:7])
    return any((y is None or y == year) and (mo is None or mo == month) for y, mo in wanted)

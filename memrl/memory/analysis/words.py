"""Words of a query: the tokens, the stopwords and question words that say nothing of an answer.

- :func:`query_words`: a query's distinct non-stopword tokens (what a lexical search looks for);
- :func:`strip_question_words`: a question without the words that only shape it;
- :func:`fts5_match`: the same words as an SQLite FTS5 ``MATCH`` expression (quoted, OR-ed): the FTS5 query
  memrl's own BM25 is compared with (it replaced FTS5, and must rank as FTS5 ranked).
"""

from __future__ import annotations

import re

TOKEN = re.compile(r"\w+", re.UNICODE)
#: Words too common to help BM25 (they only slow FTS5 down on large stores).
STOPWORDS = frozenset(
    "a an and are as at be by did do does for from had has have he her his how i in is it its me my of on or "
    "our she so that the their them they this to was we were what when where which who whom why will with "
    "you your".split()
)


#: Words that shape a question but say nothing of its answer ("What kind of ...", "Would X likely ...").
QUESTION_WORDS = frozenset(
    "would could should might likely probably kind kinds type types sort sorts ever some any based "
    "think thing things considered consider main particular specific".split()
)


def strip_question_words(text: str) -> str:
    """``text`` without :data:`QUESTION_WORDS` (whole words, any case), unless nothing else would remain."""
    kept = re.sub(r"\b(?:" + "|".join(sorted(QUESTION_WORDS)) + r")\b", " ", text, flags=re.IGNORECASE)
    return kept if query_words(kept) else text


def query_words(text: str) -> list[str]:
    """The distinct non-stopword tokens of ``text`` (lower-cased), in order of first appearance."""
    return list(dict.fromkeys(t for t in TOKEN.findall(text.lower()) if t not in STOPWORDS))


def fts5_match(text: str) -> str:
    """An FTS5 MATCH expression: the query's distinct non-stopword tokens, quoted, OR-ed together."""
    return " OR ".join(f'"{t}"' for t in query_words(text))

"""The lexical analysis both BM25 indexes share: FTS5's ``porter unicode61`` tokenizer and one Porter stemmer.

:func:`tokens` mirrors FTS5's ``porter unicode61`` tokenizer: runs of letters and digits (``_`` and
punctuation separate), lower-cased, Latin diacritics removed, tokens of 3 to 64 bytes
Porter-stemmed (the original algorithm, as FTS5's); a token over :data:`MAX_TERM_BYTES` is indexed in a
shortened form (FTS5 kept it whole). The in-process index (:mod:`memrl.memory.index.lexical`) and Postgres'
postings (:mod:`memrl.memory.backends.postgres.lexical`) both analyse text with it, so both score alike.

The stemmer is PyStemmer's Snowball ``porter`` (a C extension, ~1 ms to import), not NLTK's (whose package
import pulls scipy.stats: 1.1 s of a process's first BM25 search). Snowball's ``english`` (Porter2) was
measured and rejected: it stems ~300 of LoCoMo's 9,727 words otherwise than FTS5, ``porter`` 8, NLTK's original
Porter 7 (``trekked`` -> ``trekk`` is the one word where Snowball's and NLTK's differ). Stems are persisted
only by Postgres' postings: :data:`ANALYZER` names this analysis, and a Postgres store whose postings were
written by another re-indexes them when it opens (:mod:`memrl.memory.backends.postgres.reindex`).
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from typing import Any

from memrl.memory.analysis.words import STOPWORDS, TOKEN

#: The name of this analysis, stored beside persisted postings (Postgres' ``meta`` row ``analyzer``): change
#: it whenever :func:`tokens` would give another term for some text, so that old postings are re-indexed.
ANALYZER = "unicode61-snowball-porter-1"


@functools.lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    return _stemmer().stemWord(word)


@functools.lru_cache(maxsize=1)
def _stemmer() -> Any:
    import Stemmer  # PyStemmer

    return Stemmer.Stemmer(
        "porter"
    )  # Snowball's original Porter algorithm, the one FTS5's porter tokenizer runs


_WORD = re.compile(r"[^\W_]+")
_STEMS: dict[str, str] = {}
#: A token longer than this (UTF-8 bytes) is indexed as its first :data:`LONG_PREFIX` characters, ``~`` and a
#: hash of the whole: the same term on both back-ends (a Postgres index row holds at most ~2.7 KB, so one
#: 9,000-letter word could not be stored there), and still found by the same long word in a query.
MAX_TERM_BYTES = 256
LONG_PREFIX = 64


def _term(word: str) -> str:
    """One token (lower-cased) as FTS5's ``porter unicode61`` indexes it (a very long one shortened)."""
    out = _STEMS.get(word)
    if out is None:
        w = word
        if not w.isascii():
            w = "".join(c for c in unicodedata.normalize("NFD", w) if unicodedata.category(c) != "Mn")
        size = len(w.encode())
        if size > MAX_TERM_BYTES:  # not cached: a flood of distinct long words must not fill the cache
            return w[:LONG_PREFIX] + "~" + hashlib.blake2b(w.encode(), digest_size=8).hexdigest()
        out = _stemmer().stemWord(w) if 3 <= size <= 64 else w
        if len(_STEMS) < 1_000_000:
            _STEMS[word] = out
    return out


def tokens(text: str) -> list[str]:
    """The indexed terms of ``text``, in order (see the module docstring)."""
    stems = _STEMS
    out = []
    for w in _WORD.findall(text.lower()):
        t = stems.get(w)
        out.append(_term(w) if t is None else t)
    return out


#: A text's terms with their counts, and its length in tokens.
TermCounts = tuple[dict[str, int], int]


def term_counts(text: str) -> TermCounts:
    """(term -> count, number of tokens) of ``text``: what the index stores of it."""
    stems, counts = _STEMS, {}
    words = _WORD.findall(text.lower())
    for w in words:
        t = stems.get(w)
        if t is None:
            t = _term(w)
        counts[t] = counts.get(t, 0) + 1
    return counts, len(words)


def query_terms(query: str) -> list[str]:
    """The terms a query scores with: one per distinct non-stopword word (as the FTS5 query of
    :func:`memrl.memory.fusion.fts_query` had one phrase per word; a word the tokenizer splits, such as
    ``x_y``, gives each of its parts)."""
    words = list(dict.fromkeys(t for t in TOKEN.findall(query.lower()) if t not in STOPWORDS))
    return [term for w in words for term in tokens(w)]

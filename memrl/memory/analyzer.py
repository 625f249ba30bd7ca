"""The lexical analyzer of SQLite's FTS5 ``porter unicode61`` tokenizer, in Python, for back-ends without FTS5.

BM25 must rank the same on every back-end (so LoCoMo recall is the same on SQLite and on Postgres), so a
back-end that keeps its own postings (:mod:`memrl.memory.pg_lexical`) indexes exactly the terms FTS5
would: ``unicode61`` splits on every character that is not a letter, a number or private-use, folds case
and removes diacritics; ``porter`` then stems each token of 3 to 64 bytes with Martin Porter's C
implementation (the ``logi`` -> ``log`` and ``bli`` -> ``ble`` variant: NLTK's ``MARTIN_EXTENSIONS``).

How each non-ASCII character folds depends on the Unicode tables compiled into SQLite, so it is asked of
FTS5 itself, once per character (cached), through an in-memory FTS5 table: exact on the machine it runs
on. ``tests/test_analyzer.py`` checks the whole analyzer against FTS5's own index on LoCoMo.
"""

from __future__ import annotations

import functools
import re
import sqlite3
import threading
from typing import Any

from memrl.memory.fusion import STOPWORDS, TOKEN

#: Longest token (UTF-8 bytes) FTS5's porter stemmer stems; shorter than 3 bytes is left as it is too.
_PORTER_MAX = 64
#: The few inputs where NLTK's Martin-extensions Porter and FTS5's differ (all checked 3-4 letter words).
_PORTER_EXCEPTIONS = {"eed": "e", "eeds": "e", "ies": "ie", "sses": "sse"}
_ASCII_TOKEN = re.compile(r"[a-z0-9]+")
_ASCII = {chr(i): (chr(i).lower() if chr(i).isalnum() else None) for i in range(128)}


@functools.lru_cache(maxsize=1)
def _stemmer() -> Any:
    from nltk.stem.porter import PorterStemmer

    return PorterStemmer(PorterStemmer.MARTIN_EXTENSIONS)


@functools.lru_cache(maxsize=1 << 17)
def stem(token: str) -> str:
    """FTS5's porter stem of one folded token."""
    n = len(token.encode("utf-8"))
    if n < 3 or n > _PORTER_MAX:
        return token
    if not token.isascii():  # FTS5 stems bytes: ask it (rare, cached)
        return _probe(token, "porter unicode61")[0]
    return _PORTER_EXCEPTIONS.get(token) or _stemmer().stem(token)


_probe_lock = threading.Lock()


@functools.lru_cache(maxsize=2)
def _probe_db(tokenizer: str) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.execute(f"CREATE VIRTUAL TABLE f USING fts5(x, tokenize='{tokenizer}')")
    db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, 'instance')")
    return db


def _probe(text: str, tokenizer: str) -> list[str]:
    """The terms an in-memory FTS5 table with ``tokenizer`` indexes for ``text``."""
    with _probe_lock:
        db = _probe_db(tokenizer)
        db.execute("DELETE FROM f")
        db.execute("INSERT INTO f (rowid, x) VALUES (1, ?)", (text,))
        return [r[0] for r in db.execute("SELECT term FROM v ORDER BY offset")]


@functools.lru_cache(maxsize=1 << 16)
def fold(ch: str) -> str | None:
    """What ``unicode61`` makes of one character: None for a separator, else its folded form ("" for a
    diacritic it removes). ASCII is answered directly; anything else is asked of FTS5 once."""
    if ch in _ASCII:
        return _ASCII[ch]
    terms = _probe("q" + ch + "q", "unicode61")
    if len(terms) != 1:
        return None
    return terms[0][1:-1]


class _FoldTable(dict):
    """``str.translate`` table: each character to its folded form, a separator to a space."""

    def __missing__(self, code: int) -> str:
        f = fold(chr(code))
        self[code] = " " if f is None else f
        return self[code]


_TABLE = _FoldTable()


def tokens(text: str) -> list[str]:
    """The folded tokens of ``text`` as ``unicode61`` splits them (before stemming)."""
    if text.isascii():
        return _ASCII_TOKEN.findall(text.lower())
    return text.translate(_TABLE).split()


def analyze(text: str) -> list[str]:
    """The terms FTS5 ``porter unicode61`` indexes for ``text``, in order (duplicates kept)."""
    return [stem(t) for t in tokens(text)]


def query_terms(text: str) -> list[str]:
    """The terms of a free-text query, as :func:`memrl.memory.fusion.fts_query` would make FTS5 search them:
    the distinct non-stopword tokens, each analysed (a token FTS5 reads as a phrase of several terms, such as
    ``a_b``, gives them all). Duplicates are kept: FTS5 scores each OR-ed phrase apart."""
    words = list(dict.fromkeys(t for t in TOKEN.findall(text.lower()) if t not in STOPWORDS))
    return [term for w in words for term in analyze(w)]

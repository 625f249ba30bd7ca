"""BM25's stemmer (issue 59): Snowball's Porter through PyStemmer, no NLTK import on the search path, the
same terms as FTS5's ``porter`` tokenizer, and a Postgres store whose postings another stemmer wrote is
re-indexed when it opens (SQLite's BM25 index is built in the process: nothing persisted to migrate)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

from memrl.memory.analysis.tokenizer import ANALYZER, tokens


def test_a_bm25_search_imports_no_nltk(tmp_path):
    code = (
        "import sys\n"
        "from memrl.memory import Memory\n"
        "from memrl.memory.embedders.providers import HashingEmbedder\n"
        f"m = Memory({str(tmp_path / 'm.db')!r}, embedder=HashingEmbedder(64))\n"
        "m.add('Caroline trekked up the hills', user_id='a')\n"
        "hits = m.search('who trekked', user_id='a', mode='bm25')\n"
        "m.close()\n"
        "print(len(hits), 'nltk' in sys.modules, 'scipy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "False", "False"]


def test_stems_follow_fts5_on_words_where_stemmers_differ():
    words = "trekked trekking revving caresses ponies generalization happily hopping agreed sized"
    vocab = sqlite3.connect(":memory:")
    vocab.execute("CREATE VIRTUAL TABLE f USING fts5 (x, tokenize='porter unicode61')")
    vocab.execute("CREATE VIRTUAL TABLE v USING fts5vocab (f, 'instance')")
    for i, w in enumerate(words.split()):
        vocab.execute("INSERT INTO f (rowid, x) VALUES (?, ?)", [i, w])
    fts5 = [r[0] for r in vocab.execute("SELECT term FROM v ORDER BY doc")]
    ours = [t for w in words.split() for t in tokens(w)]
    # the one known difference on LoCoMo's and LongMemEval's words: FTS5 undoubles after -ed/-ing, Snowball no
    assert [(a, b) for a, b in zip(ours, fts5, strict=True) if a != b] == [
        ("trekk", "trek"),
        ("trekk", "trek"),
        ("revv", "rev"),
    ]


async def test_postgres_postings_of_another_stemmer_are_reindexed_on_open(pg_server):
    import psycopg

    from memrl.memory.backends.postgres.store import PostgresStore
    from memrl.memory.embedders.providers import HashingEmbedder
    from memrl.memory.facade.memory import AsyncMemory

    url = pg_server.create_database("old_stems")
    m = AsyncMemory(url, embedder=HashingEmbedder(64))
    await m.add("Caroline trekked across the desert", namespace="a")
    await m.add("Mel painted a sunset", namespace="a")
    await m.close()
    # What a store written before issue 59 holds: NLTK's stem of "trekked", and no analyzer row.
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("UPDATE lex_terms SET term = 'trek' WHERE term = 'trekk'")
        c.execute("DELETE FROM meta WHERE key = 'analyzer'")
        stats = c.execute("SELECT namespace, field, docs, tokens FROM lex_stats ORDER BY 1, 2").fetchall()
    store = PostgresStore(url)  # opening re-indexes
    assert store.lexical("a", "who trekked", 5) and store.read(
        "SELECT value FROM meta WHERE key = 'analyzer'"
    ) == [(ANALYZER,)]
    assert store.read("SELECT count(*) FROM lex_terms WHERE term = 'trek'") == [(0,)]
    assert store.read("SELECT namespace, field, docs, tokens FROM lex_stats ORDER BY 1, 2") == stats
    store.close()
    with psycopg.connect(url, autocommit=True) as c:  # once re-indexed, a re-open writes nothing
        c.execute("UPDATE lex_terms SET term = 'trek' WHERE term = 'trekk'")
    store = PostgresStore(url)
    assert store.lexical("a", "who trekked", 5) == []  # left as it was: the row says this analyzer wrote it
    store.close()

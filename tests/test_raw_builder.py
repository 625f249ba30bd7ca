"""The raw builder: every turn stored once per view with its own evidence and metadata, the indexed text
rendered as configured, rebuilds idempotent, lexical-only items never embedded, pooled vectors right,
and search collapsing a turn's views into one hit."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest

from memrl.agents.base import create_builder
from memrl.agents.raw import RawBuilder, RawConfig, build, indexed_text, session_items, texts_to_embed
from memrl.data.types import Conversation, Question, Session, Turn
from memrl.errors import ConfigError
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from tests.conftest import CountingEmbedder


def _conv() -> Conversation:
    s1 = Session(
        1,
        datetime(2023, 5, 8, 13, 56),
        "1:56 pm on 8 May, 2023",
        (
            Turn("D1:1", "Caroline", "Hey Mel! How have you been?", 1, 1),
            Turn("D1:2", "Melanie", "Swamped with the kids. What is new?", 1, 2),
            Turn(
                "D1:3", "Caroline", "I went to a support group yesterday.", 1, 3, "a photo of a rainbow flag"
            ),
            Turn("D1:4", "Melanie", "That sounds powerful!", 1, 4),
        ),
    )
    s2 = Session(
        2,
        datetime(2023, 6, 9, 10, 0),
        "10:00 am on 9 June, 2023",
        (
            Turn("D2:1", "Melanie", "I ran a charity race last Saturday.", 2, 1),
            Turn("D2:2", "Caroline", "Amazing, which charity?", 2, 2),
        ),
    )
    q = Question(
        "c:q0", "When did Melanie run a charity race?", ("3 June 2023",), "temporal", 2, ("D2:1",), (2,)
    )
    return Conversation("c", ("Caroline", "Melanie"), (s1, s2), (q,), "sample")


def test_indexed_text_renders_date_speaker_caption_and_context():
    conv = _conv()
    s1 = conv.sessions[0]
    plain = RawConfig(context_before=0, context_after=0, views=("turn",), dense_views=("turn",))
    assert indexed_text(s1, 2, plain, context=False) == (
        "[8 May 2023] Caroline: I went to a support group yesterday. [shares a photo of a rainbow flag]"
    )
    bare = RawConfig(date_style="none", include_speaker=False, include_caption=False, views=("turn",),
                     dense_views=("turn",))  # fmt: skip
    assert indexed_text(s1, 2, bare, context=False) == "I went to a support group yesterday."
    assert indexed_text(s1, 0, RawConfig(date_style="iso"), context=False).startswith("[2023-05-08] ")
    assert indexed_text(s1, 0, RawConfig(date_style="text"), context=False).startswith("[1:56 pm on 8 May")
    ctx = indexed_text(s1, 2, RawConfig(context_before=1, context_after=1), context=True)
    assert ctx.splitlines()[0].startswith("[8 May 2023] Caroline: I went")  # the turn comes first
    assert (
        "(context: Melanie: Swamped with the kids. What is new? / ... / Melanie: That sounds powerful!)"
        in ctx
    )
    # the window stays inside the session
    first = indexed_text(s1, 0, RawConfig(context_before=2, context_after=0), context=True)
    assert "context" not in first


def test_items_carry_evidence_metadata_and_views():
    conv = _conv()
    items = session_items(conv.sessions[0], RawConfig())
    assert [it.id for it in items] == [
        "D1:1",
        "D1:1+ctx",
        "D1:2",
        "D1:2+ctx",
        "D1:3",
        "D1:3+ctx",
        "D1:4",
        "D1:4+ctx",
    ]
    turn, ctx = items[4], items[5]
    assert turn.evidence == ctx.evidence == ("D1:3",)
    assert turn.session == "1" and turn.type.value == "episodic"
    meta = turn.metadata
    assert (
        meta["turn_id"] == meta["unit"] == "D1:3" and meta["speaker"] == "Caroline" and meta["session"] == 1
    )
    assert meta["date"] == "2023-05-08T13:56:00" and meta["date_text"] == "1:56 pm on 8 May, 2023"
    assert meta["text"] == "Caroline: I went to a support group yesterday. [shares a photo of a rainbow flag]"
    assert meta["mentions_time"] is True and items[0].metadata["mentions_time"] is False
    # defaults: the turn view is lexical-only, the context view's vector is pooled from the turn and neighbours
    assert turn.metadata["dense"] is False and "pool" not in turn.metadata
    assert ctx.metadata["pool"] == {"D1:2": 0.3, "D1:3": 1.0, "D1:4": 0.3}
    sessions = _conv().sessions[:1]
    assert texts_to_embed(sessions, items, RawConfig()) == [
        it.content for it in items if it.metadata["view"] == "turn"
    ]


def test_config_is_validated():
    with pytest.raises(ConfigError):
        RawConfig(context_before=-1)
    with pytest.raises(ConfigError):
        RawConfig(views=("turn",), dense_views=("context",))
    with pytest.raises(ConfigError):
        RawConfig(views=("nope",))


async def test_build_stores_every_turn_and_is_idempotent(db_path):
    conv = _conv()
    emb = CountingEmbedder()
    m = AsyncMemory(db_path, embedder=emb)
    seen = []
    stats = await build(m, "c@raw", conv, progress=lambda done, total: seen.append((done, total)))
    assert (stats.turns, stats.items, stats.sessions) == (6, 12, 2)
    assert seen == [(4, 6), (6, 6)]
    items = await m.list(namespace="c@raw")
    assert sorted(i.id for i in items if i.metadata["view"] == "turn") == sorted(t.id for t in conv.turns())
    assert all(i.evidence == (i.metadata["turn_id"],) for i in items)
    # only the six turn texts were embedded; the context items are pooled, never embedded themselves
    assert sorted(emb.seen) == sorted(it.content for it in items if it.metadata["view"] == "turn")
    again = await build(m, "c@raw", conv)
    assert again.items == 12 and await m.count(namespace="c@raw") == 12
    assert len(emb.seen) == 6  # the rebuild found every vector in the cache
    part = await build(m, "c@raw", conv, sessions=[2])
    assert part.turns == 2 and {i.metadata["session"] for i in await m.list(namespace="c@raw")} == {2}
    await m.close()


async def test_pooled_vector_and_collapsed_hits(db_path):
    conv = _conv()
    emb = HashingEmbedder(64)
    m = AsyncMemory(db_path, embedder=emb)
    await build(m, "c@raw", conv)
    idx = await m.index.sync("c@raw")
    by_id = {i.id: i for i in await m.list(namespace="c@raw")}
    rids = dict(m.store.read("SELECT id, rid FROM memories WHERE namespace = ?", ("c@raw",)))
    # lexical-only turn items are not in the dense index; pooled context items are, with the pooled vector
    vectors = idx.vectors()
    assert rids["D1:3"] not in vectors
    v = emb.embed([by_id[i].content for i in ("D1:2", "D1:3", "D1:4")])
    want = 0.3 * v[0] + v[1] + 0.3 * v[2]
    got = vectors[rids["D1:3+ctx"]]
    np.testing.assert_allclose(got, want / np.linalg.norm(want), atol=1e-5)
    assert "pool" not in by_id["D1:3+ctx"].metadata and by_id["D1:3+ctx"].metadata["vector_key"].startswith(
        "v:"
    )
    # a fresh process (cold load in one query) sees the same dense index as the incremental path
    m2 = AsyncMemory(db_path, embedder=HashingEmbedder(64))
    cold = (await m2.index.sync("c@raw")).vectors()
    assert set(cold) == set(vectors)
    for rid, vec in vectors.items():
        np.testing.assert_allclose(cold[rid], vec, atol=1e-6)
    # editing a pooled item's text drops its own vector: it is embedded from its new text
    await m2.update("D1:3+ctx", "Caroline joined a rowing club", namespace="c@raw")
    edited = await m2.get("D1:3+ctx", namespace="c@raw")
    assert "vector_key" not in edited.metadata and "text" not in edited.metadata
    idx2 = await m2.index.sync("c@raw")
    np.testing.assert_allclose(
        idx2.vectors()[rids["D1:3+ctx"]], emb.embed(["Caroline joined a rowing club"])[0], atol=1e-6
    )
    await m2.close()
    for mode in ("dense", "bm25", "hybrid"):
        hits = await m.search("Melanie charity race", namespace="c@raw", mode=mode, top_k=6)
        units = [h.item.metadata["unit"] for h in hits]
        assert len(units) == len(set(units)), mode  # one hit per turn, never two views of one turn
        assert len(units) == (2 if mode == "bm25" else 6), mode  # BM25 matches only "charity race" turns
        assert units[0] == "D2:1", mode
    await m.close()


async def test_builder_protocol(db_path):
    conv = _conv()
    builder = create_builder("raw")
    assert isinstance(builder, RawBuilder) and builder.config == RawConfig()
    m = AsyncMemory(db_path, embedder=HashingEmbedder(32))
    results = await builder.build(m, "ns", conv)
    assert [r.session for r in results] == [1, 2]
    assert [r.stats["turns"] for r in results] == [4, 2] and results[0].stats["items"] == 8
    hits = await m.search("support group", namespace="ns", top_k=1)
    assert hits[0].item.evidence == ("D1:3",)
    await m.close()

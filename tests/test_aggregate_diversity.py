"""Session diversity for questions that gather facts (``aggregate_diversity``, 0.1 by default): a "How many"
question's evidence lies in several sessions, so each hit picked from a session lowers that session's
others. Real SQLite store, deterministic embedder."""

from __future__ import annotations

from memrl.memory.analysis.query import asks_aggregate
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.search.options import PLAIN, SearchOptions
from memrl.memory.store.base import NewItem


def test_which_questions_gather_facts():
    for q in ("How many doctors did I visit?", "What is the total amount I spent?",
              "How many different books did Ann read?", "What are all the places Bob went to?"):  # fmt: skip
        assert asks_aggregate(q), q
    for q in ("Where does Ann live?", "When did Bob move?", "What did I buy at Ikea?"):
        assert not asks_aggregate(q), q


async def test_a_gathering_question_reaches_a_second_session(db_path):
    m = AsyncMemory(db_path, embedder=HashingEmbedder(64))
    await m.add_many([
        NewItem("I visit my doctor, Dr. Patel, about my sinus", "episodic", {"session": 1}, session="1"),
        NewItem("at the visit the doctor said my sinus is better", "episodic", {"session": 1}, session="1"),
        NewItem("next visit the doctor gives me a spray", "episodic", {"session": 1}, session="1"),
        NewItem("a skin doctor looked at my rash", "episodic", {"session": 2}, session="2"),
    ])  # fmt: skip
    q = "How many doctors did I visit?"
    plain = await m.search(q, mode="bm25", top_k=2, aggregate_diversity=0.0)
    spread = await m.search(q, mode="bm25", top_k=2, aggregate_diversity=0.5)
    single = await m.search("Which doctor did I visit?", mode="bm25", top_k=2, aggregate_diversity=0.5)
    await m.close()
    assert {h.item.session for h in plain} == {"1"}  # the session that repeats the words fills the top 2
    assert {h.item.session for h in spread} == {"1", "2"}
    assert {h.item.session for h in single} == {"1"}  # a question that gathers nothing is left alone
    assert SearchOptions().aggregate_diversity == 0.1 and PLAIN["aggregate_diversity"] == 0.0

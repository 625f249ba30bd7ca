"""The speaker prior for first-person questions: in a user/assistant chat, "I"/"my" is the user; with named
speakers (LoCoMo) a first-person question names no one. On a real SQLite store with a deterministic
embedder: the prior moves the user's turn above an assistant turn that repeats the question's words."""

from __future__ import annotations

from memrl.memory.analysis.query import speakers_meant
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.search.options import PLAIN
from memrl.memory.store.base import NewItem


def test_who_a_first_person_question_is_about():
    chat = ["user", "assistant"]
    assert speakers_meant("How often do I see my therapist?", chat) == {"user"}
    assert speakers_meant("What did I'm... I've bought?", chat) == {"user"}
    assert speakers_meant("How often does the assistant suggest therapy?", chat) == {"assistant"}
    assert speakers_meant("How often is therapy suggested?", chat) == set()  # no person: no prior
    assert speakers_meant("How often do I see my therapist?", ["Caroline", "Melanie"]) == set()
    assert speakers_meant("What did Caroline tell me?", ["Caroline", "Melanie"]) == {"Caroline"}
    assert speakers_meant("Is it mine?", ["User", "Assistant"]) == {"User"}  # any case
    assert speakers_meant("Did Imogen come?", chat) == set()  # "I" only as a word


async def test_first_person_question_prefers_the_users_turn(db_path):
    m = AsyncMemory(db_path, embedder=HashingEmbedder(64))
    await m.add_many([
        NewItem("I see Dr. Smith every two weeks", "episodic", {"speaker": "user"}),
        NewItem("Seeing a therapist often helps; how often you see your therapist Dr. Smith is up to you, "
                "see what works", "episodic", {"speaker": "assistant"}),
    ])  # fmt: skip
    q = "How often do I see my therapist, Dr. Smith?"
    plain = await m.search(q, mode="bm25", top_k=2, **PLAIN)
    assert plain[0].item.metadata["speaker"] == "assistant"  # the assistant repeats the words
    prior = await m.search(q, mode="bm25", top_k=2)
    assert prior[0].item.metadata["speaker"] == "user"
    await m.close()

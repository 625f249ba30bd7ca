"""ADRPO session rewards for MemBuilder: questions per session, judged answers, length penalties,
attribution, failures, and GRPO groups of rollouts. The agents, answerer and judge are scripted."""

from __future__ import annotations

import json
import re

import pytest

from memrl.agents.membuilder import MemBuilderAgent
from memrl.agents.membuilder.adrpo import (
    decoy_questions,
    rollout_group,
    score_session,
    session_questions,
    written_item_ids,
)
from memrl.data import load_dataset
from memrl.data.types import Conversation, Question
from memrl.errors import ProviderError
from memrl.llm.scripted import ScriptedLLM
from memrl.memory.facade.memory import AsyncMemory
from tests.test_membuilder_agent import kind, rule
from tests.test_qa_eval import question_of

NS = "adrpo"


@pytest.fixture(scope="module")
def conv() -> Conversation:
    return load_dataset("sample")[0][0]


@pytest.fixture
async def amem():
    m = AsyncMemory(":memory:", embedder="hashing")
    yield m
    await m.close()


def answerer(conv: Conversation, wrong: set[str] = frozenset()):
    gold = {q.question: q.answer for q in conv.questions}
    return ScriptedLLM(lambda m, t, s: "no idea" if question_of(m) in wrong else gold[question_of(m)])


def judge(reply=None):
    """CORRECT when the prediction equals the gold answer; ``reply`` overrides the whole reply."""

    def verdict(messages, tools, schema):
        if reply is not None:
            return reply
        text = messages[-1]["content"]
        gold = re.search(r"Gold answer: (.*)\n", text).group(1)
        pred = re.search(r"Model answer: (.*)", text).group(1)
        return json.dumps({"reasoning": "r", "label": "CORRECT" if gold == pred else "WRONG"})

    return ScriptedLLM(verdict)


def test_session_questions_follow_the_evidence_and_the_mix(conv):
    s1 = session_questions(conv, 1)
    assert [q.id for q in s1] == [q.id for q in session_questions(conv, conv.sessions[0])]  # deterministic
    assert len(s1) == 5 and all(max(q.evidence_sessions) == 1 for q in s1)
    # mix 3 single-session / 1 multi-session / 1 temporal; session 1 has no multi-session question, so a
    # second temporal one fills its place
    assert [q.category == "temporal" for q in s1].count(True) == 2
    # a question needing sessions 2 and 3 belongs to session 3, when it becomes answerable
    assert {q.id for q in session_questions(conv, 3)} == {
        "sample-1:q4",
        "sample-1:q7",
        "sample-1:q8",
        "sample-1:q9",
    }
    assert [q.id for q in session_questions(conv, 2)] == ["sample-1:q6"]

    def q(i: int, cat: str, sessions: tuple[int, ...]) -> Question:
        return Question(f"x:q{i}", f"question {i}?", ("a",), cat, None, ("D1:1",), sessions)

    pool = [q(i, "single-hop", (4,)) for i in range(6)] + [q(10 + i, "multi-hop", (2, 4)) for i in range(4)]
    pool += [q(20 + i, "temporal", (4,)) for i in range(3)] + [q(30, "adversarial", (4,))]
    many = Conversation("x", ("A", "B"), (), tuple(pool), "test")
    chosen = session_questions(many, 4, n=5, seed=1)
    kinds = [int(c.id.split("q")[1]) // 10 for c in chosen]  # 0 single, 1 multi, 2 temporal
    assert sorted(kinds) == [0, 0, 0, 1, 2] and session_questions(many, 4, n=5, seed=1) == chosen
    assert session_questions(many, 4, n=5, seed=2) != chosen  # another seed draws others
    assert len(session_questions(many, 4, n=20)) == 13  # never the adversarial one


async def test_rewards_are_task_accuracy_with_attribution(amem, conv):
    session = conv.sessions[0]
    result = await MemBuilderAgent(ScriptedLLM(rule())).build_session(amem, NS, conv, session)
    qs = session_questions(conv, session)
    score = await score_session(amem, NS, conv, result, qs, answer_llm=answerer(conv, {qs[0].question}),
                                judge_llm=judge())  # fmt: skip
    assert score.n_correct == 4 and score.n_failed == 0 and len(score.questions) == 5
    assert {t: r.value for t, r in score.rewards.items()} == pytest.approx(
        {"core": 0.8, "episodic": 0.8, "semantic": 0.8, "procedural": 0.8}  # short replies: no length penalty
    )
    # the store holds one item of each type and top-10 retrieves all three for every question: a tie,
    # broken in the original's order, so the episodic agent's advantage is boosted 4x
    assert all(
        sorted(r["retrieved_types"]) == ["episodic", "procedural", "semantic"] for r in score.questions
    )
    assert score.dominant == "episodic"
    assert score.weights == {"core": 1.0, "episodic": 4.0, "semantic": 1.0, "procedural": 1.0}
    by_type = {t.info["memory_type"]: t for t in result.trajectories}
    assert (
        by_type["episodic"].reward == pytest.approx(0.8)
        and by_type["episodic"].info["advantage_weight"] == 4.0
    )
    assert by_type["core"].metrics["reward_task"] == pytest.approx(0.8)


async def test_attribution_counts_only_the_memories_this_session_wrote(amem, conv):
    """An agent that writes nothing in a session is never its dominant type, however many of its
    memories from earlier sessions the questions retrieve (the old count boosted a silent semantic agent
    in 13 of 42 red-team sessions)."""
    earlier = [await amem.add(f"Lena fact {i}: she likes walks and Leeds.", namespace=NS, type="semantic")
               for i in range(6)]  # fmt: skip
    session = conv.sessions[0]
    silent = {"operations": []}
    result = await MemBuilderAgent(ScriptedLLM(rule(semantic=silent))).build_session(amem, NS, conv, session)
    qs = session_questions(conv, session)
    score = await score_session(amem, NS, conv, result, qs, answer_llm=answerer(conv), judge_llm=judge())
    retrieved = [t for r in score.questions for t in r["retrieved_types"]]
    assert retrieved.count("semantic") > retrieved.count("episodic")  # earlier semantic memories dominate
    assert {i.id for i in earlier}.isdisjoint(written_item_ids(result))
    assert score.dominant == "episodic" and score.weights["semantic"] == 1.0
    # and with nothing written this session, nobody is boosted
    quiet = await MemBuilderAgent(ScriptedLLM(rule(episodic=silent, semantic=silent, procedural=silent)))\
        .build_session(amem, NS, conv, conv.sessions[1])  # fmt: skip
    score = await score_session(amem, NS, conv, quiet, qs, answer_llm=answerer(conv), judge_llm=judge())
    assert score.dominant is None and set(score.weights.values()) == {1.0}


async def test_length_penalties_and_unparsable_agents(amem, conv):
    session = conv.sessions[0]
    await amem.core_append("Lena and Omar are neighbours.", namespace=NS)  # so REWRITE is offered
    long_core = {"operation": "REWRITE", "content": "Lena likes long walks. " * 44}  # 1,012 characters
    llm = ScriptedLLM(rule(core=long_core, procedural="this is not JSON"))
    result = await MemBuilderAgent(llm).build_session(amem, NS, conv, session)
    qs = session_questions(conv, session)
    # the semantic expert wrote ~4,000 characters, the model ~100: rho far below 0.5 with a gap of
    # ~975 tokens (>= 200): LP = 1; the episodic expert wrote about as much as the model: LP = 0
    expert = {"episodic": 150, "semantic": 4000}
    score = await score_session(amem, NS, conv, result, qs, answer_llm=answerer(conv), judge_llm=judge(),
                                expert_chars=expert)  # fmt: skip
    assert score.n_correct == 5
    r = {t: o.value for t, o in score.rewards.items()}
    traj = {t.info["memory_type"]: t for t in result.trajectories}
    # LP measures the memory text written (1,012 characters = 253 tokens), not the JSON around it
    chars = traj["core"].metrics["written_chars"]
    assert chars == len(long_core["content"]) < traj["core"].metrics["reply_chars"]
    lp = (chars / 4 - 150) / (400 - 150)  # linear between 150 and 400 tokens
    assert lp == pytest.approx(0.412) and r["core"] == pytest.approx(1 - 0.8 * lp)
    assert traj["core"].metrics["reward_length_penalty"] == pytest.approx(lp)
    assert r["semantic"] == pytest.approx(0.2)
    assert r["episodic"] == pytest.approx(1.0)
    # its JSON did not parse: the floor of the task's range
    assert r["procedural"] == -1.0 and score.rewards["procedural"].invalid
    assert traj["procedural"].info["reward_invalid"] and traj["semantic"].metrics["expert_length"] == 4000


async def test_without_a_judge_model_the_official_f1_decides(amem, conv):
    session = conv.sessions[0]
    result = await MemBuilderAgent(ScriptedLLM(rule())).build_session(amem, NS, conv, session)
    qs = session_questions(conv, session)
    gold = {q.question: q.answer for q in qs}
    # the training F1 (precision x recall) decides: "Biscuit the dog" against "Biscuit" scores 1/2: correct;
    # "Golden" against a three-word gold scores 1/3 (official F1 0.5): wrong; "the Nile" against "Egypt": 0
    said = {qs[0].question: "Biscuit the dog", qs[1].question: "Golden", qs[2].question: "the Nile"}
    llm = ScriptedLLM(lambda m, t, s: said.get(question_of(m), gold[question_of(m)]))
    score = await score_session(amem, NS, conv, result, qs, answer_llm=llm)
    assert [q["question_id"] for q in score.questions][:3] == ["sample-1:q0", "sample-1:q2", "sample-1:q5"]
    assert [round(q["f1"], 3) for q in score.questions] == [0.667, 0.5, 0.0, 1.0, 1.0]
    assert [round(q["train_f1"], 3) for q in score.questions] == [0.5, 0.333, 0.0, 1.0, 1.0]
    assert [q["judge"] for q in score.questions] == [True, False, False, True, True]
    assert score.n_correct == 3 and score.rewards["episodic"].value == pytest.approx(0.6)


async def test_failed_judgements_and_rollouts_are_never_rewarded(amem, conv):
    session = conv.sessions[0]
    llm = ScriptedLLM(rule(semantic=ProviderError("HTTP 503")))
    result = await MemBuilderAgent(llm).build_session(amem, NS, conv, session)
    qs = session_questions(conv, session)
    score = await score_session(amem, NS, conv, result, qs, answer_llm=answerer(conv),
                                judge_llm=judge(reply="I think it is right"))  # fmt: skip
    assert score.n_failed == 5 and all(r["judge_error"] for r in score.questions)
    assert all(r.value is None for r in score.rewards.values())
    assert all(t.reward is None and t.info["reward_failure"] for t in result.trajectories)

    # a good judge, but the semantic agent's provider call failed: the memory lacks its writes, so no
    # agent of this rollout is rewarded (its siblings would be judged on a memory they did not make)
    score = await score_session(amem, NS, conv, result, qs, answer_llm=answerer(conv), judge_llm=judge())
    assert score.n_correct == 5 and all(r.value is None for r in score.rewards.values())
    assert "HTTP 503" in score.rewards["semantic"].failure
    assert score.rewards["episodic"].failure.startswith("rollout failed (the semantic agent's)")

    # a rollout without failures, scored on one question only: task = 1 / 5, as in the original
    ok = await MemBuilderAgent(ScriptedLLM(rule())).build_session(amem, NS, conv, session)
    score = await score_session(amem, NS, conv, ok, qs[:1], answer_llm=answerer(conv), judge_llm=judge())
    assert {t: r.value for t, r in score.rewards.items()} == pytest.approx(dict.fromkeys(score.rewards, 0.2))

    # no question about the session: nothing to reward with
    score = await score_session(amem, NS, conv, ok, [], answer_llm=answerer(conv), judge_llm=judge())
    assert {t: r.failure for t, r in score.rewards.items()} == dict.fromkeys(
        ("core", "episodic", "semantic", "procedural"), "membuilder: no questions to score the session with"
    )


async def test_a_group_of_rollouts_builds_on_clones(amem, conv):
    await amem.add("Lena lives in Leeds.", namespace=NS, type="semantic")
    group = await rollout_group(MemBuilderAgent(ScriptedLLM(rule())), amem, NS, conv, conv.sessions[0], 3,
                                answer_llm=answerer(conv), judge_llm=judge())  # fmt: skip
    assert len(group) == 3
    assert (
        await amem.count(namespace=NS) == 1 and await amem.core(namespace=NS) == ""
    )  # the source is untouched
    for i, (result, score) in enumerate(group):
        assert await amem.count(namespace=f"{NS}#g{i}") == 4  # the copied item + one of each type
        assert result.session == 1 and score.n_correct == 5
        assert all(t.reward is not None for t in result.trajectories)


async def test_each_rollout_is_scored_on_the_memory_it_built(amem, conv):
    """The reward reads the memory a rollout built, not the memory it started from: of two rollouts of one
    session, the one that wrote the answers earns the reward, the one that wrote nothing does not (scoring
    the source namespace, or one shared clone, would give both the same)."""
    from memrl.eval.redteam.build import oracle_reader

    session = conv.sessions[0]
    qs = session_questions(conv, session)
    facts = {"operations": [{"operation": "ADD", "memory": f"{q.question} {q.answer}"} for q in qs[:3]]}
    calls = {"n": 0}

    def builder(messages, tools, schema):
        calls["n"] += 1  # the four agents of rollout 0 answer first, then those of rollout 1
        writes = calls["n"] <= 4
        if kind(messages) == "core":
            return json.dumps({"operation": "APPEND", "content": "-"})
        return json.dumps(facts if writes and kind(messages) == "episodic" else {"operations": []})

    group = await rollout_group(MemBuilderAgent(ScriptedLLM(builder)), amem, NS, conv, session, 2,
                                answer_llm=oracle_reader(conv), questions=qs)  # fmt: skip
    (built, score_built), (_, score_empty) = group
    assert score_built.n_correct == 3 and score_empty.n_correct == 0
    assert score_built.rewards["episodic"].value == pytest.approx(3 / 5)
    assert score_empty.rewards["episodic"].value == 0.0
    assert await amem.count(namespace=NS) == 0  # the source memory was not written


def test_decoys_are_questions_the_session_does_not_answer(conv):
    qs = session_questions(conv, 1)
    later = decoy_questions(conv, 1, qs)  # one conversation: its questions whose evidence is all later
    assert later == decoy_questions(conv, conv.sessions[0], qs)  # deterministic
    assert [d.id for d in later] and all(d.id.startswith("decoy:") for d in later)
    by_id = {q.id: q for q in conv.questions}
    assert all(min(by_id[d.id.removeprefix("decoy:")].evidence_sessions) > 1 for d in later)
    assert {d.id.removeprefix("decoy:sample-1:") for d in later} == {"q4", "q6", "q7", "q9"}
    assert decoy_questions(conv, 3, session_questions(conv, 3)) == []  # the last session: nothing later

    # another conversation's questions, its speakers renamed to this one's, of the same category if any
    other = Conversation("o", ("Ana", "Ben"), (), (
        Question("o:q1", "Where does Ben's brother live?", ("Oslo",), "single-hop", 1, ("D1:1",), (1,)),
        Question("o:q2", "When did Ana meet Ben?", ("3 June 2023",), "temporal", 2, ("D1:2",), (1,)),
        Question("o:q3", "Who is Ana's boss?", ("Ben",), "single-hop", 1, ("D1:3",), (1,)),
        Question("o:q4", "What did Ana lose?", ("a ring",), "adversarial", 5, ("D1:4",), (1,)),
    ), "test")  # fmt: skip
    pair = [next(q for q in qs if q.category == c) for c in ("single-hop", "temporal")]
    swapped = decoy_questions(conv, 1, pair, others=[conv, other])  # its own conversation is skipped
    assert [d.category for d in swapped] == ["single-hop", "temporal"]
    assert swapped[1].question == "When did Lena meet Omar?" and swapped[1].id == "decoy:o:q2"
    assert {d.question for d in swapped[:1]} <= {"Where does Omar's brother live?", "Who is Lena's boss?"}
    assert "Omar" in {d.answer for d in decoy_questions(conv, 1, qs, others=[other])}  # answers renamed too
    assert all(d.category != "adversarial" for d in decoy_questions(conv, 1, qs, others=[other]))
    # names are swapped at once: a conversation whose speakers are this one's, the other way round
    mirror = Conversation("m", ("Omar", "Lena"), (), (
        Question("m:q1", "When did Omar call Lena?", ("May",), "temporal", 2, ("D1:1",), (1,)),), "test")  # fmt: skip
    assert decoy_questions(conv, 1, pair[1:], others=[mirror])[0].question == "When did Lena call Omar?"


async def test_memory_that_answers_decoys_is_paid_only_beyond_chance(amem, conv):
    """The red team's core hedge (likely answers appended to core memory) is paid whenever a guess is
    right; decoys take back what the memory answers without the session."""
    from memrl.eval.redteam.build import oracle_reader

    session = conv.sessions[0]
    qs = session_questions(conv, session)
    decoys = decoy_questions(conv, session, qs)
    guesses = ", ".join(q.answer for q in conv.questions)  # every answer of the conversation, in core memory

    def agents(core: str):
        def reply(messages, tools, schema):
            if kind(messages) == "core":
                return json.dumps({"operation": "APPEND", "content": core})
            return json.dumps({"operations": []})

        return ScriptedLLM(reply)

    async def score(core: str, ds):
        ns = f"{NS}-{len(ds)}-{core[:4]}"
        result = await MemBuilderAgent(agents(core)).build_session(amem, ns, conv, session)
        reader = oracle_reader(conv, decoys)
        return await score_session(amem, ns, conv, result, qs, answer_llm=reader, decoys=ds)

    blind = await score(guesses, [])
    assert blind.n_correct == 5 and blind.rewards["core"].metrics["task"] == 1.0  # without decoys: all paid
    hedged = await score(guesses, decoys)
    assert hedged.n_correct == 5 and hedged.n_decoys_correct == len(decoys) == 4
    # 5 right, 5 by chance
    assert hedged.chance == pytest.approx(5.0) and hedged.rewards["core"].value == 0.0
    assert len(hedged.questions) == 5 and len(hedged.decoys) == 4  # decoys are reported apart

    # memory of what the session said (two of its answers, with their questions) answers no decoy
    said = " ".join(f"{q.question} {q.answer}." for q in qs[:2])
    honest = await score(said, decoys)
    assert honest.n_correct == 2 and honest.n_decoys_correct == 0 and honest.chance == 0.0
    assert honest.rewards["core"].metrics["task"] == pytest.approx(0.4)
    # half the decoys answered costs half the session's questions
    half = await score(f"{said} {decoys[0].answer}, {decoys[1].answer}", decoys)
    assert half.n_decoys_correct == 2 and half.chance == pytest.approx(2.5)
    assert half.rewards["core"].metrics["task"] == pytest.approx(-0.1)  # 2 right - 2.5 by chance, signed


async def test_no_write_makes_the_answer_prompt_fail_to_escape_a_negative_reward(amem, conv):
    """A failed judgement is no reward at all, which beats a negative one: no write may make the answerer's
    prompt grow past a model's window. Core memory is capped by the store, the retrieved memories by the
    reader's character budget, so the agents' longest writes leave every answer prompt bounded and every
    agent with a value (here a negative one: the memory answers decoys, never the session's questions)."""
    session = conv.sessions[0]
    qs = session_questions(conv, session)
    decoys = decoy_questions(conv, session, qs)
    words = " ".join(f"word{i}" for i in range(3000))  # distinct words: the dumped items differ
    limit = amem.store.core_limit
    await amem.core_rewrite(
        words[: limit - 60], namespace=f"{NS}-dump"
    )  # earlier sessions filled core memory
    prompts: list[int] = []

    def agents(messages, tools, schema):
        if kind(messages) == "core":
            return json.dumps({"operation": "APPEND", "content": "More of the same."})
        if kind(messages) == "compress":
            return words
        cap = MemBuilderAgent(ScriptedLLM(agents)).config.max_item_chars
        return json.dumps({"operations": [{"action": "ADD", "content": words[k * cap : (k + 1) * cap]}
                                          for k in range(10)]})  # fmt: skip

    def answerer(messages, tools, schema):
        prompts.append(sum(len(m["content"]) for m in messages))
        return decoys[0].answer  # right on a decoy at most, never on the session's own questions

    result = await MemBuilderAgent(ScriptedLLM(agents)).build_session(amem, f"{NS}-dump", conv, session)
    score = await score_session(amem, f"{NS}-dump", conv, result, qs, answer_llm=ScriptedLLM(answerer),
                                decoys=decoys)  # fmt: skip
    assert len(prompts) == len(qs) + len(decoys)
    assert limit - 60 < max(prompts) < limit + 1_000 + 3_000
    assert score.n_failed == 0 and all(r.value is not None for r in score.rewards.values())
    assert score.n_decoys_correct >= 1 and score.rewards["episodic"].value < 0

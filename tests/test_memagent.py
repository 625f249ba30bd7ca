"""MemAgent: chunked reading with an overwritten memory, boxed answers, reward, QA-eval hook."""

from __future__ import annotations

import pytest

from memrl.agents.memagent import MemAgent, MemAgentConfig, answer_by_reading, chunk_text, render_conversation
from memrl.data import load_dataset
from memrl.llm import ScriptedLLM
from memrl.llm.base import ChatResponse, Usage


def test_chunk_text_respects_budget_and_keeps_everything():
    text = "\n".join(f"line {i} " + "word " * 10 for i in range(40))
    chunks = chunk_text(text, chunk_tokens=40)
    assert len(chunks) > 5
    assert all(len(c.split()) <= 30 for c in chunks)  # 0.75 words per token
    assert " ".join(" ".join(chunks).split()) == " ".join(text.split())
    assert chunk_text("one enormous line " * 100, 20)[0].split() == ("one enormous line " * 5).split()


async def test_memory_is_overwritten_and_answer_boxed():
    def reply(messages, tools, schema):
        prompt = messages[-1]["content"]
        if "Next section:" in prompt:
            chunk = prompt.split("Next section:\n", 1)[1].split("\n\nWrite your updated memory")[0]
            previous = prompt.split("Your memory so far:\n", 1)[1].split("\n\nNext section")[0]
            keep = [w for w in (previous + " " + chunk).split() if w.istitle() and w != "No"]
            return ChatResponse(" ".join(dict.fromkeys(keep)) or "nothing", usage=Usage(50, 5))
        return ChatResponse("The city is \\boxed{Lisbon}.", usage=Usage(30, 6))

    llm = ScriptedLLM(reply)
    doc = "filler words here\n" * 30 + "Anna moved to Lisbon in May.\n" + "more filler\n" * 30
    agent = MemAgent(llm, MemAgentConfig(chunk_tokens=40, memory_tokens=64))
    res = await agent.run("Where did Anna move?", doc, golds=["lisbon"], task_id="t1")
    n = res.chunks_read
    assert n == len(chunk_text(doc, 40)) and n > 2
    assert len(llm.requests) == n + 1
    first = llm.requests[0].messages[-1]["content"]
    assert "Your memory so far:\nNo previous memory" in first
    # each step sees the memory the previous step wrote, never the growing document
    for i in range(1, n):
        prev_reply = reply(llm.requests[i - 1].messages, None, None).text
        assert f"Your memory so far:\n{prev_reply}" in llm.requests[i].messages[-1]["content"]
    assert all(r.sampling.max_tokens == 64 for r in llm.requests[:n])
    assert res.answer == "Lisbon" and "Anna" in res.memory and "Lisbon" in res.memory
    traj = res.trajectory
    assert traj.reward == 1.0 and [s.role for s in traj.steps][-1] == "answer"
    assert traj.prompt_tokens == 50 * n + 30


async def test_max_chunks_and_wrong_answer_reward():
    llm = ScriptedLLM(lambda m, t, s: "memory" if "Next section" in m[-1]["content"] else "\\boxed{Porto}")
    res = await MemAgent(llm, MemAgentConfig(chunk_tokens=16, max_chunks=2)).run(
        "q?", "a b c\n" * 50, golds=["Lisbon"]
    )
    assert res.chunks_read == 2 and res.trajectory.reward == 0.0


async def test_answer_by_reading_counts_missing_box_as_format_error():
    conv = load_dataset("sample")[0][0]
    q = conv.questions[0]
    llm = ScriptedLLM(
        lambda m, t, s: "notes" if "Next section" in m[-1]["content"] else "I think it is Paris"
    )
    res = await answer_by_reading(llm, conv, q, config=MemAgentConfig(chunk_tokens=400))
    assert res.prediction == "" and res.format_error == "no \\boxed{} answer" and res.error is None
    document = render_conversation(conv)
    assert document.startswith("Session 1 (") and conv.sessions[-1].turns[-1].text in document


async def test_answer_by_reading_records_provider_failure():
    conv = load_dataset("sample")[0][0]
    llm = ScriptedLLM([])  # runs out at once: a provider error
    res = await answer_by_reading(llm, conv, conv.questions[0])
    assert res.prediction is None and res.error and "ScriptExhausted" in res.error


@pytest.mark.slow
async def test_memagent_with_the_offline_model():
    from memrl.llm import create_llm

    llm = create_llm("local")
    doc = (
        ("The weather was mild. " * 20 + "\n") * 3
        + "Marta's cat is called Pixel.\n"
        + ("Nothing happened. " * 20)
    )
    res = await MemAgent(llm, MemAgentConfig(chunk_tokens=200, memory_tokens=48, answer_tokens=24)).run(
        "What is the name of Marta's cat?", doc, golds=["Pixel"]
    )
    traj = res.trajectory
    assert res.chunks_read >= 2 and len(traj.steps) == res.chunks_read + 1
    assert traj.has_tokens and all(len(s.logprobs) == len(s.completion_ids) for s in traj.steps)
    assert all(len(s.completion_ids) <= 48 for s in traj.steps[:-1])  # the memory stays within budget
    # a 135M model: what it answers varies, but the episode is scored and its metrics recorded
    assert traj.reward is not None and traj.reward == float(traj.metrics["reward"])
    assert traj.metrics["chunks"] == res.chunks_read and "empty_memory_updates" in traj.metrics


async def test_provider_failure_mid_reading_is_recorded_not_scored():
    llm = ScriptedLLM(["notes so far"])  # one reply, then the provider fails
    res = await MemAgent(llm, MemAgentConfig(chunk_tokens=16)).run("q?", "a b c\n" * 50, golds=["x"])
    traj = res.trajectory
    assert res.answer is None and traj.reward is None and "ScriptExhausted" in traj.failure
    assert [s.error is None for s in traj.steps] == [True, False] and res.chunks_read == 1


async def test_an_empty_memory_update_keeps_the_memory_and_is_counted():
    doc = "Anna moved to Lisbon in May.\n" * 6
    n = len(chunk_text(doc, 20))
    llm = ScriptedLLM(["Anna: Lisbon, May"] + [""] * (n - 1) + ["\\boxed{Lisbon}"])
    res = await MemAgent(llm, MemAgentConfig(chunk_tokens=20)).run(
        "Where did Anna move?", doc, golds=["Lisbon"]
    )
    assert n >= 2 and res.memory == "Anna: Lisbon, May"
    assert res.trajectory.metrics["empty_memory_updates"] == n - 1 and res.trajectory.reward == 1.0

"""The MemUpdate agent on a real store (hashing embedder) driven by a scripted LLM: real edits, malformed
calls that change nothing, budgets, provider failures, the episode reward, and (slow) the local model."""

from __future__ import annotations

import dataclasses
import json

import pytest

from memrl.agents.memupdate import (
    MemUpdateAgent,
    MemUpdateConfig,
    init_from_observations,
    probe_questions,
    run_episode,
    update_memory,
)
from memrl.data import load_dataset
from memrl.errors import ConfigError, DataError
from memrl.llm.base import LLMProviderError
from memrl.llm.scripted import ScriptedLLM, cycle
from memrl.memory.facade.memory import AsyncMemory
from memrl.rewards.memupdate import edit_size, retention
from memrl.tools.memupdate import MEMUPDATE_TOOLS

NS = "conv"


def calls(*specs: tuple[str, object]) -> dict:
    """A scripted reply making these tool calls (arguments: a dict, or raw text as a model might write)."""
    return {"tool_calls": [{"id": f"c{i}", "name": n, "arguments": a} for i, (n, a) in enumerate(specs)]}


@pytest.fixture(scope="module")
def conv():
    return load_dataset("sample")[0][0]


@pytest.fixture
async def seeded(amem: AsyncMemory):
    for mid, text in [
        ("m1", "Lena has a dog called Biscuit."),
        ("m2", "Lena's dog is named Biscuit."),
        ("m3", "Omar works at a bakery. Omar's sister is Nadia."),
        ("m4", "ok"),
    ]:
        await amem.add(text, namespace=NS, id=mid, type="semantic", actor="setup")
    return amem


async def snapshot(m: AsyncMemory, ns: str = NS):
    items = await m.list(namespace=ns, include_deleted=True)
    return [(i.id, i.content, i.deleted, i.type.value) for i in items], len(await m.history(namespace=ns))


async def test_scripted_episode_really_edits_the_store(seeded: AsyncMemory, conv):
    llm = ScriptedLLM(
        [
            calls(("search_memory", {"query": "Biscuit dog"})),
            calls(
                (
                    "merge_memory",
                    {
                        "memory_ids": ["m1", "m2"],
                        "content": "Lena's dog is Biscuit.",
                        "strategy": "summarize",
                    },
                ),
                (
                    "split_memory",
                    {"memory_id": "m3", "parts": ["Omar works at a bakery.", "Omar's sister is Nadia."]},
                ),
            ),  # fmt: skip
            calls(("delete_memory", {"memory_id": "m4", "reason": "says nothing"})),
            calls(
                (
                    "manage_memory",
                    {
                        "operation": "create",
                        "content": "2024-02-25: Lena adopted Biscuit.",
                        "memory_type": "episodic",
                        "metadata": {"date": "2024-02-25"},
                    },
                )
            ),  # fmt: skip
            "Merged the duplicates, split m3, deleted m4, added the adoption date.",
        ]
    )
    result = await update_memory(llm, seeded, NS, conv)

    live = {i.id: i for i in await seeded.list(namespace=NS)}
    assert live["m1"].content == "Lena's dog is Biscuit." and "m2" not in live and "m4" not in live
    assert live["m3"].content == "Omar works at a bakery."
    (part,) = [i for i in live.values() if i.content == "Omar's sister is Nadia."]
    assert part.metadata["split_from"] == "m3"
    (created,) = [i for i in live.values() if i.content.startswith("2024-02-25")]
    assert created.type.value == "episodic" and created.metadata["date"] == "2024-02-25"
    episode_ops = [h for h in await seeded.history(namespace=NS) if h.actor != "setup"]
    assert {h.actor for h in episode_ops} == {"memupdate"}
    assert sorted(h.op for h in episode_ops) == sorted(["MERGE", "MERGE", "SPLIT", "ADD", "DELETE", "ADD"])

    # The model saw each result, answered by call id, in the next request.
    second = llm.requests[1].messages
    assert (
        second[-2]["role"] == "assistant"
        and second[-2]["tool_calls"][0]["function"]["name"] == "search_memory"
    )
    assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "c0"
    assert "[m1]" in second[-1]["content"] and "Biscuit" in second[-1]["content"]
    third = llm.requests[2].messages
    assert [m.get("tool_call_id") for m in third[-2:]] == ["c0", "c1"]
    assert (
        "Merged 2 memories into m1" in third[-2]["content"]
        and "Split memory m3 into 2" in third[-1]["content"]
    )
    assert all(r.tools == MEMUPDATE_TOOLS.schemas and r.tool_choice == "auto" for r in llm.requests)

    traj = result.trajectory
    assert result.stop_reason == "answered" and traj.failure is None and traj.reward is None
    assert len(traj.steps) == 5 and [len(s.tool_results) for s in traj.steps] == [1, 2, 1, 1, 0]
    assert traj.steps[1].tool_results[0]["kind"] == "ok" and traj.steps[1].tool_results[0]["data"] == {
        "id": "m1"
    }
    assert traj.metrics["tool_calls"] == 5 and traj.metrics["valid_calls"] == 5
    assert traj.metrics["invalid_calls"] == 0 and traj.metrics["calls/merge_memory"] == 1
    assert result.calls_by_tool == {"search_memory": 1, "merge_memory": 1, "split_memory": 1,
                                    "delete_memory": 1, "manage_memory": 1}  # fmt: skip
    assert (result.items_before, result.items_after) == (4, 4)
    row = result.to_dict()
    json.dumps(row)
    assert row["llm_calls"] == 5 and row["failures"] == [] and row["completion_tokens"] > 0
    assert "trajectory" not in row and "trajectory" in result.to_dict(with_trajectory=True)


async def test_first_messages_describe_the_job_question_and_memories(seeded: AsyncMemory, conv):
    llm = ScriptedLLM(["Nothing to change."])
    q = conv.questions[0]
    cfg = MemUpdateConfig(sample_size=3, tool_choice="required", max_tool_calls=7)
    await MemUpdateAgent(llm, cfg).run(seeded, NS, conv, question=q)
    system, user = llm.requests[0].messages
    assert "Lena and Omar" in system["content"] and "merge_memory" in system["content"]
    assert "at most 7 tool calls" in system["content"]
    assert (
        f"Target question: {q.question}" in user["content"] and q.answer not in user["content"].split("\n")[2]
    )
    assert "A search for the question finds now:\n[m" in user["content"]
    assert user["content"].split("Some memories:\n")[1].count("] (semantic)") == 3
    assert llm.requests[0].tool_choice == "required"


async def test_malformed_calls_are_errors_the_model_sees_and_change_nothing(seeded: AsyncMemory, conv):
    before = await snapshot(seeded)
    llm = ScriptedLLM(
        [
            {**calls(("delete_memory", '{"memory_id": "m1"')), "finish_reason": "length"},  # cut off
            calls(("drop_all_memories", {})),  # no such tool
            calls(("delete_memory", {"reason": "no id"})),  # required argument missing
            calls(("merge_memory", {"memory_ids": ["m1", "nope"]})),  # well-formed, unknown id
            "I give up.",
        ]
    )
    result = await update_memory(llm, seeded, NS, conv)
    assert await snapshot(seeded) == before

    seen = [r.messages[-1] for r in llm.requests[1:]]
    assert all(m["role"] == "tool" for m in seen)
    assert "could not be read" in seen[0]["content"] and "not valid JSON" in seen[0]["content"]
    assert "cut off after 512 tokens" in seen[0]["content"]
    assert result.trajectory.info["finish_reasons"] == [
        "length",
        "tool_calls",
        "tool_calls",
        "tool_calls",
        "stop",
    ]
    assert "no tool named 'drop_all_memories'" in seen[1]["content"]
    assert "memory_id" in seen[2]["content"] and "Field required" in seen[2]["content"]
    assert "nope" in seen[3]["content"]
    assert all("Nothing was changed" in m["content"] for m in seen[:1] + seen[2:])
    kinds = [s.tool_results[0]["kind"] for s in result.trajectory.steps[:4]]
    assert kinds == ["malformed", "malformed", "malformed", "failed"]
    m = result.trajectory.metrics
    assert (m["tool_calls"], m["valid_calls"], m["invalid_calls"], m["malformed_calls"]) == (4, 0, 4, 3)
    assert result.stop_reason == "answered" and result.failures == []


async def test_the_30_call_budget_stops_the_loop(seeded: AsyncMemory, conv):
    llm = ScriptedLLM(cycle([calls(("search_memory", {"query": "Biscuit"}))]))
    result = await update_memory(llm, seeded, NS, conv)
    assert len(llm.requests) == 30 and result.stop_reason == "max_tool_calls"
    assert result.trajectory.metrics["tool_calls"] == 30 and result.calls_by_tool == {"search_memory": 30}

    # Calls beyond the budget within one reply are answered (OpenAI needs every id) but not run.
    two = calls(("delete_memory", {"memory_id": "m1"}), ("delete_memory", {"memory_id": "m2"}))
    llm = ScriptedLLM(cycle([two]))
    result = await update_memory(llm, seeded, NS, conv, config=MemUpdateConfig(max_tool_calls=3))
    assert len(llm.requests) == 2 and result.trajectory.metrics["skipped_calls"] == 1
    last = result.trajectory.steps[-1].tool_results
    assert [r["kind"] for r in last] == ["failed", "skipped"]  # m1 is already gone by then
    assert "budget is used up" in last[1]["content"]

    llm = ScriptedLLM(cycle([calls(("sample_memory", {"k": 1}))]))
    result = await update_memory(llm, seeded, NS, conv, config=MemUpdateConfig(max_turns=2))
    assert len(llm.requests) == 2 and result.stop_reason == "max_turns"


async def test_provider_error_mid_episode_is_a_failure_not_a_reward(seeded: AsyncMemory, conv):
    def flaky(messages, tools, json_schema):
        if len(messages) > 2:
            raise LLMProviderError("503 upstream overloaded", status=503, attempts=3)
        return calls(("manage_memory", {"operation": "create", "content": "Nadia is Omar's sister."}))

    q = conv.questions[5]
    result = await run_episode(ScriptedLLM(flaky), seeded, NS, conv, q)
    traj = result.trajectory
    assert traj.failure is not None and "503 upstream overloaded" in traj.failure
    assert traj.reward is None and "p_new" not in traj.metrics and result.reward is None
    assert result.stop_reason == "failure" and result.failures[0]["kind"] == "provider"
    assert traj.steps[-1].error is not None and traj.steps[0].tool_results[0]["kind"] == "ok"
    assert result.to_dict()["failures"] == result.failures


async def test_run_episode_reward_matches_the_formula_by_hand(amem: AsyncMemory, conv):
    items = await init_from_observations(amem, NS, conv)
    before = await snapshot(amem)
    q = next(q for q in conv.questions if q.answer == "Egypt")  # observations say Cairo, never Egypt
    fact = "Omar's sister Nadia is flying in from Cairo, Egypt, in March 2024."
    llm = ScriptedLLM(
        [
            calls(("search_memory", {"query": "Nadia flying in from"})),
            calls(("manage_memory", {"operation": "create", "content": fact})),
            "Added the country.",
        ]
    )
    result = await run_episode(llm, amem, NS, conv, q, episode_namespace="ep-1", keep_namespace=True)

    assert await snapshot(amem) == before  # the initial memory is untouched
    assert fact in [i.content for i in await amem.list(namespace="ep-1")]
    old = [i.content for i in items]
    new = [*old, fact]
    p_old, p_new = 0.1, 1.0  # "egypt" is in no memory before (clamped up to 0.1), in the new one after
    assert edit_size(old, new) == 1 and retention(old, new) == 1.0  # one create, nothing lost: E = 1
    probes = probe_questions(conv, q, MemUpdateConfig().probes)
    assert len(probes) == 8 and q not in probes
    traj = result.trajectory
    assert traj.failure is None
    assert traj.metrics["efficiency"] == 1.0 and traj.metrics["n_probes"] == 8
    # the new memory is retrieved for no probe in place of its answer: no collateral
    assert traj.metrics["collateral"] == 0.0
    assert traj.reward == pytest.approx((p_new - p_old) * 1.0)
    assert traj.metrics["p_old"] == p_old and traj.metrics["p_new"] == p_new
    assert (traj.metrics["n_old"], traj.metrics["n_new"]) == (14, 15)
    assert traj.info["initial_namespace"] == NS and traj.task_id == q.id

    # Throw-away episode namespaces for RL groups.
    result = await run_episode(ScriptedLLM(["No change."]), amem, NS, conv, q, keep_namespace=False)
    assert result.reward == 0.0
    items_per_ns = {n["name"]: n["items"] for n in await amem.namespaces()}
    assert items_per_ns == {NS: 14, "ep-1": 15}  # the dropped episode namespace is gone


async def test_an_edit_that_takes_a_probe_questions_answer_away_is_charged_for_it(amem: AsyncMemory, conv):
    """The reward is per question, but an edit can break others: deleting the memories a probe question
    is answered from costs that probe's lost coverage, even when the target question does not move."""
    await init_from_observations(amem, NS, conv)
    q = next(q for q in conv.questions if q.answer == "Egypt")
    cfg = MemUpdateConfig(probes=8)
    probe = probe_questions(conv, q, cfg.probes)[0]
    hits = await amem.search(probe.question, namespace=NS, top_k=3)
    deletes = [calls(("delete_memory", {"memory_id": h.item.id})) for h in hits]
    result = await run_episode(ScriptedLLM([*deletes, "Done."]), amem, NS, conv, q, config=cfg)
    traj = result.trajectory
    assert traj.failure is None and traj.metrics["edit_size"] == 3
    assert traj.metrics["collateral"] > 0.0
    assert traj.reward == pytest.approx(
        traj.metrics["p_new"] - traj.metrics["p_old"] - traj.metrics["collateral"]
    )
    assert traj.reward < 0.0


async def test_an_episode_that_changes_nothing_earns_exactly_0_while_other_namespaces_are_written(
    amem: AsyncMemory, conv
):
    """GRPO runs a group's episodes concurrently, each in its own clone: writes to another namespace
    between this episode's 'before' and 'after' must not move its retrieval (seen in a learning run: an
    episode with no tool call earned -0.0067, P 0.17 -> 0.10, with the memory unchanged)."""
    await init_from_observations(amem, NS, conv)
    q = next(q for q in conv.questions if q.answer == "Egypt")

    class Busy(ScriptedLLM):  # while this episode's model 'thinks', another episode writes its clone
        async def _chat(self, request):
            await amem.clone(NS, "other-ep", overwrite=True)
            for i in range(40):
                await amem.add(f"Nadia flew in from Cairo, Egypt, trip {i}. Omar's sister visits in March.",
                               namespace="other-ep", type="semantic", actor="other")  # fmt: skip
            return await super()._chat(request)

    result = await run_episode(Busy(["No change needed."]), amem, NS, conv, q)
    traj = result.trajectory
    assert traj.failure is None and traj.metrics["tool_calls"] == 0
    assert traj.metrics["p_new"] == traj.metrics["p_old"] and traj.reward == 0.0
    assert await amem.count(namespace="other-ep") == 14 + 40  # the writes did happen, mid-episode


async def test_unscorable_question_fails_before_any_llm_call(amem: AsyncMemory, conv):
    await init_from_observations(amem, NS, conv)
    q = dataclasses.replace(conv.questions[0], answers=("?",))
    llm = ScriptedLLM([])
    result = await run_episode(llm, amem, NS, conv, q)
    assert llm.requests == [] and result.reward is None
    assert "no scorable answer" in result.trajectory.failure and result.failures[0]["kind"] == "reward"


async def test_init_from_observations_on_the_bundled_sample(amem: AsyncMemory, conv):
    items = await init_from_observations(amem, NS, conv)
    assert len(items) == 14 and await amem.count(namespace=NS) == 14
    first = await amem.get("O1:1", namespace=NS)
    assert first.content.startswith("Lena adopted a dog named Biscuit")
    assert first.type.value == "episodic" and first.evidence == ("D1:3",) and first.session == "1"
    assert first.metadata == {"speaker": "Lena", "session": 1, "source": "observation", "date": "2024-03-03",
                              "date_text": "10:15 am on 3 March, 2024"}  # fmt: skip
    assert {i.id for i in items} >= {"O2:4", "O3:4"}
    assert len(await init_from_observations(amem, NS, conv)) == 14  # idempotent: the namespace is reset
    assert await amem.count(namespace=NS) == 14
    with pytest.raises(DataError, match="no LoCoMo observations"):
        await init_from_observations(amem, NS, dataclasses.replace(conv, metadata={}))


def test_config_rejects_bad_values():
    with pytest.raises(ConfigError, match="max_tool_calls"):
        MemUpdateConfig(max_tool_calls=0)
    with pytest.raises(ConfigError, match="temperature"):
        MemUpdateConfig(temperature=-1)
    assert MemUpdateConfig(temperature=0.7, seed=3).sampling.deterministic


@pytest.mark.slow
async def test_local_model_short_episode_makes_valid_tool_calls(amem: AsyncMemory, conv):
    """SmolLM2-135M under constrained decoding: every call it finishes is a valid call of one of the six
    tools (only a reply cut off by max_tokens can be malformed), and the trajectory has ids and logprobs."""
    from memrl.llm import create_llm

    await init_from_observations(amem, NS, conv)
    llm = create_llm("local")
    cfg = MemUpdateConfig(
        max_tool_calls=3, tool_choice="required", max_tokens=96, sample_size=3, question_hits=3
    )
    q = next(q for q in conv.questions if q.answer == "Egypt")
    try:
        result = await run_episode(
            llm, amem, NS, conv, q, config=cfg, episode_namespace="ep", keep_namespace=True
        )
    finally:
        llm.close()
    traj = result.trajectory
    print(
        *(f"{c['name']} {c['arguments']}" for s in traj.steps for c in s.tool_calls), traj.metrics, sep="\n"
    )
    assert traj.failure is None and result.stop_reason == "max_tool_calls" and len(traj.steps) == 3
    names = set(MEMUPDATE_TOOLS.by_name)
    for step, finish in zip(traj.steps, traj.info["finish_reasons"], strict=True):
        (call,) = step.tool_calls
        if finish == "length":  # cut off mid-JSON: recorded as malformed, with the reason shown to the model
            assert (
                step.tool_results[0]["kind"] == "malformed" and "cut off" in step.tool_results[0]["content"]
            )
            continue
        assert (
            call["error"] is None
            and call["name"] in names
            and isinstance(json.loads(call["arguments"]), dict)
        )
        assert step.tool_results[0]["kind"] in ("ok", "failed")  # the arguments always fit the schema
    assert traj.metrics["valid_calls"] + traj.metrics["invalid_calls"] == 3
    assert traj.has_tokens and all(len(s.logprobs) == len(s.completion_ids) > 0 for s in traj.steps)
    ids, mask, _ = traj.token_view()
    assert sum(mask) == sum(len(s.completion_ids) for s in traj.steps)
    # the reward is MemUpdate's, computed from the memory before (untouched) and the edited copy
    from memrl.agents.memupdate.agent import _state
    from memrl.rewards.memupdate import Probe, score_memupdate

    probes = probe_questions(conv, q, cfg.probes)
    before, after = await _state(amem, NS, q, probes), await _state(amem, "ep", q, probes)
    expected = score_memupdate(
        q.answer, before[0], after[0], before[1], after[1], question=q.question,
        probes=[Probe(p.answer, p.question, b, a) for p, b, a in zip(probes, before[2], after[2], strict=True)],
    )  # fmt: skip
    assert traj.reward == pytest.approx(expected.value) and traj.metrics["p_old"] == expected.metrics["p_old"]

"""Each task of ``memrl train grpo`` earns a reward when its policy does the job and none when it does not:
the tasks' groups scored end to end (agent, store, reward), with a scripted policy in place of the model.

Where ``tests/test_train_tasks.py`` runs the real update on a random tiny model (whose rewards are all 0),
these show the other half: a group with one good and one useless rollout has a positive and a zero reward,
so it carries a gradient; a cheat gets nothing; a provider failure is no reward at all."""

from __future__ import annotations

import json
import re

import pytest

from memrl.data import load_dataset
from memrl.errors import ProviderError
from memrl.llm.scripted import ScriptedLLM
from memrl.train.tasks import AnswerTasks, BuildTasks, ReadTasks, UpdateTasks


@pytest.fixture(scope="module")
def conv():
    return load_dataset("sample")[0][0]


def alternate(good, bad):
    """A rule answering the k-th final call with good() on even k, bad() on odd k."""
    n = {"k": 0}

    def pick(*a):
        n["k"] += 1
        return good(*a) if n["k"] % 2 else bad(*a)

    return pick


def question_in(text: str, conv) -> object:
    return next(q for q in conv.questions if q.question in text)


async def test_read_rewards_the_right_box_only(conv):
    tasks = ReadTasks([conv])
    q = tasks.items[0][1]
    final = alternate(lambda: f"\\boxed{{{q.answer}}}", lambda: "\\boxed{e}")

    def rule(messages, tools, schema):
        text = messages[-1]["content"]
        return final() if "Give the final answer" in text else "memory: notes"

    (group,) = await tasks.group(ScriptedLLM(rule), 0, 2, 1.0)
    assert sorted(t.reward for t in group) == [0.0, 1.0]
    sub = ReadTasks([conv], reward="sub_em")  # the dense score of the same box: a fragment earns nothing
    final2 = alternate(lambda: f"\\boxed{{{q.answer}}}", lambda: f"\\boxed{{{str(q.answer)[0]}}}")
    rule2 = lambda m, t, s: final2() if "Give the final answer" in m[-1]["content"] else "notes"  # noqa: E731
    (group,) = await sub.group(ScriptedLLM(rule2), 0, 2, 1.0)
    assert sorted(t.reward for t in group) == [0.0, 1.0]


async def test_answer_rewards_the_answer_and_charges_guesses(conv):
    tasks = AnswerTasks([conv], embedder="hashing")
    await tasks.setup()
    q = tasks.items[0][1]
    pick = alternate(lambda: str(q.answer), lambda: f"{q.answer}, Paris, London, 2023, yes")
    (group,) = await tasks.group(ScriptedLLM(lambda m, t, s: pick()), 0, 2, 1.0)
    by = {t.metrics["prediction"]: t for t in group}
    honest, guesses = by[str(q.answer)], by[f"{q.answer}, Paris, London, 2023, yes"]
    assert honest.reward == 1.0 and 0 < guesses.reward < 0.7
    assert guesses.metrics["train_reward"] == guesses.reward  # the official F1 is logged beside it


async def test_answer_pays_a_multi_hop_list_by_locomos_comma_split_f1(conv):
    """The question's category reaches the reward: a multi-hop gold "running, swimming" pays the full
    list more than one item of it, and one item repeated as one item, not as the list (issue 54)."""
    tasks = AnswerTasks([conv], embedder="hashing")
    await tasks.setup()
    k = next(i for i, (_, q) in enumerate(tasks.items) if q.answer == "running, swimming")
    assert tasks.items[k][1].category_id == 1
    answers = ["running, swimming", "running", "running, running, running", "running and swimming"]
    group = [await tasks.rollout(ScriptedLLM(lambda m, t, s, a=a: a), k, 1.0) for a in answers]
    paid = {t.metrics["prediction"]: t.reward for t in group}
    assert paid["running, swimming"] == 1.0
    assert paid["running"] == pytest.approx(0.5) == group[1].metrics["f1"]  # the official metric, logged
    assert paid["running, running, running"] == pytest.approx(1 / 3)
    assert paid["running and swimming"] == pytest.approx(group[3].metrics["f1"])  # 2/3: was 1/8
    assert paid["running and swimming"] > paid["running"]


async def test_update_rewards_the_fix_not_a_blind_merge(conv):
    tasks = UpdateTasks([conv], embedder="hashing")
    await tasks.setup()
    k = next(i for i, (_, q) in enumerate(tasks.items) if q.category != "multi-hop")
    q = tasks.items[k][1]
    ns = f"{conv.id}@obs"
    for item in await tasks.memory.list(namespace=ns):  # a memory that lost the fact the question needs
        if str(q.answer).lower() in item.content.lower():
            await tasks.memory.delete(item.id, namespace=ns)
    calls = {"n": 0}

    def policy(messages, tools, schema):
        first = messages[1]["content"]
        if messages[-1]["role"] != "user":
            return "Done."
        calls["n"] += 1
        if calls["n"] % 2:  # the fix: write the fact the question asks for
            return {"tool_calls": [{"name": "manage_memory", "arguments": {
                "operation": "create", "content": f"{q.question} {q.answer}."}}]}  # fmt: skip
        ids = re.findall(r"^\[([^\]]+)\]", first, re.M)[:3]
        return {"tool_calls": [{"name": "merge_memory", "arguments": {"memory_ids": ids}}]}

    (group,) = await tasks.group(ScriptedLLM(policy), k, 2, 1.0)
    fix, merge = sorted(group, key=lambda t: -(t.metrics.get("calls/manage_memory", 0)))
    assert fix.metrics["calls/manage_memory"] == 1 and merge.metrics["calls/merge_memory"] == 1
    assert fix.reward > 0 and fix.reward > merge.reward
    assert merge.reward <= 0


async def test_build_rewards_the_session_facts_and_a_failure_is_no_reward(conv):
    from memrl.eval.redteam.build import oracle_answer

    tasks = BuildTasks([conv], embedder="hashing")
    await tasks.setup()
    _, session, questions = tasks.items[0]
    facts = {
        "operations": [{"operation": "ADD", "memory": f"{q.question} {q.answer}"} for q in questions[:2]]
    }
    n = {"k": 0}
    reader = oracle_answer(conv)  # ADRPO answers with the policy's own model: here, an oracle reader

    def agents(messages, tools, schema):
        system = messages[0]["content"]
        if "You answer questions" in system:
            return reader(messages, tools, schema)
        n["k"] += 1  # rollout 0's four agents answer first
        if "CORE memory" in system:
            return json.dumps({"operation": "APPEND", "content": "-"})
        return json.dumps(facts if n["k"] <= 4 and "EPISODIC memory" in system else {"operations": []})

    groups = await tasks.group(ScriptedLLM(agents), 0, 2, 1.0)
    episodic = next(g for g in groups if g[0].info["memory_type"] == "episodic")
    assert episodic[0].reward > episodic[1].reward >= 0.0
    assert episodic[0].metrics["expert_length"] > 0  # the expert's length reached the length penalty

    def down(messages, tools, schema):
        raise ProviderError("back-end down")

    for group in await tasks.group(ScriptedLLM(down), 0, 2, 1.0):
        assert all(t.reward is None and t.failure for t in group)

"""The MemBuilder agents on a real store, driven by a scripted LLM that answers by the memory type named in
the request's system prompt: items of each type with evidence and dates, UPDATE replacing, failures
recorded per agent, core compression, retrieved vs full context, trajectories, schemas. One slow test runs
the real offline model on one session of the bundled sample conversation."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest

from memrl.agents.base import create_builder
from memrl.agents.membuilder import MemBuilderAgent, MemBuilderConfig
from memrl.agents.membuilder.schema import budget_schema, worst_case_tokens
from memrl.data import load_dataset
from memrl.errors import ConfigError, ProviderError
from memrl.llm.base import ChatResponse
from memrl.llm.scripted import ScriptedLLM
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.records.types import MemoryType
from memrl.memory.store.base import CORE_ID
from memrl.tools.membuilder import action_schema

NS = "sample-1@membuilder"
TYPES = ("core", "episodic", "semantic", "procedural")


@pytest.fixture(scope="module")
def conv():
    return load_dataset("sample")[0][0]


def kind(messages: list[dict[str, Any]]) -> str:
    """Which agent a request comes from (``compress`` for the core compression call)."""
    if "Rewrite it in under" in messages[-1]["content"]:
        return "compress"
    return next(t for t in TYPES if f"is the {t.upper()} memory" in messages[0]["content"])


def ids_shown(messages: list[dict[str, Any]]) -> list[str]:
    return re.findall(r"^\[([0-9a-f]{12})\]", messages[-1]["content"], re.M)


DEFAULT = {
    "core": {"operation": "APPEND", "content": "Lena: lives in Leeds, has a dog named Biscuit."},
    "episodic": {
        "operations": [
            {
                "operation": "ADD",
                "memory": "2024-02-25: Lena adopted Biscuit | Details: "
                "a small brown dog from a shelter in Leeds",
            }
        ]
    },  # fmt: skip
    "semantic": {
        "operations": [{"operation": "ADD", "memory": "Lena - Pets: dog Biscuit | Details: adopted"}]
    },
    "procedural": {
        "operations": [
            {
                "operation": "ADD",
                "memory": "Teach a dog to sit | Steps: 1) treat 2) praise | Context: Biscuit",
            }
        ]
    },  # fmt: skip
}


def rule(**answers: Any):
    """A ScriptedLLM rule: per agent, a reply (dict -> JSON text, str as is, callable(messages), or an
    exception to raise); agents not given answer with DEFAULT."""

    def reply(messages, tools, json_schema):
        a = {**DEFAULT, **answers}[kind(messages)]
        if callable(a):
            a = a(messages)
        if isinstance(a, Exception):
            raise a
        return a if isinstance(a, (str, ChatResponse)) else json.dumps(a)

    return reply


async def test_session_builds_items_of_each_type(amem: AsyncMemory, conv):
    llm = ScriptedLLM(rule())
    agent = MemBuilderAgent(llm)
    s1 = conv.sessions[0]
    r = await agent.build_session(amem, NS, conv, s1)

    assert r.failures == [] and r.llm_calls == 4
    assert r.stats["parsed"] == 4 and r.stats["actions_applied"] == r.stats["actions_proposed"] == 4
    assert await amem.core(namespace=NS) == DEFAULT["core"]["content"]
    items = await amem.list(namespace=NS)
    assert sorted(i.type.value for i in items) == ["episodic", "procedural", "semantic"]
    turn_ids = tuple(t.id for t in s1.turns)
    for i in items:
        assert i.evidence == turn_ids and i.session == "1"
        assert i.metadata == {"date": s1.date.isoformat(), "date_text": s1.date_text, "session": 1}
    # Applied in the fixed order core, episodic, semantic, procedural, by the agent of each type.
    actors = [h.actor for h in await amem.history(namespace=NS)]
    assert actors == [f"membuilder:{t}" for t in TYPES]

    # One trajectory per agent, one step each, with the request's messages and the answer.
    assert [t.task_id for t in r.trajectories] == [f"sample-1:s1:{t}" for t in TYPES]
    for traj in r.trajectories:
        assert traj.agent == "membuilder" and traj.failure is None and len(traj.steps) == 1
        assert traj.steps[0].role == traj.info["memory_type"] and traj.metrics["applied"] == 1
    assert r.prompt_tokens == sum(t.prompt_tokens for t in r.trajectories) > 0

    # Every call is constrained by its action schema, narrowed to the budget of the config and to the
    # operations that can apply: on an empty memory, only APPEND / ADD (and SKIP).
    cfg = agent.config
    offered = {"core": ("APPEND",), "episodic": ("ADD",), "semantic": ("ADD", "SKIP"), "procedural": ("ADD",)}
    for req in llm.requests:
        t = MemoryType(kind(req.messages))
        assert agent.offered(t, core="", own_ids=[]) == offered[t.value]
        assert req.json_schema == budget_schema(
            t, operations=offered[t.value], max_operations=cfg.max_operations, max_chars=cfg.max_item_chars
        )
        assert req.sampling.max_tokens == cfg.answer_budget
    ep = llm.requests[1].json_schema["properties"]["operations"]
    assert ep["maxItems"] == cfg.max_operations
    assert ep["items"]["properties"]["memory"]["maxLength"] == cfg.max_item_chars
    assert action_schema("episodic")["properties"]["operations"]["maxItems"] >= cfg.max_operations


async def test_registry_builds_the_agent():
    agent = create_builder("membuilder", llm=ScriptedLLM(rule()))
    assert isinstance(agent, MemBuilderAgent) and agent.config.context == "retrieved"


async def test_update_replaces_an_existing_item(amem: AsyncMemory, conv):
    old = await amem.add(
        "2024-02-25: Lena adopted a dog | Details: from a shelter", namespace=NS, type="episodic"
    )

    def update(messages):
        assert old.id in ids_shown(messages)
        return {"operations": [{"operation": "UPDATE", "old_memory": old.id,
                                "new_memory": "2024-02-25: Lena adopted Biscuit | Details: shelter in Leeds"}]}  # fmt: skip

    llm = ScriptedLLM(rule(episodic=update))
    r = await MemBuilderAgent(llm).build_session(amem, NS, conv, conv.sessions[0])
    # One item shown: UPDATE is offered (by id: a reference as long as an id), MERGE is not.
    schema = next(q.json_schema for q in llm.requests if kind(q.messages) == "episodic")
    alts = {
        a["properties"]["operation"]["const"]: a for a in schema["properties"]["operations"]["items"]["anyOf"]
    }
    assert set(alts) == {"ADD", "UPDATE"} and alts["UPDATE"]["properties"]["old_memory"]["maxLength"] == 12
    assert r.stats["agents"]["episodic"] == {**r.stats["agents"]["episodic"], "applied": 1, "failed": 0}
    episodic = await amem.list(namespace=NS, types=["episodic"])
    assert [i.id for i in episodic] == [old.id] and "Biscuit" in episodic[0].content
    assert [h.op for h in await amem.history(old.id, namespace=NS)][-1] == "UPDATE"
    assert set(episodic[0].evidence) == {t.id for t in conv.sessions[0].turns}


async def test_bad_answers_are_recorded_and_the_others_apply(amem: AsyncMemory, conv):
    cut = ChatResponse(
        '{"operations": [{"operation": "ADD", "memory": "2024-03-03:15:15:15', finish_reason="length"
    )
    llm = ScriptedLLM(
        rule(core=cut, semantic="I think Lena likes dogs.", procedural=ProviderError("server down"))
    )
    r = await MemBuilderAgent(llm).build_session(amem, NS, conv, conv.sessions[0])

    failures = [("core", "parse"), ("semantic", "parse"), ("procedural", "llm")]
    assert [(f["type"], f["stage"]) for f in r.failures] == failures
    assert "cut at max_tokens" in r.failures[0]["error"] and "server down" in r.failures[2]["error"]
    assert r.stats["parsed"] == 1 and r.llm_calls == 4
    by_type = {t.info["memory_type"]: t for t in r.trajectories}
    # an unparsable answer is the policy's error (invalid, reward 0 in training), not an infrastructure failure
    assert by_type["semantic"].failure is None and by_type["semantic"].metrics["invalid"] is True
    assert len(by_type["semantic"].steps) == 1  # the answer is kept as data
    assert by_type["procedural"].failure and by_type["procedural"].steps == []
    assert by_type["episodic"].failure is None
    assert sorted(i.type.value for i in await amem.list(namespace=NS)) == ["episodic"]
    assert await amem.core(namespace=NS) == ""


async def test_operations_outside_the_config_are_rejected_not_applied(amem: AsyncMemory, conv):
    # A back-end without constrained decoding may ignore the schema: REWRITE is not offered by default,
    # and only max_operations operations are applied.
    five = {"operations": [{"operation": "ADD", "memory": f"Lena - Fact {i}: x"} for i in range(5)]}
    llm = ScriptedLLM(rule(core={"operation": "REWRITE", "content": "wiped"}, semantic=five))
    await amem.core_append("Lena: lives in Leeds.", namespace=NS)
    r = await MemBuilderAgent(llm).build_session(amem, NS, conv, conv.sessions[0])
    assert await amem.core(namespace=NS) == "Lena: lives in Leeds."
    assert r.stats["agents"]["core"]["failed"] == 1 and r.failures == []
    assert r.stats["agents"]["semantic"]["applied"] == 3 and r.stats["agents"]["semantic"]["failed"] == 2
    assert await amem.count(namespace=NS, types=["semantic"]) == 3


async def test_core_compression_near_the_limit(amem: AsyncMemory, conv):
    await amem.core_rewrite("Lena likes walks in the park. " * 149, namespace=NS)  # 4,470 characters
    short = "Lena: lives in Leeds; dog Biscuit; likes walks in the park."
    llm = ScriptedLLM(rule(compress={"operation": "REWRITE", "content": short}))
    agent = MemBuilderAgent(llm)
    r = await agent.build_session(amem, NS, conv, conv.sessions[0])

    # The APPEND took it over 90% of 5,000: one extra, recorded call rewrote it under 3,000.
    assert r.stats["compressed"] and r.llm_calls == 5 and r.failures == []
    assert await amem.core(namespace=NS) == short
    core_traj = next(t for t in r.trajectories if t.info["memory_type"] == "core")
    assert len(core_traj.steps) == 2 and core_traj.metrics["compressions"] == 1
    req = next(q for q in llm.requests if kind(q.messages) == "compress")
    assert req.json_schema == agent.compress_schema
    assert req.json_schema["properties"]["content"]["maxLength"] < 3000
    assert [h.op for h in await amem.history(CORE_ID, namespace=NS)][-2:] == ["CORE_APPEND", "CORE_REWRITE"]

    # Below the threshold nothing happens; a compression that does not shorten is a recorded failure.
    r = await agent.build_session(amem, NS, conv, conv.sessions[1])
    assert not r.stats["compressed"] and r.llm_calls == 4
    await amem.core_rewrite("x" * 4600, namespace=NS)
    llm2 = ScriptedLLM(rule(core={"operation": "REPLACE", "old_text": "xx", "new_text": "xx"},
                            compress={"operation": "REWRITE", "content": "y" * 4700}))  # fmt: skip
    r = await MemBuilderAgent(llm2).build_session(amem, NS, conv, conv.sessions[2])
    assert [(f["type"], f["stage"]) for f in r.failures] == [("core", "compress")] * 2  # before and after
    assert not r.stats["compressed"] and await amem.core(namespace=NS) == "x" * 4600
    assert (
        next(t for t in r.trajectories if t.info["memory_type"] == "core").failure is None
    )  # the model's fault

    # The provider failing on the compression call is not the model's doing: the rollout is marked failed.
    llm3 = ScriptedLLM(rule(core={"operation": "REPLACE", "old_text": "xx", "new_text": "xx"},
                            compress=ProviderError("HTTP 502")))  # fmt: skip
    r = await MemBuilderAgent(llm3).build_session(amem, NS, conv, conv.sessions[2])
    core_traj = next(t for t in r.trajectories if t.info["memory_type"] == "core")
    assert "HTTP 502" in core_traj.failure and core_traj.steps[-1].error
    assert await amem.core(namespace=NS) == "x" * 4600


async def _store_with_many_items(amem: AsyncMemory) -> str:
    topics = ["museum", "marathon", "guitar", "garden", "chess", "sailing", "bakery", "opera", "hiking"]
    for t in ("episodic", "semantic", "procedural"):
        for i in range(40):
            topic = topics[i % len(topics)]
            await amem.add(f"2023-01-{i % 28 + 1:02d}: Omar talked about {topic} number {i} | Details: "
                           f"a long story about the {topic} club and its members", namespace=NS, type=t)  # fmt: skip
    old = await amem.add("2024-02-25: Lena adopted a dog | Details: from a shelter in Leeds, named Biscuit",
                         namespace=NS, type="episodic")  # fmt: skip
    return old.id


async def test_retrieved_context_is_cheaper_and_keeps_what_update_needs(amem: AsyncMemory, conv):
    target = await _store_with_many_items(amem)
    await amem.clone(NS, "full")
    seen: dict[str, list[str]] = {}

    def update(messages):
        seen.setdefault("ids", []).append(ids_shown(messages))
        return {"operations": [{"operation": "UPDATE", "old_memory": target,
                                "new_memory": "2024-02-25: Lena adopted Biscuit, a small brown dog | Details: Leeds"}]}  # fmt: skip

    results = {}
    for ctx, ns in (("retrieved", NS), ("full", "full")):
        llm = ScriptedLLM(rule(episodic=update))
        agent = MemBuilderAgent(llm, MemBuilderConfig(context=ctx, context_k=5))
        results[ctx] = await agent.build_session(amem, ns, conv, conv.sessions[0])
        assert (await amem.get(target, namespace=ns)).content.startswith("2024-02-25: Lena adopted Biscuit")

    retrieved, full = results["retrieved"], results["full"]
    assert retrieved.prompt_tokens * 4 < full.prompt_tokens
    assert target in seen["ids"][0] and len(seen["ids"][0]) == 5  # own type only, top-k, with the target
    assert len(seen["ids"][1]) == 121  # full: every item of every type
    assert retrieved.stats["agents"]["episodic"]["context_items"] == 5
    assert retrieved.stats["agents"]["core"]["context_items"] == 0


def test_worst_case_tokens_bounds_the_longest_answer():
    # The tool's own schema has unbounded strings (references): no budget is safe under it.
    assert worst_case_tokens(action_schema("episodic")) == float("inf")
    schema = budget_schema("episodic", operations=("ADD",), max_operations=3, max_chars=200)
    longest = {"operations": [{"operation": "ADD", "memory": "7" * 200}] * 3}  # digits: one token each
    bound = worst_case_tokens(schema)
    assert 3 * 200 < bound <= len(json.dumps(longest))
    assert MemBuilderConfig(types=("episodic",)).answer_budget >= bound


def test_config_checks_the_token_budget():
    with pytest.raises(ConfigError, match="Raise it"):
        MemBuilderConfig(max_operations=10, max_item_chars=600, max_tokens=2000)
    with pytest.raises(ConfigError, match="types"):
        MemBuilderConfig(types=("core", "memes"))
    big = MemBuilderConfig(max_operations=10, max_item_chars=600)
    assert big.max_tokens is None and big.answer_budget > 6000  # derived, and replace() keeps working
    assert dataclasses.replace(big, max_operations=2).answer_budget < big.answer_budget


@pytest.mark.slow
async def test_real_model_builds_one_session(amem: AsyncMemory, conv):
    from memrl.llm import create_llm

    llm = create_llm("local")
    # A small budget keeps the test short (~150 tokens per answer at worst); the grammar still closes it.
    agent = MemBuilderAgent(llm, MemBuilderConfig(max_operations=1, max_item_chars=100))
    r = await agent.build_session(amem, NS, conv, conv.sessions[0])
    assert r.stats["parsed"] == 4, r.failures  # constrained decoding: every answer parses
    # ... and finishes within the budget derived from the schema (the grammar closed it, not max_tokens).
    assert all(a["finish_reason"] == "stop" for a in r.stats["agents"].values())
    assert all(t.completion_tokens <= agent.config.answer_budget for t in r.trajectories)
    assert r.llm_calls == 4 and r.completion_tokens > 0
    assert all(t.has_tokens and t.steps[0].logprobs for t in r.trajectories)  # what trainers consume
    # what the model wrote was applied: every applied action's text is in the store, where it belongs
    applied = r.stats["actions_applied"]
    items = {i.content for i in await amem.list(namespace=NS)}
    core = await amem.core(namespace=NS)
    written = 0
    for t in r.trajectories:
        for a in t.info["report"]["applied"]:
            text = a.get("memory") or a.get("new_memory") or a.get("content") or a.get("new_text") or ""
            assert text in (core if t.info["memory_type"] == "core" else items), (a, items, core)
            written += 1
    assert written == applied <= r.stats["actions_proposed"]
    assert len(await amem.history(None, namespace=NS)) >= applied

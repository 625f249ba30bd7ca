"""The ``annotations`` builder: MemBuilder's agents answered by the annotation expert, in ``memrl eval``."""

from __future__ import annotations

import pytest

from memrl.agents.base import create_builder
from memrl.agents.membuilder import MemBuilderAgent, MemBuilderConfig
from memrl.agents.membuilder import prompts as P
from memrl.agents.membuilder.annotations import AnnotationsConfig
from memrl.agents.membuilder.experts import annotation_action, annotation_expert
from memrl.data import load_dataset
from memrl.errors import ConfigError
from memrl.eval.qa import QAEvaluation
from memrl.eval.qa.config import QAEvalConfig
from memrl.llm import ScriptedLLM
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.records.types import MemoryType

SAMPLE = load_dataset("sample")[0][0]


async def _contents(memory: AsyncMemory, ns: str) -> list[tuple[str, str]]:
    return sorted((i.type.value, i.content) for i in await memory.list(namespace=ns))


async def test_it_writes_the_memory_the_experts_actions_build():
    """Session by session, the same items and core memory as MemBuilder's agents driven by the expert
    (the SFT targets), and a build that costs no model call."""
    builder = create_builder("annotations")
    expected, built = AsyncMemory(":memory:", embedder="hashing"), AsyncMemory(":memory:", embedder="hashing")
    try:
        expert = annotation_expert(SAMPLE, max_items=10, core="first", interleave=True)
        agent = MemBuilderAgent(expert, MemBuilderConfig(max_operations=10))
        for s in SAMPLE.sessions:
            await agent.build_session(expected, "x", SAMPLE, s)
            r = await builder.build_session(built, "x", SAMPLE, s)
            assert r.failures == [] and r.stats["parsed"] == 4 and r.stats["actions_applied"] > 0
            assert (r.llm_calls, r.prompt_tokens, r.completion_tokens) == (0, 0, 0)
            assert r.stats["expert_words"] > 0
        assert await _contents(built, "x") == await _contents(expected, "x")
        assert await built.core(namespace="x") == await expected.core(namespace="x")
    finally:
        await expected.close()
        await built.close()


def test_it_takes_membuilders_options_and_its_own():
    builder = create_builder("annotations", options=["max_operations=2", "context=full", "core=first"])
    assert builder.config.max_operations == 2 and builder.agent(SAMPLE).config.context == "full"
    assert builder.config.core == "first"
    assert create_builder("annotations").config.max_operations == 10  # every annotation, not MemBuilder's 3
    with pytest.raises(ConfigError, match="core must be one of"):
        AnnotationsConfig(core="none")


def _semantic_prompt(session_index: int = 0, core: str = "") -> list[dict]:
    session = SAMPLE.sessions[session_index]
    return P.agent_messages(MemoryType.SEMANTIC, P.session_block(session), core, operations=("ADD",))


def test_a_cut_keeps_every_speakers_facts():
    """Facts are taken from the speakers in turn: a cut at two keeps one of each speaker, not the first
    speaker's first two."""
    obs = SAMPLE.metadata["observation"]["session_1_observation"]
    speakers = [who for who, rows in obs.items() if rows]
    assert len(speakers) == 2 and all(len(obs[w]) >= 2 for w in speakers)  # the sample can show it
    ops = annotation_action(SAMPLE, _semantic_prompt(), max_items=2, interleave=True)["operations"]
    assert [o["memory"].split(" - ")[0] for o in ops] == speakers
    in_file_order = annotation_action(SAMPLE, _semantic_prompt(), max_items=2)["operations"]
    assert [o["memory"].split(" - ")[0] for o in in_file_order] == [speakers[0]] * 2  # the rewards' expert
    every = annotation_action(SAMPLE, _semantic_prompt(), max_items=10, interleave=True)["operations"]
    assert len(every) == sum(len(r) for r in obs.values())


async def test_core_first_keeps_the_first_sessions_core():
    """``core=first``: later sessions leave core memory as the first session wrote it (a REPLACE of a line
    by itself), where ``sessions`` appends each session's first observations."""
    built = {}
    for mode in ("first", "sessions"):
        memory = AsyncMemory(":memory:", embedder="hashing")
        try:
            builder = create_builder("annotations", options=[f"core={mode}"])
            cores = []
            for s in SAMPLE.sessions:
                r = await builder.build_session(memory, "x", SAMPLE, s)
                assert r.failures == [] and r.stats["parsed"] == 4
                cores.append(await memory.core(namespace="x"))
            built[mode] = cores
        finally:
            await memory.close()
    assert len(SAMPLE.sessions) >= 2
    assert built["first"] == [built["first"][0]] * len(SAMPLE.sessions) and built["first"][0].strip()
    assert built["sessions"][0] == built["first"][0] and len(built["sessions"][-1]) > len(built["first"][0])


async def test_memrl_eval_builds_without_the_model_and_answers_with_it(tmp_path):
    """The answerer is asked once per question and never while building; the report counts no build
    tokens."""
    llm = ScriptedLLM(lambda messages, tools, schema: "Biscuit")
    cfg = QAEvalConfig(dataset="sample", builder="annotations", embedder="hashing", provider="scripted",
                       output_dir=str(tmp_path / "run"), cache=False)  # fmt: skip
    summary = await QAEvaluation(cfg, llm=llm, progress=False).run()
    assert len(llm.requests) == summary["n_questions"] == summary["n_answered"] == 10
    assert all("Question" in r.messages[-1]["content"] for r in llm.requests)
    b = summary["build"]
    assert b["sessions"] == len(SAMPLE.sessions) and b["llm_calls"] == 0 and b["tokens_per_session"] == 0
    memory = AsyncMemory(str(cfg.out / "memory.db"), embedder="hashing")
    try:
        items = await memory.list(namespace=f"{SAMPLE.id}@annotations")
        assert {i.type.value for i in items} == {"episodic", "semantic"}
        # every stored item was one applied ADD (besides the core memory's writes)
        assert b["actions_applied"] >= len(items) > 0
    finally:
        await memory.close()


async def test_membuilder_can_build_with_another_model_than_the_answerer(tmp_path):
    """``builder_model``: the agents run one model (here the expert itself, as an SFT checkpoint would), the
    questions another; the memory equals the annotations builder's."""
    answerer = ScriptedLLM(lambda messages, tools, schema: "Biscuit")
    cfg = QAEvalConfig(dataset="sample", builder="membuilder", builder_model="sft-checkpoint", embedder="hashing",
                       provider="scripted", output_dir=str(tmp_path / "mb"), cache=False)  # fmt: skip
    run = QAEvaluation(
        cfg, llm=answerer, builder_llm=annotation_expert(SAMPLE, interleave=True), progress=False
    )
    summary = await run.run()
    assert len(answerer.requests) == summary["n_answered"] == 10
    assert len(run.builder_llm.requests) == 4 * len(SAMPLE.sessions)
    assert summary["build"]["llm_calls"] == 4 * len(SAMPLE.sessions)
    ann = QAEvalConfig(dataset="sample", builder="annotations", embedder="hashing", provider="scripted",
                       output_dir=str(tmp_path / "ann"), cache=False, mode="build",
                       builder_option=("max_operations=3",))  # fmt: skip
    await QAEvaluation(ann, llm=answerer, progress=False).run()
    a = AsyncMemory(str(cfg.out / "memory.db"), embedder="hashing")
    b = AsyncMemory(str(ann.out / "memory.db"), embedder="hashing")
    try:
        assert await _contents(a, f"{SAMPLE.id}@membuilder") == await _contents(b, f"{SAMPLE.id}@annotations")
    finally:
        await a.close()
        await b.close()


async def test_the_answer_prompt_puts_retrieved_memories_before_core_memory():
    """A small reader copies the prompt's first lines: memory 1 comes first, core memory after the list."""
    from memrl.scoring.answer import answer_messages

    memory = AsyncMemory(":memory:", embedder="hashing")
    try:
        await memory.core_append("Lena has a dog.", namespace="x")
        await memory.add("Lena adopted Biscuit in May.", namespace="x")
        q = SAMPLE.questions[0]
        hits = await memory.search(q.question, namespace="x", top_k=5)
        prompt = answer_messages(SAMPLE, q, await memory.core(namespace="x"), hits)[-1]["content"]
        assert prompt.index("1. ") < prompt.index("Core memory:\nLena has a dog.") < prompt.index("Question")
        assert prompt.startswith("Memories (most relevant first):\n1. ")
        no_core = answer_messages(SAMPLE, q, "", hits)[-1]["content"]
        assert "Core memory" not in no_core
    finally:
        await memory.close()

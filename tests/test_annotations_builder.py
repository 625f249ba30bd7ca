"""The ``annotations`` builder: MemBuilder's agents answered by the annotation expert, in ``memrl eval``."""

from __future__ import annotations

from memrl.agents.base import create_builder
from memrl.agents.experts import annotation_expert
from memrl.agents.membuilder import MemBuilderAgent
from memrl.data import load_dataset
from memrl.eval.qa import QAEvaluation
from memrl.eval.qa_config import QAEvalConfig
from memrl.llm import ScriptedLLM
from memrl.memory.facade import AsyncMemory

SAMPLE = load_dataset("sample")[0][0]


async def _contents(memory: AsyncMemory, ns: str) -> list[tuple[str, str]]:
    return sorted((i.type.value, i.content) for i in await memory.list(namespace=ns))


async def test_it_writes_the_memory_the_experts_actions_build():
    """Session by session, the same items and core memory as MemBuilder's agents driven by the expert
    (the SFT targets), and a build that costs no model call."""
    builder = create_builder("annotations")
    expected, built = AsyncMemory(":memory:", embedder="hashing"), AsyncMemory(":memory:", embedder="hashing")
    try:
        agent = MemBuilderAgent(annotation_expert(SAMPLE))
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


def test_it_takes_membuilders_options():
    builder = create_builder("annotations", options=["max_operations=2", "context=full"])
    assert builder.config.max_operations == 2 and builder.agent(SAMPLE).config.context == "full"


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
        types = {i.type.value for i in await memory.list(namespace=f"{SAMPLE.id}@annotations")}
        assert types == {"episodic", "semantic"}
    finally:
        await memory.close()


async def test_membuilder_can_build_with_another_model_than_the_answerer(tmp_path):
    """``builder_model``: the agents run one model (here the expert itself, as an SFT checkpoint would), the
    questions another; the memory equals the annotations builder's."""
    answerer = ScriptedLLM(lambda messages, tools, schema: "Biscuit")
    cfg = QAEvalConfig(dataset="sample", builder="membuilder", builder_model="sft-checkpoint", embedder="hashing",
                       provider="scripted", output_dir=str(tmp_path / "mb"), cache=False)  # fmt: skip
    run = QAEvaluation(cfg, llm=answerer, builder_llm=annotation_expert(SAMPLE), progress=False)
    summary = await run.run()
    assert len(answerer.requests) == summary["n_answered"] == 10
    assert len(run.builder_llm.requests) == 4 * len(SAMPLE.sessions)
    assert summary["build"]["llm_calls"] == 4 * len(SAMPLE.sessions)
    ann = QAEvalConfig(dataset="sample", builder="annotations", embedder="hashing", provider="scripted",
                       output_dir=str(tmp_path / "ann"), cache=False, mode="build")  # fmt: skip
    await QAEvaluation(ann, llm=answerer, progress=False).run()
    a = AsyncMemory(str(cfg.out / "memory.db"), embedder="hashing")
    b = AsyncMemory(str(ann.out / "memory.db"), embedder="hashing")
    try:
        assert await _contents(a, f"{SAMPLE.id}@membuilder") == await _contents(b, f"{SAMPLE.id}@annotations")
    finally:
        await a.close()
        await b.close()

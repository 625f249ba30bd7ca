"""What MemBuilder's SFT data teaches (issue 61): core SKIP, the expert's repeats, the counts
``memrl train sft-membuilder`` prints, and the rule that thins empty targets. The expert is the bundled
sample conversation's annotations (a scripted LLM); the agents, store and action code are the real ones."""

from __future__ import annotations

import dataclasses
import json

import pytest

from memrl.agents.base import create_builder
from memrl.agents.membuilder import MemBuilderAgent, MemBuilderConfig
from memrl.agents.membuilder import prompts as P
from memrl.agents.membuilder.annotations import AnnotationsConfig
from memrl.agents.membuilder.config import prompt_options
from memrl.agents.membuilder.experts import annotation_action, annotation_expert
from memrl.cli.main import main
from memrl.data import load_dataset
from memrl.memory import AsyncMemory
from memrl.memory.records.types import MemoryType
from memrl.tools.membuilder import apply_actions
from memrl.train.sft_data import format_stats, sft_data_stats, thin_empty
from tests.tiny_lm import make_tiny_lm

SAMPLE = load_dataset("sample")[0][0]


async def test_a_core_skip_leaves_core_as_it_is_and_is_counted():
    m = AsyncMemory(":memory:", embedder="hashing")
    try:
        await m.core_append("Lena runs.", namespace="u")
        r = await apply_actions(m, "u", "core", {"operation": "SKIP", "reason": "nothing lasting"})
        assert r.parsed and r.failed == [] and r.skips == 1 and r.written_chars == 0
        assert await m.core(namespace="u") == "Lena runs."
    finally:
        await m.close()


def test_core_skip_is_offered_only_where_asked_and_an_adapter_records_it():
    core = MemoryType.CORE
    assert "SKIP" not in MemBuilderConfig().operations(core)  # the untrained agents and the shipped adapter
    assert MemBuilderConfig(core_skip=True).operations(core) == ("APPEND", "REPLACE", "SKIP")
    assert "core_skip=True" in prompt_options(AnnotationsConfig())  # the new SFT data's prompts
    assert "core_skip=True" not in prompt_options(AnnotationsConfig(core_skip=False))


def _prompt(mtype: MemoryType, memory: str, ops: tuple[str, ...], session: int = 1) -> list[dict]:
    block = P.session_block(SAMPLE.sessions[session])
    return P.agent_messages(mtype, block, memory, operations=ops)


def test_the_expert_keeps_core_with_a_skip_where_offered_else_a_self_replace():
    held = "Core memory:\nLena adopted Biscuit.\nOmar bakes."
    skip = annotation_action(
        SAMPLE, _prompt(MemoryType.CORE, held, ("APPEND", "REPLACE", "SKIP")), core="first"
    )
    old = annotation_action(SAMPLE, _prompt(MemoryType.CORE, held, ("APPEND", "REPLACE")), core="first")
    assert skip["operation"] == "SKIP"
    assert old == {"operation": "REPLACE", "old_text": "Omar bakes.", "new_text": "Omar bakes."}


def test_dedupe_adds_no_fact_the_prompt_shows_and_skips_when_nothing_is_new():
    facts = [o["memory"] for o in annotation_action(SAMPLE, _prompt(MemoryType.SEMANTIC, "", ("ADD",)),
                                                     max_items=10)["operations"]]  # fmt: skip
    shown = "Core memory:\n(empty)\n\nExisting semantic memories:\n" + f"[abc123] {facts[0]}"
    ops = ("ADD", "UPDATE", "SKIP")
    new = annotation_action(SAMPLE, _prompt(MemoryType.SEMANTIC, shown, ops), max_items=10, dedupe=True)
    assert [o["memory"] for o in new["operations"]] == facts[1:]
    again = annotation_action(SAMPLE, _prompt(MemoryType.SEMANTIC, shown, ops), max_items=10)
    assert [o["memory"] for o in again["operations"]] == facts  # the old expert repeats it
    every = "Core memory:\n(empty)\n\nExisting semantic memories:\n" + "\n".join(f"[i{k}] {f}" for k, f in
                                                                            enumerate(facts))  # fmt: skip
    assert annotation_action(SAMPLE, _prompt(MemoryType.SEMANTIC, every, ops), max_items=10, dedupe=True) == {
        "operations": [{"operation": "SKIP", "reason": "nothing new"}]
    }


async def test_the_annotations_builder_passes_interleave_to_its_expert():
    """A cut at two facts keeps one of each speaker with interleave (the default), the first speaker's
    two without (what the builder did from 2f39d65 to issue 61, though it asked for interleave)."""

    async def speakers(interleave: bool) -> list[str]:
        m = AsyncMemory(":memory:", embedder="hashing")
        try:
            b = create_builder("annotations", options=["max_operations=2", f"interleave={interleave}"])
            await b.build_session(m, "x", SAMPLE, SAMPLE.sessions[0])
            return sorted(i.content.split(" - ")[0] for i in await m.list(namespace="x", types=["semantic"]))
        finally:
            await m.close()

    assert await speakers(True) == ["Lena", "Omar"]
    assert await speakers(False) == ["Lena", "Lena"]


async def _expert_trajectories(conv, cfg: AnnotationsConfig) -> list:
    expert = annotation_expert(conv, max_items=cfg.max_operations, core=cfg.core, interleave=cfg.interleave,
                               dedupe=cfg.dedupe)  # fmt: skip
    m = AsyncMemory(":memory:", embedder="hashing")
    try:
        agent, trajs = MemBuilderAgent(expert, cfg), []
        for s in conv.sessions:
            trajs += (await agent.build_session(m, conv.id, conv, s)).trajectories
        return trajs
    finally:
        await m.close()


async def test_the_statistics_of_the_sample_conversations_sft_data():
    """The sample: 3 sessions, 7 events, 14 observations, no procedure."""
    new = sft_data_stats(await _expert_trajectories(SAMPLE, AnnotationsConfig()))
    assert new["agents"] == {
        "core": {"examples": 3, "operations": {"APPEND": 1, "SKIP": 2}, "empty": 0, "skips": 2, "repeats": 0,
                 "unparsed": 0, "failed_actions": 0},
        "episodic": {"examples": 3, "operations": {"ADD": 7}, "empty": 0, "skips": 0, "repeats": 0,
                     "unparsed": 0, "failed_actions": 0},
        "semantic": {"examples": 3, "operations": {"ADD": 14}, "empty": 0, "skips": 0, "repeats": 0,
                     "unparsed": 0, "failed_actions": 0},
        "procedural": {"examples": 3, "operations": {}, "empty": 3, "skips": 0, "repeats": 0, "unparsed": 0,
                       "failed_actions": 0},
    }  # fmt: skip
    assert new["total"] == {"examples": 12, "empty": 3, "skips": 2, "repeats": 0, "unparsed": 0,
                            "failed_actions": 0}  # fmt: skip
    old = sft_data_stats(await _expert_trajectories(SAMPLE, AnnotationsConfig(core_skip=False, dedupe=False)))
    assert old["agents"]["core"]["operations"] == {"APPEND": 1, "REPLACE": 2}
    assert "core: 3 examples; actions: APPEND 1, SKIP 2; empty 0; SKIP 2" in format_stats(new)


async def test_repeats_are_counted_and_the_deduplicating_expert_writes_none():
    """Session 2's annotations repeat a fact of session 1: the old expert's target repeats it (and the
    store refuses it: a failed action), the deduplicating expert's does not."""
    obs = json.loads(json.dumps(SAMPLE.metadata["observation"]))
    obs["session_2_observation"]["Lena"].append(obs["session_1_observation"]["Lena"][0])
    conv = dataclasses.replace(SAMPLE, metadata={**SAMPLE.metadata, "observation": obs})
    old = sft_data_stats(await _expert_trajectories(conv, AnnotationsConfig(dedupe=False)))
    new = sft_data_stats(await _expert_trajectories(conv, AnnotationsConfig()))
    assert (old["agents"]["semantic"]["repeats"], old["agents"]["semantic"]["failed_actions"]) == (1, 1)
    assert (new["agents"]["semantic"]["repeats"], new["agents"]["semantic"]["failed_actions"]) == (0, 0)
    assert new["agents"]["semantic"]["operations"] == {"ADD": 14}


async def test_thin_empty_keeps_a_seeded_share_and_at_least_one():
    trajs = await _expert_trajectories(SAMPLE, AnnotationsConfig())
    kept, dropped = thin_empty(trajs, 0.1, seed=0)
    assert dropped == 2 and sft_data_stats(kept)["agents"]["procedural"]["examples"] == 1
    assert len(kept) == 10 and [t.task_id for t in kept] == [t.task_id for t in trajs if t in kept]
    assert thin_empty(trajs, 1.0)[1] == 0 and thin_empty(trajs, 0.0)[1] == 3
    assert thin_empty(trajs, 0.1, seed=0)[0] == kept  # seeded
    with pytest.raises(ValueError, match="share"):
        thin_empty(trajs, 1.5)


def test_sft_membuilder_prints_and_keeps_its_datas_statistics(tmp_path, capsys):
    tiny = str(make_tiny_lm(tmp_path / "lm"))
    out = tmp_path / "sft"
    assert main(["train", "sft-membuilder", "--dataset", "sample", "--embedder", "hashing", "--model", tiny,
                 "--max-steps", "0", "--output-dir", str(out)]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "core: 3 examples; actions: APPEND 1, SKIP 2" in printed
    assert "procedural: 1 examples; actions: none; empty 1" in printed  # 2 of its 3 empty targets dropped
    kept = json.loads((out / "sft_data.json").read_text())
    assert (kept["empty_share"], kept["empty_dropped"]) == (0.1, 2)
    assert kept["expert"]["total"]["examples"] == 12 and kept["trained"]["total"]["examples"] == 10
    assert json.loads((out / "sft_summary.json").read_text())["examples"] == 10

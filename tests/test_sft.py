"""SFT before ADRPO: the annotation expert's actions, examples from trajectories, and fine-tuning a real
(tiny, random) transformers model, end to end through ``memrl train sft-membuilder``."""

from __future__ import annotations

import json

import pytest

from memrl.agents.experts import annotation_expert
from memrl.agents.membuilder import MemBuilderAgent
from memrl.agents.trajectory import Step, Trajectory
from memrl.cli.main import main
from memrl.data import load_dataset
from memrl.data.types import Conversation
from memrl.errors import DataError
from memrl.llm.local import LocalLLM
from memrl.memory.facade import AsyncMemory
from memrl.train.sft import SFTConfig, SFTTrainer, sft_samples
from tests.tiny_lm import make_tiny_lm


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(make_tiny_lm(tmp_path_factory.mktemp("tiny") / "lm"))


@pytest.fixture(scope="module")
def conv() -> Conversation:
    return load_dataset("sample")[0][0]


async def test_the_annotation_expert_writes_the_sessions_annotations(conv):
    memory = AsyncMemory(":memory:", embedder="hashing")
    try:
        r = await MemBuilderAgent(annotation_expert(conv)).build_session(memory, "x", conv, conv.sessions[0])
        assert r.failures == [] and r.stats["parsed"] == 4
        items = {i.type.value: [] for i in await memory.list(namespace="x")}
        for i in await memory.list(namespace="x"):
            items[i.type.value].append(i.content)
        events = conv.metadata["event_summary"]["events_session_1"]
        assert items["episodic"][0] == f"{events['date']}: {events['Lena'][0]}"  # dated events
        first = conv.metadata["observation"]["session_1_observation"]["Lena"][0][0]
        assert items["semantic"][0] == f"Lena - {first}" and first in await memory.core(namespace="x")
        assert "procedural" not in items
    finally:
        await memory.close()
    bare = Conversation("y", ("A", "B"), conv.sessions, (), "test")
    with pytest.raises(DataError, match="no observation/event_summary annotations"):
        annotation_expert(bare)


def test_examples_come_from_successful_steps_and_end_the_turn(tiny):
    llm = LocalLLM(tiny).load()
    msgs = [{"role": "user", "content": "Remember this."}]
    good = Trajectory("membuilder", "a", steps=[Step(msgs, '{"operations": []}')])
    failed = Trajectory("membuilder", "b", steps=[Step(msgs, "")], failure="HTTP 503")
    errored = Trajectory("membuilder", "c", steps=[Step(msgs, "", error="timeout"), Step(msgs, "   ")])
    samples, skipped = sft_samples(llm, [good, failed, errored])
    assert len(samples) == 1 and skipped == {"failed": 2, "empty": 1, "too_long": 0}
    (s,) = samples
    end = llm.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert s.prompt_ids == llm.prompt_ids(msgs) and s.completion_ids[-1] == end
    assert llm.tokenizer.decode(s.completion_ids[:-1]) == '{"operations": []}'
    assert sft_samples(llm, [good], max_seq_tokens=5)[1]["too_long"] == 1


def test_fine_tuning_lowers_the_loss_on_the_expert_answers(tiny, tmp_path):
    llm = LocalLLM(tiny).load()
    msgs = [{"role": "user", "content": "What did Lena adopt?"}]
    trajs = [
        Trajectory("m", "t", steps=[Step(msgs, '{"operation": "APPEND", "content": "Lena: dog Biscuit"}')])
    ]
    samples, _ = sft_samples(llm, trajs)
    trainer = SFTTrainer(llm, SFTConfig(lr=2e-2, epochs=16, batch_size=1))
    before, n = trainer.loss_on(samples)
    rows = trainer.fit(samples, tmp_path, progress=False)
    after, _ = trainer.loss_on(samples)
    assert n == len(samples[0].completion_ids) and len(rows) == 16 and after < before / 2
    assert (tmp_path / "checkpoint" / "trainer_state.pt").is_file()
    assert len((tmp_path / "sft_metrics.jsonl").read_text().splitlines()) == 16
    # the checkpoint is a model the local back-end serves, and it learnt the answer
    tuned = SFTTrainer(LocalLLM(str(tmp_path / "checkpoint")).load())
    assert tuned.loss_on(samples)[0] == pytest.approx(after, rel=1e-4)


def test_memrl_train_sft_membuilder(tiny, tmp_path, capsys):
    out = tmp_path / "sft"
    code = main(["train", "sft-membuilder", "--dataset", "sample", "--sessions", "2", "--embedder", "hashing",
                 "--model", tiny, "--epochs", "2", "--batch-size", "2", "--lr", "5e-3", "--output-dir", str(out),
                 "--json"])  # fmt: skip
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["expert_trajectories"] == 8 and summary["expert_failures"] == 0
    assert summary["examples"] == 8 and summary["steps"] == 8  # 2 epochs of 4 batches of 2
    assert summary["loss_after"] < summary["loss_before"]
    assert (out / "checkpoint" / "config.json").is_file()

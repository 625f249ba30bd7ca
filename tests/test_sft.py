"""SFT before ADRPO: the annotation expert's actions, examples from trajectories, and fine-tuning a real
(tiny, random) transformers model, end to end through ``memrl train sft-membuilder``."""

from __future__ import annotations

import json

import pytest

from memrl.agents.membuilder import MemBuilderAgent
from memrl.agents.membuilder.experts import annotation_expert
from memrl.agents.trajectory import Step, Trajectory
from memrl.cli.main import main
from memrl.data import load_dataset
from memrl.data.types import Conversation
from memrl.errors import DataError
from memrl.llm.local import LocalLLM
from memrl.memory.facade.memory import AsyncMemory
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
    # one of the two empty procedural targets kept (--empty-share 0.1, at least one): 7 examples
    assert summary["examples"] == 7 and summary["empty_dropped"] == 1
    assert summary["steps"] == 8  # 2 epochs of 4 batches of at most 2
    assert summary["loss_after"] < summary["loss_before"]
    assert (out / "checkpoint" / "config.json").is_file()


def test_sft_on_the_answer_tasks_gold_answers_then_a_budget_stop(tiny, tmp_path, conv):
    """The learning benchmark's SFT stage: the answer task's own prompts (retrieved memories included)
    answered with the gold answer, loss on the answer tokens only; a step cap and a time budget stop it."""
    import asyncio

    from memrl.errors import ConfigError
    from memrl.train.tasks import AnswerTasks

    tasks = AnswerTasks([conv], embedder="hashing", top_k=3, max_tokens=8)
    with pytest.raises(ConfigError, match="setup"):
        tasks.gold_trajectories()
    asyncio.run(tasks.setup())
    trajs = tasks.gold_trajectories()
    assert len(trajs) == len(tasks) and [t.task_id for t in trajs] == [q.id for _, q in tasks.items]
    llm = LocalLLM(tiny).load()
    samples, skipped = sft_samples(llm, trajs, max_reply_tokens=8)
    assert samples and len(samples) + skipped["too_long"] == len(trajs)
    end = llm.tokenizer.convert_tokens_to_ids("<|im_end|>")
    kept = [(t, q) for t, (_, q) in zip(trajs, tasks.items, strict=True)
            if len(llm.tokenizer.encode(q.answers[0], add_special_tokens=False)) + 1 <= 8]  # fmt: skip
    assert len(kept) == len(samples)
    for s, (t, q) in zip(samples, kept, strict=True):  # prompt = the GRPO prompt; completion = gold + end
        assert s.prompt_ids == llm.prompt_ids(t.steps[0].messages) and s.completion_ids[-1] == end
        assert llm.tokenizer.decode(s.completion_ids[:-1]) == q.answers[0]
        user = t.steps[0].messages[-1]["content"]
        assert "Memories (most relevant first):" in user and f"{q.question}\nAnswer:" in user
    trainer = SFTTrainer(llm, SFTConfig(lr=2e-2, epochs=50, batch_size=2, save_every=1000))
    before, n = trainer.loss_on(samples)
    assert n == sum(len(s.completion_ids) for s in samples)  # the answer tokens only, not the prompt
    rows = trainer.fit(samples, tmp_path / "a", progress=False, max_steps=6)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6] and trainer.loss_on(samples)[0] < before
    assert (tmp_path / "a" / "checkpoint" / "trainer_state.pt").is_file()  # saved at the cap
    rows = SFTTrainer(llm, SFTConfig(lr=1e-3, epochs=3, batch_size=1)).fit(
        samples, tmp_path / "b", progress=False, time_limit_s=0.0
    )
    assert len(rows) == 1 and (tmp_path / "b" / "checkpoint" / "trainer_state.pt").is_file()


def test_bf16_autocast_fine_tunes_fp32_weights_and_calls_back_each_step(tiny, tmp_path):
    """Mixed precision: the loss falls as in fp32, the weights stay fp32, ``on_step`` sees every step."""
    import torch

    llm = LocalLLM(tiny).load()
    msgs = [{"role": "user", "content": "What did Lena adopt?"}]
    samples, _ = sft_samples(llm, [Trajectory("m", "t", steps=[Step(msgs, "Lena: dog Biscuit")])])
    trainer = SFTTrainer(llm, SFTConfig(lr=2e-2, epochs=16, batch_size=1, autocast="bf16"))
    before, _ = trainer.loss_on(samples)
    seen: list[int] = []
    rows = trainer.fit(samples, tmp_path, progress=False, on_step=lambda row: seen.append(row["step"]))
    after, _ = trainer.loss_on(samples)
    assert after < before / 2 and seen == [r["step"] for r in rows] == list(range(1, 17))
    assert all(p.dtype == torch.float32 for p in llm.hf_model.parameters())
    with pytest.raises(Exception, match="autocast must be"):
        SFTConfig(autocast="fp16")


def test_sft_membuilder_with_a_validation_conversation_and_lora(tiny, tmp_path, capsys, locomo_path):
    """--val-conv: that conversation's expert answers are never trained on, and their loss is measured
    before training and after each epoch; --lora-rank: only the adapter trains, saved as a small
    safetensors file beside the merged model; a LoRA run stopped after epoch 1 and resumed ends with the
    weights of an uninterrupted one."""
    import torch
    from safetensors.torch import load_file

    def sft(out, *extra: str) -> int:
        return main(["train", "sft-membuilder", "--dataset", "locomo", "--data-path", str(locomo_path), "--split",
                     "train", "--sessions", "1", "--val-conv", "conv-49", "--model", tiny, "--embedder", "hashing",
                     "--batch-size", "4", "--lr", "5e-3", "--lora-rank", "4", "--save-every", "1",
                     "--agent-option", "max_operations=2", "--output-dir", str(out), "--json", *extra])  # fmt: skip

    assert sft(tmp_path / "whole", "--epochs", "2") == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["conversations"] == 6 and summary["val_conversations"] == ["conv-49"]
    assert summary["expert_trajectories"] == 6 * 4 and summary["val_examples"] == 4
    assert [e for e, _ in summary["val_loss"]] == [0, 1, 2]
    assert summary["steps"] == 2 * -(-summary["examples"] // 4)
    assert summary["val_loss"][-1][1] < summary["val_loss"][0][1]  # the format transfers to conv-49
    run = json.loads((tmp_path / "whole" / "run.json").read_text())
    assert "conv-49" not in run["conversations"] and run["validation_conversations"] == ["conv-49"]
    ckpt = tmp_path / "whole" / "checkpoint"
    adapter = load_file(str(ckpt / "adapter.safetensors"))
    assert adapter and all("lora_" in k for k in adapter)
    assert (ckpt / "adapter.safetensors").stat().st_size < (ckpt / "model.safetensors").stat().st_size / 5
    # the expert's answers follow --agent-option: at most 2 memories per answer
    base = LocalLLM(tiny).load().hf_model.state_dict()
    merged = LocalLLM(str(ckpt)).load().hf_model.state_dict()
    assert any(not torch.equal(base[k], merged[k]) for k in base if k.endswith("proj.weight"))

    assert sft(tmp_path / "split", "--epochs", "1") == 0
    capsys.readouterr()
    assert sft(tmp_path / "split", "--epochs", "2", "--resume") == 0
    resumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert resumed["expert_reused"] and resumed["expert_trajectories"] == 6 * 4  # not built again
    a = LocalLLM(str(ckpt)).load().hf_model.parameters()
    b = LocalLLM(str(tmp_path / "split" / "checkpoint")).load().hf_model.parameters()
    assert all(torch.allclose(x, y, atol=1e-6) for x, y in zip(a, b, strict=True))


def test_the_annotation_expert_writes_up_to_its_limits(conv):
    from memrl.agents.membuilder import prompts as P
    from memrl.agents.membuilder.experts import annotation_action
    from memrl.memory.records.types import MemoryType

    msgs = P.agent_messages(MemoryType.SEMANTIC, P.session_block(conv.sessions[0]), "", operations=("ADD",))
    ops = annotation_action(conv, msgs, max_items=1, max_chars=20)["operations"]
    assert len(ops) == 1 and len(ops[0]["memory"]) == 20


def test_sft_membuilder_stops_at_max_steps(tiny, tmp_path, capsys):
    out = tmp_path / "capped"
    code = main(["train", "sft-membuilder", "--dataset", "sample", "--sessions", "1", "--embedder", "hashing",
                 "--model", tiny, "--epochs", "3", "--batch-size", "2", "--max-steps", "1", "--output-dir", str(out),
                 "--json"])  # fmt: skip
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and summary["steps"] == 1 and summary["examples"] == 4
    # 3 epochs of 2 steps planned, 1 made: not finished (a queue resumes it)
    assert summary["total_steps"] == 6 and summary["finished"] is False
    assert json.loads((out / "sft_summary.json").read_text())["steps"] == 1
    assert (out / "checkpoint" / "trainer_state.pt").is_file()


def test_sft_membuilder_keeps_the_experts_trajectories_and_samples_its_losses(tiny, tmp_path, capsys):
    """The expert's trajectories are built once per output folder (expert.jsonl) and read back by a resumed
    run, or a run whose first try stopped before its first checkpoint; a resume with another selection is
    refused; --loss-examples caps the examples the before/after loss is measured on; a damaged file is an
    error that names it, never trained on."""
    import shutil

    def sft(out, *extra: str) -> tuple[int, dict | None, str]:
        code = main(["train", "sft-membuilder", "--dataset", "sample", "--embedder", "hashing", "--model", tiny,
                     "--batch-size", "2", "--output-dir", str(out), "--json", *extra])  # fmt: skip
        cap = capsys.readouterr()
        return code, json.loads(cap.out.strip().splitlines()[-1]) if code == 0 else None, cap.err

    out = tmp_path / "sft"
    code, first, _ = sft(out, "--sessions", "2", "--epochs", "1", "--loss-examples", "3")
    assert code == 0 and not first["expert_reused"] and first["examples"] == 7 and first["loss_examples"] == 3
    kept = (out / "expert.jsonl").read_text()
    code, again, _ = sft(out, "--sessions", "2", "--epochs", "2", "--loss-examples", "0", "--resume")
    assert code == 0 and again["expert_reused"] and again["examples"] == 7 and again["loss_examples"] == 7
    assert (out / "expert.jsonl").read_text() == kept and again["steps"] == 8  # 2 epochs of 4 steps in all
    assert first["finished"] and (first["total_steps"], again["total_steps"]) == (4, 8) and again["finished"]
    code, _, err = sft(out, "--sessions", "1", "--epochs", "3", "--resume")
    assert code == 1 and "another selection" in err
    # a run stopped before its first checkpoint: the next try reads what its expert built
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shutil.copy(out / "expert.jsonl", fresh / "expert.jsonl")
    code, summary, _ = sft(fresh, "--sessions", "2", "--max-steps", "1")
    assert code == 0 and summary["expert_reused"] and summary["examples"] == 7  # 8 answers, 1 empty dropped
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "expert.jsonl").write_text(kept[:-40])
    code, _, err = sft(damaged, "--sessions", "2")
    assert code == 1 and "expert.jsonl: not a file of expert trajectories" in err


def test_bf16_on_a_cpu_without_native_bf16_is_warned_once(tiny, caplog, monkeypatch):
    """An AVX2-only core emulates bfloat16 (SFT 4.4x slower than fp32 there): asking for it says so, once."""
    import logging

    from memrl.llm import cpu

    cpu._warn_once.cache_clear()
    monkeypatch.setattr(cpu, "cpu_bf16_native", lambda: False)
    with caplog.at_level(logging.WARNING, logger="memrl.llm.cpu"):
        llm = LocalLLM(tiny).load()
        for autocast in ("bf16", "bf16", "none"):
            SFTTrainer(llm, SFTConfig(autocast=autocast))
    slow = [r for r in caplog.records if "no native bfloat16" in r.getMessage()]
    assert len(slow) == 1 and "SFT (--autocast bf16)" in slow[0].getMessage()
    assert cpu.warn_slow_bf16("cuda", "x") is False  # GPUs are not this check's business
    monkeypatch.setattr(cpu, "cpu_bf16_native", lambda: True)
    cpu._warn_once.cache_clear()
    assert cpu.warn_slow_bf16("cpu", "y") is False


def test_the_sft_step_benchmark_times_each_setting_on_the_kept_examples(tiny, tmp_path, capsys):
    """bench/sft_step.py reads the examples memrl train sft-membuilder kept and times SFTTrainer's own step."""
    from bench import sft_step

    out = tmp_path / "expert"
    assert main(["train", "sft-membuilder", "--dataset", "sample", "--sessions", "1", "--embedder", "hashing",
                 "--model", tiny, "--max-steps", "0", "--output-dir", str(out), "--json"]) == 0  # fmt: skip
    capsys.readouterr()
    res = sft_step.main(
        ["--expert", str(out / "expert.jsonl"), "--examples", "2", "--model", tiny, "--lora-rank", "4"]
    )
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last == json.loads(json.dumps(res)) and last["examples"] == 2 and last["tokens"] > 0
    assert set(last["step_s"]) == {"fp32-mb1", "fp32-mb4", "bf16-mb1"} and all(
        v > 0 for v in last["step_s"].values()
    )
    assert set(last["bf16_over_fp32"]) == {"forward", "step"} and isinstance(last["bf16_native"], bool)
    with pytest.raises(SystemExit):
        sft_step.main(["--expert", str(out / "expert.jsonl"), "--settings", "fp16-mb1", "--model", tiny])

"""``memrl train grpo`` on every task, two steps on the tiny real model (the CI smoke test), resume after a
kill, LoRA, TensorBoard, and ``sft-membuilder --resume``.

The tiny model is random, so its rewards are all 0: ``--no-dynamic-sampling`` keeps the groups anyway so
that every step runs the real update, replaying each reply's recorded constraint (the boxed-answer
grammar, MemUpdate's tool calls, MemBuilder's JSON schemas): the trainer's log-probabilities must equal
the sampler's there too."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from memrl.agents.trajectory import Step, Trajectory
from memrl.cli.main import main
from memrl.llm.local import LocalLLM
from memrl.server.ui.run_files import load_train
from memrl.train.loop import rollout_record
from tests.tiny_lm import make_tiny_lm

AGENT = {
    "read": ["--agent-option", "chunk_tokens=600", "--agent-option", "memory_tokens=16",
             "--agent-option", "answer_tokens=16"],
    "answer": ["--max-answer-tokens", "8", "--top-k", "3"],
    "update": ["--agent-option", "max_tokens=48", "--agent-option", "max_tool_calls=2"],
    "build": ["--agent-option", "max_item_chars=40", "--agent-option", "max_operations=1"],
}  # fmt: skip
CONSTRAINT = {"read": "grammar", "answer": None, "update": "tools", "build": "json_schema"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(make_tiny_lm(tmp_path_factory.mktemp("tiny") / "lm"))


def grpo(tiny: str, task: str, out: Path, *extra: str) -> list[str]:
    return ["train", "grpo", "--task", task, "--dataset", "sample", "--model", tiny, "--group-size", "2",
            "--embedder", "hashing", "--lr", "1e-3", "--no-dynamic-sampling", "--output-dir", str(out),
            "--json", *AGENT[task], *extra]  # fmt: skip


@pytest.mark.parametrize("task", ["read", "answer", "update", "build"])
def test_two_steps_of_each_task_then_resume(tiny, tmp_path, capsys, task):
    out = tmp_path / task
    assert main(grpo(tiny, task, out, "--steps", "2")) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["task"] == task and summary["steps"] == 2
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1.0, 2.0]
    assert all(r["failed"] == 0 and r["samples"] > 0 and r["skipped"] == 0 for r in rows)
    # the update recomputed exactly the distribution the rollouts were drawn from
    assert all(r["rollout_logprob_diff"] < 1e-4 for r in rows)
    rollouts = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    assert rollouts and all(r["reward"] is not None for r in rollouts)
    # each rollout's trajectory is recorded for the browser, without token ids
    for r in rollouts:
        assert r["steps"] and r["final"] == r["steps"][-1]["response"]
        for call in r["steps"]:
            assert set(call) >= {"role", "messages", "response", "tool_calls", "tool_results", "error"}
            assert not set(call) & {"prompt_ids", "completion_ids", "logprobs"}
            assert call["messages"] and all(m["content"] for m in call["messages"] if m["role"] == "user")
    assert load_train(out).rollouts_of(2) == [r for r in rollouts if r["step"] == 2]
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert (out / "checkpoint" / "trainer_state.pt").is_file()
    assert main([*grpo(tiny, task, out, "--steps", "3"), "--resume"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["steps"] == 3
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3


def test_rollout_records_are_bounded_and_say_what_was_cut():
    messages = [{"role": "system", "content": "rules"}] + [
        {"role": "user" if i % 2 else "assistant", "content": f"turn {i} " + "x" * (5000 if i == 9 else 10)}
        for i in range(1, 10)
    ]
    step = Step(messages=messages, response="y" * 3000, prompt_ids=[1, 2], completion_ids=[3], logprobs=[-0.5],
                tool_calls=[{"name": "search_memory", "arguments": {"query": "z" * 2500}}],
                tool_results=[{"content": "short"}], role="memupdate")  # fmt: skip
    t = Trajectory(agent="memupdate", task_id="c1:q1", steps=[step], reward=0.5)
    row = rollout_record(3, t, text_chars=100, call_messages=6)
    call = row["steps"][0]
    assert [m["content"][:6] for m in call["messages"]] == [f"turn {i}"[:6] for i in range(4, 10)]
    assert call["messages_omitted"] == 4
    assert call["messages"][-1]["content"].endswith("… [4907 more chars]")  # 5007 chars cut to 100
    assert call["response"] == "y" * 100 + "… [2900 more chars]" == row["final"]
    assert call["tool_calls"][0]["arguments"]["query"].endswith("… [2400 more chars]")
    assert call["tool_results"] == [{"content": "short"}] and call["role"] == "memupdate"
    assert not set(call) & {"prompt_ids", "completion_ids", "logprobs"}
    assert (row["step"], row["task"], row["reward"]) == (3, "c1:q1", 0.5)
    assert len(json.dumps(row)) < 2000


def test_constraints_are_recorded_on_every_agents_steps(tiny):
    import asyncio

    from memrl.cli.train_cmd import make_tasks
    from memrl.data import load_dataset

    conv = load_dataset("sample")[0][0]
    llm = LocalLLM(tiny).load()

    async def run(task: str):
        import argparse

        args = argparse.Namespace(task=task, agent_option=AGENT[task][1::2] if task != "answer" else [],
                                  reward="reward", db_path=":memory:", embedder="hashing", top_k=3,
                                  max_answer_tokens=8)  # fmt: skip
        tasks = make_tasks(args, [conv])
        await tasks.setup()
        try:
            return await tasks.group(llm, 0, 2, 0.9)
        finally:
            await tasks.close()

    for task, kind in CONSTRAINT.items():
        groups = asyncio.run(run(task))
        steps = [s for g in groups for t in g for s in t.steps if s.completion_ids]
        assert steps and all(s.temperature == 0.9 for s in steps), task
        kinds = {next(iter(s.constraint)) if s.constraint else None for s in steps}
        if task == "read":  # reading steps are free text, the final answer is a box
            assert kinds == {None, "grammar"}
        else:
            assert kinds == {kind}, task


def test_a_killed_run_resumes_from_its_checkpoint(tiny, tmp_path):
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "memrl.cli.main", *grpo(tiny, "answer", out, "--steps", "400")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (out / "checkpoint" / "trainer_state.pt").exists():
            time.sleep(0.2)
        time.sleep(1.0)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    done = torch.load(_checkpoint(out) / "trainer_state.pt", weights_only=False)["steps_done"]
    assert 1 <= done < 400
    assert main([*grpo(tiny, "answer", out, "--steps", str(done + 2)), "--resume"]) == 0
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [float(s) for s in range(1, done + 3)]  # rows after the checkpoint were redone once


def _checkpoint(out: Path) -> Path:
    from memrl.train.trainer import checkpoint_folder

    found = checkpoint_folder(out / "checkpoint")
    assert found is not None
    return found


def test_lora_trains_adapters_only_and_its_checkpoint_is_a_model_folder(tiny, tmp_path, capsys):
    from memrl.agents.trajectory import Step, Trajectory
    from memrl.train.logprobs import Sample
    from memrl.train.trainer import PolicyTrainer, TrainerConfig

    llm = LocalLLM(tiny).load()
    prompt = llm.prompt_ids([{"role": "user", "content": "Who keeps the lighthouse?"}])
    group = []
    for text, reward in (("Ana", 1.0), ("Lisbon Porto", 0.0)):
        t = Trajectory("toy", "t", reward=reward)
        t.steps.append(Step([], text, prompt_ids=prompt, completion_ids=llm.tokenizer.encode(text)))
        group.append(t)
    cfg = TrainerConfig(lora_rank=4, lr=5e-2, kl_coef=0.1)
    trainer = PolicyTrainer(llm, cfg)
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    first = trainer.step([group])
    assert first["kl"] == pytest.approx(0.0, abs=1e-6)  # adapters start at zero: policy = base = reference
    second = trainer.step([group])
    assert second["kl"] > 0  # the reference is the base model (adapters off), which the policy left
    trainer.save(tmp_path / "ckpt")
    base, merged = LocalLLM(tiny).load(), LocalLLM(str(tmp_path / "ckpt")).load()
    changed = [n for (n, a), b in zip(base.hf_model.named_parameters(), merged.hf_model.parameters(), strict=True)
               if not torch.equal(a, b)]  # fmt: skip
    assert changed and all("embed" not in n and "norm" not in n for n in changed)  # only adapted layers
    assert PolicyTrainer.model_to_load(tmp_path / "ckpt") == tiny
    s = [Sample(prompt, llm.tokenizer.encode("Ana"), 0.0)]
    resumed = PolicyTrainer(LocalLLM(tiny).load(), cfg)  # base + the saved adapter
    resumed.load_state(tmp_path / "ckpt")
    with torch.no_grad():
        live = trainer.token_logprobs(trainer.model, s)[0]
        from_merged = PolicyTrainer(merged, TrainerConfig()).token_logprobs(merged.hf_model, s)[0]
        from_adapter = resumed.token_logprobs(resumed.model, s)[0]
    assert torch.allclose(live, from_merged, atol=1e-4) and torch.equal(live, from_adapter)
    assert resumed.steps_done == 2
    # and through the CLI: a LoRA run resumes
    out = tmp_path / "cli"
    assert main(grpo(tiny, "answer", out, "--steps", "1", "--lora-rank", "4")) == 0
    assert main([*grpo(tiny, "answer", out, "--steps", "2", "--lora-rank", "4"), "--resume"]) == 0
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2


def test_sft_membuilder_resumes_to_the_same_weights(tiny, tmp_path, capsys):
    def sft(out: Path, *extra: str) -> int:
        return main(["train", "sft-membuilder", "--dataset", "sample", "--sessions", "1", "--model", tiny,
                     "--embedder", "hashing", "--batch-size", "2", "--epochs", "2", "--save-every", "1",
                     "--output-dir", str(out), "--json", *extra])  # fmt: skip

    assert sft(tmp_path / "whole") == 0
    steps = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["steps"]
    assert steps >= 3
    assert sft(tmp_path / "split", "--epochs", "1") == 0  # stopped half way (as if killed after epoch 1)
    capsys.readouterr()
    assert sft(tmp_path / "split", "--resume") == 0
    rows = [
        json.loads(x)["step"] for x in (tmp_path / "split" / "sft_metrics.jsonl").read_text().splitlines()
    ]
    assert rows == list(range(1, steps + 1))
    a = LocalLLM(str(tmp_path / "whole" / "checkpoint")).load().hf_model.parameters()
    b = LocalLLM(str(tmp_path / "split" / "checkpoint")).load().hf_model.parameters()
    assert all(torch.allclose(x, y, atol=1e-6) for x, y in zip(a, b, strict=True))


def test_build_tasks_ask_the_prompts_an_adapter_was_trained_on():
    """ADRPO on top of the SFT adapter: the rollouts ask the prompts the SFT data asked (its adapter.json's
    agent_options), unless told otherwise; without an adapter, the build task's own small defaults."""
    import argparse

    from memrl.cli.train_cmd import make_tasks
    from memrl.data import load_dataset

    conv = load_dataset("sample")[0][0]

    def config(model, *opts):
        args = argparse.Namespace(task="build", agent_option=list(opts), embedder="hashing", model=model)
        return make_tasks(args, [conv]).config

    sft = config("memrl:membuilder-sft")
    assert (sft.max_operations, sft.max_item_chars) == (10, 200)  # MemBuilder's defaults + the adapter's
    assert config("memrl:membuilder-sft", "max_operations=1").max_operations == 1
    assert (config(None).max_operations, config(None).max_item_chars) == (2, 120)

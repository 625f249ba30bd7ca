"""The local GRPO/DAPO trainer and loop on a real (tiny, random) transformers model through the real local
back-end: update direction, failures and no-signal groups, exact loss aggregation over micro-batches, the
KL reference, checkpoints and resume, and ``memrl train`` end to end."""

from __future__ import annotations

import json

import pytest
import torch

from memrl.agents.trajectory import Step, Trajectory
from memrl.cli.main import main
from memrl.data import load_dataset
from memrl.errors import ConfigError
from memrl.llm.local import LocalLLM
from memrl.train.loop import LoopConfig, MemAgentTasks, out_of_time, train
from memrl.train.trainer import PolicyTrainer, TrainerConfig
from tests.tiny_lm import make_tiny_lm


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(make_tiny_lm(tmp_path_factory.mktemp("tiny") / "lm"))


def fresh(tiny: str) -> LocalLLM:
    return LocalLLM(tiny).load()


def traj(llm: LocalLLM, completion: str, reward: float | None, prompt: str = "Say a word.") -> Trajectory:
    p = llm.prompt_ids([{"role": "user", "content": prompt}])
    c = llm.tokenizer.encode(completion)
    t = Trajectory("toy", "t", reward=reward)
    t.steps.append(Step([], completion, prompt_ids=p, completion_ids=c))
    return t


def seq_logprob(trainer: PolicyTrainer, t: Trajectory) -> float:
    from memrl.train.trainer import Sample

    s = t.steps[0]
    with torch.no_grad():
        lp, mask = trainer.token_logprobs(trainer.model, [Sample(s.prompt_ids, s.completion_ids, 0.0)])
    return float((lp * mask).sum())


def params(llm: LocalLLM) -> list[torch.Tensor]:
    return [p.detach().clone() for p in llm.hf_model.parameters()]


def test_an_update_favours_the_rewarded_completion(tiny):
    llm = fresh(tiny)
    trainer = PolicyTrainer(llm, TrainerConfig(lr=1e-2))
    good, bad = traj(llm, "Biscuit", 1.0), traj(llm, "Lisbon Porto", 0.0)
    before = seq_logprob(trainer, good), seq_logprob(trainer, bad)
    m = trainer.step([[good, bad]])
    after = seq_logprob(trainer, good), seq_logprob(trainer, bad)
    assert after[0] > before[0] and after[1] < before[1]
    assert m["skipped"] == 0 and m["samples"] == 2 and m["reward_mean"] == 0.5 and m["optimizer_steps"] == 1
    assert m["ratio_mean"] == pytest.approx(1.0)  # one optimizer step: still on-policy
    assert m["n_tokens"] == len(good.steps[0].completion_ids) + len(bad.steps[0].completion_ids)
    assert m["grad_norm"] > 0


def test_failures_and_groups_without_contrast_train_nothing(tiny):
    llm = fresh(tiny)
    trainer = PolicyTrainer(llm, TrainerConfig(lr=1e-2))
    w0 = params(llm)
    # all equal rewards (no contrast) and a group whose only other member failed (reward None)
    m = trainer.step(
        [[traj(llm, "a", 1.0), traj(llm, "b", 1.0)], [traj(llm, "c", 0.0), traj(llm, "d", None)]]
    )
    assert m["skipped"] == 1 and m["samples"] == 0 and m["failed"] == 1 and m["groups_kept"] == 0
    assert all(torch.equal(a, b) for a, b in zip(w0, params(llm), strict=True))
    # a failed step inside a trajectory (provider error) is never trained on
    t = traj(llm, "Ana", 1.0)
    t.steps.append(Step([], "", error="HTTP 503"))
    samples, _ = trainer.samples([[t, traj(llm, "x", 0.0)]])
    assert len(samples) == 2 and [s.advantage for s in samples] == [0.5, -0.5]


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_micro_batches_give_the_same_update_as_one_batch(tiny, agg):
    updated = []
    for micro in (1, 4):
        llm = fresh(tiny)
        cfg = TrainerConfig(lr=0.1, optimizer="sgd", micro_batch=micro, loss_agg=agg, max_grad_norm=1e9)
        trainer = PolicyTrainer(llm, cfg)
        group = [
            traj(llm, w, r) for w, r in (("Ana", 1.0), ("Biscuit the dog", 0.0), ("May", 1.0), ("x y z", 0.0))
        ]
        trainer.step([group])
        updated.append(params(llm))
    w0 = params(fresh(tiny))
    assert not all(torch.equal(a, b) for a, b in zip(w0, updated[0], strict=True))  # it did move
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*updated, strict=True))


def test_attribution_weights_and_kl_reference(tiny):
    llm = fresh(tiny)
    trainer = PolicyTrainer(llm, TrainerConfig(lr=1e-2, kl_coef=0.1, mini_batches=2, micro_batch=1))
    a, b = traj(llm, "Ana", 1.0), traj(llm, "Porto", 0.0)
    a.info["advantage_weight"] = b.info["advantage_weight"] = 4.0  # the dominant memory type's agent
    samples, _ = trainer.samples([[a, b]])
    assert [s.advantage for s in samples] == [2.0, -2.0]
    m = trainer.step([[a, b]])
    # two optimizer steps: the second mini-batch is off-policy and measured against the reference
    assert m["optimizer_steps"] == 2 and m["kl"] > 0  # after the first step the policy left the reference
    assert trainer.reference is not None and not any(p.requires_grad for p in trainer.reference.parameters())


def test_loop_checkpoints_and_resumes(tiny, tmp_path):
    conv = load_dataset("sample")[0][0]
    from memrl.agents.memagent import MemAgentConfig

    tasks = MemAgentTasks([conv], MemAgentConfig(chunk_tokens=600, memory_tokens=16, answer_tokens=8))
    out = tmp_path / "run"
    loop = LoopConfig(steps=2, group_size=2, output_dir=str(out))
    rows = train(fresh(tiny), tasks, loop, TrainerConfig(lr=1e-3), progress=False)
    assert [r["step"] for r in rows] == [1.0, 2.0]
    assert all(r["trajectories"] == 2 and r["failed"] == 0 for r in rows)  # every rollout was scored
    assert (out / "checkpoint" / "trainer_state.pt").is_file() and (out / "reward.png").is_file()
    assert "| step |" in (out / "report.md").read_text()
    with pytest.raises(ConfigError, match="--resume"):
        train(fresh(tiny), tasks, loop, progress=False)

    # the checkpoint is a model folder the local back-end loads; resume runs only the missing step
    resumed = LocalLLM(str(out / "checkpoint")).load()
    rows = train(
        resumed, tasks, LoopConfig(steps=3, group_size=2, output_dir=str(out)), resume=True, progress=False
    )
    assert [r["step"] for r in rows] == [1.0, 2.0, 3.0]
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3


def test_a_time_budget_stops_before_a_step_that_would_end_past_it(tiny, tmp_path):
    assert not out_of_time(100.0, None, 50.0)  # no budget
    assert out_of_time(100.0, 140.0, 50.0)  # 40 s left, steps take 50: stop now
    assert not out_of_time(100.0, 160.0, 50.0)  # 60 s left: one more
    conv = load_dataset("sample")[0][0]
    from memrl.agents.memagent import MemAgentConfig

    tasks = MemAgentTasks([conv], MemAgentConfig(chunk_tokens=600, memory_tokens=16, answer_tokens=8))
    for limit, steps in ((0.0, [1.0]), (3600.0, [1.0, 2.0])):
        out = tmp_path / f"run-{limit:g}"
        loop = LoopConfig(steps=2, group_size=2, output_dir=str(out))
        rows = train(fresh(tiny), tasks, loop, TrainerConfig(lr=1e-3), progress=False, time_limit_s=limit)
        assert [r["step"] for r in rows] == steps
        assert (out / "checkpoint" / "trainer_state.pt").is_file()  # the stop keeps its step


def test_memrl_train_memagent_cli(tiny, tmp_path, capsys):
    out = tmp_path / "cli"
    args = ["train", "memagent", "--dataset", "sample", "--model", tiny, "--steps", "1", "--group-size", "2",
            "--chunk-tokens", "600", "--memory-tokens", "16", "--answer-tokens", "8", "--output-dir", str(out),
            "--json"]  # fmt: skip
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] == 1 and summary["checkpoint"] == str(out / "checkpoint")
    assert main([*args[:-1], "--steps", "2", "--resume", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"] == 2


async def test_memagent_tasks_rewards():
    from memrl.llm import ScriptedLLM

    conv = load_dataset("sample")[0][0]
    dog = next(i for i, (_, q, _) in enumerate(MemAgentTasks([conv]).items) if q.answer == "Biscuit")
    # "biscuit dog" against "biscuit": precision 1/2, recall 1; the f1 reward is their product (a hedge never
    # pays), and sub_em allows extra function words only ("dog" is not one)
    for reward, expected in (("reward", 0.0), ("f1", 1 / 2), ("sub_em", 0.0)):
        tasks = MemAgentTasks([conv], reward=reward)
        # reading steps write notes; the answer step (its prompt starts with the question) boxes an answer
        llm = ScriptedLLM(lambda m, t, s: "It is \\boxed{Biscuit the dog}" if m[-1]["content"].startswith("Question:")
                          else "notes")  # fmt: skip
        t = await tasks.rollout(llm, dog, 1.0)
        assert t.failure is None and t.reward == pytest.approx(expected), reward
        assert all(r.sampling.temperature == 1.0 for r in llm.requests)
    tasks = MemAgentTasks([conv], reward="f1_unboxed")
    llm = ScriptedLLM(
        lambda m, t, s: "Biscuit, a dog" if m[-1]["content"].startswith("Question:") else "notes"
    )
    t = await tasks.rollout(llm, dog, 1.0)
    assert t.reward == pytest.approx(1 / 2) and t.metrics["reward"] == 0.0  # no box: the original gives 0
    with pytest.raises(ConfigError, match="reward must be one of"):
        MemAgentTasks([conv], reward="length")


def test_the_trainer_sees_the_policy_the_backend_sampled_from(tiny):
    import asyncio

    from memrl.llm.base import SamplingParams

    llm = fresh(tiny)
    msgs = [{"role": "user", "content": "Where did Anna move?"}]

    async def sample(seed: int):
        return await llm.chat(msgs, sampling=SamplingParams(temperature=1.0, max_tokens=12, seed=seed))

    trajs = []
    for seed, reward in ((1, 1.0), (2, 0.0)):
        t = Trajectory("toy", "t", reward=reward)
        t.steps.append(Step.from_response(msgs, asyncio.run(sample(seed))))
        trajs.append(t)
    for mini in (1, 2):  # old log-probs from the same pass, or from a separate one
        m = PolicyTrainer(fresh(tiny), TrainerConfig(lr=1e-3, mini_batches=mini, micro_batch=1)).step([trajs])
        assert m["samples"] == 2 and m["rollout_logprob_diff"] < 1e-4


class _Toy:
    """Two prompts; reward 1 when the tiny model's reply has an odd number of characters (arbitrary but
    deterministic given the sampled tokens, and varied enough to give most groups contrast)."""

    def __len__(self) -> int:
        return 2

    async def rollout(self, llm, index: int, temperature: float) -> Trajectory:
        from memrl.llm.base import SamplingParams

        msgs = [{"role": "user", "content": f"Say something about {['Ana', 'Porto'][index]}."}]
        reply = await llm.chat(msgs, sampling=SamplingParams(temperature=temperature, max_tokens=8))
        t = Trajectory("toy", str(index), reward=float(len(reply.text) % 2))
        t.steps.append(Step.from_response(msgs, reply))
        return t


def test_a_resumed_run_ends_where_an_uninterrupted_one_does(tiny, tmp_path):
    cfg = TrainerConfig(lr=1e-2, kl_coef=0.05)  # the KL reference must survive the resume too

    def loop(out, steps):
        return LoopConfig(steps=steps, group_size=4, tasks_per_step=2, output_dir=str(tmp_path / out))

    whole = fresh(tiny)
    rows = train(whole, _Toy(), loop("whole", 3), cfg, progress=False)
    assert sum(r["samples"] for r in rows) > 0  # something was trained on

    train(fresh(tiny), _Toy(), loop("split", 2), cfg, progress=False)
    ckpt = tmp_path / "split" / "checkpoint"
    ckpt.rename(ckpt.with_name("checkpoint.old"))  # as if the process died while swapping checkpoints
    resumed = LocalLLM(str(ckpt.with_name("checkpoint.old"))).load()
    again = train(resumed, _Toy(), loop("split", 3), cfg, resume=True, progress=False)
    assert [r["step"] for r in again] == [1.0, 2.0, 3.0]
    assert [r["reward_mean"] for r in again] == [r["reward_mean"] for r in rows]
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(params(whole), params(resumed), strict=True))
    assert len((tmp_path / "split" / "rollouts.jsonl").read_text().splitlines()) == 3 * 2 * 4
    # a resumed trainer takes this run's learning rate, not the one saved in the optimizer state
    other = PolicyTrainer(resumed, TrainerConfig(lr=0.5, weight_decay=0.1))
    other.load_state(tmp_path / "split" / "checkpoint")
    assert other.steps_done == 3
    assert {(g["lr"], g["weight_decay"]) for g in other.optimizer.param_groups} == {(0.5, 0.1)}

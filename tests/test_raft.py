"""Rejection-sampling fine-tuning and answer-only SFT (memrl.train.raft) on a tiny random model: which
rollouts are kept, what an example is made of, and that a run samples its budget, trains on what it kept,
moves the policy and writes the run's diagnostics and plot."""

from __future__ import annotations

import json

import pytest

from memrl.agents.trajectory import Step, Trajectory
from memrl.errors import ConfigError
from memrl.llm.local import LocalLLM
from memrl.train.raft import RaftConfig, gold_answer_example, kept_rollouts, raft, rollout_examples
from tests.tiny_lm import make_tiny_lm

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(make_tiny_lm(tmp_path_factory.mktemp("tiny") / "lm"))


def _t(reward: float | None, failure: str | None = None) -> Trajectory:
    return Trajectory("toy", "t", reward=reward, failure=failure)


def test_kept_rollouts_positive_and_best():
    group = [_t(0.0), _t(0.5), _t(1.0), _t(1.0), _t(None, "provider: down")]
    assert [t.reward for t in kept_rollouts(group, "positive")] == [0.5, 1.0, 1.0]
    assert [t.reward for t in kept_rollouts(group, "best")] == [1.0, 1.0]
    assert kept_rollouts([_t(0.0), _t(0.0)], "best") == []  # a group's best of 0 earned nothing


class _Toy:
    """Two prompts, two calls a rollout (a "memory" then an "answer"); reward 1 when the answer's text has an
    odd number of characters: arbitrary, deterministic given the sampled tokens, varied across a group."""

    golds = ["Ana", "Porto"]

    def __len__(self) -> int:
        return 2

    async def group(self, llm, index: int, n: int, temperature: float) -> list[list[Trajectory]]:
        import asyncio

        return [list(await asyncio.gather(*(self.rollout(llm, index, temperature) for _ in range(n))))]

    async def rollout(self, llm, index: int, temperature: float) -> Trajectory:
        from memrl.llm.base import SamplingParams

        t = Trajectory("toy", str(index))
        memo = [{"role": "user", "content": f"Note something about {self.golds[index]}."}]
        first = await llm.chat(memo, sampling=SamplingParams(temperature=temperature, max_tokens=5))
        t.steps.append(Step.from_response(memo, first, role="memory"))
        ask = [{"role": "user", "content": f"Memory: {first.text}\nWho?"}]
        reply = await llm.chat(ask, sampling=SamplingParams(temperature=temperature, max_tokens=5))
        t.steps.append(Step.from_response(ask, reply, role="answer"))
        t.reward = float(len(reply.text) % 2)
        return t


def _one(llm: LocalLLM) -> Trajectory:
    import asyncio

    async def go() -> Trajectory:
        try:
            return await _Toy().rollout(llm, 1, 1.0)
        finally:
            await llm.aclose()

    return asyncio.run(go())


def test_examples_are_the_rollouts_own_tokens_or_the_boxed_gold_after_its_own_memory(tiny):
    llm = LocalLLM(tiny).load()
    t = _one(llm)
    own = rollout_examples(llm, t)
    assert [s.completion_ids for s in own] == [s.completion_ids for s in t.steps]  # both calls, as sampled
    assert [s.prompt_ids for s in own] == [s.prompt_ids for s in t.steps]
    assert rollout_examples(llm, t, max_reply_tokens=0) == []  # too long: skipped
    g = gold_answer_example(llm, t, "Porto")
    assert g.prompt_ids == t.steps[-1].prompt_ids  # the model's own memory is in the prompt
    assert llm.tokenizer.decode(g.completion_ids, skip_special_tokens=True) == "\\boxed{Porto}"
    t.failure = "provider: down"
    assert gold_answer_example(llm, t, "Porto") is None


@pytest.mark.parametrize("target", ["rollout", "gold"])
def test_a_run_samples_its_budget_trains_on_what_it_kept_and_writes_its_diagnostics(tiny, tmp_path, target):
    llm = LocalLLM(tiny).load()
    cfg = RaftConfig(rounds=2, tasks_per_round=2, group_size=4, temperature=1.0, target=target, lr=1e-2,
                     lora_rank=4, batch_size=4, output_dir=str(tmp_path / "run"))  # fmt: skip
    assert cfg.rollouts == 16
    rows = raft(llm, _Toy(), cfg, gold=lambda i: _Toy.golds[i], heldout=_Toy())
    assert [r["step"] for r in rows] == [1, 2] and sum(r["rollouts"] for r in rows) == cfg.rollouts
    for r in rows:
        if target == "gold":  # every rollout gives one example: its final call with the gold
            assert r["kept"] == r["examples"] == r["rollouts"]
        else:  # the rewarded rollouts only, two calls each
            assert r["examples"] == 2 * r["kept"] and r["kept"] == round(r["reward_mean"] * r["rollouts"])
        assert r["sft_steps"] == -(-r["examples"] // 4)
    trained = [r for r in rows if r["sft_steps"]]
    assert trained and all(r["kl_to_start"] > 0 for r in trained)  # the adapter moved the policy
    lora_b = [p for k, p in llm.hf_model.named_parameters() if "lora_B" in k]
    assert lora_b and any(
        float(p.detach().abs().sum()) > 0 for p in lora_b
    )  # LoRA's B starts at 0: it was trained
    assert "heldout_reward_at_start" in rows[0] and "heldout_reward" in rows[-1]
    out = tmp_path / "run"
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert len((out / "rollouts.jsonl").read_text().splitlines()) == cfg.rollouts
    assert (out / "reward.png").read_bytes()[:8] == PNG and "| step |" in (out / "report.md").read_text()
    with pytest.raises(ConfigError, match="earlier run"):
        raft(LocalLLM(tiny).load(), _Toy(), cfg, gold=lambda i: "x")


def test_config_checks():
    with pytest.raises(ConfigError, match="gold"):
        raft(None, _Toy(), RaftConfig(target="gold"))
    with pytest.raises(ConfigError):
        RaftConfig(temperature=0)
    with pytest.raises(ConfigError):
        RaftConfig(target="expert")

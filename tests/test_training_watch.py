"""Training you can watch (issue 54), on the real trainer and loop with a tiny random model: the KL to the
starting policy is measured at kl_coef 0 (0 before the first update, positive after one) and stays out of
the loss; several optimizer steps per batch show the PPO ratio leaving 1 after the first; the step's
reward spread, groups with variance and reply lengths are the batch's; a run writes its held-out score and a
PNG of reward, KL and held-out score, and a resumed run's metrics continue."""

from __future__ import annotations

import json
import math

import pytest
import torch

from memrl.agents.trajectory import Step, Trajectory
from memrl.errors import ConfigError
from memrl.llm.local import LocalLLM
from memrl.train.loop import LoopConfig, train
from memrl.train.run_report import plot_run
from memrl.train.trainer import PolicyTrainer, TrainerConfig
from tests.tiny_lm import make_tiny_lm

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(make_tiny_lm(tmp_path_factory.mktemp("tiny") / "lm"))


def fresh(tiny: str) -> LocalLLM:
    return LocalLLM(tiny).load()


def traj(llm: LocalLLM, completion: str, reward: float | None, prompt: str = "Say a word.") -> Trajectory:
    t = Trajectory("toy", "t", reward=reward)
    p = llm.prompt_ids([{"role": "user", "content": prompt}])
    t.steps.append(Step([], completion, prompt_ids=p, completion_ids=llm.tokenizer.encode(completion)))
    return t


def group(llm: LocalLLM) -> list[Trajectory]:
    return [traj(llm, "Biscuit", 1.0), traj(llm, "Lisbon Porto", 0.0), traj(llm, "May 2024", 0.0)]


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_kl_to_start_is_zero_before_the_first_update_and_positive_after_one(tiny, lora_rank):
    llm = fresh(tiny)
    trainer = PolicyTrainer(llm, TrainerConfig(lr=1e-2, lora_rank=lora_rank))  # kl_coef 0, the default
    assert trainer.config.kl_coef == 0 and trainer.config.measure_kl
    # with LoRA the starting policy is the adapter switched off: no second model is kept
    assert (trainer.reference is None) == bool(lora_rank)
    first = trainer.step([group(llm)])
    assert first["skipped"] == 0 and abs(first["kl_to_start"]) <= 1e-6 and first["kl_to_start_max"] <= 1e-6
    second = trainer.step([group(llm)])
    assert second["kl_to_start"] > 1e-6 and second["kl_to_start_max"] >= second["kl_to_start"]
    assert "kl" not in second  # the loss's KL term (kl_coef > 0) is not computed


def test_measuring_the_kl_leaves_the_update_as_it_was(tiny):
    """kl_coef 0: the measurement is not in the loss, so the weights move exactly as without it."""
    moved = []
    for measure in (True, False):
        llm = fresh(tiny)
        trainer = PolicyTrainer(
            llm, TrainerConfig(lr=1e-2, measure_kl=measure, mini_batches=2, micro_batch=1)
        )
        for _ in range(2):
            m = trainer.step([group(llm)])
        assert ("kl_to_start" in m) == measure
        moved.append([p.detach().clone() for p in llm.hf_model.parameters()])
    w0 = list(fresh(tiny).hf_model.parameters())
    assert not all(torch.equal(a, b) for a, b in zip(w0, moved[0], strict=True))
    assert all(torch.equal(a, b) for a, b in zip(*moved, strict=True))


def test_the_ppo_ratio_is_one_on_the_first_optimizer_step_and_moves_after(tiny):
    llm = fresh(tiny)
    trainer = PolicyTrainer(llm, TrainerConfig(lr=5e-2, epochs=2, mini_batches=2, micro_batch=1))
    m = trainer.step([group(llm)])
    steps = m["per_optimizer_step"]
    assert m["optimizer_steps"] == 4 == len(steps)  # 2 passes over the batch, 2 optimizer steps each
    assert steps[0]["ratio_mean"] == pytest.approx(1.0, abs=1e-6) and steps[0]["clip_frac"] == 0.0
    assert steps[0]["ratio_max"] == pytest.approx(1.0, abs=1e-6)
    assert steps[0]["ratio_min"] == pytest.approx(1.0, abs=1e-6)
    # the second pass scores samples the first already trained on: the ratio has left 1
    later = max(max(abs(s["ratio_max"] - 1), abs(s["ratio_min"] - 1)) for s in steps[2:])
    assert later > 1e-3
    assert m["ratio_max"] == max(s["ratio_max"] for s in steps)
    assert m["clip_frac"] == pytest.approx(sum(s["clip_frac"] for s in steps) / 4)
    assert m["n_tokens"] == sum(len(t.steps[0].completion_ids) for t in group(llm))  # counted once
    with pytest.raises(ConfigError, match="epochs >= 1"):
        TrainerConfig(epochs=0)


def test_a_step_logs_its_reward_spread_groups_with_variance_and_reply_lengths(tiny):
    llm = fresh(tiny)
    trainer = PolicyTrainer(llm, TrainerConfig(lr=1e-3))
    varied = [traj(llm, "Ana", 1.0), traj(llm, "Lisbon Porto", 0.0)]
    flat = [traj(llm, "yes", 1.0), traj(llm, "no no", 1.0)]
    failed = [traj(llm, "x", 0.5), traj(llm, "a b c d", None)]  # one scored rollout: no variance
    m = trainer.step([varied, flat, failed])
    assert m["groups_with_variance"] == 1 and m["groups_with_variance_share"] == pytest.approx(1 / 3)
    rewards = [1.0, 0.0, 1.0, 1.0, 0.5]
    mean = sum(rewards) / 5
    assert m["reward_mean"] == pytest.approx(mean)
    assert m["reward_std"] == pytest.approx(math.sqrt(sum((r - mean) ** 2 for r in rewards) / 5))
    assert m["reward_std_in_group"] == pytest.approx((0.5 + 0.0 + 0.0) / 3)
    lengths = [
        len(t.steps[0].completion_ids) for g in (varied, flat, failed) for t in g if t.reward is not None
    ]
    assert m["response_tokens_mean"] == pytest.approx(sum(lengths) / len(lengths))
    assert m["answer_tokens_mean"] == m["response_tokens_mean"]  # one call per rollout: it is the answer


class _Alternating:
    """Two prompts; the k-th rollout earns k % 2, so every group of two or more has reward variance."""

    def __init__(self) -> None:
        self.calls = 0

    def __len__(self) -> int:
        return 2

    async def rollout(self, llm, index: int, temperature: float) -> Trajectory:
        from memrl.llm.base import SamplingParams

        msgs = [{"role": "user", "content": f"Say something about {['Ana', 'Porto'][index]}."}]
        reply = await llm.chat(msgs, sampling=SamplingParams(temperature=temperature, max_tokens=6))
        self.calls += 1
        t = Trajectory("toy", str(index), reward=float(self.calls % 2))
        t.metrics["chars"] = len(reply.text)
        t.steps.append(Step.from_response(msgs, reply))
        return t


def test_a_run_logs_its_held_out_score_draws_the_png_and_a_resumed_run_continues(tiny, tmp_path):
    out = tmp_path / "run"
    cfg = TrainerConfig(lr=1e-2)  # full fine-tuning at kl_coef 0: the KL is measured all the same

    def loop(steps: int) -> LoopConfig:
        return LoopConfig(steps=steps, group_size=2, tasks_per_step=2, output_dir=str(out), eval_every=2,
                          tensorboard=False)  # fmt: skip

    heldout = _Alternating()
    rows = train(fresh(tiny), _Alternating(), loop(3), cfg, progress=False, heldout=heldout)
    assert [r["step"] for r in rows] == [1.0, 2.0, 3.0] and all(r["skipped"] == 0 for r in rows)
    assert abs(rows[0]["kl_to_start"]) <= 1e-6 and rows[1]["kl_to_start"] > 0 and rows[2]["kl_to_start"] > 0
    # scored before the first step, at step 2 (eval_every) and after the last; each time every task once
    assert heldout.calls == 3 * 2
    assert rows[0]["heldout_reward_at_start"] == 0.5 and rows[0]["heldout_items_at_start"] == 2
    assert "heldout_reward" not in rows[0] and rows[1]["heldout_reward"] == 0.5 == rows[2]["heldout_reward"]
    assert rows[1]["heldout_metrics"]["chars"] >= 0 and rows[1]["heldout_failed"] == 0
    png = out / "reward.png"
    assert png.read_bytes()[:8] == PNG
    saved = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in saved] == [1, 2, 3] and saved[1]["kl_to_start"] == rows[1]["kl_to_start"]

    png.unlink()
    resumed = LocalLLM(str(out / "checkpoint")).load()
    again = train(resumed, _Alternating(), loop(5), cfg, resume=True, progress=False, heldout=_Alternating())
    assert [r["step"] for r in again] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert again[:3] == saved  # the earlier steps, as written
    assert "heldout_reward_at_start" not in again[3]  # a resumed run does not score its start again
    assert "heldout_reward" in again[3] and "heldout_reward" in again[4]  # step 4 (eval_every), the last
    # the KL reference is still the run's starting policy, not the checkpoint it resumed from
    assert again[3]["kl_to_start"] > rows[2]["kl_to_start"] * 0.5 > 0
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 5
    assert png.read_bytes()[:8] == PNG  # drawn again, from the whole file
    table = [line for line in (out / "report.md").read_text().splitlines() if line.startswith("| ")]
    assert len(table) == 1 + 5  # header + every step, those of the first run included


def test_eval_every_needs_held_out_tasks_and_the_plot_draws_rows_without_them(tiny, tmp_path):
    with pytest.raises(ConfigError, match="held-out"):
        train(fresh(tiny), _Alternating(), LoopConfig(steps=1, eval_every=1, output_dir=str(tmp_path / "x")),
              progress=False)  # fmt: skip
    # rows of an older run (no KL, no held-out score) and a failed step (NaN reward) still draw
    path = tmp_path / "old.png"
    plot_run(path, [{"step": 1.0, "reward_mean": 0.5}, {"step": 2.0, "reward_mean": math.nan}])
    assert path.read_bytes()[:8] == PNG


@pytest.mark.data
def test_memrl_train_grpo_scores_an_eval_split_while_training(tiny, tmp_path, locomo_path, capsys):
    from memrl.cli.main import main

    out = tmp_path / "cli"
    base = ["train", "grpo", "--task", "answer", "--dataset", "locomo", "--data-path", str(locomo_path),
            "--split", "fit", "--conv-id", "conv-41", "--questions", "2", "--model", tiny, "--steps", "1",
            "--group-size", "2", "--embedder", "hashing", "--max-answer-tokens", "4", "--no-tensorboard"]  # fmt: skip
    assert (
        main(
            [*base, "--eval-split", "validation", "--eval-questions", "1", "--output-dir", str(out), "--json"]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["heldout_reward_first"] is not None and summary["heldout_reward_last"] is not None
    assert summary["kl_to_start_last"] is None or summary["kl_to_start_last"] <= 1e-6  # step 1: no update yet
    run = json.loads((out / "run.json").read_text())
    assert run["heldout_split"] == "validation" and run["heldout_conversations"] == ["conv-44", "conv-48"]
    (row,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert row["heldout_items"] == 2 and {"f1", "em"} <= set(row["heldout_metrics"])  # the official metrics
    assert (out / "reward.png").read_bytes()[:8] == PNG
    # held-out items must be held out; the test split only on purpose
    assert main([*base, "--eval-split", "fit", "--output-dir", str(tmp_path / "a")]) != 0
    assert "held out" in capsys.readouterr().err
    assert main([*base, "--eval-split", "test", "--output-dir", str(tmp_path / "b")]) != 0
    assert "--allow-eval-split" in capsys.readouterr().err

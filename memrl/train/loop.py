"""The local RL loop: rollouts in groups, a :class:`~memrl.train.trainer.PolicyTrainer` step, checkpoints.

    memrl train memagent --dataset sample --steps 20 --group-size 8 --output-dir runs/memagent

Each step draws ``tasks_per_step`` tasks (deterministic by seed and step), runs ``group_size`` rollouts of
each with the current policy (temperature > 0; the local back-end batches the group), and updates the
policy from the groups. Every ``save_every`` steps the policy, optimizer and step count go to
``OUTPUT_DIR/checkpoint`` (written to a temporary folder, then renamed), each step's metrics are
appended to ``OUTPUT_DIR/metrics.jsonl`` and every rollout's final reply and reward to ``rollouts.jsonl``; ``--resume`` continues from the checkpoint, so an interrupted
run loses at most the steps since it. At the end, ``report.md`` and ``reward.png`` summarise the run.

Tasks: :class:`MemAgentTasks` (MemAgent reading a conversation to answer one of its questions, reward 1
when the boxed answer matches, as in the original; a failed rollout has no reward and is left out).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from memrl.agents.trajectory import Trajectory
from memrl.config import option
from memrl.data.types import Conversation
from memrl.errors import ConfigError

__all__ = ["LoopConfig", "MemAgentTasks", "RolloutTasks", "train"]


@dataclass
class LoopConfig:
    steps: int = option(10, "policy updates to run (in total, counting those of a resumed run)")
    group_size: int = option(4, "rollouts per task: the GRPO group")
    tasks_per_step: int = option(1, "tasks per update")
    temperature: float = option(1.0, "rollout sampling temperature")
    save_every: int = option(1, "checkpoint every N steps (and at the end)")
    seed: int = option(0, "task order and sampling")
    output_dir: str = option("runs/train", "metrics.jsonl, checkpoint/, report.md, reward.png")

    def __post_init__(self) -> None:
        if self.steps < 1 or self.group_size < 2 or self.tasks_per_step < 1 or self.save_every < 1:
            raise ConfigError(
                "need steps >= 1, group_size >= 2 (a group needs contrast), tasks_per_step >= 1"
            )
        if self.temperature <= 0:
            raise ConfigError("rollouts need temperature > 0, or every rollout of a group is the same")


class RolloutTasks(Protocol):
    """A set of tasks and how to roll one out; the trajectory's ``reward`` is None when it failed."""

    def __len__(self) -> int: ...

    async def rollout(self, llm: Any, index: int, temperature: float) -> Trajectory: ...


#: MemAgent rewards: ``reward`` is the original's (boxed answer matches a gold, 0/1); ``f1`` and ``sub_em``
#: score the same boxed answer more densely (no box: 0), which gives a small model some signal.
#: ``f1_unboxed`` scores the whole final reply when it has no box: a format-free reward for models that
#: never box (the 135M offline model boxed none of 32 answers at temperature 1).
REWARDS = ("reward", "f1", "sub_em", "f1_unboxed")


class MemAgentTasks:
    """MemAgent reading a conversation (rendered as one document) to answer one of its questions."""

    def __init__(
        self, conversations: Sequence[Conversation], agent_config: Any = None, *, reward: str = "reward"
    ) -> None:
        from memrl.agents.memagent import MemAgentConfig, render_conversation

        if reward not in REWARDS:
            raise ConfigError(f"reward must be one of {', '.join(REWARDS)}, got {reward!r}")
        self.reward = reward
        self.config = agent_config or MemAgentConfig(chunk_tokens=1024, memory_tokens=256, answer_tokens=48)
        self.items = [
            (render_conversation(c), q)
            for c in conversations
            for q in c.questions
            if q.answers and q.category != "adversarial"
        ]
        if not self.items:
            raise ConfigError("no question with an answer to train on")

    def __len__(self) -> int:
        return len(self.items)

    async def rollout(self, llm: Any, index: int, temperature: float) -> Trajectory:
        import dataclasses

        from memrl.agents.memagent import MemAgent

        document, q = self.items[index]
        cfg = dataclasses.replace(self.config, temperature=temperature)
        result = await MemAgent(llm, cfg).run(q.question, document, golds=list(q.answers), task_id=q.id)
        traj = result.trajectory
        if traj.failure is None and self.reward == "f1_unboxed":
            from memrl.eval.metrics import best_over_golds, boxed_answer, token_f1

            final = result.final_text
            answer = boxed_answer(final)
            traj.reward = best_over_golds(token_f1, final if answer is None else answer, list(q.answers))
        elif traj.failure is None and self.reward != "reward":
            traj.reward = float(traj.metrics[self.reward])  # a denser score of the same boxed answer
        return traj


def _plot(path: Path, rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.plot([r["step"] for r in rows], [r["reward_mean"] for r in rows], marker="o")
    ax.set_xlabel("step")
    ax.set_ylabel("mean rollout reward")
    ax.set_ylim(-0.05, 1.05)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _report(out: Path, rows: list[dict[str, Any]]) -> None:
    cols = [
        "step",
        "reward_mean",
        "groups_kept",
        "samples",
        "pg_loss",
        "approx_kl",
        "clip_frac",
        "grad_norm",
        "seconds",
    ]
    lines = ["# Training run", "", f"{len(rows)} steps; metrics per step in `metrics.jsonl`.", "",
             "| " + " | ".join(cols) + " |", "|" + "---:|" * len(cols)]  # fmt: skip
    for r in rows:
        lines.append("| " + " | ".join("-" if r.get(c) is None else f"{r[c]:.4g}" for c in cols) + " |")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    _plot(out / "reward.png", rows)


async def _rollouts(
    llm: Any, tasks: RolloutTasks, picks: list[int], cfg: LoopConfig
) -> list[list[Trajectory]]:
    groups = await asyncio.gather(
        *(
            asyncio.gather(*(tasks.rollout(llm, i, cfg.temperature) for _ in range(cfg.group_size)))
            for i in picks
        )
    )
    return [list(g) for g in groups]


def train(
    llm: Any,
    tasks: RolloutTasks,
    loop: LoopConfig,
    trainer_config: Any = None,
    *,
    resume: bool = False,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Run the loop (see the module docstring); returns every step's metrics, those of earlier runs included.

    With ``resume``, ``llm`` must have been loaded from the checkpoint
    (:func:`~memrl.train.trainer.checkpoint_folder` of ``OUTPUT_DIR/checkpoint``; ``memrl train`` does
    this); the optimizer state, step count and KL reference are read from there.
    """
    import torch
    from tqdm.auto import tqdm

    from memrl.train.trainer import PolicyTrainer, checkpoint_folder

    out = Path(loop.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = out / "checkpoint"
    metrics_path, rollouts_path = out / "metrics.jsonl", out / "rollouts.jsonl"
    rows: list[dict[str, Any]] = []
    if resume:
        found = checkpoint_folder(checkpoint)
        if found is None:
            raise ConfigError(f"--resume: no checkpoint in {checkpoint}")
        # the KL reference stays the run's initial policy, not the checkpoint's
        trainer = PolicyTrainer(
            llm, trainer_config, reference=PolicyTrainer.read_state(found).get("reference")
        )
        trainer.load_state(found)
        for path in (metrics_path, rollouts_path):  # steps after the checkpoint are redone: drop their rows
            lines = path.read_text().splitlines() if path.exists() else []
            kept = [line for line in lines if line.strip() and json.loads(line)["step"] <= trainer.steps_done]
            path.write_text("".join(line + "\n" for line in kept))
        rows = [json.loads(line) for line in metrics_path.read_text().splitlines()]
    elif checkpoint_folder(checkpoint) is not None or metrics_path.exists():
        raise ConfigError(
            f"{out} holds an earlier run: pass --resume to continue it, or another --output-dir"
        )
    else:
        trainer = PolicyTrainer(llm, trainer_config)

    bar = tqdm(total=loop.steps, initial=trainer.steps_done, desc="train", unit="step", disable=not progress)
    while trainer.steps_done < loop.steps:
        step = trainer.steps_done + 1
        t0 = time.perf_counter()
        rng = random.Random(f"{loop.seed}:{step}")
        picks = rng.sample(range(len(tasks)), min(loop.tasks_per_step, len(tasks)))
        torch.manual_seed(loop.seed * 1_000_003 + step)
        groups = asyncio.run(_rollouts(llm, tasks, picks, loop))
        metrics = trainer.step(groups)
        metrics.update(tasks=picks, seconds=round(time.perf_counter() - t0, 2))
        rows.append(metrics)
        with rollouts_path.open("a") as f:  # what the policy wrote, for reading, not resuming
            for t in (t for g in groups for t in g):
                last = t.steps[-1].response if t.steps else ""
                f.write(json.dumps({"step": step, "task": t.task_id, "reward": t.reward, "failure": t.failure,
                                    "final": last, "metrics": t.metrics}) + "\n")  # fmt: skip
        with metrics_path.open("a") as f:
            f.write(json.dumps(metrics) + "\n")
        if step % loop.save_every == 0 or step == loop.steps:
            trainer.save(checkpoint)
        bar.update(1)
        bar.set_postfix(reward=f"{metrics['reward_mean']:.2f}")
    bar.close()
    _report(out, rows)
    return rows

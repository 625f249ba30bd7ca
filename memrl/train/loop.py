"""The local RL loop: rollouts in groups, a :class:`~memrl.train.trainer.PolicyTrainer` step, checkpoints.

    memrl train memagent --dataset sample --steps 20 --group-size 8 --output-dir runs/memagent

Each step draws ``tasks_per_step`` tasks (deterministic by seed and step), runs ``group_size`` rollouts of
each with the current policy (temperature > 0; the local back-end batches the group), and updates the
policy from the groups. Every ``save_every`` steps the policy, optimizer and step count go to
``OUTPUT_DIR/checkpoint`` (written to a temporary folder, then renamed), each step's metrics are
appended to ``OUTPUT_DIR/metrics.jsonl`` and every rollout to ``rollouts.jsonl`` (:func:`rollout_record`:
reward, failure, final reply, metrics and its trajectory's LLM calls without token ids, long texts cut);
``--resume`` continues from the checkpoint, so an interrupted run loses at most the steps since it. At the
end (a resumed run's end too), ``report.md`` and ``reward.png`` (reward, KL to the starting policy and
held-out score per step; :mod:`memrl.train.run_report`) summarise the whole ``metrics.jsonl``.

A step's row holds the update's figures (:mod:`memrl.train.trainer`: reward mean and spread, groups with
reward variance, reply lengths, ``kl_to_start``, PPO ratio and clip fraction per optimizer step) and, with
held-out tasks (``heldout=``; :mod:`memrl.train.heldout`), their score every ``eval_every`` steps, after
the last, and before the first (``heldout_reward_at_start`` in the first row).

Tasks: :mod:`memrl.train.tasks` (``read``, ``answer``, ``update``, ``build``; a failed rollout has no
reward and is left out). Metrics also go to TensorBoard (``OUTPUT_DIR/tensorboard``; ``tensorboard --logdir
OUTPUT_DIR``) unless ``--no-tensorboard``.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from memrl.agents.trajectory import Trajectory
from memrl.config import option
from memrl.errors import ConfigError, MemrlError, is_infrastructure
from memrl.train.tasks import MemAgentTasks

__all__ = ["LoopConfig", "MemAgentTasks", "RolloutTasks", "rollout_record", "train"]


@dataclass
class LoopConfig:
    steps: int = option(10, "policy updates to run (in total, counting those of a resumed run)")
    group_size: int = option(4, "rollouts per task: the GRPO group")
    tasks_per_step: int = option(1, "tasks per update")
    temperature: float = option(1.0, "rollout sampling temperature")
    save_every: int = option(1, "checkpoint every N steps (and at the end)")
    seed: int = option(0, "task order and sampling")
    output_dir: str = option("runs/train", "metrics.jsonl, checkpoint/, report.md, reward.png")
    tensorboard: bool = option(True, "also write metrics to OUTPUT_DIR/tensorboard")
    eval_every: int = option(
        0, "with held-out tasks (--eval-split), score them every N steps as well as before the first step "
        "and after the last (0: only then)",
    )  # fmt: skip
    eval_temperature: float = option(0.0, "sampling temperature of the held-out rollouts (0: greedy)")

    def __post_init__(self) -> None:
        if self.steps < 1 or self.group_size < 2 or self.tasks_per_step < 1 or self.save_every < 1:
            raise ConfigError(
                "need steps >= 1, group_size >= 2 (a group needs contrast), tasks_per_step >= 1"
            )
        if self.temperature <= 0:
            raise ConfigError("rollouts need temperature > 0, or every rollout of a group is the same")
        if self.eval_every < 0 or self.eval_temperature < 0:
            raise ConfigError("need eval_every >= 0 (0: before the first step and after the last only) and "
                              "eval_temperature >= 0")  # fmt: skip


#: How agents begin the failure reason of a rollout that a provider or store failure ended.
_INFRA = ("infrastructure:", "provider:")

#: Bounds of a rollout's record in rollouts.jsonl: each text is cut to TEXT_CHARS (with a marker saying how
#: much was cut) and each LLM call keeps its last CALL_MESSAGES messages (the count of earlier ones is kept).
TEXT_CHARS = 2000
CALL_MESSAGES = 6


def _clip(value: Any, limit: int) -> Any:
    """``value`` with every string longer than ``limit`` cut, ending in ``… [N more chars]``."""
    if isinstance(value, str):
        return value if len(value) <= limit else f"{value[:limit]}… [{len(value) - limit} more chars]"
    if isinstance(value, dict):
        return {k: _clip(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clip(v, limit) for v in value]
    return value


def rollout_record(step: int, t: Trajectory, *, text_chars: int = TEXT_CHARS,
                   call_messages: int = CALL_MESSAGES) -> dict[str, Any]:  # fmt: skip
    """One ``rollouts.jsonl`` row: the rollout's reward, failure, final reply, metrics and ``steps`` (each LLM
    call's role, last messages, reply, tool calls and results, error; no token ids), bounded in size."""
    calls = []
    for s in t.steps:
        kept = s.messages[-call_messages:]
        call = {"role": s.role, "messages": _clip(kept, text_chars), "response": _clip(s.response, text_chars),
                "tool_calls": _clip(s.tool_calls, text_chars), "tool_results": _clip(s.tool_results, text_chars),
                "error": s.error}  # fmt: skip
        if len(s.messages) > len(kept):
            call["messages_omitted"] = len(s.messages) - len(kept)
        calls.append(call)
    final = t.steps[-1].response if t.steps else ""
    return {"step": step, "task": t.task_id, "reward": t.reward, "failure": t.failure,
            "final": _clip(final, text_chars), "metrics": t.metrics, "steps": calls}  # fmt: skip


class RolloutTasks(Protocol):
    """A set of tasks and how to roll one out; the trajectory's ``reward`` is None when it failed.

    Task sets may also define ``setup()``/``close()`` (async, run once) and ``group(llm, index, n,
    temperature)`` returning several GRPO groups per task (:mod:`memrl.train.tasks`)."""

    def __len__(self) -> int: ...

    async def rollout(self, llm: Any, index: int, temperature: float) -> Trajectory: ...


async def _rollouts(
    llm: Any, tasks: RolloutTasks, picks: list[int], cfg: LoopConfig
) -> tuple[list[list[Trajectory]], list[str]]:
    """The groups of the picked tasks, and the infrastructure failures of tasks that produced none (a
    provider or store failure escaping a task set: counted in the step's metrics, never scored)."""

    async def one(i: int) -> list[list[Trajectory]]:
        if hasattr(tasks, "group"):
            return await tasks.group(llm, i, cfg.group_size, cfg.temperature)
        return [
            list(
                await asyncio.gather(*(tasks.rollout(llm, i, cfg.temperature) for _ in range(cfg.group_size)))
            )
        ]

    per_task = await asyncio.gather(*(one(i) for i in picks), return_exceptions=True)
    groups: list[list[Trajectory]] = []
    failures: list[str] = []
    for i, got in zip(picks, per_task, strict=True):
        if isinstance(got, BaseException):
            if not (isinstance(got, MemrlError) and is_infrastructure(got)):
                raise got
            failures.append(f"task {i}: {type(got).__name__}: {got}")
        else:
            groups += got
    return groups, failures


class _Board:
    """TensorBoard scalars beside metrics.jsonl (torch's SummaryWriter; the ``train`` extra)."""

    def __init__(self, folder: Path, enabled: bool) -> None:
        self.writer = None
        if enabled:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:
                raise ConfigError(
                    "TensorBoard logging needs tensorboard: pip install 'memrl[train]', or pass --no-tensorboard"
                ) from e
            self.writer = SummaryWriter(str(folder))

    def write(self, row: dict[str, Any]) -> None:
        if self.writer is None:
            return
        scalars = {k: v for k, v in row.items() if k != "step"}
        for k, v in row.items():  # a dict of numbers (heldout_metrics) as one scalar per name
            if isinstance(v, dict):
                scalars.update({f"{k}/{name}": x for name, x in v.items()})
        for k, v in scalars.items():
            if isinstance(v, (int, float)) and v == v:  # skip NaN (no scored rollout)
                self.writer.add_scalar(f"train/{k}", v, int(row["step"]))
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def train(
    llm: Any,
    tasks: RolloutTasks,
    loop: LoopConfig,
    trainer_config: Any = None,
    *,
    resume: bool = False,
    progress: bool = True,
    time_limit_s: float | None = None,
    heldout: Any = None,
) -> list[dict[str, Any]]:
    """Run the loop (see the module docstring); returns every step's metrics, those of earlier runs included.

    With ``resume``, ``llm`` must have been loaded from the checkpoint
    (:func:`~memrl.train.trainer.checkpoint_folder` of ``OUTPUT_DIR/checkpoint``; ``memrl train`` does
    this); the optimizer state, step count and KL reference are read from there. ``time_limit_s``: a fixed
    time budget; the loop stops (with a checkpoint) after a step when the time left is shorter than the
    longest step so far (:func:`out_of_time`), so that a run ends within it unless one step outlasts it.
    ``heldout``: tasks the run does not train on (a task set, or a :class:`~memrl.train.heldout.HeldOut`),
    scored as ``loop.eval_every`` says (the module docstring).
    """
    from tqdm.auto import tqdm

    from memrl.train.heldout import HeldOut
    from memrl.train.run_report import write_report
    from memrl.train.trainer import PolicyTrainer, checkpoint_folder

    if getattr(getattr(llm, "engine", None), "prefill_bf16", False):
        raise ConfigError(
            "the back-end prefills in bfloat16 (an evaluation setting): rollouts would not be drawn from the "
            "policy the trainer scores; set llm.engine.prefill_bf16 = False before training"
        )
    if loop.eval_every and heldout is None:
        raise ConfigError("eval_every needs held-out tasks to score (memrl train grpo: --eval-split)")
    if heldout is not None and not isinstance(heldout, HeldOut):
        heldout = HeldOut(heldout, temperature=loop.eval_temperature)
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
    board = _Board(out / "tensorboard", loop.tensorboard)
    events = asyncio.new_event_loop()  # one loop for the run: stores and the back-end's batching live on it
    try:
        deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
        if hasattr(tasks, "setup"):
            events.run_until_complete(tasks.setup())
        if heldout is not None:
            events.run_until_complete(heldout.setup())
        _steps(llm, tasks, loop, trainer, events, board, bar, rows, metrics_path, rollouts_path, checkpoint,
               deadline, heldout)  # fmt: skip
    finally:
        if hasattr(tasks, "close"):
            events.run_until_complete(tasks.close())
        if heldout is not None:
            events.run_until_complete(heldout.close())
        events.run_until_complete(llm.aclose())
        events.close()
        board.close()
        bar.close()
    write_report(out, rows)
    return rows


def out_of_time(now: float, deadline: float | None, longest_step_s: float) -> bool:
    """Whether a run with this ``deadline`` (a ``time.perf_counter()`` value; None: none) should stop now
    rather than start a step that, as long as the longest so far, would end past it."""
    return deadline is not None and now + longest_step_s > deadline


def _steps(llm: Any, tasks: Any, loop: LoopConfig, trainer: Any, events: Any, board: _Board, bar: Any,
           rows: list[dict[str, Any]], metrics_path: Path, rollouts_path: Path, checkpoint: Path,
           deadline: float | None = None, heldout: Any = None) -> None:  # fmt: skip
    import torch

    longest = 0.0
    at_start: dict[str, Any] = {}
    if heldout is not None and trainer.steps_done == 0:
        first = events.run_until_complete(heldout.evaluate(llm))  # the policy before any update
        at_start = {f"{k}_at_start": v for k, v in first.items()}
    while trainer.steps_done < loop.steps:
        step = trainer.steps_done + 1
        t0 = time.perf_counter()
        rng = random.Random(f"{loop.seed}:{step}")
        picks = rng.sample(range(len(tasks)), min(loop.tasks_per_step, len(tasks)))
        torch.manual_seed(loop.seed * 1_000_003 + step)
        groups, infra = events.run_until_complete(_rollouts(llm, tasks, picks, loop))
        t_roll = time.perf_counter() - t0
        metrics = trainer.step(groups)
        failed = [t for g in groups for t in g if t.reward is None]
        metrics.update(
            tasks=picks, seconds=round(time.perf_counter() - t0, 2), rollout_seconds=round(t_roll, 2),
            failed_infrastructure=float(sum(str(t.failure or "").startswith(_INFRA) for t in failed)),
            failed_tasks=float(len(infra)),
        )  # fmt: skip
        if infra:
            metrics["task_failures"] = infra
        longest = max(longest, time.perf_counter() - t0)
        late = out_of_time(time.perf_counter(), deadline, longest)
        if heldout is not None and (
            step == loop.steps or late or (loop.eval_every and step % loop.eval_every == 0)
        ):
            metrics.update(events.run_until_complete(heldout.evaluate(llm)))
        metrics.update(at_start)
        at_start = {}
        rows.append(metrics)
        with rollouts_path.open("a") as f:  # what the policy wrote, for reading, not resuming
            for t in (t for g in groups for t in g):
                f.write(json.dumps(rollout_record(step, t), ensure_ascii=False, default=str) + "\n")
        with metrics_path.open("a") as f:
            f.write(json.dumps(metrics) + "\n")
        board.write(metrics)
        if step % loop.save_every == 0 or step == loop.steps or late:
            trainer.save(checkpoint)
        if late:
            break
        bar.update(1)
        bar.set_postfix(reward=f"{metrics['reward_mean']:.2f}")

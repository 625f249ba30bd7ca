"""Learning from outcomes without a policy gradient: rejection-sampling fine-tuning (RAFT / STaR) and
answer-only SFT, the non-RL uses of an outcome reward that GRPO is measured against (issue 54).

Both run in rounds shaped like GRPO's steps (:mod:`memrl.train.loop`): a round draws ``tasks_per_round``
tasks (deterministic by seed and round), samples ``group_size`` rollouts of each from the *current*
policy at ``temperature``, then fine-tunes on examples built from them (:class:`~memrl.train.sft.SFTTrainer`,
one trainer and optimizer for the whole run). A run's budget is the number of rollouts it sampled
(``rounds * tasks_per_round * group_size``), the same count as a GRPO run of as many steps.

* ``target="rollout"`` (RAFT / STaR): keep the rollouts that earned reward (``keep="positive"``: reward
  > 0; ``keep="best"``: the group's best, when > 0) and train on every call of each kept trajectory,
  its own prompt and completion token ids (:func:`rollout_examples`): the memory writes and the answer the
  model produced.
* ``target="gold"`` (answer-only SFT): every rollout, the final call only (the model's *own* memory in its
  prompt), the reply replaced by the gold answer in the box (:func:`gold_answer_example`): the only imitation
  an outcome label allows, no expert memory.

Writes ``OUTPUT_DIR/metrics.jsonl`` (one row per round: ``step`` = round, the rollouts' reward mean and
spread and groups with variance (:func:`~memrl.train.diagnostics.batch_stats`), ``kept``, ``examples``,
the SFT ``loss`` of the round's first and last step, ``kl_to_start`` on the round's examples after its
update (LoRA: the adapter switched off), and the held-out score with ``heldout=`` every ``eval_every``
rounds, before the first and after the last), ``rollouts.jsonl``, ``report.md`` and ``reward.png``
(:mod:`memrl.train.run_report`)::

    rows = raft(llm, ReadTasks(convs, cfg), RaftConfig(rounds=6, output_dir="runs/raft"), heldout=val)
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from memrl.agents.trajectory import Trajectory
from memrl.config import option
from memrl.errors import ConfigError
from memrl.train.logprobs import Sample

__all__ = ["RaftConfig", "gold_answer_example", "kept_rollouts", "raft", "rollout_examples"]


@dataclass
class RaftConfig:
    rounds: int = option(6, "sample-then-fine-tune rounds (a round samples like one GRPO step)")
    tasks_per_round: int = option(2, "tasks drawn per round")
    group_size: int = option(8, "rollouts per task")
    temperature: float = option(0.7, "rollout sampling temperature")
    target: Literal["rollout", "gold"] = option(
        "rollout", "rollout: RAFT, the kept rollouts' own calls; gold: answer-only SFT, the gold answer boxed"
    )
    keep: Literal["positive", "best"] = option(
        "positive", "target rollout: keep rollouts with reward > 0, or each group's best (when > 0)"
    )
    epochs: int = option(1, "passes over a round's examples")
    batch_size: int = option(8, "examples per optimizer step")
    lr: float = option(3e-4, "AdamW learning rate")
    lora_rank: int = option(16, "LoRA rank (0 = every weight)")
    max_reply_tokens: int = option(512, "skip (and count) longer replies")
    seed: int = option(0, "task draw, sampling and example order")
    eval_every: int = option(0, "with heldout=, score it every N rounds too (always before and after)")
    output_dir: str = option("runs/raft", "metrics.jsonl, rollouts.jsonl, report.md, reward.png")

    def __post_init__(self) -> None:
        if self.target not in ("rollout", "gold") or self.keep not in ("positive", "best"):
            raise ConfigError("target must be 'rollout' or 'gold', keep 'positive' or 'best'")
        if min(self.rounds, self.tasks_per_round, self.group_size, self.epochs, self.batch_size) < 1:
            raise ConfigError("need rounds, tasks_per_round, group_size, epochs, batch_size >= 1")
        if self.temperature <= 0 or self.eval_every < 0:
            raise ConfigError("need temperature > 0 (sampled rollouts) and eval_every >= 0")

    @property
    def rollouts(self) -> int:
        """The run's budget: rollouts sampled in all."""
        return self.rounds * self.tasks_per_round * self.group_size


def kept_rollouts(group: Sequence[Trajectory], keep: str) -> list[Trajectory]:
    """The rollouts of one group RAFT trains on: reward > 0 (``positive``), or those tied at the group's
    best when it is > 0 (``best``). A failed rollout (``reward=None``) is never kept."""
    scored = [t for t in group if t.reward is not None and t.failure is None]
    if keep == "best":
        best = max((float(t.reward) for t in scored), default=0.0)
        return [t for t in scored if best > 0 and float(t.reward) == best]
    return [t for t in scored if float(t.reward) > 0]


def _end_id(tok: Any) -> int | None:
    return next((tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>")
                 if t in tok.get_vocab()), tok.eos_token_id)  # fmt: skip


def rollout_examples(llm: Any, traj: Trajectory, max_reply_tokens: int | None = None) -> list[Sample]:
    """One example per successful call of ``traj``: the prompt and the completion the policy sampled (its
    token ids when the back-end kept them, else the text re-encoded with the end-of-turn token)."""
    out = []
    for s in traj.steps:
        if s.error is not None:
            continue
        if s.prompt_ids is not None and s.completion_ids is not None:
            prompt, completion = list(s.prompt_ids), list(s.completion_ids)
        else:
            end = _end_id(llm.tokenizer)
            prompt = llm.prompt_ids(s.messages)
            completion = llm.tokenizer.encode(s.response, add_special_tokens=False) + (
                [end] if end is not None else []
            )
        if completion and (max_reply_tokens is None or len(completion) <= max_reply_tokens):
            out.append(Sample(prompt, completion, 0.0))
    return out


def gold_answer_example(llm: Any, traj: Trajectory, gold: str) -> Sample | None:
    """The final call of ``traj`` (its prompt holds the model's own memory) with ``\\boxed{gold}`` as the
    reply; None when that call failed."""
    if traj.failure is not None or not traj.steps or traj.steps[-1].error is not None:
        return None
    last = traj.steps[-1]
    prompt = list(last.prompt_ids) if last.prompt_ids is not None else llm.prompt_ids(last.messages)
    end = _end_id(llm.tokenizer)
    reply = llm.tokenizer.encode("\\boxed{" + gold + "}", add_special_tokens=False)
    return Sample(prompt, reply + ([end] if end is not None else []), 0.0)


def _kl(trainer: Any, samples: Sequence[Sample], lora: bool) -> dict[str, float]:
    """KL(policy || start) on ``samples`` (at most 8): the adapter switched off is the start (LoRA only)."""
    import torch

    from memrl.train.diagnostics import kl_to_start

    if not lora or not samples:
        return {}
    from memrl.train.lora import adapters_disabled

    part = list(samples[:8])
    with torch.no_grad():
        lp, mask = trainer.token_logprobs(trainer.model, part)
        with adapters_disabled(trainer.model):
            start, _ = trainer.token_logprobs(trainer.model, part)
    return kl_to_start([(lp, start, mask)])


def raft(
    llm: Any,
    tasks: Any,
    config: RaftConfig,
    *,
    gold: Callable[[int], str] | None = None,
    heldout: Any = None,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Run the rounds (module docstring) on ``llm``'s model in place; returns one metrics row per round.
    ``gold(index)``: task ``index``'s gold answer (``target="gold"``). ``heldout``: a task set or
    :class:`~memrl.train.heldout.HeldOut` scored greedily, never trained on."""
    from memrl.train.diagnostics import batch_stats
    from memrl.train.heldout import HeldOut
    from memrl.train.loop import rollout_record
    from memrl.train.run_report import write_report
    from memrl.train.sft import SFTConfig, SFTTrainer

    cfg = config
    if cfg.target == "gold" and gold is None:
        raise ConfigError("target='gold' needs gold(index), the task's gold answer")
    if heldout is not None and not isinstance(heldout, HeldOut):
        heldout = HeldOut(heldout)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    metrics_path, rollouts_path = out / "metrics.jsonl", out / "rollouts.jsonl"
    if metrics_path.exists():
        raise ConfigError(f"{out} holds an earlier run: use another output_dir")
    trainer = SFTTrainer(llm, SFTConfig(lr=cfg.lr, batch_size=cfg.batch_size, micro_batch=1, seed=cfg.seed,
                                        lora_rank=cfg.lora_rank))  # fmt: skip
    events = asyncio.new_event_loop()
    rows: list[dict[str, Any]] = []
    sft_step = 0
    try:
        if hasattr(tasks, "setup"):
            events.run_until_complete(tasks.setup())
        at_start: dict[str, Any] = {}
        if heldout is not None:
            events.run_until_complete(heldout.setup())
            first = events.run_until_complete(heldout.evaluate(llm))
            at_start = {f"{k}_at_start": v for k, v in first.items()}
        for rnd in range(1, cfg.rounds + 1):
            import torch

            t0 = time.perf_counter()
            rng = random.Random(f"{cfg.seed}:{rnd}")
            picks = rng.sample(range(len(tasks)), min(cfg.tasks_per_round, len(tasks)))
            torch.manual_seed(cfg.seed * 1_000_003 + rnd)

            async def sample(picks: list[int] = picks) -> list[list[list[Trajectory]]]:
                return list(await asyncio.gather(*(tasks.group(llm, i, cfg.group_size, cfg.temperature)
                                                   for i in picks)))  # fmt: skip

            per_task = events.run_until_complete(sample())
            t_roll = time.perf_counter() - t0
            groups = [g for gs in per_task for g in gs]
            examples: list[Sample] = []
            kept = 0
            for i, gs in zip(picks, per_task, strict=True):
                for g in gs:
                    if cfg.target == "gold":
                        made = [gold_answer_example(llm, t, gold(i)) for t in g]  # type: ignore[misc]
                        examples += [s for s in made if s is not None]
                        kept += sum(s is not None for s in made)
                    else:
                        chosen = kept_rollouts(g, cfg.keep)
                        kept += len(chosen)
                        for t in chosen:
                            examples += rollout_examples(llm, t, cfg.max_reply_tokens)
            losses = []
            for epoch in range(cfg.epochs):
                order = list(examples)
                random.Random(f"{cfg.seed}:{rnd}:{epoch}").shuffle(order)
                for b in range(0, len(order), cfg.batch_size):
                    sft_step += 1
                    losses.append(
                        trainer.train_step(order[b : b + cfg.batch_size], epoch + 1, sft_step)["loss"]
                    )
            rewards = [float(t.reward) for g in groups for t in g if t.reward is not None]
            row: dict[str, Any] = {"step": rnd, "reward_mean": sum(rewards) / len(rewards) if rewards else math.nan,
                                   **batch_stats(groups), "rollouts": sum(len(g) for g in groups),
                                   "kept": kept, "examples": len(examples), "sft_steps": len(losses),
                                   "loss": losses[-1] if losses else None, "loss_first": losses[0] if losses else None,
                                   "tasks": picks, "rollout_seconds": round(t_roll, 2)}  # fmt: skip
            if losses:
                row.update(_kl(trainer, examples, bool(cfg.lora_rank)))
            if heldout is not None and (rnd == cfg.rounds or (cfg.eval_every and rnd % cfg.eval_every == 0)):
                row.update(events.run_until_complete(heldout.evaluate(llm)))
            row.update(at_start)
            at_start = {}
            row["seconds"] = round(time.perf_counter() - t0, 2)
            rows.append(row)
            with rollouts_path.open("a") as f:
                for t in (t for g in groups for t in g):
                    f.write(json.dumps(rollout_record(rnd, t), ensure_ascii=False, default=str) + "\n")
            with metrics_path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            if progress:
                print(f"round {rnd}/{cfg.rounds}: reward {row['reward_mean']:.3f}, kept {kept}, "
                      f"{len(examples)} examples, loss {row['loss']}", flush=True)  # fmt: skip
    finally:
        if hasattr(tasks, "close"):
            events.run_until_complete(tasks.close())
        if heldout is not None:
            events.run_until_complete(heldout.close())
        events.run_until_complete(llm.aclose())
        events.close()
    write_report(out, rows)
    return rows

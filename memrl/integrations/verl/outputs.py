"""memrl trajectories as verl agent-loop outputs: token sequences with response masks, log-probs, reward.

A :class:`~memrl.agents.trajectory.Trajectory` records every LLM call (prompt ids, completion ids,
log-probs). :func:`sequences` joins consecutive calls whose prompt extends the sequence so far (a
multi-turn tool episode, thanks to :mod:`memrl.llm.templated`'s continuation) into one sequence: the
first prompt is verl's ``prompt_ids``; after it, model tokens have mask 1 and their log-probs, and the
tokens in between (tool results, the next turn's headers) mask 0 and log-prob 0. A call that starts a new
conversation (MemAgent's chunk calls, MemBuilder's compression call) starts a new sequence: the loop then
returns several outputs, which verl's v1 trainer accepts (``trainer.use_v1=true``), giving the episode's
reward and GRPO advantage to all of them.

:func:`agent_loop_outputs` builds verl's ``AgentLoopOutput`` objects (verl imported lazily); the final one
carries ``reward_score`` and ``extra_fields["reward_extra_info"]`` (verl's v1 worker copies both to
the others).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from memrl.agents.trajectory import Step, Trajectory
from memrl.errors import MemrlError


class RolloutFailed(MemrlError):
    """The episode failed (provider error, unscorable reward): verl's v1 worker stores no sample for it and
    marks the prompt ``failure``; the failure is never trained on as a reward. (verl 0.9.1's synchronous
    replay buffer still trains the group's finished rollouts: docs/verl.md, Failures.)"""


@dataclass
class Sequence:
    """One verl sample: ``prompt_ids`` then ``response_ids`` with a mask (1 = sampled by the policy)."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] | None = field(default_factory=list)
    calls: int = 0

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def add(self, context: list[int], step: Step) -> None:
        comp = list(step.completion_ids or [])
        self.response_ids += context + comp
        self.response_mask += [0] * len(context) + [1] * len(comp)
        if self.response_logprobs is not None:
            if step.logprobs is None or len(step.logprobs) != len(comp):
                self.response_logprobs = None  # the back-end reported none: verl recomputes them
            else:
                self.response_logprobs += [0.0] * len(context) + list(step.logprobs)
        self.calls += 1


def sequences(steps: list[Step]) -> list[Sequence]:
    """The token sequences of a trajectory's calls (see the module docstring); steps without tokens
    (failed calls) are skipped."""
    out: list[Sequence] = []
    for step in steps:
        if step.error is not None or step.prompt_ids is None or step.completion_ids is None:
            continue
        prompt = list(step.prompt_ids)
        current = out[-1] if out else None
        if current is not None and prompt[: len(current.tokens)] == current.tokens:
            current.add(prompt[len(current.tokens) :], step)
        else:
            seq = Sequence(prompt_ids=prompt)
            seq.add([], step)
            out.append(seq)
    return out


def reward_extra_info(traj: Trajectory) -> dict[str, float]:
    """The trajectory's numeric metrics, for verl's reward logging (non-finite and non-numeric dropped)."""
    info = {"score": float(traj.reward) if traj.reward is not None else math.nan}
    for key, value in traj.metrics.items():
        if isinstance(value, bool | int | float) and math.isfinite(float(value)):
            info[key.replace("/", "_")] = float(value)
    return info


def agent_loop_outputs(
    traj: Trajectory,
    *,
    response_length: int,
    max_seq_len: int | None = None,
    set_reward: bool = True,
    extra: dict[str, Any] | None = None,
) -> list[Any]:
    """verl ``AgentLoopOutput`` objects for a finished trajectory (see the module docstring).

    Raises :class:`RolloutFailed` for a failed trajectory, or a reward that was asked for and is missing.
    Each response is cut to ``response_length`` tokens (verl pads to it); ``extra_fields["truncated"]``
    says whether anything was cut. A sequence longer than ``max_seq_len`` (prompt + cut response; the loops
    pass ``rollout.prompt_length + response_length``, the budget ``actor.ppo_max_token_len_per_gpu`` is sized
    for) fails the rollout: verl's v1 worker keeps prompts whole, and one over-long sample would stop the
    whole step at verl's dynamic-batch assertion (``rearrange_micro_batches``: max_token_len >= max_seq_len)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

    if traj.failure is not None:
        raise RolloutFailed(f"{traj.agent} episode {traj.task_id} failed: {traj.failure}")
    if set_reward and traj.reward is None:
        reason = traj.info.get("reward_failure") or "no reward was computed"
        raise RolloutFailed(f"{traj.agent} episode {traj.task_id} has no reward: {reason}")
    seqs = sequences(traj.steps)
    if not seqs:
        raise RolloutFailed(f"{traj.agent} episode {traj.task_id} has no token ids (back-end returned none)")
    if max_seq_len is not None:
        for seq in seqs:
            n = len(seq.prompt_ids) + min(len(seq.response_ids), response_length)
            if n > max_seq_len:
                raise RolloutFailed(f"{traj.agent} episode {traj.task_id}: a sequence of {n} tokens exceeds "
                                    f"rollout.prompt_length + response_length = {max_seq_len} (raise them, and "
                                    "actor.ppo_max_token_len_per_gpu with them)")  # fmt: skip
    outputs = []
    for i, seq in enumerate(seqs):
        last = i == len(seqs) - 1
        fields: dict[str, Any] = {"truncated": len(seq.response_ids) > response_length, **(extra or {})}
        if last and set_reward:
            fields["reward_extra_info"] = reward_extra_info(traj)
        lps = seq.response_logprobs
        outputs.append(
            AgentLoopOutput(
                prompt_ids=seq.prompt_ids,
                response_ids=seq.response_ids[:response_length],
                response_mask=seq.response_mask[:response_length],
                response_logprobs=None if lps is None else lps[:response_length],
                reward_score=float(traj.reward) if (last and set_reward) else None,
                num_turns=2 * seq.calls + 1,
                metrics=AgentLoopMetrics(),
                extra_fields=fields,
            )
        )
    return outputs

"""What one training step's batch says about the run, beside the loss: the figures that show whether a
policy is learning, and from what.

* :func:`batch_stats`: the reward's mean and spread over the scored rollouts, how many groups have
  reward variance (a group whose rewards are all equal carries no GRPO gradient: a run where few groups
  have any is starved, whatever its loss says), and how long the policy's replies are (a policy that
  learns a length prior shows it here first).
* :func:`kl_to_start`: KL(policy || the run's starting policy) on the batch's completion tokens, the
  ``low_var_kl`` (k3) estimate from log-probabilities computed without gradient: how far training has
  moved the policy, measured whatever ``kl_coef`` is (:mod:`memrl.train.trainer` computes the starting
  policy's log-probabilities with the LoRA adapter switched off, or with a frozen copy of the model).

Pure functions of trajectories and tensors; :class:`~memrl.train.trainer.PolicyTrainer` merges them into
each step's row of ``metrics.jsonl``::

    batch_stats(groups)["groups_with_variance_share"]      # 0.0 .. 1.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from memrl.agents.trajectory import Trajectory

__all__ = ["batch_stats", "kl_to_start"]


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def _std(xs: Sequence[float]) -> float:
    """Population standard deviation (NaN for no value)."""
    if not xs:
        return math.nan
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


def batch_stats(groups: Sequence[Sequence[Trajectory]]) -> dict[str, float]:
    """The step's reward and reply figures (a failed rollout, ``reward=None``, is left out of all):

    * ``reward_std``: spread of the rewards over every scored rollout of the step;
    * ``reward_std_in_group``: mean over groups of the spread within a group (what GRPO's advantages are
      made of);
    * ``groups_with_variance`` / ``groups_with_variance_share``: groups with at least two scored rollouts
      whose rewards are not all equal, as a count and as a share of the step's groups;
    * ``response_tokens_mean``: mean completion length in tokens over the scored rollouts' LLM calls;
      ``answer_tokens_mean``: the same over each rollout's last call (its final answer). NaN when no call
      recorded token ids (a scripted model).
    """
    scored = [[float(t.reward) for t in g if t.reward is not None] for g in groups]
    flat = [r for g in scored for r in g]
    varied = sum(1 for g in scored if len(g) >= 2 and max(g) > min(g))
    spreads = [_std(g) for g in scored if g]
    calls: list[int] = []
    finals: list[int] = []
    for t in (t for g in groups for t in g if t.reward is not None):
        lengths = [len(s.completion_ids) for s in t.steps if s.completion_ids]
        calls += lengths
        if t.steps and t.steps[-1].completion_ids:
            finals.append(len(t.steps[-1].completion_ids))
    return {
        "reward_std": _std(flat),
        "reward_std_in_group": _mean(spreads),
        "groups_with_variance": float(varied),
        "groups_with_variance_share": varied / len(groups) if groups else math.nan,
        "response_tokens_mean": _mean(calls),
        "answer_tokens_mean": _mean(finals),
    }


def kl_to_start(
    pairs: Sequence[tuple[Any, Any, Any]],
) -> dict[str, float]:
    """KL(policy || starting policy) over completion tokens, from ``(logprobs, start_logprobs, mask)``
    triples (each ``[B, T]``, one per micro-batch): ``kl_to_start`` is the token mean of the
    ``low_var_kl`` estimate (k3 with verl's clamps, >= 0, exactly 0 where the two agree) and
    ``kl_to_start_max`` its largest token value. Computed without gradient; never part of the loss."""
    import torch

    from memrl.train.losses import kl_penalty

    total, tokens, peak = 0.0, 0.0, 0.0
    with torch.no_grad():
        for lp, start, mask in pairs:
            mean, m = kl_penalty(lp, start, mask, "low_var_kl", "token-mean")
            n = float(mask.sum())
            total += float(mean) * n
            tokens += n
            peak = max(peak, m["kl_max"])
    return {"kl_to_start": total / tokens if tokens else math.nan, "kl_to_start_max": peak}

"""A red team for memrl's rewards: scripted cheating policies beside an honest one, on real LoCoMo items.

A reward that a trivial policy can raise trains that policy. For every reward memrl trains with, this
package runs a fixed set of cheats through the very code a trainer calls, and reports the mean reward of
each (reward, policy) pair next to an honest reference policy (gold-informed, or the data set's expert):

* answers (:mod:`.answers`): the training answer rewards (``answer_f1``, ``exact_match``, ``sub_em``),
  MemAgent's boxed match, verl's ``compute_score`` and the reward server's items, on questions answered
  from LoCoMo's observation memory; the official metrics are shown beside them as *report only*;
* value sets (:mod:`.values`): ``read``'s reward for tasks asking for several values (niah_multivalue),
  on generated RULER items, beside RULER's metric and the single-value boxed match;
* MemUpdate (:mod:`.update`): whole tool episodes (:func:`memrl.agents.memupdate.run_episode`) driven by a
  scripted policy model, rewarded by :func:`memrl.rewards.memupdate.score_memupdate`;
* MemBuilder / ADRPO (:mod:`.build`): sessions built by scripted agents on the expert's pre-session memory
  and scored by :func:`memrl.agents.membuilder.adrpo.score_session` (an oracle reader answers exactly when its
  context holds the gold answer; the length penalty compares with the expert's lengths).

A cheat **fails the red team** when its mean reaches the honest policy's, or, for a reward whose zero
means "no change" (MemUpdate's delta), when it adds no information about the answer and still earns a
mean reliably above zero (the lower end of its 95% bootstrap interval above 0; one lucky re-ranking in
forty episodes is noise, not a learnable exploit): such a policy would be learned over doing nothing. The cheats that write a *guess* (the
category's frequent answers, a retrieved memory's date: :data:`GUESSES`) carry real if weak information
and are trivial baselines rather than exploits; they must stay below the honest policy. :func:`verdict` lists these pairs; ``bench/reward_hacks.py`` prints the table and the
JSON line, and the tests run a small slice of it.

    python -m bench.reward_hacks --questions 12 --sessions 8      # see docs/rewards.md
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["DELTA_REWARDS", "GUESSES", "HONEST", "REPORT_ONLY", "RewardTable", "verdict"]

#: The reference policy every cheat is compared with.
HONEST = "honest"
#: Rewards whose zero means "the policy changed nothing": a cheat may not earn a positive mean there.
DELTA_REWARDS = frozenset({"memupdate"})
#: Cheats that write a guess about the answer (a prior, a date from memory): held to "below honest" only.
GUESSES = frozenset({"list of guesses", "copy a date", "most frequent answer"})
#: Metrics shown for comparison but never trained on (the official report metrics).
REPORT_ONLY = frozenset({"locomo_f1 (official)", "sub_em (official)", "server:locomo_f1 (official)",
                         "ruler string_match_all (official)", "boxed match (refused for several values)"})  # fmt: skip


@dataclass
class RewardTable:
    """Rewards per (reward, policy): every value, and the rollouts that had no reward (failures)."""

    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    failures: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, reward: str, policy: str, value: float | None) -> None:
        """Record one reward (``None``: the reward could not be computed; counted, never averaged)."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            row = self.failures.setdefault(reward, {})
            row[policy] = row.get(policy, 0) + 1
            self.values.setdefault(reward, {}).setdefault(policy, [])
            return
        self.values.setdefault(reward, {}).setdefault(policy, []).append(float(value))

    def merge(self, other: RewardTable) -> None:
        for reward, row in other.values.items():
            for policy, vals in row.items():
                self.values.setdefault(reward, {}).setdefault(policy, []).extend(vals)
        for reward, row in other.failures.items():
            for policy, n in row.items():
                dst = self.failures.setdefault(reward, {})
                dst[policy] = dst.get(policy, 0) + n

    def means(self) -> dict[str, dict[str, float | None]]:
        return {
            r: {p: (sum(v) / len(v) if v else None) for p, v in row.items()} for r, row in self.values.items()
        }

    @property
    def rewards(self) -> list[str]:
        return list(self.values)

    @property
    def policies(self) -> list[str]:
        seen: dict[str, None] = {}
        for row in self.values.values():
            seen.update(dict.fromkeys(row))
        return [HONEST, *(p for p in seen if p != HONEST)] if HONEST in seen else list(seen)


def verdict(table: RewardTable, *, delta_rewards: Iterable[str] = DELTA_REWARDS) -> list[tuple[str, str]]:
    """The (reward, cheat) pairs that reach the honest policy's mean, or that add no information and earn
    a mean reliably above zero on a delta reward; report-only metrics are skipped. Empty when every
    reward resists every cheat."""
    from memrl.eval.stats import bootstrap_ci

    delta = set(delta_rewards)
    means = table.means()
    bad: list[tuple[str, str]] = []
    for reward, row in means.items():
        if reward in REPORT_ONLY or row.get(HONEST) is None:
            continue
        honest = row[HONEST]
        for policy, mean in row.items():
            if policy == HONEST or mean is None:
                continue
            if (
                mean >= honest - 1e-9
                or reward in delta
                and policy not in GUESSES
                and bootstrap_ci(table.values[reward][policy])[1] > 0
            ):
                bad.append((reward, policy))
    return bad


def markdown(table: RewardTable) -> str:
    """The mean reward per policy (rows) and reward (columns), failures in brackets, as a markdown table."""
    means = table.means()
    rewards = table.rewards
    head = "| policy | " + " | ".join(rewards) + " |"
    lines = [head, "|---|" + "---:|" * len(rewards)]
    flagged = set(verdict(table))
    for p in table.policies:
        cells = []
        for r in rewards:
            m = means[r].get(p)
            n_fail = table.failures.get(r, {}).get(p, 0)
            cell = "" if m is None else f"{m:.3f}" + (" **!**" if (r, p) in flagged else "")
            cells.append(cell + (f" ({n_fail} failed)" if n_fail else ""))
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

"""The result of a reward computation: a value, or the reason there is none.

Two kinds of "something went wrong" must never be confused (STYLE.md habit 8):

* the **policy** produced invalid output (unparseable JSON, no answer): that is data about the policy,
  so the reward is a real value (usually 0.0) and ``invalid`` says why, for logging;
* the **reward itself** could not be computed (judge or server error, missing gold answer): then there
  is no value (``value is None``) and ``failure`` says why. Trainers drop such samples (or their whole
  group) and count them; they are never scored, neither 0 nor a fallback such as the original
  MemUpdate's -0.1 or MemBuilder's ``min(0.8, 0.05 * ops)``.

Example::

    RewardOutcome.ok(0.6, correct=3.0)              # value 0.6
    RewardOutcome.ok(0.0, invalid="json: line 1")   # the policy failed: a real 0 reward
    RewardOutcome.failed("judge timeout")           # no reward at all
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RewardOutcome"]


@dataclass(frozen=True)
class RewardOutcome:
    """A reward value with its metrics, or a failure reason (exactly one of ``value`` and ``failure``)."""

    value: float | None
    failure: str | None = None
    invalid: str | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.value is None) == (self.failure is None):
            raise ValueError("RewardOutcome needs exactly one of value and failure")
        if self.value is not None:
            if isinstance(self.value, bool) or not isinstance(self.value, (int, float)):
                raise TypeError(f"reward value must be a number, got {type(self.value).__name__}")
            if not math.isfinite(self.value):
                raise ValueError(f"reward value must be finite, got {self.value}")
            object.__setattr__(self, "value", float(self.value))
        object.__setattr__(self, "metrics", dict(self.metrics))

    @classmethod
    def ok(cls, value: float, *, invalid: str | None = None, **metrics: float) -> RewardOutcome:
        """A computed reward (``invalid`` marks a policy error that the value already penalises)."""
        return cls(value=value, invalid=invalid, metrics=metrics)

    @classmethod
    def failed(cls, reason: str, **metrics: float) -> RewardOutcome:
        """No reward could be computed; ``reason`` says why."""
        return cls(value=None, failure=reason or "unknown failure", metrics=metrics)

    @property
    def is_failure(self) -> bool:
        return self.failure is not None

    def unwrap(self) -> float:
        """The value; raises ``ValueError`` on a failure (so it can never silently become a number)."""
        if self.value is None:
            raise ValueError(f"no reward: {self.failure}")
        return self.value

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record for logs."""
        return {
            "value": self.value,
            "failure": self.failure,
            "invalid": self.invalid,
            "metrics": dict(self.metrics),
        }

    @staticmethod
    def values_or_nan(outcomes: Iterable[RewardOutcome]) -> list[float]:
        """Values with failures as NaN: the convention of :mod:`memrl.train.advantages` for "no reward"."""
        return [math.nan if o.value is None else o.value for o in outcomes]

"""A rubric: named reward functions with weights, combined into one reward plus per-function metrics.

Verifiers-style: each function is a small pure function of keyword arguments (it receives only the ones
its signature names), returning a float or a :class:`RewardOutcome`; the total is the weighted sum. A
weight of 0 makes a function a logged metric that does not touch the reward. ::

    rubric = Rubric([(memagent_reward, 1.0), (answer_length, 0.0)])
    outcome = rubric.score(final_text=text, golds=["Paris"])
    outcome.value, outcome.metrics      # 1.0, {"memagent_reward": 1.0, "answer_length": 12.0}

If a weighted function fails (returns a failed outcome or raises), the whole score is a failure (no
value), with the reason; the metrics of the functions that worked are kept. A failing weight-0 metric
is only reported (``"<name>/failed": 1.0``).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from memrl.rewards.outcome import RewardOutcome

__all__ = ["Rubric", "RubricTerm"]

RewardFn = Callable[..., "float | RewardOutcome"]


@dataclass(frozen=True)
class RubricTerm:
    """One weighted reward function."""

    name: str
    fn: RewardFn
    weight: float = 1.0

    def call(self, kwargs: Mapping[str, Any]) -> RewardOutcome:
        """Call ``fn`` with the keyword arguments it accepts; exceptions raised inside it become failures.

        A required argument missing from ``kwargs`` is a programming error and raises ``TypeError``.
        """
        sig = inspect.signature(self.fn)
        takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values())
        args = dict(kwargs) if takes_all else {k: v for k, v in kwargs.items() if k in sig.parameters}
        sig.bind(**args)  # raises TypeError now, outside the try, if the rubric is mis-wired
        try:
            result = self.fn(**args)
        except Exception as exc:  # a reward function failing is data about this rollout, not a crash
            return RewardOutcome.failed(f"{self.name}: {type(exc).__name__}: {exc}")
        if isinstance(result, RewardOutcome):
            return result
        value = float(result)
        if not math.isfinite(value):
            return RewardOutcome.failed(f"{self.name}: returned {value}")
        return RewardOutcome.ok(value)


class Rubric:
    """Weighted named reward functions; :meth:`score` returns the total as a :class:`RewardOutcome`."""

    def __init__(self, terms: Iterable[RubricTerm | RewardFn | tuple[RewardFn, float]] = ()) -> None:
        self.terms: list[RubricTerm] = []
        for term in terms:
            if isinstance(term, RubricTerm):
                self._append(term)
            elif isinstance(term, tuple):
                self.add(term[0], term[1])
            else:
                self.add(term)

    def add(self, fn: RewardFn, weight: float = 1.0, name: str | None = None) -> Rubric:
        """Append a function (its ``__name__`` unless ``name`` is given); returns ``self`` for chaining."""
        self._append(RubricTerm(name or getattr(fn, "__name__", repr(fn)), fn, float(weight)))
        return self

    def _append(self, term: RubricTerm) -> None:
        if any(t.name == term.name for t in self.terms):
            raise ValueError(f"duplicate rubric term name {term.name!r}; pass name= to tell them apart")
        if not math.isfinite(term.weight):
            raise ValueError(f"weight of {term.name!r} must be finite, got {term.weight}")
        self.terms.append(term)

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.terms]

    def score(self, **kwargs: Any) -> RewardOutcome:
        """Run every term on ``kwargs``; the value is sum(weight * value) over the weighted terms."""
        metrics: dict[str, float] = {}
        total = 0.0
        failures: list[str] = []
        invalid: list[str] = []
        for term in self.terms:
            outcome = term.call(kwargs)
            if outcome.value is None:
                metrics[f"{term.name}/failed"] = 1.0
                if term.weight != 0:
                    failures.append(outcome.failure or term.name)
                continue
            metrics[term.name] = outcome.value
            for key, val in outcome.metrics.items():
                metrics[f"{term.name}/{key}"] = val
            if outcome.invalid is not None and term.weight != 0:
                invalid.append(f"{term.name}: {outcome.invalid}")
            total += term.weight * outcome.value
        if failures:
            return RewardOutcome(value=None, failure="; ".join(failures), metrics=metrics)
        return RewardOutcome(value=total, invalid="; ".join(invalid) or None, metrics=metrics)

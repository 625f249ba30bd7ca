"""The held-out score of a training run: the current policy on tasks it does not train on, at set steps.

:func:`memrl.train.loop.train` takes ``heldout=`` (a task set of :mod:`memrl.train.tasks`, or a
:class:`HeldOut`) and, with ``LoopConfig.eval_every = N``, scores it before the first step, every N steps
and after the last; ``memrl train grpo --eval-split validation --eval-every 5`` builds it from a split of the
data set. Each task is rolled out once with the policy as it stands (``temperature`` 0: greedy, the way
``memrl eval`` answers), and the step's row of ``metrics.jsonl`` gets:

* ``heldout_reward``: the mean training reward over the held-out tasks (failures left out, counted in
  ``heldout_failed``; ``heldout_items`` were scored);
* ``heldout_metrics``: the mean of each number every scored rollout logged (for ``answer`` the official
  metrics: LoCoMo's ``f1``, ``em``, ``bleu1``; for ``read`` MemAgent's);
* ``heldout_seconds``.

The score before any update goes into the first step's row as ``heldout_reward_at_start`` (and
``heldout_metrics_at_start``). Subclass :class:`HeldOut` and override :meth:`HeldOut.evaluate` for another
score.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

__all__ = ["HeldOut"]


class HeldOut:
    """One rollout of each task of ``tasks`` with the current policy, averaged (module docstring)."""

    def __init__(self, tasks: Any, *, temperature: float = 0.0) -> None:
        if len(tasks) == 0:
            from memrl.errors import ConfigError

            raise ConfigError("the held-out task set is empty")
        self.tasks = tasks
        self.temperature = temperature

    async def setup(self) -> None:
        if hasattr(self.tasks, "setup"):
            await self.tasks.setup()

    async def close(self) -> None:
        if hasattr(self.tasks, "close"):
            await self.tasks.close()

    async def _one(self, llm: Any, index: int) -> list[Any]:
        if hasattr(self.tasks, "group"):  # a build task is one group per memory type
            return [t for g in await self.tasks.group(llm, index, 1, self.temperature) for t in g]
        return [await self.tasks.rollout(llm, index, self.temperature)]

    async def evaluate(self, llm: Any) -> dict[str, Any]:
        """``heldout_reward``, ``heldout_items``, ``heldout_failed``, ``heldout_metrics``, ``heldout_seconds``."""
        t0 = time.perf_counter()
        per_task = await asyncio.gather(*(self._one(llm, i) for i in range(len(self.tasks))))
        trajs = [t for ts in per_task for t in ts]
        scored = [t for t in trajs if t.reward is not None]
        names = set.intersection(*(set(t.metrics) for t in scored)) if scored else set()
        metrics = {
            k: sum(float(t.metrics[k]) for t in scored) / len(scored)
            for k in sorted(names)
            if all(isinstance(t.metrics[k], (int, float)) for t in scored)
        }
        return {
            "heldout_reward": sum(float(t.reward) for t in scored) / len(scored) if scored else math.nan,
            "heldout_items": float(len(scored)),
            "heldout_failed": float(len(trajs) - len(scored)),
            "heldout_metrics": metrics,
            "heldout_seconds": round(time.perf_counter() - t0, 2),
        }

"""What MemBuilder's SFT data teaches, counted before training, and the rule that thins its empty targets.

``memrl train sft-membuilder`` turns an expert's trajectories into (prompt, target) examples, one per
agent call. Issue 61 found the kept data teaching little: 142 of 147 core targets a no-op REPLACE, all 147
procedural targets empty. :func:`sft_data_stats` counts, per agent, the examples, the actions per
operation, the empty targets, the SKIPs, the items a target writes that an earlier target of the same
conversation already wrote (repeats), and the actions that failed when the expert's answer was applied::

    stats = sft_data_stats(trajectories)      # {"agents": {"core": {...}, ...}, "total": {...}}
    print(format_stats(stats))

:func:`thin_empty` is the rule for empty targets (``{"operations": []}``): of each agent's empty targets it
keeps a seeded ``share`` (at least one where any exist and ``share`` > 0), and drops the rest. The default
share (:data:`EMPTY_SHARE`, 0.1) is a guess, not a measured choice (choosing it needs training runs
compared on the validation conversations): at 1.0 the empty procedural answers are a quarter of LoCoMo's
examples, the data's loudest lesson; at 0 the procedural agent is never shown an empty answer, though
saying nothing is right in every LoCoMo session (no procedures are annotated), so it keeps the untrained
model's habit of inventing one. A tenth keeps the lesson present but small.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from typing import Any

from memrl.agents.trajectory import Trajectory

__all__ = ["EMPTY_SHARE", "format_stats", "is_empty_target", "sft_data_stats", "thin_empty"]

#: Share of each agent's empty targets kept in the SFT data by default (see the module docstring).
EMPTY_SHARE = 0.1
_WRITTEN = ("memory", "new_memory", "content", "new_text")


def _agent(t: Trajectory, role: str) -> str:
    return role or str(t.info.get("memory_type") or "?")


def _usable(t: Trajectory) -> list[Any]:
    """The steps :func:`memrl.train.sft.sft_samples` makes examples of (successful, non-empty replies)."""
    if t.failure is not None:
        return []
    return [s for s in t.steps if s.error is None and s.response.strip()]


def _actions(agent: str, response: str) -> list[dict[str, Any]] | None:
    from memrl.tools.membuilder import parse_actions

    try:
        return [a.model_dump() for a in parse_actions(agent, response)]
    except (ValueError, KeyError):
        return None


def is_empty_target(t: Trajectory) -> bool:
    """An item agent's answer that does nothing: ``{"operations": []}`` (a SKIP says why, and is kept)."""
    steps = _usable(t)
    if len(steps) != 1 or _agent(t, steps[0].role) == "core":
        return False
    acts = _actions(_agent(t, steps[0].role), steps[0].response)
    return acts == []


def sft_data_stats(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """Counts per agent (see the module docstring); ``repeats`` compare written texts within a
    conversation (``info["conversation"]``) and memory type, in the trajectories' order."""
    agents: dict[str, dict[str, Any]] = {}
    written: dict[tuple[str, str], set[str]] = {}

    def row(name: str) -> dict[str, Any]:
        return agents.setdefault(name, {"examples": 0, "operations": Counter(), "empty": 0, "skips": 0,
                                        "repeats": 0, "unparsed": 0, "failed_actions": 0})  # fmt: skip

    for t in trajectories:
        conv = str(t.info.get("conversation", ""))
        for s in _usable(t):
            name = _agent(t, s.role)
            a = row(name)
            a["examples"] += 1
            acts = _actions(name, s.response)
            if acts is None:
                a["unparsed"] += 1
                continue
            a["empty"] += not acts
            seen = written.setdefault((conv, name), set())
            for act in acts:
                a["operations"][act["operation"]] += 1
                a["skips"] += act["operation"] == "SKIP"
                for key in ("memory", "new_memory"):
                    text = act.get(key)
                    if text:
                        a["repeats"] += text in seen
                        seen.add(text)
        failed = len((t.info.get("report") or {}).get("failed") or [])
        if failed and t.steps:  # the expert's own actions the store refused (a repeat, a bad quote)
            row(_agent(t, t.steps[0].role))["failed_actions"] += failed
    out = {name: {**a, "operations": dict(sorted(a["operations"].items()))} for name, a in agents.items()}
    keys = ("examples", "empty", "skips", "repeats", "unparsed", "failed_actions")
    return {"agents": out, "total": {k: sum(a[k] for a in out.values()) for k in keys}}


def thin_empty(
    trajectories: Sequence[Trajectory], share: float = EMPTY_SHARE, *, seed: int = 0
) -> tuple[list[Trajectory], int]:
    """``trajectories`` with each agent's empty targets cut to ``share`` of them (a seeded choice, order
    kept; at least one where any exist and ``share`` > 0); returns them and how many were dropped."""
    if not 0 <= share <= 1:
        raise ValueError(f"share must be within 0..1, got {share}")
    empty: dict[str, list[int]] = {}
    for i, t in enumerate(trajectories):
        if is_empty_target(t):
            empty.setdefault(_agent(t, t.steps[0].role), []).append(i)
    rng = random.Random(seed)
    drop: set[int] = set()
    for name in sorted(empty):
        idx = empty[name]
        keep = 0 if share == 0 else max(1, round(share * len(idx)))
        drop |= set(idx) - set(rng.sample(idx, min(keep, len(idx))))
    return [t for i, t in enumerate(trajectories) if i not in drop], len(drop)


def format_stats(stats: dict[str, Any]) -> str:
    """A few lines a person reads before training starts."""
    lines = ["SFT data per agent: examples, actions per operation, empty targets, SKIPs, repeated items, "
             "actions that failed when applied"]  # fmt: skip
    for name, a in stats["agents"].items():
        ops = ", ".join(f"{k} {v}" for k, v in a["operations"].items()) or "none"
        lines.append(f"  {name}: {a['examples']} examples; actions: {ops}; empty {a['empty']}; "
                     f"SKIP {a['skips']}; repeats {a['repeats']}; failed {a['failed_actions']}"
                     + (f"; unparsed {a['unparsed']}" if a["unparsed"] else ""))  # fmt: skip
    t = stats["total"]
    lines.append(f"  all: {t['examples']} examples, {t['empty']} empty, {t['skips']} SKIPs, "
                 f"{t['repeats']} repeats, {t['failed_actions']} failed actions")  # fmt: skip
    return "\n".join(lines)

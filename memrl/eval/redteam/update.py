"""Cheating MemUpdate policies: whole tool episodes by a scripted model that never reads for meaning.

Each policy is a :class:`~memrl.llm.scripted.ScriptedLLM` rule playing the policy model inside the real
episode (:func:`memrl.agents.memupdate.run_episode`: the agent loop, the six tools, the reward). It sees
what the model sees (the opening message with the question's current hits, then tool results) and only
copies ids, texts and dates out of it. The honest policy writes one memory stating the gold answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from memrl.eval.redteam import HONEST, RewardTable
from memrl.eval.redteam.items import Item, spoken_date
from memrl.memory.facade import AsyncMemory

__all__ = ["UPDATE_POLICIES", "score_updates", "update_policy"]

UPDATE_POLICIES = (
    HONEST, "empty", "copy question", "copy memory", "list of guesses", "one letter", "blind merges",
    "blind splits", "delete everything", "same call repeated", "maximal length", "copy a date",
)  # fmt: skip

_LINE = re.compile(r"^\[([^\]]+)\] \(([^)]*)\)(?: score=\S+)? (.*)$", re.M)


def _listed(text: str) -> list[tuple[str, str, str]]:
    """(id, tags, content) of every memory line in a message or tool result."""
    return [(m.group(1), m.group(2), m.group(3)) for m in _LINE.finditer(text or "")]


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _create(content: str) -> dict[str, Any]:
    return _call("manage_memory", operation="create", content=content[:2000] or "-")


def update_policy(name: str, item: Item, frequent: Sequence[str]) -> Callable[..., Any]:
    """The scripted model of policy ``name`` for one episode (a fresh one per episode: it keeps state)."""
    q = item.question
    queue: list[dict[str, Any]] = []
    state = {"turn": 0}

    def reply(messages: list[dict[str, Any]], tools: Any, schema: Any) -> Any:
        state["turn"] += 1
        first = _listed(messages[1]["content"])  # the question's hits and a sample, as shown
        last = messages[-1]
        seen = _listed(last["content"]) if last.get("role") == "tool" else []
        date = next(
            (spoken_date(t.split(", ")[-1]) for _, t, _ in first if spoken_date(t.split(", ")[-1])), ""
        )
        once = state["turn"] == 1
        if name == HONEST:
            return _create(f"{q.question} {q.answer}.") if once else "Added the missing fact."
        if name == "empty":
            return "The database is fine."
        if name in ("copy question", "copy memory", "list of guesses", "one letter", "maximal length",
                    "copy a date"):  # fmt: skip
            if not once:
                return "Done."
            text = {
                "copy question": q.question,
                "copy memory": first[0][2] if first else q.question,
                "list of guesses": q.question + " " + ", ".join(dict.fromkeys([*frequent[:5], date])),
                "one letter": "e",
                "maximal length": " ".join(c for _, _, c in first),
                "copy a date": f"{q.question} {date}",
            }[name]
            return _create(text)
        if name == "same call repeated":
            return _create(first[0][2] if first else q.question)
        # the tool-loop cheats: search for the question, then act on every id it returns, again and again
        if queue:
            return queue.pop(0)
        if name == "blind merges" and len(seen) >= 2:
            return _call("merge_memory", memory_ids=[i for i, _, _ in seen[:5]])
        if name == "blind splits" and seen:
            queue.extend(_call("split_memory", memory_id=i) for i, _, _ in seen[1:])
            return _call("split_memory", memory_id=seen[0][0])
        if name == "delete everything" and seen:
            queue.extend(_call("delete_memory", memory_id=i) for i, _, _ in seen[1:])
            return _call("delete_memory", memory_id=seen[0][0])
        return _call("search_memory", query=q.question, top_k=5 if name == "blind merges" else 10)

    return reply


async def score_updates(
    memory: AsyncMemory,
    items: Sequence[Item],
    frequent: dict[str, list[str]],
    *,
    max_tool_calls: int = 30,
    policies: Sequence[str] = UPDATE_POLICIES,
) -> RewardTable:
    """Every policy's MemUpdate reward on every item (one real episode each)."""
    from memrl.agents.memupdate import MemUpdateConfig, run_episode
    from memrl.llm.scripted import ScriptedLLM

    cfg = MemUpdateConfig(max_tool_calls=max_tool_calls, max_turns=max_tool_calls + 1)
    table = RewardTable()
    for item in items:
        for name in policies:
            llm = ScriptedLLM(update_policy(name, item, frequent.get(item.question.category, [])))
            result = await run_episode(
                llm, memory, item.namespace, item.conversation, item.question, config=cfg
            )
            table.add("memupdate", name, result.trajectory.reward)
    return table

"""Cheating answers against the answer rewards: what a policy can write without knowing the answer.

Each policy turns (question, the memories retrieved for it) into an answer; the honest one writes the gold
answer. The same answers, boxed, are scored by MemAgent's reward (and, from ``bench/reward_hacks.py``, by
verl's ``compute_score`` and the reward server's real ASGI app). The official report metrics are scored
beside them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memrl.eval.redteam import HONEST, RewardTable
from memrl.eval.redteam.items import Item, spoken_date
from memrl.memory.facade import AsyncMemory
from memrl.memory.types import SearchHit
from memrl.rewards.answer import answer_reward, reward_golds
from memrl.rewards.memagent import memagent_reward
from memrl.scoring import metrics as M

__all__ = ["ANSWER_POLICIES", "AnswerRow", "answer_policies", "answer_rows", "boxed", "score_answer_rows"]

ANSWER_POLICIES = (
    HONEST, "empty", "copy question", "copy memory", "list of guesses", "one letter",
    "maximal length", "copy a date", "most frequent answer",
)  # fmt: skip


def answer_policies(item: Item, hits: Sequence[SearchHit], frequent: Sequence[str]) -> dict[str, str]:
    """Policy name -> the answer it gives (see the module docstring)."""
    q = item.question
    top = hits[0].item if hits else None
    dates = [d for d in (spoken_date(h.item.metadata.get("date")) for h in hits) if d]
    return {
        # the gold as a perfect answerer gives it (open-domain golds carry a justification after ';')
        HONEST: str(q.answer).split(";")[0].strip() if q.category_id == 3 else str(q.answer),
        "empty": "",
        "copy question": q.question,
        "copy memory": top.content if top else "",
        # comma-joined guesses: the category's frequent answers and the retrieved memories' dates
        "list of guesses": ", ".join(dict.fromkeys([*frequent[:5], *dates[:5]])),
        "one letter": "e",
        "maximal length": " ".join(h.item.content for h in hits),
        "copy a date": dates[0] if dates else "",
        "most frequent answer": frequent[0] if frequent else "",
    }


def boxed(text: str) -> str:
    """An answer as MemAgent's final reply writes it."""
    return f"The answer is \\boxed{{{text}}}"


@dataclass(frozen=True)
class AnswerRow:
    """One policy's answer to one question, with what every scorer needs."""

    policy: str
    text: str
    golds: list[str]
    answer: str
    category: int | None


async def answer_rows(
    memory: AsyncMemory, items: Sequence[Item], frequent: dict[str, list[str]], *, top_k: int = 10
) -> list[AnswerRow]:
    """Every answer policy's answer to every item (the memories are retrieved as ``memrl eval`` does)."""
    rows = []
    for item in items:
        q = item.question
        hits = await memory.search(q.question, namespace=item.namespace, top_k=top_k)
        for policy, text in answer_policies(item, hits, frequent.get(q.category, [])).items():
            rows.append(
                AnswerRow(policy, text, reward_golds(q.answers, q.category_id), str(q.answer), q.category_id)
            )
    return rows


def score_answer_rows(rows: Sequence[AnswerRow]) -> RewardTable:
    """The answer rewards of :mod:`memrl.rewards` on every row, and the official metrics (report only).
    verl's ``compute_score`` and the reward server score the same rows from ``bench/reward_hacks.py``
    (they live in layers above this one)."""
    table = RewardTable()
    for r in rows:
        table.add("answer_f1", r.policy, answer_reward("f1", r.text, r.golds, r.category))
        table.add("exact_match", r.policy, answer_reward("em", r.text, r.golds, r.category))
        table.add("sub_em", r.policy, answer_reward("sub_em", r.text, r.golds, r.category))
        table.add("memagent (boxed)", r.policy, memagent_reward(boxed(r.text), r.golds))
        table.add("locomo_f1 (official)", r.policy, M.locomo_f1(r.text, r.answer, r.category))
        table.add("sub_em (official)", r.policy, M.best_over_golds(M.sub_em, r.text, r.golds))
    return table

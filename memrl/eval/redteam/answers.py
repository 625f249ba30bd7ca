"""Cheating answers against the answer rewards: what a policy can write without knowing the answer.

Each policy turns (question, the memories retrieved for it) into an answer; the honest one writes the gold
answer. The same answers, boxed, are scored by MemAgent's reward, by verl's ``compute_score`` and by the
reward server (through its real ASGI app). The official report metrics are scored beside them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from memrl.eval import metrics as M
from memrl.eval.redteam import HONEST, RewardTable
from memrl.eval.redteam.items import Item, spoken_date
from memrl.memory.facade import AsyncMemory
from memrl.memory.types import SearchHit
from memrl.rewards.answer import answer_reward
from memrl.rewards.memagent import memagent_reward

__all__ = ["ANSWER_POLICIES", "answer_policies", "score_answers"]

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
        HONEST: str(q.answer),
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


def _boxed(text: str) -> str:
    return f"The answer is \\boxed{{{text}}}"


async def _server_scores(items: list[dict[str, Any]]) -> list[float | None]:
    """The reward server's scores of ``items`` through its ASGI app (no network, the real routes)."""
    import httpx

    from memrl.server.reward_api import create_reward_app

    app = create_reward_app(max_batch=256)
    out: list[float | None] = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://reward") as client:
        for k in range(0, len(items), 256):
            r = await client.post("/v1/score", json={"items": items[k : k + 256]})
            r.raise_for_status()
            out += [res["score"] for res in r.json()["results"]]
    return out


async def score_answers(
    memory: AsyncMemory, items: Sequence[Item], frequent: dict[str, list[str]], *, top_k: int = 10
) -> RewardTable:
    """Every answer policy on every item, under every answer reward (see the module docstring)."""
    from memrl.integrations.verl.reward import compute_score

    table = RewardTable()
    server_items: list[dict[str, Any]] = []
    server_keys: list[tuple[str, str]] = []
    for item in items:
        q = item.question
        hits = await memory.search(q.question, namespace=item.namespace, top_k=top_k)
        golds = list(q.answers)
        cat = q.category_id
        for policy, text in answer_policies(item, hits, frequent.get(q.category, [])).items():
            boxed = _boxed(text)
            table.add("answer_f1", policy, answer_reward("f1", text, golds, cat))
            table.add("exact_match", policy, answer_reward("em", text, golds, cat))
            table.add("sub_em", policy, answer_reward("sub_em", text, golds, cat))
            table.add("memagent (boxed)", policy, memagent_reward(boxed, golds))
            verl = compute_score("memrl/read", boxed, json.dumps(golds), {"task": "read"})
            table.add("verl compute_score", policy, verl["score"])
            table.add("locomo_f1 (official)", policy, M.locomo_f1(text, q.answer, cat))
            table.add("sub_em (official)", policy, M.best_over_golds(M.sub_em, text, golds))
            for metric, body in (
                ("answer_f1", {"prediction": text, "answers": golds, "category": cat}),
                ("sub_em", {"prediction": boxed_answer_or(boxed), "answers": golds}),
                ("memagent", {"response": boxed, "answers": golds}),
                ("locomo_f1", {"prediction": text, "answer": str(q.answer), "category": cat}),
            ):
                server_items.append({"metric": metric, **body})
                name = f"server:{metric}" + (" (official)" if metric == "locomo_f1" else "")
                server_keys.append((name, policy))
    for (name, policy), value in zip(server_keys, await _server_scores(server_items), strict=True):
        table.add(name, policy, value)
    return table


def boxed_answer_or(text: str) -> str:
    """The boxed answer of ``text`` (what a trainer scores with sub-EM), or the empty string."""
    return M.boxed_answer(text) or ""

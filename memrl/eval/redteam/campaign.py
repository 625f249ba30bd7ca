"""The search (:mod:`.search`) run for every family of shipped rewards on LoCoMo's training items.

    report = await search_all(memory, conversations, budget=150, seed=0)   # bench/reward_hacks.py runs it
    report["found"]          # [] when no composition reached the honest policy within the budget

The families and their items: **answers** (the training answer rewards and MemAgent's boxed match on
``per_category`` questions of each answerable category, plus as many adversarial ones, scored by the
committed refusal), **memupdate** (real MemUpdate episodes, ``update_per_category`` questions per
category), **adrpo** (``sessions`` sessions per conversation built on the expert's memory before them).
Each family searches on a seeded half of its items and confirms its best and flagged genomes on all of
them. The regression cheats of each family (``REGRESSIONS``) are always among the starting genomes.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

from memrl.data.types import Conversation
from memrl.eval.redteam.items import Item, pick_questions, priors
from memrl.eval.redteam.search import HONEST_GENOME, Genome, compare, search
from memrl.memory import AsyncMemory

__all__ = ["pick_adversarial", "search_all", "start_genomes"]


def pick_adversarial(conversations: Sequence[Conversation], n: int, seed: int = 0) -> list[Item]:
    """Up to ``n`` adversarial questions (LoCoMo category 5: the answer is a refusal), seeded."""
    pool = [Item(c, q) for c in conversations for q in c.questions if q.category_id == 5]
    pool.sort(key=lambda it: it.question.id)
    random.Random(f"redteam-adversarial:{seed}").shuffle(pool)
    return pool[:n]


def start_genomes(family: Any, regressions: dict[str, Genome], seed: int, n_genes: int = 24) -> list[Genome]:
    """Where a search starts: the regression cheats, ``n_genes`` random genes alone, and each of them
    added to the honest edit."""
    rng = random.Random(f"redteam-start:{family.name}:{seed}")
    genes = list(dict.fromkeys(family.random_gene(rng) for _ in range(n_genes)))
    with_honest = [] if getattr(family, "implicit_honest", False) else [(("honest",), g) for g in genes]
    return [*regressions.values(), *((g,) for g in genes), *with_honest]


def _rounded(d: dict[str, dict[str, float | None]]) -> dict[str, dict[str, float | None]]:
    return {k: {n: None if v is None else round(v, 4) for n, v in row.items()} for k, row in d.items()}


def _halves(items: list[Any], seed: int) -> list[Any]:
    """A seeded half of ``items`` (at least one): the search's own; all of them confirm."""
    picked = list(items)
    random.Random(f"redteam-half:{seed}").shuffle(picked)
    return picked[: max(1, len(picked) // 2)]


async def search_all(
    memory: AsyncMemory,
    conversations: Sequence[Conversation],
    *,
    budget: int = 150,
    seed: int = 0,
    per_category: int = 15,
    update_per_category: int = 5,
    sessions: int = 2,
    max_tool_calls: int = 30,
    families: Sequence[str] = ("answers", "memupdate", "adrpo"),
    log: Any = None,
) -> dict[str, Any]:
    """Search every family (see the module docstring); the memory must hold each conversation's
    observation memory in ``{conv.id}@obs`` (:func:`memrl.agents.memupdate.init_from_observations`)."""
    from memrl.eval.redteam import answers, build_search, update

    frequent = priors(conversations)  # per conversation: the other conversations' frequent answers
    reports: dict[str, Any] = {}
    for name in families:
        t0 = time.perf_counter()
        if name == "answers":
            items = pick_questions(conversations, per_category, seed)
            items += pick_adversarial(conversations, per_category, seed)
            cases: list[Any] = await answers.answer_cases(memory, items, frequent)
            family: Any = answers.AnswerFamily()
            regressions = answers.REGRESSIONS
        elif name == "memupdate":
            cases = pick_questions(conversations, update_per_category, seed + 1)
            family = update.UpdateFamily(memory, frequent, max_tool_calls=max_tool_calls)
            regressions = update.REGRESSIONS
        elif name == "adrpo":
            cases = await build_search.build_cases(memory, conversations, sessions, frequent)
            family = build_search.BuildFamily(memory)
            regressions = build_search.REGRESSIONS
        else:
            raise ValueError(f"unknown family {name!r}; expected answers, memupdate or adrpo")
        report = await search(family, _halves(cases, seed), budget=budget, seed=seed, confirm_items=cases,
                              start=start_genomes(family, regressions, seed), log=log)  # fmt: skip
        honest = await family.evaluate(HONEST_GENOME, cases)
        table = {k: {"genome": [list(g) for g in v], "vs_honest": _rounded(await compare(family, v, cases, honest))}
                 for k, v in regressions.items()}  # fmt: skip
        extra: dict[str, Any] = {}
        if hasattr(family, "boosted"):  # ADRPO: which agent's advantage the attribution boosted, per session
            await family.evaluate(HONEST_GENOME, cases)
            extra["boosted_honest"] = family.boosted(HONEST_GENOME)
            for k, v in regressions.items():
                await family.evaluate(v, cases)
                table[k]["boosted"] = family.boosted(v)
        reports[name] = {**report.to_dict(), "seconds": round(time.perf_counter() - t0, 1), "regressions": table,
                         **extra}  # fmt: skip
        if log is not None:
            log(f"search {name}: {report.evaluated} genomes, {len(report.found)} found "
                f"({time.perf_counter() - t0:.0f} s)")  # fmt: skip
    found = [{"family": n, **c} for n, r in reports.items() for c in r["found"]]
    return {
        "families": reports,
        "found": found,
        "unconfirmed": sum(r["unconfirmed"] for r in reports.values()),
    }

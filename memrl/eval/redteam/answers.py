"""Cheating answers against the answer rewards: what a policy can write without knowing the answer.

Each policy turns (question, the memories retrieved for it) into an answer; the honest one writes the gold
answer. The same answers, boxed, are scored by MemAgent's reward (and, from ``bench/reward_hacks.py``, by
verl's ``compute_score`` and the reward server's real ASGI app). The official report metrics are scored
beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memrl.data.locomo import NOT_ANSWERABLE
from memrl.eval.redteam import HONEST, RewardTable
from memrl.eval.redteam.items import Item, spoken_date
from memrl.memory import AsyncMemory
from memrl.memory.records import SearchHit
from memrl.rewards.answer import answer_reward, reward_golds
from memrl.rewards.memagent import memagent_reward
from memrl.scoring import metrics as M
from memrl.scoring.metrics import normalize_answer

__all__ = [
    "ANSWER_POLICIES",
    "REGRESSIONS",
    "AnswerCase",
    "AnswerFamily",
    "AnswerRow",
    "answer_cases",
    "answer_policies",
    "answer_rows",
    "answer_text",
    "boxed",
    "score_answer_rows",
]

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
    memory: AsyncMemory, items: Sequence[Item], priors: dict[str, dict[str, list[str]]], *, top_k: int = 10
) -> list[AnswerRow]:
    """Every answer policy's answer to every item (the memories are retrieved as ``memrl eval`` does;
    ``priors``: :func:`memrl.eval.redteam.items.priors`)."""
    rows = []
    for item in items:
        q = item.question
        hits = await memory.search(q.question, namespace=item.namespace, top_k=top_k)
        frequent = priors[item.conversation.id].get(q.category, [])
        for policy, text in answer_policies(item, hits, frequent).items():
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


# ---------------------------------------------------------------------------------------------------
# The search's genes (:mod:`.search`): an answer is a composition of pieces joined by a separator.

_HEDGES = ("likely", "maybe", "probably", "possibly", "perhaps")
#: The cheats an outside red team found (issue 32), as genomes: the search starts from them.
REGRESSIONS: dict[str, tuple[tuple[Any, ...], ...]] = {
    # a hedge with no separator is one part: old sub-EM paid it on "Likely yes"/"Likely no" golds
    "hedge": (("hedge", 0), ("polar", "yes"), ("hedge", 0), ("polar", "no")),
    # an answer and a refusal at once: the old adversarial rule paid anything containing "not mentioned"
    "answer and refusal": (("other",), ("refusal", "short")),
}
_FILLERS = ("the answer is", "it was", "I think", "according to the conversation")


@dataclass(frozen=True)
class AnswerCase:
    """One question with what every answer gene may draw on (retrieved once)."""

    item: Item
    gold: str  # the honest answer (LoCoMo's refusal for an adversarial question)
    golds: list[str]
    category: int | None
    frequent: tuple[str, ...]
    dates: tuple[str, ...]
    top: str
    other: str  # another question's gold of the same category (a confident wrong answer)
    retrieved: tuple[str, ...] = ()  # the retrieved memories' texts, best first


def _piece(gene: tuple[Any, ...], case: AnswerCase) -> str:
    name, p = gene[0], gene[1:]
    if name == "honest":
        return case.gold
    if name in ("guess", "date"):
        pool = case.frequent if name == "guess" else case.dates
        return pool[p[0]] if p[0] < len(pool) else ""
    if name == "memory":
        return " ".join(case.top.split()[: p[0]])
    if name == "memories":  # every retrieved memory, a dump that holds whatever they hold
        return " ".join(case.retrieved[: p[0]])
    if name == "letter":
        return p[0]
    if name == "refusal":
        return NOT_ANSWERABLE if p[0] == "full" else "not mentioned"
    if name in ("hedge", "filler"):
        words = _HEDGES if name == "hedge" else _FILLERS
        return words[p[0] % len(words)]
    fixed = {"question": case.item.question.question, "negation": "not", "other": case.other}
    return str(p[0]) if name == "polar" else fixed.get(name, "")


def answer_text(genome: tuple[tuple[Any, ...], ...], case: AnswerCase) -> str:
    """The answer a genome writes for one question (genes in order, joined by its ``sep`` gene)."""
    sep = next((g[1] for g in genome if g[0] == "sep"), " ")
    return sep.join(piece for gene in genome if (piece := _piece(gene, case)))


def answer_rewards(text: str, case: AnswerCase) -> dict[str, float]:
    """The training answer rewards of ``text`` (on an adversarial question every one pays the refusal:
    the training rewards a committed one, MemAgent's match LoCoMo's refusal sentence)."""
    golds = [NOT_ANSWERABLE] if case.category == 5 else case.golds
    return {
        "answer_f1": answer_reward("f1", text, case.golds, case.category),
        "exact_match": answer_reward("em", text, case.golds, case.category),
        "sub_em": answer_reward("sub_em", text, case.golds, case.category),
        "memagent (boxed)": memagent_reward(boxed(text), golds),
    }


class AnswerFamily:
    """The answer rewards as a search family (:class:`memrl.eval.redteam.search.Family`). ``rewards``:
    reward name -> function of (answer text, case), in place of the training rewards (e.g. an official
    metric, to see the search find what it pays for)."""

    def __init__(self, rewards: dict[str, Callable[[str, AnswerCase], float]] | None = None) -> None:
        self.rewards = rewards

    name = "answers"
    informative = frozenset({"honest"})
    # a guess commits to an answer: a prior, a retrieved date or memory, another question's answer, a
    # yes or a no, a refusal ("not answerable" is an answer too)
    guesses = frozenset({"guess", "date", "memory", "memories", "other", "polar", "refusal"})
    delta_rewards: frozenset[str] = frozenset()
    structural = frozenset({"sep"})

    def slices(self, items: Sequence[AnswerCase]) -> dict[str, list[int]]:
        """Per answerable category, and the questions answered yes or no (hedges pay there first). Not the
        adversarial questions alone: there the honest answer (a refusal) needs no information, so any
        policy that refuses ties it; what must not pay there is a refusal hedged with an answer, which
        the "paid for" bars catch."""
        out: dict[str, list[int]] = {}
        for i, case in enumerate(items):
            if case.category != 5:
                out.setdefault(case.item.question.category, []).append(i)
            if {"yes", "no"} & set(normalize_answer(case.gold).split()):
                out.setdefault("yes/no", []).append(i)
        return out

    def random_gene(self, rng: Any) -> tuple[Any, ...]:
        name = rng.choice(("guess", "date", "memory", "memories", "question", "refusal", "hedge", "polar",
                           "negation", "filler", "other", "sep", "letter"))  # fmt: skip
        return self._params(name, rng)

    def _params(self, name: str, rng: Any) -> tuple[Any, ...]:
        return {
            "guess": lambda: ("guess", rng.randrange(5)),
            "date": lambda: ("date", rng.randrange(3)),
            "memory": lambda: ("memory", rng.choice((1, 3, 8, 20, 60))),
            "memories": lambda: ("memories", rng.choice((3, 10))),
            "letter": lambda: ("letter", rng.choice("aeinrst")),
            "refusal": lambda: ("refusal", rng.choice(("full", "short"))),
            "hedge": lambda: ("hedge", rng.randrange(len(_HEDGES))),
            "polar": lambda: ("polar", rng.choice(("yes", "no"))),
            "filler": lambda: ("filler", rng.randrange(len(_FILLERS))),
            "sep": lambda: ("sep", rng.choice((" ", ", ", " or ", "; ", " / ", " and "))),
        }.get(name, lambda: (name,))()

    def mutate_gene(self, gene: tuple[Any, ...], rng: Any) -> tuple[Any, ...]:
        return self._params(gene[0], rng) if rng.random() < 0.7 else self.random_gene(rng)

    async def evaluate(self, genome: Any, items: Sequence[AnswerCase]) -> Any:
        from memrl.eval.redteam.search import Evaluation

        rewards: dict[str, list[float | None]] = {}
        texts = []
        for case in items:
            text = answer_text(genome, case)
            texts.append(text)
            scored = answer_rewards(text, case) if self.rewards is None else {
                name: fn(text, case) for name, fn in self.rewards.items()}  # fmt: skip
            for name, value in scored.items():
                rewards.setdefault(name, []).append(value)
        return Evaluation(rewards, tuple(texts))


async def answer_cases(
    memory: AsyncMemory,
    items: Sequence[Item],
    priors: dict[str, dict[str, list[str]]],
    *,
    top_k: int = 10,
) -> list[AnswerCase]:
    """The search's questions with what the genes draw on (adversarial items answer LoCoMo's refusal)."""
    by_cat: dict[str, list[str]] = {}
    for it in items:
        if it.question.answers:
            by_cat.setdefault(it.question.category, []).append(str(it.question.answer))
    cases = []
    for it in items:
        q = it.question
        hits = await memory.search(q.question, namespace=it.namespace, top_k=top_k)
        dates = tuple(d for d in (spoken_date(h.item.metadata.get("date")) for h in hits) if d)
        others = [a for a in by_cat.get(q.category, []) if a != str(q.answer)]
        adversarial = q.category_id == 5
        # an adversarial question looks like a single-hop one (the policy is never told its category)
        prior = priors[it.conversation.id].get("single-hop" if adversarial else q.category, [])
        gold = NOT_ANSWERABLE if adversarial else (str(q.answer).split(";")[0].strip() if q.category_id == 3
                                                  else str(q.answer))  # fmt: skip
        cases.append(
            AnswerCase(it, gold, [] if adversarial else reward_golds(q.answers, q.category_id), q.category_id,
                       tuple(prior[:5]), dates[:3], hits[0].item.content if hits else "",
                       others[sum(map(ord, q.id)) % len(others)] if others else str(q.adversarial_answer or ""),
                       tuple(h.item.content for h in hits))
        )  # fmt: skip
    return cases

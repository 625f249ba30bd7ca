"""The red team's items: LoCoMo questions of the training split, the observation memory they are asked of,
and the facts a cheating policy may use without reading (dates, frequent answers).

Only the training conversations (MemUpdate's 7, :data:`memrl.data.splits.LOCOMO_UPDATE_SPLIT`) are used:
red-teaming a reward needs no test item. Questions are drawn per category (multi-hop, temporal,
open-domain, single-hop; never adversarial), deterministically by seed.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

from memrl.data.types import Conversation, Question

__all__ = ["Item", "frequent_answers", "pick_questions", "priors", "spoken_date", "squeeze"]

CATEGORIES = ("multi-hop", "temporal", "open-domain", "single-hop")


@dataclass(frozen=True)
class Item:
    """One question of one conversation."""

    conversation: Conversation
    question: Question

    @property
    def namespace(self) -> str:
        """Where the conversation's observation memory lives in the red team's store."""
        return f"{self.conversation.id}@obs"


def pick_questions(conversations: Sequence[Conversation], per_category: int, seed: int = 0) -> list[Item]:
    """Up to ``per_category`` answerable questions of each category, seeded, in a stable order."""
    from memrl.rewards.memupdate import scorable_tokens

    pool: dict[str, list[Item]] = {c: [] for c in CATEGORIES}
    for conv in conversations:
        for q in conv.questions:
            if q.category in pool and q.answerable and q.answers and scorable_tokens(q.answer, q.question):
                pool[q.category].append(Item(conv, q))
    rng = random.Random(f"redteam:{seed}")
    out: list[Item] = []
    for cat in CATEGORIES:
        items = sorted(pool[cat], key=lambda it: it.question.id)
        rng.shuffle(items)
        out += items[:per_category]
    return out


def frequent_answers(
    conversations: Sequence[Conversation], *, exclude: str | None = None
) -> dict[str, list[str]]:
    """Category -> the answers given most often in these conversations, most frequent first (ties in
    order of appearance). ``exclude``: leave that conversation out, so a guess about one of its
    questions cannot be its own answer (where most answers occur once, "the most frequent" would
    otherwise hand the first questions their own golds)."""
    counts: dict[str, Counter[str]] = {c: Counter() for c in CATEGORIES}
    for conv in conversations:
        if conv.id == exclude:
            continue
        for q in conv.questions:
            if q.category in counts and q.answers:
                counts[q.category][str(q.answer).strip()] += 1
    return {c: [a for a, _ in n.most_common()] for c, n in counts.items()}


def priors(conversations: Sequence[Conversation]) -> dict[str, dict[str, list[str]]]:
    """Conversation id -> the frequent answers of the *other* conversations (:func:`frequent_answers`):
    what a policy may guess from the training answers about a question it has not seen."""
    return {c.id: frequent_answers(conversations, exclude=c.id) for c in conversations}


def spoken_date(iso: object) -> str | None:
    """``"2023-05-08"`` -> ``"8 May 2023"`` (LoCoMo's answer style); None if it is not an ISO date."""
    try:
        d = date.fromisoformat(str(iso)[:10])
    except ValueError:
        return None
    return f"{d.day} {d:%B %Y}"


def squeeze(content: str) -> str:
    """``content`` without its stopwords: shorter, the same content words (nothing a reader needs is
    known to be lost, and the store keeps the dropped words elsewhere, so retention stays near 1)."""
    from memrl.memory.analysis import STOPWORDS, TOKEN

    return " ".join(t for t in TOKEN.findall(content) if t.lower() not in STOPWORDS) or content

"""Trivial baselines of the learning benchmark: what a rule with no model scores on the same held-out items.

A trained model that does not beat these learned a format, not memory use (REFERENCE.md section 9). Each
item offers *candidates*: the units a rule may look at, ranked for the question (the document's turns by
BM25 for ``read``, the retrieved memories in retrieval order for ``answer``), each with the date of its
session. Three rules, the same for every task:

* ``most_frequent``: the most frequent gold answer of the question's category in the *train* split;
* ``top1_date``: the date of the best-matching session (``read``: BM25 over whole sessions) or of the
  top-1 retrieved memory (``answer``), in LoCoMo's answer style ("8 May 2023");
* ``top1_text``: the best-matching turn or top-1 memory, cut to ``N`` characters, ``N`` chosen on train
  items (the value with the best mean score there, from :data:`N_GRID`);
* ``per_category``: for each category, whichever of the three rules scores best on that category's train
  items (a question's category is given to every rule, as ``most_frequent`` uses it): e.g. the date for
  temporal questions and the top-1 text for the others.

Every rule is scored with the very functions the model is scored with (:func:`score_prediction`):
LoCoMo's official F1 (for reports, labelled so), exact match, and the training F1 of
:mod:`memrl.rewards.answer`.

    rules = Baselines.fit(train_items)               # most frequent answers, N, from train items only
    table = rules.predict(test_items)                # {rule: [prediction per item]}
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

#: Characters of the top-1 text the ``top1_text`` rule may keep (chosen on train items).
N_GRID = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
RULES = ("most_frequent", "top1_date", "top1_text", "per_category")


@dataclass
class Candidate:
    """A unit a rule may look at: its text and its session's date (None when unknown)."""

    text: str
    day: date | None = None


@dataclass
class Item:
    """One held-out (or train) question with what the rules may use: ranked candidates, and for
    documents the best-matching session's date."""

    id: str
    question: str
    answers: tuple[str, ...]
    category: int  # LoCoMo category id, 1-4 (5: adversarial)
    candidates: list[Candidate] = field(default_factory=list)
    top_session_day: date | None = None


def spoken_date(day: date | None) -> str:
    """``date(2023, 5, 8)`` -> ``"8 May 2023"`` (LoCoMo's answer style); empty when unknown."""
    return "" if day is None else f"{day.day} {day:%B %Y}"


def score_prediction(prediction: str, item: Item) -> dict[str, float]:
    """Official LoCoMo F1 (``f1``), exact match (``em``) and the training F1 (``train_f1``) of one answer."""
    from memrl.rewards.answer import answer_reward
    from memrl.scoring.metrics import best_over_golds, exact_match, locomo_f1

    gold = item.answers[0] if item.answers else ""
    return {
        "f1": locomo_f1(prediction, gold, item.category),
        "em": best_over_golds(exact_match, prediction, list(item.answers)),
        "train_f1": answer_reward("f1", prediction, list(item.answers), item.category),
    }


# ---- ranking the units of a document, no model ------------------------------------------------------
def _bm25(query: list[str], docs: list[list[str]], k1: float = 1.2, b: float = 0.75) -> list[float]:
    """BM25 of each tokenised doc for the tokenised query (idf over these docs)."""
    n = len(docs)
    if not n:
        return []
    avg = sum(len(d) for d in docs) / n or 1.0
    df = Counter(t for d in docs for t in set(d))
    scores = []
    for d in docs:
        tf = Counter(d)
        s = 0.0
        for t in set(query):
            if tf[t]:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                s += idf * tf[t] * (k1 + 1) / (tf[t] + k1 * (1 - b + b * len(d) / avg))
        scores.append(s)
    return scores


_DATE_TEXT = re.compile(r"(\d{1,2}) (\w+),? (\d{4})")


def _day_of(date_text: str | None) -> date | None:
    """The day of a LoCoMo session date ("1:56 pm on 8 May, 2023")."""
    m = _DATE_TEXT.search(date_text or "")
    if m is None:
        return None
    try:
        return datetime.strptime(f"{m[1]} {m[2]} {m[3]}", "%d %B %Y").date()
    except ValueError:
        return None


def document_item(conv: Any) -> Item:
    """A RULER-LoCoMo document question as an :class:`Item`: turns ranked by BM25 for the question, the
    best-matching session by BM25 over whole sessions (titles hold the session's date)."""
    from memrl.memory.analysis.terms import content_terms

    q = conv.questions[0]
    query = content_terms(q.question)
    units: list[Candidate] = []
    sessions: list[tuple[list[str], date | None]] = []
    for s in conv.sessions:
        day = _day_of(s.id)
        words: list[str] = []
        for t in s.turns:
            units.append(Candidate(t.text, day))
            words += content_terms(t.text)
        sessions.append((words, day))
    turn_scores = _bm25(query, [content_terms(u.text) for u in units])
    order = sorted(range(len(units)), key=lambda i: -turn_scores[i])
    session_scores = _bm25(query, [w for w, _ in sessions])
    best = max(range(len(sessions)), key=lambda i: session_scores[i]) if sessions else None
    category = int(_locomo_id(conv.metadata.get("locomo_category", q.category)))
    return Item(q.id, q.question, tuple(q.answers), category, [units[i] for i in order],
                None if best is None else sessions[best][1])  # fmt: skip


def _locomo_id(category: Any) -> int:
    from memrl.scoring.metrics import locomo_category

    return locomo_category(category)


# ---- the rules ----------------------------------------------------------------------------------------
@dataclass
class Baselines:
    """The three rules, fitted on train items only (see the module docstring)."""

    frequent: dict[int, str]
    n_chars: int
    by_category: dict[int, str] = field(default_factory=dict)  # category -> the rule used for it

    @classmethod
    def fit(cls, train: Sequence[Item]) -> Baselines:
        counts: dict[int, Counter[str]] = {}
        for it in train:
            if it.answers:
                counts.setdefault(it.category, Counter())[str(it.answers[0]).strip()] += 1
        frequent = {c: n.most_common(1)[0][0] for c, n in counts.items()}

        def mean_f1(n: int) -> float:
            return sum(score_prediction(_top_text(it, n), it)["f1"] for it in train) / max(1, len(train))

        best = max(N_GRID, key=lambda n: (mean_f1(n), -n))
        rules = cls(frequent, best)
        table = rules.predict(train)
        by_category = {}
        for c in sorted({it.category for it in train}):
            idx = [k for k, it in enumerate(train) if it.category == c]
            by_category[c] = max(RULES[:3], key=lambda r: (sum(score_prediction(table[r][k], train[k])["f1"]
                                                                for k in idx), -RULES.index(r)))  # fmt: skip
        return cls(frequent, best, by_category)

    def predict(self, items: Sequence[Item]) -> dict[str, list[str]]:
        """Each rule's prediction for each item."""
        table = {
            "most_frequent": [self.frequent.get(it.category, "") for it in items],
            "top1_date": [spoken_date(_top_day(it)) for it in items],
            "top1_text": [_top_text(it, self.n_chars) for it in items],
        }
        if self.by_category:
            table["per_category"] = [table[self.by_category.get(it.category, "top1_text")][k]
                                     for k, it in enumerate(items)]  # fmt: skip
        return table


def _top_day(it: Item) -> date | None:
    if it.top_session_day is not None:
        return it.top_session_day
    return it.candidates[0].day if it.candidates else None


def _top_text(it: Item, n: int) -> str:
    return it.candidates[0].text[:n].strip() if it.candidates else ""

"""Answer rewards for training: scores a policy cannot raise with a list of guesses or a fragment.

Reports keep the official metrics (:mod:`memrl.scoring.metrics`: LoCoMo's F1, MemAgent's sub-EM); a trainer
must not optimise them, because both pay for tricks (REFERENCE.md section 9):

* LoCoMo's official multi-hop F1 splits prediction and gold on commas and scores each gold part against
  its *best* prediction part: extra prediction parts cost nothing, so ``"Paris, Rome, Lisbon, Berlin"``
  outscores the honest ``"Paris"``. :func:`answer_f1` matches parts one-to-one and divides by the number
  of prediction parts as well (precision), so every extra guess is charged.
* sub-EM ("gold in prediction or prediction in gold") pays a one-letter answer that occurs inside the
  gold, and any long dump that contains it. :func:`short_sub_em` pays only when the whole gold occurs in
  the prediction, the prediction is one answer (no more parts than the gold) and at most
  ``max_extra_tokens`` longer than the gold.

Both are pure functions of (prediction, golds[, category]); no model, no data download.

    answer_f1("Paris, Rome, Lisbon", "Paris", "multi-hop")     # 0.5 (official: 1.0)
    short_sub_em("e", ["Emily"])                                # 0.0 (official sub-EM: 1.0)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from memrl.scoring.metrics import (
    _f1_from_tokens,
    _stem,
    best_over_golds,
    exact_match,
    locomo_category,
    locomo_f1,
    normalize_answer,
)

__all__ = ["ANSWER_REWARDS", "answer_f1", "answer_parts", "answer_reward", "reward_golds", "short_sub_em"]

#: What ``--reward`` may name for answer-producing tasks: ``f1`` (:func:`answer_f1`), ``em`` (exact
#: match), ``sub_em`` (:func:`short_sub_em`).
ANSWER_REWARDS = ("f1", "em", "sub_em")

#: Separators that turn one answer into several: commas, semicolons, slashes, new lines, " or ".
_PARTS = re.compile(r"\s*(?:[,;/\n]|\bor\b)\s*", re.IGNORECASE)


def answer_parts(text: Any) -> list[str]:
    """The non-empty parts of an answer split on commas, semicolons, slashes, new lines and " or "."""
    return [p for p in _PARTS.split("" if text is None else str(text)) if normalize_answer(p)]


def _stems(text: str) -> list[str]:
    return [_stem(w) for w in normalize_answer(text).split()]


def _matched_f1(pred_parts: Sequence[str], gold_parts: Sequence[str]) -> float:
    """F1 over parts matched one-to-one (greedy on the part-to-part F1): precision divides the matched
    score by the number of prediction parts, recall by the number of gold parts."""
    if not pred_parts or not gold_parts:
        return 0.0
    pred = [_stems(p) for p in pred_parts]
    gold = [_stems(g) for g in gold_parts]
    pairs = sorted(
        ((_f1_from_tokens(p, g), i, j) for i, p in enumerate(pred) for j, g in enumerate(gold)), reverse=True
    )
    used_p: set[int] = set()
    used_g: set[int] = set()
    total = 0.0
    for score, i, j in pairs:
        if score <= 0:
            break
        if i in used_p or j in used_g:
            continue
        used_p.add(i)
        used_g.add(j)
        total += score
    if total == 0:
        return 0.0
    precision, recall = total / len(pred), total / len(gold)
    return 2 * precision * recall / (precision + recall)


def answer_f1(prediction: Any, gold: Any, category: int | str | None = None) -> float:
    """Training F1 of one answer: LoCoMo's normalisation and stemming, every extra part charged.

    Multi-hop (category 1) answers are compared part by part (one-to-one, see the module docstring);
    other answers by bag-of-stems F1 over the whole text, which already charges extra words. Category 3
    golds are cut at their first ';' as in the official script; category 5 (adversarial) uses the
    official refusal rule. ``category=None``: plain stemmed token F1 (documents, other data sets).
    """
    cat = None if category is None else locomo_category(category)
    if cat == 5:
        return locomo_f1(prediction, gold, 5)
    pred = "" if prediction is None else str(prediction)
    ref = "" if gold is None else str(gold)
    if cat == 3:
        ref = ref.split(";")[0].strip()
    if cat == 1:
        return _matched_f1(answer_parts(pred), answer_parts(ref))
    return _f1_from_tokens(_stems(pred), _stems(ref))


def _contains(haystack: list[str], needle: list[str]) -> bool:
    n = len(needle)
    return any(haystack[i : i + n] == needle for i in range(len(haystack) - n + 1))


def short_sub_em(prediction: Any, golds: Any, *, max_extra_tokens: int = 3) -> float:
    """1.0 if one short answer contains a whole gold answer, else 0.0.

    The prediction's normalised tokens must contain the gold's as a contiguous run, hold at most
    ``max_extra_tokens`` more tokens than that gold, and have no more parts (:func:`answer_parts`) than
    it: a fragment of the gold (``"e"`` for ``"Emily"``), a dump that happens to contain it, and a list
    of guesses all score 0.
    """
    if golds is None or isinstance(golds, (str, int, float)):
        golds = [] if golds is None else [golds]
    pred = normalize_answer(prediction, drop_and=False).split()
    if not pred:
        return 0.0
    n_parts = len(answer_parts(prediction))
    for g in golds:
        ref = normalize_answer(g, drop_and=False).split()
        if not ref or len(pred) > len(ref) + max_extra_tokens or n_parts > max(1, len(answer_parts(g))):
            continue
        if _contains(pred, ref):
            return 1.0
    return 0.0


def reward_golds(golds: Any, category: int | str | None = None) -> list[str]:
    """The gold answers a reward compares with: as given, but a LoCoMo open-domain gold (category 3) cut at
    its first ';' (what follows is a justification, not part of the answer: the official script cuts it)."""
    if golds is None or isinstance(golds, (str, int, float)):
        golds = [] if golds is None else [golds]
    cat = None if category is None else locomo_category(category)
    return [str(g).split(";")[0].strip() if cat == 3 else str(g) for g in golds]


def answer_reward(kind: str, prediction: Any, golds: Any, category: int | str | None = None) -> float:
    """The training reward ``kind`` (one of :data:`ANSWER_REWARDS`), best over the gold answers (cut as
    :func:`reward_golds` says)."""
    if kind in ("em", "sub_em"):
        golds = reward_golds(golds, category)
    if kind == "f1":
        return best_over_golds(lambda p, g: answer_f1(p, g, category), prediction, golds)
    if kind == "em":
        return best_over_golds(exact_match, prediction, golds)
    if kind == "sub_em":
        return short_sub_em(prediction, golds)
    raise ValueError(f"unknown answer reward {kind!r}; expected one of {', '.join(ANSWER_REWARDS)}")

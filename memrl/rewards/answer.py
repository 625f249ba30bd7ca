"""Answer rewards for training: scores a policy cannot raise with a list of guesses, a hedge or a fragment.

Reports keep the official metrics (:mod:`memrl.scoring.metrics`: LoCoMo's F1, MemAgent's sub-EM); a trainer
must not optimise them, because both pay for tricks (REFERENCE.md section 9):

* LoCoMo's official multi-hop F1 splits prediction and gold on commas and scores each gold part against
  its *best* prediction part: extra prediction parts cost nothing, so ``"Paris, Rome, Lisbon, Berlin"``
  outscores the honest ``"Paris"``. A multi-hop answer is paid that very F1 (:func:`multi_hop_reward`,
  the metric it is judged by), times ``n_gold / n_pred`` when it has more comma parts than the gold: an
  answer with no more parts than the gold earns exactly the metric, every part past the gold's count is
  charged, and a list of k guesses holding the right one earns 1/k, what committing to one of them earns.
  (The earlier one-to-one part matching scored with precision x recall paid ``"Lisbon"`` 0.5 and
  ``"Lisbon and Porto"`` 0.125 for the gold ``"Lisbon, Porto"``, which the metric scores 0.5 and 2/3: it
  paid the policy for dropping list items, where issue 54 saw multi-hop F1 fall in every trained run.)
* Any F1 pays a hedge: ``"Paris Rome"`` scores 2/3 when either is right, more than the 1/2 a policy torn
  between the two earns on average by committing to one. :func:`answer_f1` multiplies precision and
  recall instead of taking their harmonic mean: a hedge between k answers earns at most 1/k of a right
  one, never more than committing (an exact answer still scores 1, every extra word costs in proportion).
  Multi-hop answers are the exception: they earn the metric's F1 within a part (``"Paris Rome"`` for the
  multi-hop gold ``"Paris"`` earns 2/3, as the metric pays it), so that the reward agrees with the metric.
* sub-EM ("gold in prediction or prediction in gold") pays a one-letter answer that occurs inside the
  gold, and any long dump that contains it. :func:`short_sub_em` pays only when the whole gold occurs in
  the prediction, the prediction is one answer (no more parts than the gold), at most
  ``max_extra_tokens`` longer than the gold, and the extra words state nothing (``"in May 2023"``, not
  ``"likely yes likely no"``).
* LoCoMo's adversarial rule pays any output containing "not mentioned", an answer hedged with a refusal
  included. :func:`committed_refusal` pays a refusal that says nothing else.

All are pure functions of (prediction, golds[, category]); no model, no data download.

    answer_f1("Paris, Rome, Lisbon", "Paris", "multi-hop")     # 1/3 (official: 1.0)
    answer_f1("Lisbon and Porto", "Lisbon, Porto", 1)           # 2/3 (= official)
    answer_f1("Paris Rome", "Paris")                            # 0.5 (token F1: 0.67)
    short_sub_em("e", ["Emily"])                                # 0.0 (official sub-EM: 1.0)
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from memrl.scoring.metrics import (
    _stem,
    best_over_golds,
    exact_match,
    locomo_category,
    locomo_f1,
    normalize_answer,
)

__all__ = [
    "ANSWER_REWARDS",
    "FUNCTION_WORDS",
    "answer_f1",
    "committed_refusal",
    "answer_parts",
    "answer_reward",
    "multi_hop_reward",
    "reward_golds",
    "short_sub_em",
]

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


def _committed(pred: Sequence[str], gold: Sequence[str]) -> float:
    """Precision x recall of two bags of tokens (0.0 when nothing overlaps, which covers empty inputs)."""
    same = sum((Counter(pred) & Counter(gold)).values())
    return same * same / (len(pred) * len(gold)) if same else 0.0


def _comma_parts(text: str) -> int:
    """How many comma-separated parts of ``text`` hold a word (the official metric's split, empty parts
    not counted)."""
    return sum(1 for p in text.split(",") if normalize_answer(p))


def multi_hop_reward(prediction: Any, gold: Any) -> float:
    """A multi-hop (category 1) answer's training reward: LoCoMo's official comma-split F1
    (:func:`memrl.scoring.metrics.locomo_f1`, the metric reports judge it by), times ``n_gold / n_pred``
    when the prediction has more comma parts than the gold (the metric charges none of them).

    So an answer with no more parts than the gold earns exactly the metric (``"Lisbon"`` 0.5 and
    ``"Lisbon, Porto"`` 1.0 for the gold ``"Lisbon, Porto"``), ``"Lisbon, Lisbon, Lisbon"`` earns 1/3
    (one value repeated is one part right of three written), and a list of k single guesses earns 1/k of a
    right one, what committing to one of them earns in expectation.
    """
    pred = "" if prediction is None else str(prediction)
    ref = "" if gold is None else str(gold)
    official = locomo_f1(pred, ref, 1)
    n_pred, n_gold = _comma_parts(pred), _comma_parts(ref)
    return official * n_gold / n_pred if n_pred > n_gold > 0 else official


#: Words that state no answer of their own (prepositions, pronouns, auxiliaries): an answer may add these
#: to a gold and still be that one answer ("in May 2023" for "May 2023"). Negations, hedges ("likely",
#: "maybe") and words like "before"/"after" that change what is claimed are not among them.
FUNCTION_WORDS = frozenset(
    "in on at of to for from by with about around during it its is was were are be been being he she they "
    "them his her their him we our us you your i my me this that these those there here then as so did do "
    "does has have had and".split()
)
#: Words a refusal may use around its phrase ("Not mentioned in the conversation") without answering.
_REFUSAL_WORDS = FUNCTION_WORDS | frozenset(
    "not no mentioned information available conversation memory memories context text answer question "
    "provided given stated".split()
)


def committed_refusal(prediction: Any) -> float:
    """1.0 if the prediction refuses and says nothing else, else 0.0 (LoCoMo's adversarial questions).

    The official rule pays any output that *contains* "not mentioned" or "no information available", so
    ``"adoption agencies (not mentioned)"`` (an answer and a refusal at once) scores 1. Here the refusal
    must also be all there is: every other word is one a refusal sentence uses (``"Not mentioned in the
    conversation"`` scores 1; a hedge that names an answer scores 0).
    """
    if locomo_f1(prediction, None, 5) == 0.0:
        return 0.0
    words = normalize_answer(prediction, drop_and=False).split()
    return 1.0 if all(w in _REFUSAL_WORDS for w in words) else 0.0


def answer_f1(prediction: Any, gold: Any, category: int | str | None = None) -> float:
    """The training F1 of one answer: LoCoMo's normalisation and stemming, scored by precision x recall
    (not their harmonic mean: a hedge must not pay, see the module docstring), every extra part charged.

    Multi-hop (category 1) answers earn LoCoMo's comma-split F1 with parts past the gold's count charged
    (:func:`multi_hop_reward`); other answers are compared as bags of stems over the whole text. Category 3 golds are cut at their first ';' as
    in the official script; category 5 (adversarial) pays a refusal that commits to nothing else
    (:func:`committed_refusal`). ``category=None``: stems of the whole text (documents, other data sets).
    An exact answer scores 1.0 as under F1; reports use the official F1 (:mod:`memrl.scoring.metrics`).
    """
    cat = None if category is None else locomo_category(category)
    if cat == 5:
        return committed_refusal(prediction)
    pred = "" if prediction is None else str(prediction)
    ref = "" if gold is None else str(gold)
    if cat == 3:
        ref = ref.split(";")[0].strip()
    if cat == 1:
        return multi_hop_reward(pred, ref)
    return _committed(_stems(pred), _stems(ref))


def _find(haystack: list[str], needle: list[str]) -> int | None:
    """Where ``needle`` first occurs in ``haystack`` as a contiguous run (None: nowhere)."""
    n = len(needle)
    return next((i for i in range(len(haystack) - n + 1) if haystack[i : i + n] == needle), None)


def short_sub_em(prediction: Any, golds: Any, *, max_extra_tokens: int = 3) -> float:
    """1.0 if one short answer contains a whole gold answer and commits to nothing else, else 0.0.

    The prediction's normalised tokens must contain the gold's as a contiguous run, hold at most
    ``max_extra_tokens`` more tokens than that gold, every one of them a word that states no answer of its
    own (:data:`FUNCTION_WORDS`: "in May 2023" for "May 2023"), and have no more parts
    (:func:`answer_parts`) than it: a fragment of the gold (``"e"`` for ``"Emily"``), a dump that happens to
    contain it, a list of guesses and a hedge between answers (``"Likely yes likely no"`` for ``"Likely
    no"``) all score 0.
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
        start = _find(pred, ref)
        if start is not None and all(w in FUNCTION_WORDS for w in pred[:start] + pred[start + len(ref) :]):
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
    :func:`reward_golds` says); a LoCoMo adversarial question (category 5) pays a committed refusal
    (:func:`committed_refusal`) under every kind."""
    if kind not in ANSWER_REWARDS:
        raise ValueError(f"unknown answer reward {kind!r}; expected one of {', '.join(ANSWER_REWARDS)}")
    if category is not None and locomo_category(category) == 5:  # the gold is a refusal, whatever is passed
        return committed_refusal(prediction)
    if kind in ("em", "sub_em"):
        golds = reward_golds(golds, category)
    if kind == "f1":
        return best_over_golds(lambda p, g: answer_f1(p, g, category), prediction, golds)
    if kind == "em":
        return best_over_golds(exact_match, prediction, golds)
    if kind == "sub_em":
        return short_sub_em(prediction, golds)
    raise ValueError(f"unknown answer reward {kind!r}; expected one of {', '.join(ANSWER_REWARDS)}")

"""Answer and retrieval metrics: LoCoMo's official F1, SQuAD-style EM/F1/sub-EM, BLEU-1, ``\\boxed{}``, and
:func:`score`, the data set's own metric for one answered question. The retrieval metrics (recall@k,
hit@k, session recall@k, NDCG@k) live in :mod:`memrl.scoring.ranking` and are re-exported here.

All functions are pure and cheap; none needs a model or any nltk data download. Use::

    from memrl.scoring.metrics import locomo_f1, squad_scores, recall_at_k
    locomo_f1("She was running", "run", category="single-hop")   # 0.5 (stemmed token F1)

LoCoMo scoring mirrors ``task_eval/evaluation.py`` of snap-research/locomo, read at commits 9228632
(``snap-research/locomo``) and 0e22967 (``snap-research/LoCoMo``); the scoring code is identical in both:

* ``normalize_answer``: drop ',' then lower-case, drop ``string.punctuation``, drop the words
  a/an/the/and (regex ``\\b(a|an|the|and)\\b``), collapse whitespace. Order matters only in theory.
* ``f1_score``: Porter-stem each normalised token, bag-of-tokens F1; returns 0 when nothing overlaps,
  which includes an empty prediction or an empty gold (so empty vs empty scores 0, not 1).
* category 1: prediction and gold are each split on ',' (before normalisation) and stripped; the score
  is the mean over gold parts of the best F1 against any prediction part.
* category 3: the gold is cut at its first ';' and stripped (the rest is a justification).
* categories 2, 3, 4: plain stemmed F1 (after the category-3 cut).
* category 5: 1 if ``"no information available"`` or ``"not mentioned"`` occurs in the lower-cased
  prediction, else 0; the gold is never looked at.
* answers are passed through ``str()`` first (some LoCoMo answers are ints).

Checked: :func:`locomo_f1` gives the same score as a transcription of the official functions on 13,902
(prediction, gold) pairs built from locomo10.json (other questions' answers, truncated and comma-extended
answers, empty and adversarial strings), all five categories.

Where we differ from the official script, on purpose: a category-5 question with no ``answer`` is scored
(the older script raised ``KeyError``); duplicate evidence ids are counted once by the retrieval metrics,
and a question without evidence has no recall (``None``) instead of the official 1.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from memrl.data.documents import is_documents
from memrl.data.locomo import LOCOMO_CATEGORIES  # the one definition of the official mapping
from memrl.data.types import Conversation, Question
from memrl.scoring.ranking import hit_at_k, locomo_session_of, ndcg_at_k, recall_at_k, session_recall_at_k

__all__ = [
    "LOCOMO_CATEGORIES",
    "answer_match",
    "best_over_golds",
    "bleu1",
    "boxed_answer",
    "boxed_match",
    "exact_match",
    "hit_at_k",
    "locomo_category",
    "locomo_f1",
    "locomo_session_of",
    "ndcg_at_k",
    "normalize_answer",
    "recall_at_k",
    "score",
    "session_recall_at_k",
    "squad_scores",
    "string_match_all",
    "string_match_part",
    "sub_em",
    "token_f1",
]

_CATEGORY_BY_NAME = {name: cat for cat, name in LOCOMO_CATEGORIES.items()}

#: The phrases that count as "not answerable" for category 5 (official script, verbatim).
ADVERSARIAL_PHRASES: tuple[str, ...] = ("no information available", "not mentioned")

_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ARTICLES_AND = re.compile(r"\b(a|an|the|and)\b")


def _text(s: Any) -> str:
    """``str(s)``, with ``None`` as the empty string (LoCoMo answers may be ints)."""
    return "" if s is None else str(s)


def normalize_answer(s: Any, *, drop_and: bool = True) -> str:
    """Lower-case, drop punctuation (commas included), the articles a/an/the, and collapse whitespace.

    ``drop_and=True`` (default) also drops the word "and", as LoCoMo's official script does; the SQuAD /
    HotpotQA metrics below (:func:`exact_match`, :func:`token_f1`, :func:`sub_em`, :func:`bleu1`) use
    ``drop_and=False`` so that MemAgent's numbers are reproduced.
    """
    text = _text(s).replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = (_ARTICLES_AND if drop_and else _ARTICLES).sub(" ", text)
    return " ".join(text.split())


# ----------------------------------------------------------------------------------------------------
# LoCoMo


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    # nltk's PorterStemmer is pure code (no corpus download); imported lazily to keep import cheap.
    from nltk.stem import PorterStemmer

    return PorterStemmer()


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return _stemmer().stem(word)


def _f1_from_tokens(pred: Sequence[str], gold: Sequence[str]) -> float:
    """Bag-of-tokens F1; 0.0 when nothing overlaps (which covers empty inputs)."""
    common = Counter(pred) & Counter(gold)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred)
    recall = num_same / len(gold)
    return 2 * precision * recall / (precision + recall)


def _stemmed_f1(prediction: str, gold: str) -> float:
    """The official ``f1_score``: Porter-stemmed token F1 on LoCoMo-normalised text."""
    pred = [_stem(w) for w in normalize_answer(prediction).split()]
    ref = [_stem(w) for w in normalize_answer(gold).split()]
    return _f1_from_tokens(pred, ref)


def _multi_hop_f1(prediction: str, gold: str) -> float:
    """The official ``f1``: split both on ',', mean over gold parts of the best part-to-part F1."""
    preds = [p.strip() for p in prediction.split(",")]
    golds = [g.strip() for g in gold.split(",")]
    return sum(max(_stemmed_f1(p, g) for p in preds) for g in golds) / len(golds)


def locomo_category(category: int | str) -> int:
    """The category id (1-5) from an id, a digit string, or a name ("multi-hop", "Single hop", ...)."""
    if isinstance(category, bool):  # bool is an int; True is not a category
        raise ValueError(f"unknown LoCoMo category {category!r}")
    if isinstance(category, int):
        if category in LOCOMO_CATEGORIES:
            return category
    elif isinstance(category, str):
        key = category.strip().lower().replace("_", "-").replace(" ", "-")
        if key.isdigit() and int(key) in LOCOMO_CATEGORIES:
            return int(key)
        if key in _CATEGORY_BY_NAME:
            return _CATEGORY_BY_NAME[key]
    names = ", ".join(f"{k}={v}" for k, v in LOCOMO_CATEGORIES.items())
    raise ValueError(f"unknown LoCoMo category {category!r}; expected one of {names}")


def locomo_f1(prediction: Any, answer: Any, category: int | str) -> float:
    """Score one LoCoMo answer exactly as the official ``eval_question_answering`` does.

    ``answer`` is only read for categories 1-4 (it may be an int); for category 5 pass ``None`` or the
    ``adversarial_answer``. Returns a float in [0, 1].
    """
    cat = locomo_category(category)
    output = _text(prediction)
    if cat == 5:
        lowered = output.lower()
        return 1.0 if any(phrase in lowered for phrase in ADVERSARIAL_PHRASES) else 0.0
    if answer is None:
        raise ValueError(f"category {cat} ({LOCOMO_CATEGORIES[cat]}) needs a gold answer, got None")
    gold = str(answer)
    if cat == 3:
        gold = gold.split(";")[0].strip()
    if cat == 1:
        return _multi_hop_f1(output, gold)
    return _stemmed_f1(output, gold)


# ----------------------------------------------------------------------------------------------------
# SQuAD / HotpotQA style (MemAgent's evaluation)


def _squad_tokens(s: Any) -> list[str]:
    return normalize_answer(s, drop_and=False).split()


def exact_match(prediction: Any, gold: Any) -> float:
    """1.0 if the SQuAD-normalised strings are equal, else 0.0."""
    return float(normalize_answer(prediction, drop_and=False) == normalize_answer(gold, drop_and=False))


def sub_em(prediction: Any, gold: Any) -> float:
    """1.0 if the normalised gold is a substring of the normalised prediction or vice versa.

    An empty normalised prediction or gold scores 0.0: the original (``"" in gold`` is always true) would
    reward an empty answer, which a policy learns to exploit.
    """
    pred = normalize_answer(prediction, drop_and=False)
    ref = normalize_answer(gold, drop_and=False)
    if not pred or not ref:
        return 0.0
    return float(ref in pred or pred in ref)


def token_f1(prediction: Any, gold: Any) -> float:
    """SQuAD v1.1 token F1 (no stemming); 0.0 when no token overlaps, empty inputs included."""
    return _f1_from_tokens(_squad_tokens(prediction), _squad_tokens(gold))


def bleu1(prediction: Any, gold: Any) -> float:
    """Sentence BLEU-1 on SQuAD-normalised tokens: clipped unigram precision times the brevity penalty.

    BP = 1 if the prediction is longer than the gold, else exp(1 - len(gold)/len(pred)). An empty
    prediction or gold scores 0.0 (no smoothing).
    """
    import math

    pred = _squad_tokens(prediction)
    ref = _squad_tokens(gold)
    if not pred or not ref:
        return 0.0
    clipped = sum((Counter(pred) & Counter(ref)).values())
    precision = clipped / len(pred)
    bp = 1.0 if len(pred) > len(ref) else math.exp(1.0 - len(ref) / len(pred))
    return bp * precision


def best_over_golds(metric: Callable[[Any, Any], float], prediction: Any, golds: Any) -> float:
    """``max(metric(prediction, g) for g in golds)``; a lone string (or int) counts as one gold.

    No gold at all scores 0.0.
    """
    if golds is None or isinstance(golds, (str, int, float)):
        golds = [golds] if golds is not None else []
    scores = [metric(prediction, g) for g in golds]
    return max(scores, default=0.0)


def squad_scores(prediction: Any, golds: Any) -> dict[str, float]:
    """``{"em", "f1", "sub_em", "bleu1"}``, each the best over the gold answers."""
    return {
        "em": best_over_golds(exact_match, prediction, golds),
        "f1": best_over_golds(token_f1, prediction, golds),
        "sub_em": best_over_golds(sub_em, prediction, golds),
        "bleu1": best_over_golds(bleu1, prediction, golds),
    }


# ----------------------------------------------------------------------------------------------------
# \boxed{} answers (MemAgent)

_BOXED = "\\boxed{"


def boxed_answer(text: str | None, window: int = 300) -> str | None:
    """The content of the last ``\\boxed{...}``, when the box ends in the final ``window`` characters.

    MemAgent reads the last box in the final 300 characters of the reply; a box that *starts* there
    cannot hold a longer gold answer (LoCoMo has one of 388 characters), so here the box must *end* there
    (nothing but ``window`` characters after it): every box MemAgent's rule finds is found, and a long one
    too. Nested braces are matched (``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``). Returns ``None`` when
    there is no ``\\boxed{``, its braces never close, or more than ``window`` characters follow it.
    """
    if not text:
        return None
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth = 1
    body_start = start + len(_BOXED)
    for i in range(body_start, len(text)):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[body_start:i] if window <= 0 or len(text) - (i + 1) < window else None
    return None


def _squash(s: Any) -> str:
    return "".join(_text(s).lower().split())


def answer_match(answer: str | None, golds: Any) -> bool:
    """MemAgent's match on an extracted answer: lower-cased with all whitespace removed, it equals a gold
    answer so treated. ``None`` (no answer) never matches, an empty answer only an empty gold."""
    if answer is None:
        return False
    if golds is None or isinstance(golds, (str, int, float)):
        golds = [golds] if golds is not None else []
    squashed = _squash(answer)
    return any(squashed == _squash(g) for g in golds)


def _ruler_clean(prediction: Any) -> str:
    """RULER's post-processing of a prediction: control characters dropped, stripped, lower-cased."""
    return re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", "", _text(prediction)).strip().lower()


def string_match_all(prediction: Any, golds: Sequence[Any]) -> float:
    """RULER's metric of niah, vt, cwe and fwe for one item: the share of the gold strings found in the
    prediction (case-insensitive substring), in [0, 1]; a report multiplies the mean by 100."""
    pred = _ruler_clean(prediction)
    golds = [_text(g).lower() for g in golds]
    return sum(g in pred for g in golds) / len(golds) if golds else 0.0


def string_match_part(prediction: Any, golds: Sequence[Any]) -> float:
    """RULER's metric of qa for one item: 1 if any gold string is found in the prediction (case-
    insensitive substring), else 0; a report multiplies the mean by 100."""
    pred = _ruler_clean(prediction)
    return float(any(_text(g).lower() in pred for g in golds))


def boxed_match(text: str | None, golds: Any) -> bool:
    """True if the last boxed answer, lower-cased with all whitespace removed, equals any gold so treated.

    A missing boxed answer never matches (even an empty gold).
    """
    return answer_match(boxed_answer(text), golds)


# ----------------------------------------------------------------------------------------------------
# One question, by its data set


def score(conv: Conversation, q: Question, prediction: str) -> dict[str, float]:
    """The data set's official metric (LoCoMo F1 with its category rules) plus EM and BLEU-1."""
    if is_documents(conv):  # MemAgent's evaluation: its match (accuracy), sub-EM, EM, F1
        return {
            "accuracy": float(answer_match(prediction, q.answers)),
            **squad_scores(prediction, q.answers),
        }
    if conv.source in ("locomo", "sample") and q.category_id is not None:
        f1 = locomo_f1(prediction, q.answer, q.category_id)
    else:
        f1 = best_over_golds(token_f1, prediction, q.answers)
    return {
        "f1": f1,
        "em": best_over_golds(exact_match, prediction, q.answers),
        "bleu1": best_over_golds(bleu1, prediction, q.answers),
    }

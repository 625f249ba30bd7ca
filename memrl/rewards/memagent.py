"""MemAgent's reward and evaluation scores for a final answer written as ``\\boxed{...}``.

Reward (REFERENCE.md section 2): 1.0 if the last ``\\boxed{...}`` in the final 300 characters, lower-cased
with whitespace removed, equals any gold answer treated the same way; else 0.0. The trainer gives this
episode reward to every turn (every chunk's memory update and the final answer) of the episode.

Evaluation additionally reports SQuAD-normalised exact match, token F1 and sub-EM (gold within the
prediction or the prediction within the gold), each the best over the gold answers, computed on the
boxed answer (an answer without a box is scored as the empty string, i.e. 0 everywhere).

    memagent_reward("... so the answer is \\\\boxed{Paris}", ["paris"])   # 1.0

For a task that asks for several values (RULER's niah_multivalue, multiquery), :func:`value_set_reward`
scores the box as a set of values: precision x recall of the distinct golds named, every part counted in
the precision (a value repeated four times is four parts, one right), so nothing pays more than the
honest list of the golds it names::

    value_set_reward("\\\\boxed{12, 34}", ["12", "34", "56", "78"])      # 0.5: recall 0.5, precision 1
    value_set_reward("\\\\boxed{12, 12, 12, 12}", ["12", "34", "56", "78"])  # 0.0625, not 1.0
"""

from __future__ import annotations

import re

from memrl.scoring.metrics import best_over_golds, boxed_answer, boxed_match, exact_match, sub_em, token_f1

__all__ = ["memagent_eval", "memagent_reward", "value_parts", "value_set_reward"]

# Commas and semicolons in their ASCII, full-width and ideographic forms, new lines, "and", and dashes set
# apart by spaces or written as en/em dashes; a bare hyphen splits only when no gold holds one (UUIDs do).
_LIST_SEP = re.compile(r"\s*(?:[,;\n\uff0c\u3001\uff1b\u2013\u2014]|\s-\s|\band\b)\s*", re.I)
_EDGE = re.compile(r"^[\W_]+|[\W_]+$")


def memagent_reward(final_text: str | None, golds: object) -> float:
    """1.0 if the final boxed answer matches any gold (lower-case, whitespace removed), else 0.0."""
    return 1.0 if boxed_match(final_text, golds) else 0.0


def memagent_eval(final_text: str | None, golds: object) -> dict[str, float]:
    """``{"reward", "em", "f1", "sub_em", "has_boxed"}`` for one final answer."""
    pred = boxed_answer(final_text)
    answer = pred if pred is not None else ""
    return {
        "reward": memagent_reward(final_text, golds),
        "em": best_over_golds(exact_match, answer, golds),
        "f1": best_over_golds(token_f1, answer, golds),
        "sub_em": best_over_golds(sub_em, answer, golds),
        "has_boxed": float(pred is not None),
    }


def _norm_value(text: str) -> str:
    """A value as the set reward compares it: lower-case, outer punctuation dropped, inner whitespace removed
    (MemAgent's own normalisation, so ``'Ab c'`` and ``'abc'`` are one value)."""
    return re.sub(r"\s+", "", _EDGE.sub("", text.strip().lower()))


def value_parts(answer: str, golds: object) -> list[str]:
    """The values an answer names, in order, repeats kept: split at commas and semicolons (ASCII,
    full-width or ideographic), new lines, "and" and dashes between spaces or en/em dashes; also at spaces
    when no gold holds one and at hyphens when no gold holds one (RULER's values are single words, numbers
    or UUIDs). Splitting finer only adds parts, and every part counts in the precision."""
    gold = [str(g).strip() for g in _golds(golds)]
    spaced = any(" " in g for g in gold)
    hyphen = any("-" in g for g in gold)
    parts = [p for piece in _LIST_SEP.split(answer) for p in (piece.split() if not spaced else [piece])]
    if not hyphen:
        parts = [q for p in parts for q in p.split("-")]
    return [v for v in (_norm_value(p) for p in parts) if v]


def _golds(golds: object) -> list[str]:
    return [str(g) for g in golds] if isinstance(golds, (list, tuple, set, frozenset)) else [str(golds)]


def value_set_reward(final_text: str | None, golds: object) -> float:
    """Precision x recall of the boxed answer's values against the distinct gold values (module
    docstring): recall = golds named / golds, precision = golds named / parts (repeats and wrong values
    are parts). No box, or no part: 0.0."""
    answer = boxed_answer(final_text)
    gold = {_norm_value(g) for g in _golds(golds)} - {""}
    if answer is None or not gold:
        return 0.0
    parts = value_parts(answer, golds)
    if not parts:
        return 0.0
    named = gold & set(parts)
    return (len(named) / len(parts)) * (len(named) / len(gold))

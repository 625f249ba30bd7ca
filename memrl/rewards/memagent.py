"""MemAgent's reward and evaluation scores for a final answer written as ``\\boxed{...}``.

Reward (REFERENCE.md section 2): 1.0 if the last ``\\boxed{...}`` in the final 300 characters, lower-cased
with whitespace removed, equals any gold answer treated the same way; else 0.0. The trainer gives this
episode reward to every turn (every chunk's memory update and the final answer) of the episode.

Evaluation additionally reports SQuAD-normalised exact match, token F1 and sub-EM (gold within the
prediction or the prediction within the gold), each the best over the gold answers, computed on the
boxed answer (an answer without a box is scored as the empty string, i.e. 0 everywhere).

    memagent_reward("... so the answer is \\\\boxed{Paris}", ["paris"])   # 1.0
"""

from __future__ import annotations

from memrl.scoring.metrics import best_over_golds, boxed_answer, boxed_match, exact_match, sub_em, token_f1

__all__ = ["memagent_eval", "memagent_reward"]


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

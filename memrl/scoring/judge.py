"""An LLM judge: is a predicted answer CORRECT or WRONG given the gold answer?

The judge answers in JSON (``{"reasoning": ..., "label": "CORRECT" | "WRONG"}``) constrained by a schema,
at temperature 0; wrap the judge model in :class:`~memrl.llm.cache.CachedLLM` and a re-run costs nothing.
A reply that is not valid JSON, or a provider error, is a *judge failure*: counted and shown in the report,
never scored as right or wrong.

Question-type variants follow the LongMemEval protocol (temporal answers may be off by one day,
knowledge-update answers may mention older values as long as the latest is given, abstention questions
are correct when the model says the information is not available); LoCoMo questions use the default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memrl.errors import MemrlError
from memrl.llm.base import LLM, SamplingParams
from memrl.llm.parsing import extract_json

JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reasoning": {"type": "string", "maxLength": 400},
        "label": {"enum": ["CORRECT", "WRONG"]},
    },
    "required": ["reasoning", "label"],
    "additionalProperties": False,
}

_BASE = (
    "You grade answers to questions about a long conversation. You get the question, the gold answer and "
    "a model's answer. The model's answer is CORRECT if it gives the same information as the gold answer, "
    "even if worded differently, shorter or longer, as long as it does not contradict it or add a wrong "
    "alternative. It is WRONG if it misses the point of the gold answer or says something different."
)
_RULES = {
    "temporal": " For dates and durations, accept the same date written in another format; an answer off "
    "by one day (or by one for counts of days, weeks or months) is still CORRECT.",
    "temporal-reasoning": " For dates and durations, accept the same date written in another format; an "
    "answer off by one day (or by one for counts of days, weeks or months) is still CORRECT.",
    "knowledge-update": " The facts changed over time: the answer is CORRECT if it gives the latest value "
    "in the gold answer, even if it also mentions earlier values.",
    "single-session-preference": " The gold answer is a rubric of the user's preferences: the answer is "
    "CORRECT if it respects the preferences the rubric names.",
    "abstention": " The question cannot be answered from the conversation: the answer is CORRECT only if it "
    "says the information is not available (and WRONG if it invents an answer).",
    "adversarial": " The question cannot be answered from the conversation: the answer is CORRECT only if it "
    "says the information is not mentioned or not available (and WRONG if it invents an answer).",
}
JUDGE_OUTPUT = ' Reply with JSON only: {"reasoning": "<one sentence>", "label": "CORRECT" or "WRONG"}.'


def judge_messages(question: str, gold: str, prediction: str, question_type: str | None = None) -> list[dict]:
    rule = _RULES.get(question_type or "", "")
    return [
        {"role": "system", "content": _BASE + rule + JUDGE_OUTPUT},
        {
            "role": "user",
            "content": f"Question: {question}\nGold answer: {gold}\nModel answer: {prediction}",
        },
    ]


@dataclass(frozen=True)
class JudgeResult:
    """``label`` is True (CORRECT), False (WRONG) or None when the judge failed (``error`` says why)."""

    label: bool | None
    reasoning: str = ""
    error: str | None = None
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "reasoning": self.reasoning, "error": self.error, "cached": self.cached}


async def judge_answer(
    llm: LLM,
    question: str,
    gold: str,
    prediction: str,
    *,
    question_type: str | None = None,
    max_tokens: int = 200,
) -> JudgeResult:
    """One judgement; never raises for model or provider problems (they become ``error``)."""
    try:
        reply = await llm.chat(
            judge_messages(question, gold, prediction, question_type),
            json_schema=JUDGE_SCHEMA,
            sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens),
        )
    except MemrlError as e:
        return JudgeResult(None, error=f"{type(e).__name__}: {e}")
    try:
        data = extract_json(reply.text)  # a fenced or prefixed verdict is still a verdict
        label = data["label"]
        if label not in ("CORRECT", "WRONG"):
            raise ValueError(f"label {label!r}")
    except (ValueError, KeyError, TypeError) as e:
        return JudgeResult(
            None, error=f"unparsable judge reply ({e}): {reply.text[:120]!r}", cached=reply.cached
        )
    return JudgeResult(label == "CORRECT", str(data.get("reasoning", "")), cached=reply.cached)

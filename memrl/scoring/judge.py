"""An LLM judge's verdict on one answer: is the prediction right given the gold answer?

Which prompt and calling convention is the judge's name (:mod:`memrl.scoring.judges`): ``longmemeval``,
``mem0`` and ``membuilder`` send the published prompts verbatim, ``strict`` is memrl's own. Always at
temperature 0; wrap the judge model in :class:`~memrl.llm.cache.CachedLLM` and a re-run costs nothing.
A provider error, or a reply that is no verdict (``mem0``/``membuilder``/``strict``: not the JSON the
prompt asks for), is a *judge failure*: returned with ``label=None`` and ``error``, never raised. How a
failure is scored is the report's business (memrl's mode excludes and counts it, the official mode counts
it wrong).

    j = await judge_answer(llm, "When did Ana move?", "May 2023", "in May 2023", judge="mem0")
    j.label, j.reply
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memrl.errors import MemrlError
from memrl.llm.base import LLM, SamplingParams
from memrl.scoring.judges import STRICT_SCHEMA, JudgeSpec, get_judge

#: The strict judge's schema (kept under its old name).
JUDGE_SCHEMA = STRICT_SCHEMA


def judge_messages(question: str, gold: str, prediction: str, question_type: str | None = None) -> list[dict]:
    """The strict judge's messages (``question_type`` ``abstention`` for unanswerable questions)."""
    return get_judge("strict").messages(question, gold, prediction, question_type=question_type,
                                        abstention=question_type in ("abstention", "adversarial"))  # fmt: skip


@dataclass(frozen=True)
class JudgeResult:
    """``label`` is True (right), False (wrong) or None when the judge failed (``error`` says why);
    ``reply`` is the judge model's text as it came."""

    label: bool | None
    reasoning: str = ""
    error: str | None = None
    cached: bool = False
    reply: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "reasoning": self.reasoning, "error": self.error, "cached": self.cached,
                "reply": self.reply}  # fmt: skip


async def judge_answer(
    llm: LLM,
    question: str,
    gold: str,
    prediction: str,
    *,
    question_type: str | None = None,
    judge: str | JudgeSpec = "strict",
    abstention: bool | None = None,
    max_tokens: int | None = None,
) -> JudgeResult:
    """One judgement; never raises for model or provider problems (they become ``error``).

    ``abstention``: the question has no answer in the conversation (LongMemEval's ``_abs``, LoCoMo's
    category 5); by default it is read from ``question_type`` (``abstention``/``adversarial``).
    ``max_tokens`` overrides the judge's own (10 for ``longmemeval``: leave it for the official protocol).
    A :class:`~memrl.errors.ConfigError` (a question type the judge has no template for) is raised.
    """
    spec = get_judge(judge) if isinstance(judge, str) else judge
    if abstention is None:
        abstention = question_type in ("abstention", "adversarial")
    messages = spec.messages(question, spec.gold_for(gold, not abstention), prediction,
                             question_type=question_type, abstention=abstention)  # fmt: skip
    try:
        reply = await llm.chat(
            messages,
            json_schema=spec.json_schema,
            sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens or spec.max_tokens),
        )
    except MemrlError as e:
        return JudgeResult(None, error=f"{type(e).__name__}: {e}")
    try:
        label, reasoning = spec.verdict(reply.text)
    except (ValueError, KeyError, TypeError) as e:
        return JudgeResult(None, error=f"unparsable judge reply ({e}): {reply.text[:120]!r}",
                           cached=reply.cached, reply=reply.text)  # fmt: skip
    return JudgeResult(label, reasoning, cached=reply.cached, reply=reply.text)

"""Answering a question from memory: the prompt (top-k retrieved memories with their dates, then core
memory, and a not-answerable rule) and one call to the answering model.

The answer is short on purpose: LoCoMo's official F1 compares tokens, so an explanation after the answer
costs precision. When the memories do not hold the answer, the model must say :data:`NOT_ANSWERABLE`,
which is what LoCoMo's category-5 rule and LongMemEval's abstention questions look for.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from memrl.data.documents import is_documents
from memrl.data.locomo import NOT_ANSWERABLE
from memrl.data.types import Conversation, Question
from memrl.datetimes import shown_date
from memrl.errors import MemrlError
from memrl.llm.base import LLM, SamplingParams
from memrl.memory import AsyncMemory
from memrl.memory.records import SearchHit, shown_text

ANSWER_SYSTEM = (
    "You answer questions about a long conversation between {speakers}, using only the memories given. "
    "Reply with the answer alone: a short phrase of a few words (a name, a place, a date, a number, a short "
    "list), no explanation. Dates: resolve relative expressions (yesterday, last week) against the date of "
    "the memory they come from, and give absolute dates like '7 May 2023'. If the memories do not contain "
    f"the answer, reply exactly: {NOT_ANSWERABLE}"
)


DOCUMENTS_SYSTEM = (
    "You answer questions using only the passages given (each starts with the title of its document). "
    "Reply with the answer alone: a short phrase of a few words (a name, a place, a date, a number, yes or "
    f"no), no explanation. If the passages do not contain the answer, reply exactly: {NOT_ANSWERABLE}"
)


def memory_date(hit: SearchHit) -> str | None:
    """The date shown with a retrieved memory (:func:`memrl.datetimes.shown_date`: only a real date)."""
    return shown_date(hit.item.metadata)


def shown_memory(hit: SearchHit) -> str:
    """One retrieved memory as the reader reads it (:func:`memrl.memory.records.reading.shown_text`)."""
    return shown_text(hit.item)


def format_memories(hits: list[SearchHit]) -> str:
    """Numbered memory lines (one line each, :func:`shown_memory`)."""
    lines = [f"{i}. {shown_memory(h)}" for i, h in enumerate(hits, start=1)]
    return "\n".join(lines) if lines else "(no memories)"


def within_budget(hits: list[SearchHit], chars: int) -> list[SearchHit]:
    """The leading ``hits`` whose lines as the reader reads them (:func:`shown_memory`: the date shown
    counts like content) add up to at most ``chars`` characters (newlines included)."""
    out: list[SearchHit] = []
    used = 0
    for h in hits:
        used += len(shown_memory(h)) + (1 if out else 0)
        if used > chars:
            break
        out.append(h)
    return out


def answer_messages(
    conversation: Conversation, question: Question, core: str, hits: list[SearchHit]
) -> list[dict[str, str]]:
    return lines_messages(conversation, question, core, [shown_memory(h) for h in hits])


def lines_messages(
    conversation: Conversation, question: Question, core: str, lines: list[str]
) -> list[dict[str, str]]:
    """The answer prompt over memory lines as any memory system returns them (memrl's hits are
    :func:`shown_memory` lines; another system's memory texts come as they are)."""
    speakers = " and ".join(conversation.speakers) or "the speakers"
    documents = is_documents(conversation)
    numbered = "\n".join(f"{i}. {line}" for i, line in enumerate(lines, start=1)) or "(no memories)"
    # The retrieved memories come first and core memory after them: a small reader answers from the
    # prompt's first lines, and core memory is not chosen for the question (a core block in front cut the
    # first-line F1 of LoCoMo's annotation memory from 11.1 to 2.1; docs/results/builders.md, issue 35).
    parts = [f"{'Passages' if documents else 'Memories'} (most relevant first):\n{numbered}"]
    if core.strip():
        parts.append(f"Core memory:\n{core.strip()}")
    asked = f" (asked on {question.question_date:%d %B %Y})" if question.question_date else ""
    parts.append(f"Question{asked}: {question.question}\nAnswer:")
    return [
        {
            "role": "system",
            "content": DOCUMENTS_SYSTEM if documents else ANSWER_SYSTEM.format(speakers=speakers),
        },
        {"role": "user", "content": "\n\n".join(parts)},
    ]


@dataclass
class AnswerResult:
    """One answered question: the prediction, what was retrieved, cost, and an error if it failed."""

    prediction: str | None
    retrieved_ids: list[str] = field(default_factory=list)
    retrieved_types: list[str] = field(default_factory=list)
    retrieved_evidence: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    cached: bool = False
    error: str | None = None  # the answer could not be produced (provider error): not scored, counted
    format_error: str | None = None  # the model answered in the wrong format: scored as given, counted

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def clean_prediction(text: str) -> str:
    """First line of the reply, without a leading 'Answer:' the model may repeat."""
    text = text.strip()
    line = text.splitlines()[0].strip() if text else ""
    for prefix in ("answer:", "a:"):
        if line.lower().startswith(prefix):
            line = line[len(prefix) :].strip()
    return line


async def answer_from_lines(
    llm: LLM, conversation: Conversation, question: Question, lines: list[str], *, max_tokens: int = 48
) -> AnswerResult:
    """Answer from memory lines another system retrieved (the harness's answerer, the same prompt)."""
    t0 = time.perf_counter()
    try:
        reply = await llm.chat(lines_messages(conversation, question, "", lines),
                               sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens))  # fmt: skip
    except MemrlError as e:
        return AnswerResult(None, error=f"{type(e).__name__}: {e}", latency_s=time.perf_counter() - t0)
    return _result(reply, max_tokens, [], t0)


def _result(reply: Any, max_tokens: int, hits: list[SearchHit], t0: float) -> AnswerResult:
    prediction = clean_prediction(reply.text)
    format_error = None
    if not prediction:
        format_error = "empty answer"
    elif reply.finish_reason == "length" and "\n" not in reply.text.strip():
        format_error = f"answer cut off at max_tokens={max_tokens}"  # the one line we score is truncated
    return AnswerResult(
        prediction=prediction,
        format_error=format_error,
        retrieved_ids=[h.item.id for h in hits],
        retrieved_types=[h.item.type.value for h in hits],
        retrieved_evidence=list(dict.fromkeys(e for h in hits for e in h.item.evidence)),
        prompt_tokens=reply.usage.prompt_tokens,
        completion_tokens=reply.usage.completion_tokens,
        latency_s=time.perf_counter() - t0,
        cached=reply.cached,
    )


async def answer_from_memory(
    llm: LLM,
    memory: AsyncMemory,
    namespace: str,
    conversation: Conversation,
    question: Question,
    *,
    top_k: int = 10,
    max_tokens: int = 48,
    search_options: dict[str, Any] | None = None,
    context_chars: int | None = None,
) -> AnswerResult:
    """Retrieve the top-k memories for the question and ask the model. Failures are returned, not raised.

    ``context_chars``: show the model only the retrieved memories that fit this many characters of
    memory text, best first (the ones after the first that does not fit are dropped too), instead of a
    count: a reward must not pay a policy for packing more text into each memory (ADRPO uses it).
    """
    t0 = time.perf_counter()
    try:
        hits = await memory.search(
            question.question, namespace=namespace, top_k=top_k, **(search_options or {})
        )
        if context_chars is not None:
            hits = within_budget(hits, context_chars)
        core = await memory.core(namespace=namespace)
        reply = await llm.chat(
            answer_messages(conversation, question, core, hits),
            sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens),
        )
    except MemrlError as e:
        return AnswerResult(None, error=f"{type(e).__name__}: {e}", latency_s=time.perf_counter() - t0)
    return _result(reply, max_tokens, hits, t0)

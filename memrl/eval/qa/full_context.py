"""The full-context baseline (``memrl eval --builder full``): no memory, the whole conversation in the
answer prompt, where it fits the model's window.

    memrl eval --dataset locomo --builder full --provider openai --base-url URL --model M
    memrl eval --dataset locomo --builder full --builder-option context_window=8192 overflow=truncate

The prompt is the conversation session by session (a dated header, then one ``speaker: text`` line per
turn, images as LoCoMo's scripts mention them), then the question, with the same answer rules as the
memory-based prompt (:mod:`memrl.scoring.answer`). locomo-audit found such a baseline (gpt-4.1-mini)
beating published memory systems on LoCoMo.

When prompt + answer budget + a margin do not fit ``context_window`` (default: the local model's; none
for a server, where everything fits), ``overflow=truncate`` (default) keeps the latest turns that fit and
records how many were dropped (``context_turns_dropped``; the report counts the questions so answered),
and ``overflow=skip`` answers nothing: the question is an answer failure, counted (wrong in the official
mode). Tokens are counted with ``tokenizer`` (``model``: the local model's own, else SmolLM2's;
``whitespace``; a tokenizer folder).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Literal

from memrl.config import option
from memrl.data.documents import is_documents
from memrl.data.locomo import NOT_ANSWERABLE
from memrl.data.types import Conversation, Question
from memrl.errors import MemrlError
from memrl.llm.base import LLM, SamplingParams
from memrl.scoring.answer import AnswerResult, clean_prediction

#: Tokens kept free for the chat template's own tokens (role markers, BOS/EOS).
TEMPLATE_MARGIN = 32

FULL_SYSTEM = (
    "You answer questions about a long conversation between {speakers}; the whole conversation is given, "
    "session by session with its dates. Reply with the answer alone: a short phrase of a few words (a name, "
    "a place, a date, a number, a short list), no explanation. Dates: resolve relative expressions "
    "(yesterday, last week) against the date of the session they come from, and give absolute dates like "
    f"'7 May 2023'. If the conversation does not contain the answer, reply exactly: {NOT_ANSWERABLE}"
)
FULL_DOCUMENTS_SYSTEM = (
    "You answer questions using only the documents given. Reply with the answer alone: a short phrase of a "
    f"few words, no explanation. If the documents do not contain the answer, reply exactly: {NOT_ANSWERABLE}"
)


@dataclasses.dataclass(frozen=True)
class FullContextConfig:
    """``--builder full``'s settings (``--builder-option KEY=VALUE``)."""

    context_window: int | None = option(
        None, "the model's window in tokens (default: the local model's; none for a server: all fits)"
    )
    tokenizer: str = option("model", "how tokens are counted: model, whitespace, or a tokenizer folder")
    overflow: Literal["truncate", "skip"] = option(
        "truncate",
        "a conversation longer than the window: keep its latest turns that fit, or skip the question",
    )


def transcript(conv: Conversation) -> list[tuple[int, str]]:
    """The conversation as ``(session index, line)`` pairs: a header per session, then its turns."""
    out: list[tuple[int, str]] = []
    documents = is_documents(conv)
    for s in conv.sessions:
        when = f" ({s.date_text})" if s.date_text else ""
        out.append((s.index, f"\n{'Document' if documents else 'Session'} {s.index}{when}:"))
        out.extend((s.index, t.render(speaker=not documents)) for t in s.turns)
    return out


def full_messages(conv: Conversation, q: Question, lines: list[str]) -> list[dict[str, str]]:
    speakers = " and ".join(conv.speakers) or "the speakers"
    system = FULL_DOCUMENTS_SYSTEM if is_documents(conv) else FULL_SYSTEM.format(speakers=speakers)
    asked = f" (asked on {q.question_date:%d %B %Y})" if q.question_date else ""
    user = "Conversation:" + "\n".join(lines) + f"\n\nQuestion{asked}: {q.question}\nAnswer:"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


class FullContextReader:
    """Answers questions from whole conversations; caches each conversation's line token counts."""

    def __init__(
        self, llm: LLM, config: FullContextConfig, *, window: int | None, count: Any, max_tokens: int
    ):
        self.llm, self.config, self.window = llm, config, window
        self.count, self.max_tokens = count, max_tokens
        self._lines: dict[str, tuple[list[str], list[int], int]] = {}

    def _prepared(self, conv: Conversation) -> tuple[list[str], list[int], int]:
        if conv.id not in self._lines:
            lines = [text for _, text in transcript(conv)]
            counts = [self.count(line) + 1 for line in lines] if self.window is not None else [0] * len(lines)
            self._lines[conv.id] = (lines, counts, sum(1 for line in lines if not line.startswith("\n")))
        return self._lines[conv.id]

    def fit(self, conv: Conversation, q: Question) -> tuple[list[str], dict[str, Any]]:
        """The lines that fit, and what the report records (tokens, turns dropped, whether all fit)."""
        lines, counts, n_turns = self._prepared(conv)
        if self.window is None:
            return lines, {"context_fit": True, "context_turns_dropped": 0}
        frame = sum(self.count(m["content"]) for m in full_messages(conv, q, []))
        budget = self.window - self.max_tokens - TEMPLATE_MARGIN - frame
        needed = total = sum(counts)
        start = 0
        while total > budget and start < len(lines):
            total -= counts[start]
            start += 1
        kept = lines[start:]
        dropped = n_turns - sum(1 for line in kept if not line.startswith("\n"))
        return kept, {"context_fit": start == 0, "context_turns_dropped": dropped,
                      "context_tokens": total + frame, "context_tokens_needed": needed + frame,
                      "context_window": self.window}  # fmt: skip

    async def answer(self, conv: Conversation, q: Question) -> tuple[AnswerResult, dict[str, Any]]:
        t0 = time.perf_counter()
        lines, info = self.fit(conv, q)
        if not info["context_fit"] and self.config.overflow == "skip":
            why = (
                f"context: the conversation needs {info['context_tokens_needed']} tokens, the window is "
                f"{self.window} (overflow=skip)"
            )
            return AnswerResult(None, error=why), info
        try:
            reply = await self.llm.chat(full_messages(conv, q, lines),
                                        sampling=SamplingParams(temperature=0.0, max_tokens=self.max_tokens))  # fmt: skip
        except MemrlError as e:
            return AnswerResult(
                None, error=f"{type(e).__name__}: {e}", latency_s=time.perf_counter() - t0
            ), info
        prediction = clean_prediction(reply.text)
        res = AnswerResult(prediction, format_error=None if prediction else "empty answer",
                           prompt_tokens=reply.usage.prompt_tokens, completion_tokens=reply.usage.completion_tokens,
                           latency_s=time.perf_counter() - t0, cached=reply.cached)  # fmt: skip
        return res, info


def make_reader(llm: LLM, options: tuple[str, ...], max_tokens: int) -> FullContextReader:
    from memrl.config import parse_options
    from memrl.eval.qa.tokens import model_window, token_counter

    config = parse_options(FullContextConfig, options)
    window = config.context_window or model_window(llm)
    count = token_counter(config.tokenizer, llm) if window is not None else (lambda text: 0)
    return FullContextReader(llm, config, window=window, count=count, max_tokens=max_tokens)

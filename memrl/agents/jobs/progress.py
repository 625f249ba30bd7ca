"""How far a running agent job got: its model calls counted as they come back, against the calls it will make.

The agents have no progress hooks, and need none: every step of theirs is one ``llm.chat`` call. A job's
agent is given its LLM wrapped in :class:`CountingLLM`, and :class:`Progress` turns the count into the
job's ``progress`` (``GET /v1/jobs/{id}``, ``Job.to_dict()["progress"]``)::

    {"sessions_done": 0, "sessions_total": 1,     # remember: the conversation is one session
     "steps_done": 2, "steps_total": 4,           # model calls back / expected (None: not known ahead)
     "unit": "model calls"}

Expected calls: ``remember`` one per MemBuilder agent (four; a core memory over its limit adds a
compression call, and the total grows with it), ``read`` one per chunk plus the answer, ``maintain`` not
known ahead (the episode ends when the model stops calling tools; its budget is ``max_tool_calls``).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

from memrl.llm.base import LLM, ChatRequest, ChatResponse, Message


class CountingLLM(LLM):
    """Forwards every call to ``inner`` and calls ``on_reply()`` after each reply (a failure is not a step)."""

    def __init__(self, inner: LLM, on_reply: Callable[[], None]) -> None:
        super().__init__(inner.model, max_concurrency=inner.max_concurrency)
        self.inner = inner  # MemAgent chunks with ``inner``'s tokenizer, as through CachedLLM
        self.provider = inner.provider  # type: ignore[misc]
        self.supports_grammar = inner.supports_grammar  # type: ignore[misc]
        self.on_reply = on_reply

    async def chat(self, messages: list[Message], **kwargs: Any) -> ChatResponse:
        reply = await self.inner.chat(messages, **kwargs)
        sent = self.on_reply()
        if inspect.isawaitable(sent):  # an async report (a store write off the event loop): done before the
            await sent  # next call, so progress is never read behind the model
        return reply

    async def _chat(self, request: ChatRequest) -> ChatResponse:  # pragma: no cover - chat is overridden
        raise NotImplementedError


class Progress:
    """A job's progress, reported through ``report(dict)`` at most every ``every`` seconds (and at the end).
    ``report`` may be a coroutine function: the counting LLM awaits it after the reply it counts."""

    def __init__(
        self,
        report: Callable[[dict[str, Any]], Any] | None,
        *,
        steps_total: int | None = None,
        sessions_total: int | None = None,
        every: float = 0.5,
    ) -> None:
        self.report = report
        self.every = every
        self.steps_done, self.steps_total = 0, steps_total
        self.sessions_done, self.sessions_total = 0, sessions_total
        self._last = 0.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"steps_done": self.steps_done, "steps_total": self.steps_total,
                               "unit": "model calls"}  # fmt: skip
        if self.sessions_total is not None:
            out.update(sessions_done=self.sessions_done, sessions_total=self.sessions_total)
        return out

    def step(self) -> Any:
        self.steps_done += 1
        if self.steps_total is not None and self.steps_done > self.steps_total:
            self.steps_total = self.steps_done  # an extra call (a core compression): the total grows
        return self._send()

    def wrap(self, llm: LLM | None) -> LLM | None:
        """``llm``, counting its replies as steps (None stays None: raw remember has no model)."""
        return None if llm is None else CountingLLM(llm, self.step)

    def done(self, *, send: bool = True) -> dict[str, Any]:
        """The final progress: every session done, the total the steps actually taken (reported unless
        ``send`` is False: the caller stores it with the job's end)."""
        self.sessions_done = self.sessions_total or 0
        self.steps_total = self.steps_done
        if send:
            self._send(force=True)
        return self.to_dict()

    def _send(self, force: bool = False) -> Any:
        now = time.monotonic()
        if self.report is not None and (force or now - self._last >= self.every):
            self._last = now
            return self.report(self.to_dict())
        return None

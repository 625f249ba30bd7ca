"""A fake LLM for tests and demos: replays scripted replies and records every request.

Each script item is a string (the reply text), a :class:`ChatResponse`, a dict
(``{"content": ..., "tool_calls": [{"name": ..., "arguments": {...} or "raw json"}]}``; OpenAI-style
``{"function": {"name", "arguments"}}`` entries work too), or a callable
``(messages, tools, json_schema) -> any of those`` for rule-based fakes. Pass a single callable instead
of a list to answer every call with it::

    llm = ScriptedLLM(["hello", {"tool_calls": [{"name": "search_memory", "arguments": {"query": "x"}}]}])
    await llm.chat([{"role": "user", "content": "hi"}])       # -> text "hello"
    llm.requests[0].messages                                   # what the code under test sent

When the script runs out, :class:`ScriptExhaustedError` says how many replies were scripted and shows
the request that found it empty.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from memrl.errors import ProviderError, ValidationError
from memrl.llm.base import (
    LLM,
    ChatRequest,
    ChatResponse,
    Message,
    SamplingParams,
    ToolCall,
    ToolChoice,
    Usage,
)

Reply = str | ChatResponse | dict[str, Any] | Callable[..., Any]


class ScriptExhaustedError(ProviderError):
    """The scripted LLM was asked for more replies than it was given."""


@dataclass
class ScriptedRequest:
    """One call the scripted LLM received."""

    messages: list[Message]
    tools: list[dict[str, Any]] | None
    json_schema: dict[str, Any] | None
    sampling: SamplingParams
    tool_choice: ToolChoice


def _count_tokens(text: str) -> int:
    return len(text.split())


def to_response(reply: Any) -> ChatResponse:
    """Normalise a scripted reply into a ChatResponse."""
    if isinstance(reply, ChatResponse):
        return reply
    if isinstance(reply, str):
        return ChatResponse(text=reply, usage=Usage(0, _count_tokens(reply)))
    if isinstance(reply, dict):
        calls = []
        for i, c in enumerate(reply.get("tool_calls") or []):
            fn = c.get("function", c)
            calls.append(ToolCall.from_raw(c.get("id") or f"call_{i}", fn["name"], fn.get("arguments")))
        text = reply.get("content") or reply.get("text") or ""
        reason = reply.get("finish_reason") or ("tool_calls" if calls else "stop")
        return ChatResponse(
            text=text, tool_calls=calls, usage=Usage(0, _count_tokens(text)), finish_reason=reason
        )
    raise ValidationError(
        f"a scripted reply must be a str, ChatResponse, dict or callable, got {type(reply).__name__}"
    )


class ScriptedLLM(LLM):
    """Replays ``responses`` in order (or calls one function for every request)."""

    provider = "scripted"

    def __init__(
        self, responses: Iterable[Reply] | Callable[..., Any] = (), *, model: str = "scripted", **kw: Any
    ) -> None:
        super().__init__(model, **kw)
        self._rule = responses if callable(responses) else None
        self._script: list[Reply] = [] if callable(responses) else list(responses)
        self._next = 0
        self.requests: list[ScriptedRequest] = []

    @property
    def remaining(self) -> int | None:
        """Scripted replies not yet used (None for a rule-based fake, which never runs out)."""
        return None if self._rule is not None else len(self._script) - self._next

    def add(self, *responses: Reply) -> None:
        """Append replies to the script."""
        self._script.extend(responses)

    async def _chat(self, request: ChatRequest) -> ChatResponse:
        messages, tools, json_schema = request.messages, request.tools, request.json_schema
        # Record first, so a test can inspect the request that exhausted the script.
        self.requests.append(
            ScriptedRequest(list(messages), tools, json_schema, request.sampling, request.tool_choice)
        )
        if self._rule is not None:
            item: Reply = self._rule
        elif self._next < len(self._script):
            item = self._script[self._next]
            self._next += 1
        else:
            last = messages[-1].get("content")
            raise ScriptExhaustedError(
                f"ScriptedLLM {self.model!r} ran out of replies: {len(self._script)} scripted, "
                f"request #{len(self.requests)} has last message {str(last)[:120]!r}. "
                "Add replies to the script (ScriptedLLM([...]) or .add(...))."
            )
        if callable(item) and not isinstance(item, ChatResponse):
            item = item(messages, tools, json_schema)
        response = to_response(item)
        if not response.usage.prompt_tokens:  # a copy: a scripted ChatResponse may be replayed
            prompt = sum(_count_tokens(str(m.get("content") or "")) for m in messages)
            response = replace(response, usage=Usage(prompt, response.usage.completion_tokens))
        return response

    def reset(self, responses: Iterable[Reply] | None = None) -> None:
        """Forget recorded requests and restart (or replace) the script."""
        if responses is not None:
            self._script = list(responses)
        self._next = 0
        self.requests.clear()


def cycle(responses: Iterable[Reply]) -> Callable[..., Any]:
    """A rule that repeats ``responses`` forever: ``ScriptedLLM(cycle(["a", "b"]))``."""
    it = itertools.cycle(list(responses))
    return lambda messages, tools, json_schema: next(it)

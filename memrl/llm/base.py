"""The one protocol every LLM back-end implements, and the records it exchanges.

Messages are plain OpenAI chat-format dicts (``{"role": "user", "content": "..."}``, assistant messages
with ``tool_calls``, ``{"role": "tool", "tool_call_id": ..., "content": ...}``): what users, the OpenAI
SDK and verl already speak. Tools are OpenAI function schemas. A back-end implements one coroutine,
``_chat``; the base class adds argument checks, a per-event-loop concurrency limit, batching and a sync
wrapper::

    from memrl.llm import create_llm, SamplingParams

    llm = create_llm("openai", "gpt-4o-mini")          # or "local" (offline SmolLM2), "scripted"
    reply = await llm.chat([{"role": "user", "content": "hi"}], sampling=SamplingParams(max_tokens=64))
    reply = llm.chat_sync([{"role": "user", "content": "hi"}])  # same call, from sync code
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, ClassVar, Literal, TypeVar

from memrl import telemetry
from memrl.errors import ProviderError, ValidationError

Message = dict[str, Any]

#: ``json_schema=JSON_OBJECT`` asks for any JSON object: OpenAI's ``response_format`` ``json_object``.
JSON_OBJECT: dict[str, Any] = {"type": "object"}
ToolChoice = Literal["auto", "required", "none"]
T = TypeVar("T")


class LLMProviderError(ProviderError):
    """A provider failed after retries. ``status`` is the HTTP status (None for connection errors)."""

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 1):
        super().__init__(message)
        self.status = status
        self.attempts = attempts


@dataclass
class ToolCall:
    """One function call requested by the model. ``arguments`` is the raw JSON text it produced;
    ``parsed`` is that text decoded to an object, or None with ``error`` saying why it is unusable."""

    id: str
    name: str
    arguments: str
    parsed: dict[str, Any] | None = None
    error: str | None = None

    @classmethod
    def from_raw(cls, id: str, name: str, arguments: str | dict[str, Any] | None) -> ToolCall:
        """Build a call from what a model produced; malformed arguments become ``error``, never raise."""
        if isinstance(arguments, dict):
            return cls(id, name, json.dumps(arguments, ensure_ascii=False), dict(arguments))
        text = arguments or ""
        try:
            value = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as e:
            return cls(id, name, text, None, f"arguments are not valid JSON ({e.msg} at char {e.pos})")
        if not isinstance(value, dict):
            return cls(id, name, text, None, f"arguments must be a JSON object, got {type(value).__name__}")
        return cls(id, name, text, value)

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class ChatResponse:
    """A model reply. Token ids and per-token logprobs of the sampled tokens are filled in by back-ends
    that know them (local: under the distribution each token was drawn from, grammar mask and
    temperature applied, see :mod:`memrl.llm.decoding`; vLLM-style servers: what the server returns).
    ``constraint`` records what constrained the reply (:func:`constraint_of`: a JSON
    schema, tools + tool_choice, an EBNF grammar, or None) and ``temperature`` the sampling temperature,
    so a trainer can rebuild the behaviour distribution."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None
    raw: Any = None
    cached: bool = False
    constraint: dict[str, Any] | None = None
    temperature: float | None = None

    def to_message(self) -> Message:
        """The assistant message to append to the conversation."""
        msg: Message = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            msg["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        return msg

    def json(self) -> Any:
        """The text decoded as JSON (for ``json_schema`` calls); ProviderError if it is not JSON."""
        try:
            return json.loads(self.text)
        except json.JSONDecodeError as e:
            raise ProviderError(f"model output is not valid JSON ({e.msg}): {self.text[:200]!r}") from e

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (``raw`` is dropped): used by the disk cache and the HTTP server."""
        d = asdict(self)
        d.pop("raw")
        d.pop("cached")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChatResponse:
        known = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        d["tool_calls"] = [ToolCall(**c) for c in d.get("tool_calls") or []]
        d["usage"] = Usage(**(d.get("usage") or {}))
        return cls(**d)


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. ``temperature=0`` is greedy; a fixed ``seed`` makes sampling repeatable."""

    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512
    seed: int | None = None
    stop: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        elif self.stop is not None:
            object.__setattr__(self, "stop", tuple(self.stop) or None)
        if self.temperature < 0:
            raise ValidationError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValidationError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValidationError(f"max_tokens must be >= 1, got {self.max_tokens}")

    @property
    def deterministic(self) -> bool:
        """True if the same request always gives the same reply (greedy, or seeded)."""
        return self.temperature == 0 or self.seed is not None

    def replace(self, **changes: Any) -> SamplingParams:
        return replace(self, **changes)


@dataclass(frozen=True)
class ChatRequest:
    """One chat call as a back-end receives it (``LLM._chat(request)``), checked by :meth:`LLM.chat`."""

    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    json_schema: dict[str, Any] | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    tool_choice: ToolChoice = "auto"
    grammar: str | None = None

    @property
    def constraint(self) -> dict[str, Any] | None:
        """The JSON-safe record of what constrains the reply (:func:`constraint_of`)."""
        return constraint_of(self.json_schema, self.tools, self.tool_choice, self.grammar)


def constraint_of(
    json_schema: dict[str, Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: str = "auto",
    grammar: str | None = None,
) -> dict[str, Any] | None:
    """The JSON-safe record of what constrains a reply: ``{"json_schema": ...}``, ``{"tools": [...],
    "tool_choice": ...}``, ``{"grammar": "<ebnf>"}``, or None when nothing does. It lives here, beside the
    request it describes; :meth:`memrl.llm.grammar.GrammarBook.for_constraint` compiles it back."""
    if grammar is not None:
        return {"grammar": grammar}
    if json_schema is not None:
        return {"json_schema": json_schema}
    if tools and tool_choice != "none":
        return {"tools": tools, "tool_choice": tool_choice}
    return None


def check_messages(messages: Any) -> list[Message]:
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        raise ValidationError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise ValidationError(f"messages[{i}] must be a dict with a 'role' key, got {m!r:.80}")
    return list(messages)


def tool_names(tools: list[dict[str, Any]] | None) -> list[str]:
    """Names of OpenAI function tools (accepts ``{"type": "function", "function": {...}}`` or bare)."""
    return [(t.get("function") or t)["name"] for t in tools or []]


class _Portal:
    """A private event loop in a daemon thread, so sync callers reuse one loop (and its clients)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="memrl-llm-sync", daemon=True)
        self.thread.start()

    def run(self, coro: Awaitable[T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


class LLM(ABC):
    """Base class of every back-end: implement ``_chat(request)``."""

    provider: ClassVar[str] = "base"
    supports_grammar: ClassVar[bool] = False  # accepts chat(..., grammar=EBNF)

    def __init__(self, model: str, *, max_concurrency: int = 4) -> None:
        if max_concurrency < 1:
            raise ValidationError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self._model = model
        self.max_concurrency = max_concurrency
        self._loop_state: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._portal: _Portal | None = None
        self._portal_lock = threading.Lock()

    @property
    def model(self) -> str:
        return self._model

    @property
    def name(self) -> str:
        return f"{self.provider}:{self.model}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model!r})"

    def per_loop(self, key: str, factory: Callable[[], T]) -> T:
        """State bound to the running event loop (semaphores, HTTP clients), created on first use."""
        state = self._loop_state.setdefault(asyncio.get_running_loop(), {})
        if key not in state:
            state[key] = factory()
        return state[key]

    async def chat(
        self,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None = None,
        json_schema: dict[str, Any] | None = None,
        sampling: SamplingParams | None = None,
        tool_choice: ToolChoice = "auto",
        grammar: str | None = None,
    ) -> ChatResponse:
        """One reply. ``tools``: OpenAI function schemas; ``json_schema``: constrain the reply to it;
        ``grammar``: an EBNF grammar (xgrammar's dialect) the reply must follow (back-ends with
        ``supports_grammar``: local)."""
        request = self.checked_request(messages, tools, json_schema, sampling, tool_choice, grammar)
        sem = self.per_loop("semaphore", lambda: asyncio.Semaphore(self.max_concurrency))
        async with sem:
            reply = await self._observed(request)
        if reply.temperature is None:  # back-ends that do not record it themselves
            reply.constraint = request.constraint
            reply.temperature = request.sampling.temperature
        return reply

    async def _observed(self, request: ChatRequest) -> ChatResponse:
        """``_chat`` in a GenAI ``chat`` span, its usage told to :data:`memrl.telemetry.LLM_CALLS`."""
        attrs = {telemetry.OPERATION: "chat", telemetry.PROVIDER: self.provider, telemetry.REQUEST_MODEL: self.model,
                 "gen_ai.request.max_tokens": request.sampling.max_tokens,
                 "gen_ai.request.temperature": request.sampling.temperature}  # fmt: skip
        start = time.monotonic()
        with telemetry.span(f"chat {self.model}", attrs, kind="client") as span:
            try:
                reply = await self._chat(request)
            except BaseException as e:
                telemetry.llm_called(telemetry.LLMCall(self.provider, self.model, seconds=time.monotonic() - start,
                                                       error=type(e).__name__))  # fmt: skip
                raise
            span.set_attribute(telemetry.INPUT_TOKENS, reply.usage.prompt_tokens)
            span.set_attribute(telemetry.OUTPUT_TOKENS, reply.usage.completion_tokens)
            span.set_attribute("gen_ai.response.finish_reasons", [reply.finish_reason])
        telemetry.llm_called(telemetry.LLMCall(self.provider, self.model, reply.usage.prompt_tokens,
                                               reply.usage.completion_tokens, time.monotonic() - start))  # fmt: skip
        return reply

    def checked_request(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        json_schema: dict[str, Any] | None = None,
        sampling: SamplingParams | None = None,
        tool_choice: ToolChoice = "auto",
        grammar: str | None = None,
    ) -> ChatRequest:
        """The request ``chat`` (and the local back-end's ``generate_sync``) sends, after the checks every
        call path shares: well-formed messages, one kind of constraint, a grammar only where supported."""
        request = ChatRequest(check_messages(messages), tools or None, json_schema, sampling or SamplingParams(),
                              tool_choice, grammar)  # fmt: skip
        if tools and json_schema is not None:
            raise ValidationError("pass either tools or json_schema, not both")
        if grammar is not None:
            if tools or json_schema is not None:
                raise ValidationError("pass a grammar alone, without tools or json_schema")
            if not self.supports_grammar:
                raise ValidationError(f"the {self.provider} back-end cannot follow a grammar (use local)")
        if tool_choice not in ("auto", "required", "none"):
            raise ValidationError(f"tool_choice must be 'auto', 'required' or 'none', got {tool_choice!r}")
        return request

    async def chat_batch(
        self,
        conversations: list[list[Message]],
        *,
        tools: list[dict[str, Any]] | None = None,
        json_schema: dict[str, Any] | None = None,
        sampling: SamplingParams | None = None,
        tool_choice: ToolChoice = "auto",
        return_exceptions: bool = False,
        grammar: str | None = None,
    ) -> list[Any]:
        """Replies for many conversations, in order. With ``return_exceptions`` a failed call yields its
        exception in place of a reply (a failed rollout is data, not a crash)."""
        calls = [
            self.chat(
                m,
                tools=tools,
                json_schema=json_schema,
                sampling=sampling,
                tool_choice=tool_choice,
                grammar=grammar,
            )  # fmt: skip
            for m in conversations
        ]
        return list(await asyncio.gather(*calls, return_exceptions=return_exceptions))

    @abstractmethod
    async def _chat(self, request: ChatRequest) -> ChatResponse:
        """One reply to a checked request: what a back-end implements."""

    # ---- sync wrappers -------------------------------------------------------------------------
    def run_sync(self, coro: Awaitable[T]) -> T:
        """Run a coroutine of this LLM from sync code (works inside Jupyter's running loop too)."""
        with self._portal_lock:
            if self._portal is None:
                self._portal = _Portal()
        return self._portal.run(coro)

    def chat_sync(self, messages: list[Message], **kw: Any) -> ChatResponse:
        return self.run_sync(self.chat(messages, **kw))

    def chat_batch_sync(self, conversations: list[list[Message]], **kw: Any) -> list[Any]:
        return self.run_sync(self.chat_batch(conversations, **kw))

    async def aclose(self) -> None:
        """Release clients. Back-ends holding connections override this."""
        return None

    def close(self) -> None:
        """Release clients and the sync helper's thread."""
        if self._portal is not None:
            self._portal.run(self.aclose())
            self._portal.close()
            self._portal = None

"""Any OpenAI-compatible chat server (OpenAI, vLLM, SGLang, Ollama, llama.cpp, ``memrl serve``).

Function calling (``tools``), structured output (``json_schema`` -> ``response_format`` json_schema, or
the schema written into the prompt for servers without it), a timeout, a concurrency limit, and retries
with exponential backoff on 429 / 5xx / connection errors / timeouts. The SDK's own retries are switched
off so the policy lives in one visible loop. After the last attempt a :class:`LLMProviderError` carries the
HTTP status. A tool call whose arguments are not valid JSON comes back as a ``ToolCall`` with ``error``
set (the agent shows the error to the model), never as an exception::

    llm = OpenAILLM("gpt-4o-mini")                                     # OPENAI_API_KEY from the env
    llm = OpenAILLM("Qwen/Qwen3-4B", base_url="http://gpu:8000/v1")    # vLLM: dummy key is fine
    llm = OpenAILLM(config=OpenAIConfig.from_env("MEMRL_LLM_"))        # MEMRL_LLM_BASE_URL, ..._API_KEY

Token ids and logprobs are read when the server returns them (vLLM ``return_token_ids`` /
``logprobs``; ``memrl serve``), which is what RL rollouts need.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from memrl.errors import ConfigError
from memrl.llm.base import JSON_OBJECT, LLM, ChatRequest, ChatResponse, LLMProviderError, ToolCall, Usage

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({408, 409, 429}) | frozenset(range(500, 600))
DUMMY_KEY = "EMPTY"  # what vLLM / SGLang / Ollama accept when they run without auth


@dataclass(frozen=True)
class OpenAIConfig:
    """Settings of one OpenAI-compatible endpoint. The embedding provider keeps its own instance (its
    own ``base_url`` and key), e.g. ``OpenAIConfig.from_env("MEMRL_EMBED_")``."""

    model: str = field(default="gpt-4o-mini", metadata={"help": "model name the server knows"})
    base_url: str | None = field(
        default=None, metadata={"help": "e.g. http://localhost:8000/v1; None = OpenAI"}
    )
    api_key: str | None = field(default=None, metadata={"help": "None: $OPENAI_API_KEY, else a dummy key"})
    timeout: float = field(default=120.0, metadata={"help": "seconds per attempt"})
    max_retries: int = field(default=4, metadata={"help": "retries after the first attempt"})
    backoff_base: float = field(default=0.5, metadata={"help": "first backoff (s); doubles each retry"})
    backoff_max: float = field(default=30.0, metadata={"help": "cap on one backoff and on Retry-After"})
    max_concurrency: int = field(default=8, metadata={"help": "requests in flight per event loop"})
    schema_mode: Literal["response_format", "prompt"] = field(
        default="response_format",
        metadata={"help": "'prompt' writes the JSON schema into the prompt, for servers without it"},
    )
    strict_schema: bool = field(default=False, metadata={"help": "OpenAI strict mode (needs its subset)"})
    logprobs: bool = field(default=False, metadata={"help": "ask for per-token logprobs"})
    extra_body: dict[str, Any] | None = field(
        default=None, metadata={"help": "server-specific fields, e.g. {'return_token_ids': True} for vLLM"}
    )

    def __post_init__(self) -> None:
        if self.schema_mode not in ("response_format", "prompt"):
            raise ConfigError(f"schema_mode must be 'response_format' or 'prompt', got {self.schema_mode!r}")
        if self.timeout <= 0 or self.max_retries < 0 or self.max_concurrency < 1:
            raise ConfigError("need timeout > 0, max_retries >= 0 and max_concurrency >= 1")

    @classmethod
    def from_env(cls, prefix: str = "MEMRL_LLM_", **overrides: Any) -> OpenAIConfig:
        """Read ``{prefix}MODEL``, ``{prefix}BASE_URL``, ``{prefix}API_KEY``, ``{prefix}TIMEOUT``."""
        env = {
            "model": os.environ.get(prefix + "MODEL"),
            "base_url": os.environ.get(prefix + "BASE_URL"),
            "api_key": os.environ.get(prefix + "API_KEY"),
            "timeout": float(os.environ[prefix + "TIMEOUT"]) if prefix + "TIMEOUT" in os.environ else None,
        }
        return cls(**{k: v for k, v in env.items() if v is not None}, **overrides)

    def resolved_api_key(self) -> str:
        if self.api_key:
            return self.api_key
        if os.environ.get("OPENAI_API_KEY"):
            return os.environ["OPENAI_API_KEY"]
        if self.base_url is None:
            raise ConfigError("no API key for api.openai.com: set OPENAI_API_KEY or pass api_key=...")
        return DUMMY_KEY


def schema_instruction(schema: dict[str, Any]) -> str:
    return "Reply with one JSON object and nothing else. It must match this JSON schema:\n" + json.dumps(
        schema, ensure_ascii=False
    )


class OpenAILLM(LLM):
    """Chat completions over HTTP with the ``openai`` SDK's ``AsyncOpenAI``."""

    provider = "openai"

    def __init__(self, model: str | None = None, *, config: OpenAIConfig | None = None, **settings: Any):
        config = config or OpenAIConfig(base_url=os.environ.get("OPENAI_BASE_URL"))
        if model is not None:
            settings["model"] = model
        self.config = replace(config, **settings) if settings else config
        self.config.resolved_api_key()  # fail now, not on the first request
        super().__init__(self.config.model, max_concurrency=self.config.max_concurrency)

    def _make_client(self) -> Any:
        import openai  # lazy: importing the SDK costs ~0.5 s

        c = self.config
        return openai.AsyncOpenAI(
            api_key=c.resolved_api_key(), base_url=c.base_url, timeout=c.timeout, max_retries=0
        )

    def _client(self) -> Any:
        return self.per_loop("client", self._make_client)

    async def _aclient(self) -> Any:
        """This loop's client; the first one is made on a thread (importing the SDK and loading the CA
        certificates take a second or more: on the event loop they held every other task, a server's too)."""
        state = self._loop_state.setdefault(asyncio.get_running_loop(), {})
        if "client" not in state:
            client = await asyncio.to_thread(self._make_client)
            state.setdefault("client", client)
        return state["client"]

    def _request(self, request: ChatRequest) -> dict[str, Any]:
        messages, tools, json_schema = request.messages, request.tools, request.json_schema
        sampling, tool_choice = request.sampling, request.tool_choice
        c = self.config
        req: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
        }
        if sampling.seed is not None:
            req["seed"] = sampling.seed
        if sampling.stop:
            req["stop"] = list(sampling.stop)
        if tools:
            req["tools"] = [t if "function" in t else {"type": "function", "function": t} for t in tools]
            req["tool_choice"] = tool_choice
        if json_schema is not None:
            if c.schema_mode == "response_format" and json_schema == JSON_OBJECT:
                req["response_format"] = {"type": "json_object"}  # any object, as OpenAI's JSON mode
            elif c.schema_mode == "response_format":
                req["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {
                        "name": str(json_schema.get("title") or "response"),
                        "schema": json_schema,
                        "strict": c.strict_schema,
                    },
                }
            elif messages[0].get("role") == "system":  # one system message: some templates allow no more
                first = {
                    **messages[0],
                    "content": f"{messages[0].get('content') or ''}\n\n{schema_instruction(json_schema)}",
                }
                req["messages"] = [first, *messages[1:]]
            else:
                req["messages"] = [{"role": "system", "content": schema_instruction(json_schema)}, *messages]
        if c.logprobs:
            req["logprobs"] = True
        if c.extra_body:
            req["extra_body"] = c.extra_body
        return req

    async def _chat(self, request: ChatRequest) -> ChatResponse:
        req = self._request(request)
        completion = await self._with_retries(req)
        return parse_completion(completion)

    async def _with_retries(self, req: dict[str, Any]) -> Any:
        client = await self._aclient()
        import openai  # imported by now (by _aclient)

        c = self.config
        for attempt in range(c.max_retries + 1):
            status: int | None = None
            retry_after: float | None = None
            try:
                return await client.chat.completions.create(**req)
            except openai.APIStatusError as e:
                status, message = e.status_code, _error_message(e)
                retry_after = _retry_after(e)
                if status not in RETRY_STATUSES:
                    raise LLMProviderError(
                        f"{self.name}: HTTP {status}: {message}", status=status, attempts=attempt + 1
                    ) from e
                error: Exception = e
            except (openai.APIConnectionError, asyncio.TimeoutError) as e:  # APITimeoutError is one
                message = f"{type(e).__name__}: {e}"
                error = e
            if attempt == c.max_retries:
                where = f"HTTP {status}" if status else "no response"
                raise LLMProviderError(
                    f"{self.name}: gave up after {attempt + 1} attempts ({where}): {message}",
                    status=status,
                    attempts=attempt + 1,
                ) from error
            delay = min(c.backoff_max, c.backoff_base * 2**attempt) * random.uniform(0.5, 1.0)
            if retry_after is not None:
                delay = min(c.backoff_max, max(delay, retry_after))
            log.warning(
                "%s: attempt %d failed (%s); retrying in %.2fs", self.name, attempt + 1, message, delay
            )
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        state = self._loop_state.get(asyncio.get_running_loop(), {})
        client = state.pop("client", None)
        if client is not None:
            await client.close()


def _error_message(e: Any) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return str(getattr(e, "message", e))


def _retry_after(e: Any) -> float | None:
    try:
        value = e.response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, ValueError):
        return None


def parse_completion(completion: Any) -> ChatResponse:
    """Turn an SDK ``ChatCompletion`` into a ChatResponse (token ids/logprobs when the server sent them)."""
    if not completion.choices:
        raise LLMProviderError("the server returned no choices", status=200)
    choice = completion.choices[0]
    msg = choice.message
    calls = [
        ToolCall.from_raw(tc.id or f"call_{i}", tc.function.name, tc.function.arguments)
        for i, tc in enumerate(msg.tool_calls or [])
        if getattr(tc, "function", None) is not None
    ]
    usage = (
        Usage(completion.usage.prompt_tokens, completion.usage.completion_tokens)
        if completion.usage
        else Usage()
    )
    logprobs = None
    if choice.logprobs is not None and choice.logprobs.content:
        logprobs = [t.logprob for t in choice.logprobs.content]
    extra_choice = choice.model_extra or {}
    extra = completion.model_extra or {}
    return ChatResponse(
        text=msg.content or "",
        tool_calls=calls,
        usage=usage,
        finish_reason=choice.finish_reason or "stop",
        prompt_ids=extra.get("prompt_token_ids"),
        completion_ids=extra_choice.get("token_ids"),
        logprobs=logprobs,
        raw=completion,
    )

"""Chat on top of a token engine: the one chat layer shared by the local back-end and verl's rollout.

:class:`TemplatedLLM` turns ``chat(messages, tools=, json_schema=, grammar=, sampling=)`` into a
:class:`~memrl.llm.tokens.TokenRequest` and the engine's token ids back into a
:class:`~memrl.llm.base.ChatResponse`:

* **templating**: the tokenizer's chat template (``chat_template_kwargs`` are passed to it, e.g. verl's
  ``data.apply_chat_template_kwargs``); templates that cannot render ``tools`` (SmolLM2's) get the tool
  list and the call format in the system prompt, and assistant tool calls in the history are shown as the
  JSON text the model itself emits (:mod:`memrl.llm.grammar`);
* **constraint**: the request's constraint record (:func:`memrl.llm.base.constraint_of`) goes to the
  engine, which enforces it (or says it did not);
* **parsing**: with tools, the calls in a reply (Hermes/Qwen ``<tool_call>`` blocks, several per turn,
  Llama 3 JSON, plain JSON: :mod:`memrl.llm.toolcalls`) become ``ToolCall`` objects (malformed ones carry
  ``error``), with deterministic ids (a hash of prompt and completion), so cached replays match; an
  assistant turn with calls is shown back to the model as the text it wrote (when this LLM produced it),
  else in the template's own format (templates that render ``tools``) or as memrl's JSON;
* **continuation**: when a conversation continues one this LLM answered (its messages start with an
  earlier request's messages plus that reply), the new prompt is the earlier prompt ids + the sampled
  completion ids + the tokens of what was appended (tool results, the next user turn), as long as the
  rendered text agrees. The model is then conditioned on exactly the tokens it sampled, never on a
  re-tokenisation of their text, and every turn's prompt extends the previous one: a multi-turn episode
  is one token sequence (what verl's agent loops return, tool tokens masked). Otherwise the whole
  conversation is rendered afresh.

    llm = TemplatedLLM(engine, "my-model")
    reply = await llm.chat(messages, tools=[...], tool_choice="required")
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any

from memrl.errors import ValidationError
from memrl.llm.base import LLM, ChatRequest, ChatResponse, Message, Usage
from memrl.llm.grammar import render_tool_call, tool_instructions
from memrl.llm.tokens import TokenEngine, TokenRequest, TokenResult
from memrl.llm.toolcalls import parse_tool_calls


def _text(content: Any) -> str:
    if isinstance(content, list):  # OpenAI multi-part content: keep the text parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _native_call(call: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI tool call with its arguments as an object (templates render them with ``tojson``)."""
    fn = call.get("function", call)
    args = fn.get("arguments")
    if isinstance(args, str):
        with contextlib.suppress(json.JSONDecodeError):  # else shown as the string the model wrote
            args = json.loads(args) if args.strip() else {}
    return {"id": call.get("id"), "type": "function", "function": {"name": fn["name"], "arguments": args}}


def _key(messages: list[Message], tools: list[dict[str, Any]] | None, tool_choice: str) -> str:
    text = json.dumps([messages, tools, tool_choice], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class TemplatedLLM(LLM):
    """A chat back-end over a :class:`~memrl.llm.tokens.TokenEngine` (see the module docstring)."""

    provider = "templated"
    supports_grammar = True

    def __init__(
        self,
        engine: TokenEngine,
        model: str,
        *,
        max_concurrency: int = 1024,
        chat_template_kwargs: dict[str, Any] | None = None,
        continuation: bool = True,
        remembered_turns: int = 4096,
    ) -> None:
        super().__init__(model, max_concurrency=max_concurrency)
        self.engine = engine
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.continuation = continuation
        self._turns: OrderedDict[str, tuple[str, list[int], list[int]]] = OrderedDict()
        self._turns_max = remembered_turns
        self._turns_lock = threading.Lock()
        self._written: OrderedDict[str, str] = OrderedDict()  # call id -> the reply text that holds it

    @property
    def tokenizer(self) -> Any:
        return self.engine.load().tokenizer

    @property
    def stop_ids(self) -> frozenset[int]:
        return self.engine.load().stop_ids

    # ---- prompts ---------------------------------------------------------------------------------
    def render(self, messages: list[Message], tools: list[dict[str, Any]] | None = None,
               tool_choice: str = "auto", *, generation_prompt: bool = True) -> str:  # fmt: skip
        """The chat-templated text of ``messages`` (ending with the assistant header by default)."""
        tok = self.tokenizer
        native = "tools" in str(tok.chat_template or "")  # the template renders tools and calls itself
        msgs = [self._message(m, native) for m in messages]
        template_tools = None
        if tools and tool_choice != "none":
            if native:
                template_tools = tools
            else:
                block = tool_instructions(tools, tool_choice)
                if msgs and msgs[0]["role"] == "system":
                    msgs[0] = {"role": "system", "content": msgs[0]["content"] + "\n\n" + block}
                else:
                    msgs.insert(0, {"role": "system", "content": block})
        return tok.apply_chat_template(
            msgs, tools=template_tools, add_generation_prompt=generation_prompt, tokenize=False,
            **self.chat_template_kwargs,
        )  # fmt: skip

    def _message(self, m: Message, native: bool) -> dict[str, Any]:
        """A message as the template gets it. An assistant turn with calls is the exact text the model
        wrote when this LLM produced it (so a continued conversation is conditioned on the sampled
        tokens), else the calls in the template's own format (``native``) or memrl's JSON."""
        content = _text(m.get("content"))
        calls = m.get("tool_calls") or []
        if not calls:
            return {"role": m["role"], "content": content}
        with self._turns_lock:
            written = {self._written.get(str(c.get("id"))) for c in calls}
        if len(written) == 1 and None not in written:
            return {"role": m["role"], "content": written.pop()}
        if native:
            return {"role": m["role"], "content": content, "tool_calls": [_native_call(c) for c in calls]}
        rendered = [render_tool_call(c.get("function", c)["name"], c.get("function", c).get("arguments"))
                    for c in calls]  # fmt: skip
        return {"role": m["role"], "content": "\n".join(([content] if content else []) + rendered)}

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None, tool_choice: str = "auto"
    ) -> list[int]:
        """Token ids of the whole chat-templated prompt, rendered afresh (no continuation)."""
        return self.encode(self.render(messages, tools, tool_choice))

    def request_ids(self, request: ChatRequest) -> tuple[str, list[int]]:
        """The rendered prompt of ``request`` and its ids: a continuation of an earlier turn if there is one."""
        text = self.render(request.messages, request.tools, request.tool_choice)
        ids = self._continue(request, text) if self.continuation else None
        return text, ids if ids is not None else self.encode(text)

    def _continue(self, request: ChatRequest, text: str) -> list[int] | None:
        msgs = request.messages
        for k in range(len(msgs) - 1, 0, -1):  # the longest earlier turn this conversation extends
            if msgs[k - 1].get("role") != "assistant":
                continue
            with self._turns_lock:
                hit = self._turns.get(_key(msgs[:k], request.tools, request.tool_choice))
            if hit is None:
                continue
            before, prompt_ids, completion_ids = hit
            sampled = before + self.tokenizer.decode(completion_ids, skip_special_tokens=False)
            if not text.startswith(sampled):
                return None  # the reply as the template renders it is not what was sampled
            return prompt_ids + completion_ids + self.encode(text[len(sampled) :])
        return None

    def _remember(self, request: ChatRequest, reply: ChatResponse, prompt_text: str) -> None:
        if not self.continuation or reply.prompt_ids is None or reply.completion_ids is None:
            return
        key = _key([*request.messages, reply.to_message()], request.tools, request.tool_choice)
        with self._turns_lock:
            self._turns[key] = (prompt_text, list(reply.prompt_ids), list(reply.completion_ids))
            self._turns.move_to_end(key)
            while len(self._turns) > self._turns_max:
                self._turns.popitem(last=False)

    # ---- replies ---------------------------------------------------------------------------------
    def reply(self, request: ChatRequest, prompt_ids: list[int], result: TokenResult) -> ChatResponse:
        """The ChatResponse for ``result``: text (cut at a stop string), tool call, tokens, constraint."""
        text = self.tokenizer.decode(result.completion_ids, skip_special_tokens=True)
        finish = result.finish_reason
        cuts = [k for k in (text.find(s) for s in request.sampling.stop or ()) if k >= 0]
        if cuts:
            text, finish = text[: min(cuts)], "stop"
        calls, raw = [], {"text": text}
        if request.tools and request.tool_choice != "none":
            digest = hashlib.sha256(json.dumps([prompt_ids, result.completion_ids]).encode()).hexdigest()
            parsed = parse_tool_calls(text, request.tools, call_id=f"call_{digest[:16]}")
            if parsed is not None:
                with self._turns_lock:
                    for call in parsed[1]:
                        self._written[call.id] = text
                        self._written.move_to_end(call.id)
                    while len(self._written) > self._turns_max:
                        self._written.popitem(last=False)
                text, calls = parsed
                finish = "tool_calls" if finish == "stop" and calls else finish
        return ChatResponse(
            text=text,
            tool_calls=calls,
            usage=Usage(len(prompt_ids), len(result.completion_ids)),
            finish_reason=finish,
            prompt_ids=list(prompt_ids),
            completion_ids=list(result.completion_ids),
            logprobs=None if result.logprobs is None else list(result.logprobs),
            raw=raw,
            constraint=result.constraint,
            temperature=result.temperature,
        )

    def check_context(self, prompt_ids: list[int], max_tokens: int) -> None:
        context = self.engine.context_length
        if context and len(prompt_ids) + max_tokens > context:
            raise ValidationError(
                f"prompt ({len(prompt_ids)} tokens) + max_tokens ({max_tokens}) exceeds the model's "
                f"context of {context} tokens"
            )

    async def _chat(self, request: ChatRequest) -> ChatResponse:
        if self.engine.tokenizer is None:
            await asyncio.to_thread(self.engine.load)
        text, ids = self.request_ids(request)
        self.check_context(ids, request.sampling.max_tokens)
        result = await self.engine.generate(TokenRequest(tuple(ids), request.sampling, request.constraint))
        reply = self.reply(request, ids, result)
        self._remember(request, reply, text)
        return reply

    async def aclose(self) -> None:
        await self.engine.aclose()

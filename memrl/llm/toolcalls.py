"""Tool calls in a model's reply, in every format the chat templates memrl supports ask the model for.

:func:`parse_tool_calls` reads what a model wrote (decoded text) and returns the calls in it, in order:

* **Hermes / Qwen2.5 / Qwen3** (``Qwen/Qwen2.5-*-Instruct``'s template, NousResearch Hermes): one or more
  ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` blocks, anywhere in the reply; the
  text outside the blocks is the reply's content. A block the model opened but never closed (cut off by
  ``max_tokens``) is a call with ``error`` set, never silently dropped.
* **Llama 3.1 / 3.2 JSON** (``meta-llama/Llama-3.*-Instruct``'s template, "Respond in the format {"name":
  function name, "parameters": dictionary of argument name and its value}"): the whole reply is one JSON
  object with ``name`` and ``parameters`` (an optional leading ``<|python_tag|>`` is dropped).
* **plain JSON**: the whole reply is ``{"name": ..., "arguments": {...}}``: what memrl's own tool prompt
  (:func:`memrl.llm.grammar.tool_instructions`, for templates that cannot render tools) and its grammar
  ask for.

Anything else is plain text (``None``: no call). A call that cannot be used (invalid JSON, unknown tool,
arguments that are not an object) comes back as a :class:`~memrl.llm.base.ToolCall` with ``error`` set,
so the agent can tell the model what went wrong instead of losing the turn.

Why not verl's or transformers' parser: verl 0.9.1's ``HermesToolParser``
(``verl/experimental/agent_loop/tool_parser.py``) works on token ids inside a verl agent loop (memrl's chat
layer is below any engine), logs and drops a block whose JSON does not parse (the model never learns what
it did wrong), needs both tags (a cut-off call is plain text) and has no Llama 3 JSON parser;
transformers' ``tokenizer.parse_response`` needs a ``response_schema`` that neither the Qwen2.5 nor the
Llama 3 tokenizer ships. memrl's tests check that on well-formed Hermes replies this parser and verl's
agree call for call.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from memrl.llm.base import ToolCall, tool_names

__all__ = ["parse_tool_calls"]

_HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)
_PYTHON_TAG = "<|python_tag|>"


def _call(call_id: str, body: str, tools: list[dict[str, Any]], *, closed: bool = True) -> ToolCall:
    """One call from the JSON ``body`` the model wrote (``arguments`` or Llama's ``parameters``)."""
    body = body.strip()
    if not closed:
        return ToolCall(call_id, "", body, None, "tool call was cut off before </tool_call>")
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        return ToolCall(call_id, "", body, None, f"tool call is not valid JSON ({e.msg} at char {e.pos})")
    if not isinstance(obj, dict):
        return ToolCall(call_id, "", body, None, f"tool call must be a JSON object, got {type(obj).__name__}")
    name = obj.get("name")
    if not isinstance(name, str) or name not in tool_names(tools):
        return ToolCall(call_id, str(name or ""), body, None, f"unknown tool {name!r}")
    arguments = obj["arguments"] if "arguments" in obj else obj.get("parameters")
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        return ToolCall.from_raw(call_id, name, arguments)
    if arguments is not None and not isinstance(arguments, dict):
        return ToolCall(call_id, name, json.dumps(arguments), None,
                        f"arguments must be a JSON object, got {type(arguments).__name__}")  # fmt: skip
    return ToolCall.from_raw(call_id, name, arguments or {})


def parse_tool_calls(
    text: str, tools: list[dict[str, Any]], call_id: str = "call"
) -> tuple[str, list[ToolCall]] | None:
    """The reply's content and its calls (see the module docstring), or None for a plain-text reply.

    Calls are numbered ``{call_id}`` (the first) and ``{call_id}_{i}`` (the others), so ids stay unique
    and deterministic when ``call_id`` is."""
    ids = (call_id if i == 0 else f"{call_id}_{i}" for i in itertools.count())
    if "<tool_call>" in text:
        calls, content = [], []
        last = 0
        for m in _HERMES.finditer(text):
            content.append(text[last : m.start()])
            last = m.end()
            calls.append(_call(next(ids), m.group(1), tools, closed=m.group(0).endswith("</tool_call>")))
        content.append(text[last:])
        return "".join(content).strip(), calls
    body = text.strip()
    if body.startswith(_PYTHON_TAG):
        body = body[len(_PYTHON_TAG) :].lstrip()
    if not body.startswith("{"):
        return None
    return "", [_call(next(ids), body, tools)]

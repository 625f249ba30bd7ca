"""Grammars for constrained decoding with xgrammar (the engine vLLM and SGLang use), and tool-call text.

The local back-end constrains generation token by token: a JSON schema (``json_schema=``), or, with tools,
a JSON object ``{"name": <one of the tools>, "arguments": {...its parameters schema...}}``. With
``tool_choice="auto"`` the model may instead answer in plain text (anything not starting with ``{``).
JSON is generated compactly (``", "`` and ``": "`` separators, no free whitespace), so a small model
cannot stall in endless blank space. A raw EBNF grammar (xgrammar's dialect, the one vLLM accepts as a
guided grammar) may be given instead (``grammar=``). Grammars are compiled once per schema and kept::

    book = GrammarBook(tokenizer, vocab_size=model.config.vocab_size, stop_token_ids=[eos_id])
    matcher = book.matcher(book.for_schema({"type": "object", ...}))     # one matcher per sequence

**Constraint records.** Every reply records the constraint that produced it as a JSON-safe dict
(:func:`memrl.llm.base.constraint_of`: ``{"json_schema": ...}``, ``{"tools": [...], "tool_choice": ...}``,
``{"grammar": "<ebnf>"}``, or ``None``); ``book.for_constraint(record)`` compiles the same grammar again,
so a trainer can replay it over the reply's tokens and rebuild each position's mask
(:func:`memrl.llm.decoding.replay_masks`).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import OrderedDict
from typing import Any

from memrl.errors import ValidationError
from memrl.llm.base import ToolCall, tool_names

TEXT_REGEX = r"[^{\s][\s\S]*"  # a plain-text answer: anything that does not open a JSON object


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    return tool.get("function") or tool


def tool_call_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """JSON schema of one call to any of ``tools`` (OpenAI function schemas)."""
    options = []
    for tool in tools:
        fn = _function(tool)
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": fn["name"]}, "arguments": params},
                "required": ["name", "arguments"],
            }
        )
    if not options:
        raise ValidationError("tools must be a non-empty list of function schemas")
    return options[0] if len(options) == 1 else {"anyOf": options}


def render_tool_call(name: str, arguments: str | dict[str, Any] | None) -> str:
    """The text a model emits for a call (how assistant tool calls are shown back to a local model)."""
    if isinstance(arguments, dict):
        args = json.dumps(arguments, ensure_ascii=False)
    else:
        args = (arguments or "").strip() or "{}"
    return '{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": ' + args + "}"


def tool_instructions(tools: list[dict[str, Any]], tool_choice: str) -> str:
    """A system-prompt block describing the tools, for chat templates that cannot render ``tools``."""
    lines = ["You can call these tools:"]
    for tool in tools:
        fn = _function(tool)
        spec = {
            "name": fn["name"],
            "description": fn.get("description", ""),
            "parameters": fn.get("parameters"),
        }
        lines.append(json.dumps(spec, ensure_ascii=False))
    lines.append('To call a tool, reply with only a JSON object: {"name": <tool name>, "arguments": {...}}.')
    if tool_choice == "auto":
        lines.append("If no tool is needed, reply in plain text instead.")
    return "\n".join(lines)


def parse_tool_call(text: str, tools: list[dict[str, Any]], call_id: str | None = None) -> ToolCall | None:
    """The call in a model's output, or None if the output is plain text (does not start with ``{``).
    Truncated or invalid output becomes a ToolCall with ``error`` set."""
    body = text.strip()
    if not body.startswith("{"):
        return None
    call_id = call_id or f"call_{uuid.uuid4().hex[:12]}"
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        return ToolCall(call_id, "", body, None, f"tool call is not valid JSON ({e.msg} at char {e.pos})")
    name = obj.get("name") if isinstance(obj, dict) else None
    if not isinstance(name, str) or name not in tool_names(tools):
        return ToolCall(call_id, str(name or ""), body, None, f"unknown tool {name!r}")
    return ToolCall.from_raw(call_id, name, obj.get("arguments") if isinstance(obj, dict) else None)


class GrammarBook:
    """Compiles and caches grammars for one tokenizer (thread-safe; LRU of ``max_entries``)."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: list[int], max_entries: int = 64):
        import xgrammar as xgr

        self._xgr = xgr
        info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids
        )
        self.vocab_size = vocab_size
        self.compiler = xgr.GrammarCompiler(info, max_threads=2)
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._max = max_entries
        self._lock = threading.Lock()

    def _get(self, key: str, build: Any) -> Any:
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            try:
                compiled = build()
            except Exception as e:  # xgrammar raises RuntimeError/ValueError on unsupported schemas
                raise ValidationError(f"cannot build a grammar for this schema: {e}") from e
            self._cache[key] = compiled
            if len(self._cache) > self._max:
                self._cache.popitem(last=False)
            return compiled

    def for_schema(self, schema: dict[str, Any]) -> Any:
        key = "schema:" + json.dumps(schema, sort_keys=True)
        return self._get(key, lambda: self.compiler.compile_json_schema(schema, any_whitespace=False))

    def for_tools(self, tools: list[dict[str, Any]], tool_choice: str = "required") -> Any:
        """A call to one of ``tools``; with ``tool_choice="auto"`` plain text is allowed too."""
        schema = tool_call_schema(tools)
        key = f"tools:{tool_choice}:" + json.dumps(schema, sort_keys=True)

        def build() -> Any:
            xgr = self._xgr
            if tool_choice == "required":
                return self.compiler.compile_json_schema(schema, any_whitespace=False)
            call = xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False)
            return self.compiler.compile_grammar(xgr.Grammar.union(call, xgr.Grammar.from_regex(TEXT_REGEX)))

        return self._get(key, build)

    def for_grammar(self, ebnf: str) -> Any:
        """A raw EBNF grammar (root rule ``root``), xgrammar's dialect."""
        return self._get("ebnf:" + ebnf, lambda: self.compiler.compile_grammar(ebnf))

    def for_constraint(self, constraint: dict[str, Any]) -> Any:
        """The compiled grammar of a constraint record (:func:`memrl.llm.base.constraint_of`)."""
        if "grammar" in constraint:
            return self.for_grammar(constraint["grammar"])
        if "json_schema" in constraint:
            return self.for_schema(constraint["json_schema"])
        if "tools" in constraint:
            return self.for_tools(constraint["tools"], constraint.get("tool_choice", "auto"))
        raise ValidationError(f"unknown constraint record with keys {sorted(constraint)}")

    def matcher(self, compiled: Any) -> Any:
        return self._xgr.GrammarMatcher(compiled)

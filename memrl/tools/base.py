"""Tools as plain typed functions: the JSON schema is derived from the signature and docstring, once.

A tool is an ``async def f(ctx, arg: type = default, ...) -> str`` whose docstring (Google style) says
what it does and what each argument means. ``@tool`` wraps it into a :class:`Tool` with

- ``schema``: the OpenAI function-calling schema (``{"type": "function", "function": {...}}``), derived
  with pydantic from the annotations (``Annotated[int, Field(ge=1, le=50)]`` bounds, ``Literal`` enums);
- ``call(ctx, arguments)``: validates the arguments (a dict or the raw JSON text a model wrote) and runs
  the function. A bad call never raises and never changes anything: it returns a :class:`ToolResult` with
  ``ok=False`` and an error text the model can act on.

Tools never call an LLM: the acting model is the only one.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, get_type_hints

import docstring_parser
import pydantic

from memrl.errors import MemrlError, is_infrastructure

__all__ = ["Tool", "ToolResult", "clean_schema", "tool"]


@dataclass(frozen=True)
class ToolResult:
    """What a tool call gave: the text shown to the model, and structured data for programs."""

    ok: bool
    content: str
    data: Any = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "content": self.content, "data": self.data, "error": self.error}


def clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Make a pydantic JSON schema plain enough for function calling and grammar engines.

    Inlines ``$ref``/``$defs``, turns ``oneOf`` into ``anyOf``, drops ``title`` and ``discriminator``
    keys, and collapses ``anyOf [X, null]`` of optional arguments to ``X`` (an omitted argument means
    null; the model should not write ``null``).
    """
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(x) for x in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = defs[node["$ref"].split("/")[-1]]
            extra = {k: v for k, v in node.items() if k != "$ref"}
            return walk({**target, **extra})
        out = {}
        for k, v in node.items():
            if k in ("$defs", "title", "discriminator"):
                continue
            out["anyOf" if k == "oneOf" else k] = walk(v)
        alts = out.get("anyOf")
        if isinstance(alts, list) and len(alts) == 2 and {"type": "null"} in alts:
            keep = next(a for a in alts if a != {"type": "null"})
            rest = {k: v for k, v in out.items() if k not in ("anyOf", "default")}
            out = {**keep, **rest}
        return out

    return walk(schema)


class Tool:
    """A typed async function exposed to a model. Create with :func:`tool`."""

    def __init__(self, fn: Callable[..., Awaitable[str | ToolResult]], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        doc = docstring_parser.parse(inspect.getdoc(fn) or "")
        self.description = " ".join(p for p in (doc.short_description, doc.long_description) if p).strip()
        if not self.description:
            raise TypeError(f"tool {self.name} needs a docstring: it is the model's only documentation")
        param_docs = {p.arg_name: p.description for p in doc.params}
        hints = get_type_hints(fn, include_extras=True)
        params = list(inspect.signature(fn).parameters.values())[1:]  # the first one is the context
        fields: dict[str, Any] = {}
        for p in params:
            if p.name not in param_docs:
                raise TypeError(f"tool {self.name}: argument {p.name!r} is not documented in the docstring")
            default = ... if p.default is inspect.Parameter.empty else p.default
            fields[p.name] = (hints[p.name], pydantic.Field(default, description=param_docs[p.name]))
        self.model = pydantic.create_model(
            f"{self.name}_args", __config__=pydantic.ConfigDict(extra="forbid"), **fields
        )
        self.parameters = clean_schema(self.model.model_json_schema())
        self.parameters.setdefault("required", [])

    @property
    def schema(self) -> dict[str, Any]:
        """OpenAI function-calling format."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def _error(self, message: str) -> ToolResult:
        text = f"Error in {self.name}: {message}. Nothing was changed."
        return ToolResult(ok=False, content=text, error=message)

    def validate(self, arguments: dict[str, Any] | str | None) -> dict[str, Any] | ToolResult:
        """Parsed, validated keyword arguments, or a failed :class:`ToolResult` explaining what is wrong."""
        if arguments is None or arguments == "":
            arguments = {}
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError as e:
                return self._error(f"arguments are not valid JSON ({e.msg} at position {e.pos})")
        if not isinstance(arguments, dict):
            return self._error(f"arguments must be a JSON object, got {type(arguments).__name__}")
        try:
            parsed = self.model.model_validate(arguments)
        except pydantic.ValidationError as e:
            problems = []
            for err in e.errors():
                where = ".".join(str(x) for x in err["loc"]) or "arguments"
                msg = "unknown argument" if err["type"] == "extra_forbidden" else err["msg"]
                problems.append(f"argument '{where}': {msg}")
            allowed = ", ".join(self.parameters.get("properties", {}))
            return self._error("; ".join(problems) + f" (arguments: {allowed})")
        return {k: getattr(parsed, k) for k in self.model.model_fields}

    async def call(self, ctx: Any, arguments: dict[str, Any] | str | None) -> ToolResult:
        """Validate and run. Errors from memrl (unknown ids, limits) become a failed result for the model;
        an infrastructure failure (a provider down, a locked store: :func:`memrl.errors.is_infrastructure`)
        is raised, because it says nothing about the call and must end the rollout as failed."""
        kwargs = self.validate(arguments)
        if isinstance(kwargs, ToolResult):
            return kwargs
        try:
            out = await self.fn(ctx, **kwargs)
        except (MemrlError, ValueError, KeyError) as e:
            if is_infrastructure(e):
                raise
            # a KeyError's str() wraps its message in quotes: take the message itself (stripping quote
            # characters off the ends would cut a message that ends with a quoted name)
            return self._error(str(e.args[0]) if type(e) is KeyError and e.args else str(e))
        return out if isinstance(out, ToolResult) else ToolResult(ok=True, content=str(out))

    def __repr__(self) -> str:
        return f"Tool({self.name})"


def tool(fn: Callable[..., Awaitable[Any]] | None = None, *, name: str | None = None) -> Any:
    """Decorator: ``@tool`` or ``@tool(name=...)`` turns a typed async function into a :class:`Tool`."""
    if fn is None:
        return lambda f: Tool(f, name)
    return Tool(fn, name)


@dataclass
class Toolset:
    """Named tools, in order; ``schemas`` is what goes into a chat request's ``tools``."""

    tools: Sequence[Tool]
    by_name: dict[str, Tool] = field(init=False)

    def __post_init__(self) -> None:
        self.by_name = {t.name: t for t in self.tools}

    @property
    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema for t in self.tools]

    async def call(self, ctx: Any, name: str, arguments: dict[str, Any] | str | None) -> ToolResult:
        t = self.by_name.get(name)
        if t is None:
            return ToolResult(
                ok=False,
                content=f"Error: there is no tool named {name!r}. Available tools: {', '.join(self.by_name)}. "
                "Nothing was changed.",
                error=f"unknown tool {name!r}",
            )
        return await t.call(ctx, arguments)

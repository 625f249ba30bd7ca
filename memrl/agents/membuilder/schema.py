"""The JSON schemas the MemBuilder agents answer under, narrowed to a token budget.

:func:`memrl.tools.membuilder.action_schema` says what ``apply_actions`` accepts: up to 10 operations of
up to 600 characters, and references of any length. Under constrained decoding a model may write all of
it, and an answer cut at ``max_tokens`` is not JSON. :func:`budget_schema` narrows the schema (which
operations, how many, how long each string) and :func:`worst_case_tokens` bounds the tokens of the longest
answer it allows, so a budget can be chosen that every constrained answer fits::

    schema = budget_schema("episodic", operations=("ADD", "UPDATE"), max_operations=3, max_chars=200,
                           ref_chars=12)
    worst_case_tokens(schema)          # -> the max_tokens that always suffices

A narrowed schema is a subset of the full one, so whatever it admits ``apply_actions`` accepts.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

from memrl.errors import ConfigError
from memrl.memory.records import MemoryType
from memrl.tools.membuilder import action_schema

REASON_CHARS = 100  # SKIP reasons are for logs; keep them from eating the budget
REF_CHARS = 16  # budget assumption: references to old memories are ids (12 characters in the store)


def worst_case_tokens(schema: dict[str, Any]) -> int:
    """Tokens of the longest JSON ``schema`` allows, generated compactly: one token per character of
    string content (the worst case, which small models do reach: BPE tokenizers spell digits and rare
    strings one character per token; non-ASCII characters may take more), one per two characters of
    JSON syntax (keys, constants, punctuation). Unbounded strings or arrays make it infinite."""

    def syntax(text: str) -> float:
        return math.ceil(len(text) / 2)

    def walk(n: dict[str, Any]) -> float:
        if "anyOf" in n:
            return max(walk(a) for a in n["anyOf"])
        if "const" in n:
            return syntax(json.dumps(n["const"]))
        if "enum" in n:
            return max(syntax(json.dumps(v)) for v in n["enum"])
        kind = n.get("type")
        if kind == "string":
            return n.get("maxLength", math.inf) + 2
        if kind == "array":
            return 2 + n.get("maxItems", math.inf) * (walk(n.get("items", {})) + 1)
        if kind == "object":
            props = n.get("properties") or {}
            return 2 + sum(syntax(json.dumps(k) + ": ") + walk(v) + 1 for k, v in props.items())
        return 8  # numbers, booleans, null

    need = walk(schema)
    return math.inf if math.isinf(need) else int(need)  # type: ignore[return-value]


def budget_schema(
    memory_type: MemoryType | str,
    *,
    operations: tuple[str, ...],
    max_operations: int,
    max_chars: int,
    ref_chars: int | None = None,
) -> dict[str, Any]:
    """``action_schema(memory_type)`` narrowed to ``operations``, at most ``max_operations`` of them, and
    strings of at most ``max_chars`` characters (references to old memories: ``ref_chars``, the length of
    an id): a subset of what ``apply_actions`` accepts, sized so that a constrained answer finishes within
    the token budget."""
    mtype = MemoryType.parse(memory_type)
    schema = copy.deepcopy(action_schema(mtype))

    def narrow(node: dict[str, Any]) -> dict[str, Any]:
        alts = [a for a in node["anyOf"] if a["properties"]["operation"]["const"] in operations]
        if not alts:
            raise ConfigError(f"no {mtype.value} operation among {operations}")
        return alts[0] if len(alts) == 1 else {**node, "anyOf": alts}

    def cap(node: Any, key: str = "") -> None:
        """maxLength on every free string; ``key`` is the property the node belongs to."""
        if isinstance(node, list):
            for x in node:
                cap(x, key)
        elif isinstance(node, dict):
            if node.get("type") == "string" and "const" not in node:
                limit = REASON_CHARS if key == "reason" else max_chars
                if ref_chars is not None and key in ("old_memory", "old_memories"):
                    limit = ref_chars
                node["maxLength"] = min(node.get("maxLength", limit), limit)
            for k, v in node.items():
                if k == "properties":
                    for name, sub in v.items():
                        cap(sub, name)
                else:
                    cap(v, key)

    if mtype is MemoryType.CORE:
        schema = narrow(schema)
    else:
        ops = schema["properties"]["operations"]
        ops["items"] = narrow(ops["items"])
        ops["maxItems"] = max_operations
    cap(schema)
    return schema


def compress_schema(compress_to: int) -> dict[str, Any]:
    """The compression answer: one non-empty REWRITE of fewer than ``compress_to`` characters."""
    schema = budget_schema(
        MemoryType.CORE, operations=("REWRITE",), max_operations=1, max_chars=compress_to - 1
    )
    schema["properties"]["content"]["minLength"] = 1
    return schema

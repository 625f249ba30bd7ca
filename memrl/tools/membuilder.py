"""MemBuilder's memory actions: typed JSON actions per memory type, validated and applied to the store.

Each session, one agent per memory type answers with JSON (REFERENCE.md section 1):

- core: one action, ``APPEND {content}``, ``REPLACE {old_text, new_text}``, ``REWRITE {content}`` or
  ``SKIP {reason}`` (core memory left as it is: the plain no-op, offered with ``core_skip``);
- episodic: ``{"operations": [...]}`` of ADD / UPDATE / MERGE; semantic: ADD / UPDATE / SKIP;
  procedural: ADD / UPDATE.

The action models below are the single source of truth: :func:`action_schema` derives the JSON schema used
for constrained decoding, and :func:`apply_actions` parses and applies a model's output. UPDATE and MERGE
*replace* the old memories and keep their history (the original appended a new item and kept the old one).
Old memories are referred to by id or by their text (exact, else the closest of the top search hits).
"""

from __future__ import annotations

import difflib
import functools
import operator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from memrl.errors import MemrlError, NotFoundError, is_infrastructure
from memrl.llm.parsing import extract_json
from memrl.memory import AsyncMemory
from memrl.memory.records import MemoryItem, MemoryType
from memrl.tools.base import clean_schema

MAX_ITEM_CHARS = 600


class _Action(BaseModel):
    model_config = ConfigDict(extra="forbid")


Text = Annotated[str, Field(min_length=1, max_length=MAX_ITEM_CHARS)]


class CoreAppend(_Action):
    operation: Literal["APPEND"]
    content: Text


class CoreReplace(_Action):
    operation: Literal["REPLACE"]
    old_text: Annotated[str, Field(min_length=1)]
    new_text: str


class CoreRewrite(_Action):
    operation: Literal["REWRITE"]
    content: Annotated[str, Field(max_length=5000)]


class Add(_Action):
    operation: Literal["ADD"]
    memory: Text


class Update(_Action):
    operation: Literal["UPDATE"]
    old_memory: Annotated[str, Field(min_length=1)]
    new_memory: Text


class Merge(_Action):
    operation: Literal["MERGE"]
    old_memories: Annotated[list[str], Field(min_length=2, max_length=5)]
    new_memory: Text


class Skip(_Action):
    operation: Literal["SKIP"]
    reason: str = ""


#: Which operations each agent may use.
ALLOWED: dict[MemoryType, tuple[type[_Action], ...]] = {
    MemoryType.CORE: (CoreAppend, CoreReplace, CoreRewrite, Skip),
    MemoryType.EPISODIC: (Add, Update, Merge),
    MemoryType.SEMANTIC: (Add, Update, Skip),
    MemoryType.PROCEDURAL: (Add, Update),
}


def _response_model(memory_type: MemoryType) -> type[BaseModel]:
    union = Annotated[functools.reduce(operator.or_, ALLOWED[memory_type]), Field(discriminator="operation")]
    if memory_type is MemoryType.CORE:
        return pydantic.RootModel[union]  # type: ignore[valid-type]
    return pydantic.create_model(
        f"{memory_type.value.title()}Operations",
        __config__=ConfigDict(extra="forbid"),
        operations=(Annotated[list[union], Field(max_length=10)], ...),  # type: ignore[valid-type]
    )


_MODELS = {t: _response_model(t) for t in ALLOWED}


def action_schema(memory_type: MemoryType | str) -> dict[str, Any]:
    """JSON schema of a valid answer of the agent for ``memory_type`` (for constrained decoding)."""
    return clean_schema(_MODELS[MemoryType.parse(memory_type)].model_json_schema())


def parse_actions(memory_type: MemoryType | str, output: str | dict[str, Any]) -> list[_Action]:
    """Validate a model's answer into actions; raises ValueError with a readable reason."""
    mtype = MemoryType.parse(memory_type)
    data = extract_json(output) if isinstance(output, str) else output
    try:
        parsed = _MODELS[mtype].model_validate(data)
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "answer"
        raise ValueError(f"invalid {mtype.value} actions at '{where}': {first['msg']}") from None
    return [parsed.root] if mtype is MemoryType.CORE else list(parsed.operations)


#: Action fields holding text an agent writes into memory (the others refer to memory or explain).
_WRITTEN = ("memory", "new_memory", "content", "new_text")


@dataclass
class ActionReport:
    """What happened to one agent's answer: parse failure, or which actions applied and which failed."""

    memory_type: MemoryType
    parse_error: str | None = None
    applied: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)

    @property
    def parsed(self) -> bool:
        return self.parse_error is None

    @property
    def skips(self) -> int:
        """SKIPs among the applied actions: answers that left their memory as it was, on purpose."""
        return sum(1 for a in self.applied if a.get("operation") == "SKIP")

    @property
    def written_chars(self) -> int:
        """Characters of memory text the answer wrote (applied or not): the new contents of ADD, UPDATE,
        MERGE, APPEND, REPLACE and REWRITE, without JSON, ids, quoted old texts or SKIP reasons. ADRPO's
        length penalty measures this, on the policy and on the expert alike."""
        return sum(len(str(a.get(k) or "")) for a in (*self.applied, *self.failed) for k in _WRITTEN)

    def to_dict(self) -> dict[str, Any]:
        return {
            "memory_type": self.memory_type.value,
            "parse_error": self.parse_error,
            "applied": self.applied,
            "failed": self.failed,
        }


def _norm(s: str) -> str:
    return " ".join(s.lower().split())


def _own(item: Any, origin: str | None) -> Any:
    """``item``, when a writer that labels its items (``metadata["origin"]``, the ``union`` builder's notes)
    may edit it: only items of its own origin; a raw turn beside the notes is never rewritten by them."""
    if origin is not None and (item.metadata or {}).get("origin") != origin:
        raise ValueError(
            f"[{item.id}] is not one of this agent's {origin} memories: it can only change those"
        )
    return item


async def resolve(
    memory: AsyncMemory,
    ns: str,
    mtype: MemoryType,
    ref: str,
    *,
    min_ratio: float = 0.75,
    origin: str | None = None,
) -> MemoryItem:
    """The memory an action refers to: by id, by exact text, else the closest text among the top hits.
    ``origin``: only items whose ``metadata["origin"]`` is that (a labelled writer edits its own items)."""
    try:
        item = await memory.get(ref.strip(), namespace=ns)
        if item.type is mtype:
            return _own(item, origin)
    except MemrlError as e:
        if is_infrastructure(e):
            raise
    hits = await memory.search(ref, namespace=ns, types=[mtype], top_k=5)
    if origin is not None:
        hits = [h for h in hits if (h.item.metadata or {}).get("origin") == origin]
    target = _norm(ref)
    best, best_ratio = None, 0.0
    for h in hits:
        ratio = difflib.SequenceMatcher(None, target, _norm(h.item.content)).ratio()
        if ratio > best_ratio:
            best, best_ratio = h.item, ratio
    if best is None or best_ratio < min_ratio:
        raise NotFoundError(f"no {mtype.value} memory matches {ref[:80]!r}; quote an existing memory exactly")
    return best


async def apply_actions(
    memory: AsyncMemory,
    namespace: str,
    memory_type: MemoryType | str,
    output: str | dict[str, Any],
    *,
    session: str | None = None,
    evidence: tuple[str, ...] = (),
    metadata: dict[str, Any] | None = None,
    actor: str = "membuilder",
) -> ActionReport:
    """Parse one agent's answer and apply its actions in order. A bad answer changes nothing; a bad action
    (say, an UPDATE of a memory that does not exist) is recorded as failed and the others still apply."""
    mtype = MemoryType.parse(memory_type)
    report = ActionReport(mtype)
    try:
        actions = parse_actions(mtype, output)
    except ValueError as e:
        report.parse_error = str(e)
        return report
    meta = dict(metadata or {})
    for action in actions:
        record = action.model_dump()
        try:
            written = await _apply_one(memory, namespace, mtype, action, session, evidence, meta, actor)
        except (MemrlError, ValueError) as e:
            if is_infrastructure(e):  # the store or embedder failed, not the action: the caller decides
                raise
            report.failed.append({**record, "error": str(e)})
        else:
            report.applied.append({**record, "item_id": written} if written else record)
    return report


async def _apply_one(
    memory: AsyncMemory,
    ns: str,
    mtype: MemoryType,
    action: _Action,
    session: str | None,
    evidence: tuple[str, ...],
    meta: dict[str, Any],
    actor: str,
) -> str | None:
    """Apply one action; the id of the memory item it wrote (None for core memory and SKIP)."""
    if isinstance(action, CoreAppend):
        await memory.core_append(action.content, namespace=ns, actor=actor)
    elif isinstance(action, CoreReplace):
        await memory.core_replace(action.old_text, action.new_text, namespace=ns, actor=actor)
    elif isinstance(action, CoreRewrite):
        await memory.core_rewrite(action.content, namespace=ns, actor=actor)
    elif isinstance(action, Add):
        same = memory.store.find_content(ns, action.memory, mtype)
        if same is not None:  # a repeat adds nothing but crowds the reader's top-k
            raise ValueError(f"this {mtype.value} memory is already stored, as [{same}]; add something new")
        item = await memory.add(
            action.memory,
            namespace=ns,
            type=mtype,
            metadata=meta,
            evidence=evidence,
            session=session,
            actor=actor,
        )
        return item.id
    elif isinstance(action, Update):
        old = await resolve(memory, ns, mtype, action.old_memory, origin=meta.get("origin"))
        ev = tuple(dict.fromkeys((*old.evidence, *evidence)))
        item = await memory.update(old.id, action.new_memory, namespace=ns, evidence=ev, actor=actor)
        return item.id
    elif isinstance(action, Merge):
        olds = [
            await resolve(memory, ns, mtype, ref, origin=meta.get("origin")) for ref in action.old_memories
        ]
        ids = list(dict.fromkeys(o.id for o in olds))
        if len(ids) < 2:
            raise ValueError("MERGE needs at least two different existing memories")
        item = await memory.merge(ids, action.new_memory, namespace=ns, evidence=evidence, actor=actor)
        return item.id
    return None  # core memory has no item id; SKIP (core's or an item agent's) does nothing

"""One validation schema for everything that enters the store, whichever way it comes in.

The types here (pydantic) are used by the store's own checks (so the Python API, the CLI and the
browser's forms go through them), by the REST API's and the MCP server's request models (the service
tools are annotated with them: :mod:`memrl.tools.service`), and by imports, whose every line is parsed as
an :data:`ExportLine` before anything is written (:mod:`memrl.memory.store.transfer`). A bad value raises
:class:`~memrl.errors.ValidationError` naming the field; nothing is written.

Rules: every string is text the store can keep (:mod:`memrl.memory.records.values`: no NUL, no lone surrogate)
and every number fits both back-ends (64-bit integers, finite floats); names (namespaces, ids, sessions,
evidence ids, metadata and filter keys) are non-empty, bounded and free of control characters (a CR/LF in
a name once broke the HTTP export), and an item id is not one of the store's own (``__core__``); item
text is non-blank and bounded; metadata is a JSON object of bounded size and depth whose keys the store
itself derives (``text``, ``vector_key``, ``dense``) have their types; timestamps are real times; flags
are real booleans (``"no"`` is not false); evidence is a list of strings (a string is not split into
characters); history snapshots are item snapshots (or a core memory text). Minimal hand-written import
lines work: what an item line leaves out (timestamps, metadata, evidence, history) gets a default.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

import pydantic
from pydantic import AfterValidator, Field, StrictBool, StrictFloat, StrictInt, StrictStr, TypeAdapter

from memrl.errors import ValidationError
from memrl.memory.records import values as V

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: Largest item text by default (a store may be opened with a smaller or larger ``max_content_chars``).
MAX_CONTENT = 10_000
MAX_METADATA_CHARS = 100_000
MAX_OFFSET = 2**62  # SQLite integers are 64-bit: a larger OFFSET overflows


def _stored(value: str) -> str:
    """Any text the store keeps (:func:`memrl.memory.records.values.text_problem`)."""
    problem = V.text_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _plain(value: str) -> str:
    m = _CONTROL.search(value)
    if m:
        raise ValueError(
            f"contains the control character {m.group(0)!r}; names cannot hold control characters"
        )
    return _stored(value)


def _text(value: str) -> str:
    if not value.strip():
        raise ValueError("is empty (blank)")
    return _stored(value)


def _item_id(value: str) -> str:
    if V.reserved_id(value):
        raise ValueError(f"{value!r} is reserved: ids of the form __name__ are the store's own")
    return value


_VECTOR_KEY = re.compile(r"^v:[0-9a-f]{64}$")
#: Metadata keys the store derives itself, and what their values must be.
DERIVED_TYPES: dict[str, tuple[Any, str]] = {
    "text": (lambda v: isinstance(v, str), "a string"),
    "dense": (lambda v: isinstance(v, bool), "true or false"),
    "vector_key": (lambda v: isinstance(v, str) and bool(_VECTOR_KEY.match(v)), "'v:' and 64 hex digits"),
}


def _json_object(value: dict[str, Any]) -> dict[str, Any]:
    """Metadata: a JSON object that follows :mod:`memrl.memory.records.values`, returned as the store will give it
    back (tuples become lists)."""
    problem = V.json_problem(value)
    if problem:
        raise ValueError(problem)
    for key, (ok, what) in DERIVED_TYPES.items():
        if key in value and not ok(value[key]):
            raise ValueError(f"{key} must be {what} (the store derives it)")
    text = json.dumps(value, ensure_ascii=False)
    if len(text) > MAX_METADATA_CHARS:
        raise ValueError(f"is {len(text)} characters of JSON; at most {MAX_METADATA_CHARS}")
    return json.loads(text)


def _number(value: Any) -> Any:
    problem = V.number_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _timestamp(value: float) -> float:
    problem = V.timestamp_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def StoredText(max_length: int) -> Any:  # noqa: N802 (a type factory)
    """Free text the store keeps apart from items (core memory, retrieval keys, history actors)."""
    return Annotated[StrictStr, Field(max_length=max_length), AfterValidator(_stored)]


def Name(max_length: int) -> Any:  # noqa: N802 (a type factory)
    return Annotated[StrictStr, Field(min_length=1, max_length=max_length), AfterValidator(_plain)]


Namespace = Name(200)
#: An item's id: a name that is not one of the store's own (``__core__``).
MemoryId = Annotated[Name(64), AfterValidator(_item_id)]
#: What history and undo take: an item's id, or ``__core__`` for the core memory block.
HistoryId = Name(64)
Session = Annotated[StrictStr, Field(max_length=200), AfterValidator(_plain)]
EvidenceId = Name(200)
Evidence = Annotated[list[EvidenceId], Field(max_length=100)]
Content = Annotated[StrictStr, Field(min_length=1, max_length=MAX_CONTENT), AfterValidator(_text)]
Seq = Annotated[StrictInt, Field(ge=0, le=V.INT_MAX)]
ItemType = Literal["episodic", "semantic", "procedural"]
#: The type of a new memory when none is given, over REST, MCP and the Python API alike.
DEFAULT_TYPE: ItemType = "semantic"
Metadata = Annotated[dict[Name(200), Any], AfterValidator(_json_object)]
Timestamp = Annotated[StrictFloat | StrictInt, AfterValidator(_timestamp)]
FilterValue = (
    Annotated[StrictStr, AfterValidator(_stored)]
    | StrictBool
    | Annotated[StrictInt | StrictFloat, AfterValidator(_number)]
    | None
)
#: Metadata conditions: key -> value (JSON null matches a null value) or a list of accepted values.
Filters = Annotated[
    dict[Name(200), FilterValue | Annotated[list[FilterValue], Field(max_length=100)]], Field(max_length=20)
]
Offset = Annotated[int, Field(ge=0, le=MAX_OFFSET)]


class _Line(pydantic.BaseModel):
    # defer_build: the validators are built by the first import or export that needs them, not when the
    # store opens (building them all took ~0.2 s of every `memrl memory list`)
    model_config = pydantic.ConfigDict(extra="forbid", defer_build=True)


class HeaderLine(_Line):
    kind: Literal["header"]
    format: Literal["memrl-export"]
    version: Literal[1]
    namespace: Namespace
    exported_at: Timestamp | None = None


class NamespaceLine(_Line):
    kind: Literal["namespace"]
    name: Namespace
    parent: Namespace | None = None
    created_at: Timestamp | None = None


class CoreLine(_Line):
    kind: Literal["core"]
    content: StoredText(100_000)
    char_limit: Annotated[StrictInt, Field(ge=1, le=1_000_000)] | None = None
    updated_at: Timestamp | None = None


class ItemSnapshot(_Line):
    """An item as exported and as history snapshots hold it."""

    id: MemoryId
    namespace: StrictStr | None = None  # replaced by the target namespace on import
    type: ItemType
    content: Content
    metadata: Metadata = {}
    evidence: Evidence = []
    session: Session | None = None
    created_at: Timestamp
    updated_at: Timestamp
    deleted: StrictBool = False


class ItemLine(ItemSnapshot):
    """An item of an export. A hand-written one may leave out its type (semantic), its timestamps (the
    import's time) and its history (``seq``): the import then records its arrival as the item's first
    change (op ``IMPORT``)."""

    kind: Literal["item"]
    type: ItemType = DEFAULT_TYPE
    created_at: Timestamp | None = None  # type: ignore[assignment]
    updated_at: Timestamp | None = None  # type: ignore[assignment]
    seq: Seq | None = None


class CoreSnapshot(_Line):
    content: StoredText(100_000)


class HistoryLine(_Line):
    kind: Literal["history"]
    seq: Annotated[StrictInt, Field(ge=1, le=V.INT_MAX)]
    memory_id: HistoryId
    op: Annotated[StrictStr, Field(min_length=1, max_length=40, pattern=r"^[A-Z_]+$")]
    old: ItemSnapshot | CoreSnapshot | None
    new: ItemSnapshot | CoreSnapshot | None
    at: Timestamp
    actor: StoredText(200) | None = None
    batch: StoredText(100) | None = None
    undone: StrictBool = False
    #: seq (in this export) of the UNDO that reverted the entry, so a rollback after an import still knows
    #: when it was undone; absent in older exports (then treated as undone before any later point)
    undone_by: Seq | None = None

    def misfit(self) -> tuple[str, str] | None:
        """(field, message) when the snapshots do not fit the entry (checked by the import, which names
        the field), else None."""
        from memrl.memory.records.types import CORE_ID

        want = CoreSnapshot if self.memory_id == CORE_ID else ItemSnapshot
        for name in ("old", "new"):
            snap = getattr(self, name)
            if snap is not None and not isinstance(snap, want):
                what = "a core memory {content}" if want is CoreSnapshot else "an item snapshot"
                return name, f"must be {what} for memory_id {self.memory_id!r}"
            if isinstance(snap, ItemSnapshot) and snap.id != self.memory_id:
                return name, f"holds item {snap.id!r}, not the entry's memory_id {self.memory_id!r}"
        if self.old is None and self.new is None:
            return "new", "old and new cannot both be null"
        return None


class KeysLine(_Line):
    kind: Literal["keys"]
    id: MemoryId
    keys: StoredText(2000)


ExportLine = Annotated[
    HeaderLine | NamespaceLine | CoreLine | ItemLine | HistoryLine | KeysLine, Field(discriminator="kind")
]
EXPORT_LINE: TypeAdapter[Any] = TypeAdapter(ExportLine, config=pydantic.ConfigDict(defer_build=True))


_UNION_TAGS = frozenset({"str", "bool", "int", "float", "none", "list[...]", "ItemSnapshot", "CoreSnapshot"})


def describe(e: pydantic.ValidationError, prefix: str = "") -> tuple[str, str]:
    """(path of the first offending field, a one-line message naming each problem) of a pydantic error."""
    problems: dict[str, str] = {}
    # a rule's own message ("is not a finite number") says more than a union's "Input should be a string"
    for err in sorted(e.errors(), key=lambda err: err["type"] != "value_error"):
        loc = [str(x) for x in err.get("loc", ()) if not str(x).startswith("function-")]
        loc = [x for x in loc if x not in _UNION_TAGS and "[" not in x and not x.startswith("constrained-")]
        if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc = [*loc, "kind"]
        path = ".".join([prefix, *loc] if prefix else loc) or "value"
        msg = (
            "unknown field" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        )
        problems.setdefault(path, msg)
    first = next(iter(problems), prefix or "value")
    text = "; ".join(f"{k}: {v}" for k, v in list(problems.items())[:4])
    return first, text + ("; ..." if len(problems) > 4 else "")


#: kind's id -> (kind, its adapter); kind is kept so its id is never reused for another type. Keyed by id,
#: not by repr(kind): the repr of an Annotated type with its Field costs more than validating (most of
#: add_many's time on 500-item batches).
_ADAPTERS: dict[int, tuple[Any, TypeAdapter[Any]]] = {}


def check(field: str, value: Any, kind: Any) -> Any:
    """``value`` validated as ``kind`` (one of this module's types); raises ValidationError naming
    ``field``."""
    entry = _ADAPTERS.get(id(kind))
    if entry is None or entry[0] is not kind:
        if len(_ADAPTERS) >= 256:  # a caller building its type per call: bounded, not a leak
            _ADAPTERS.clear()
        entry = _ADAPTERS[id(kind)] = (kind, TypeAdapter(kind))
    adapter = entry[1]
    try:
        return adapter.validate_python(value)
    except pydantic.ValidationError as e:
        name, message = describe(e, field)
        raise ValidationError(message, field=name) from None

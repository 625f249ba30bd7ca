"""One validation schema for everything that enters the store, whichever way it comes in.

The types here (pydantic) are used by the store's own checks (so the Python API, the CLI and the
browser's forms go through them), by the REST API's and the MCP server's request models (the service
tools are annotated with them: :mod:`memrl.tools.service`), and by imports, whose every line is parsed as
an :data:`ExportLine` before anything is written (:mod:`memrl.memory.transfer`). A bad value raises
:class:`~memrl.errors.ValidationError` naming the field; nothing is written.

Rules: names (namespaces, ids, sessions, evidence ids, metadata and filter keys) are non-empty, bounded and
free of control characters (a CR/LF in a name once broke the HTTP export); item text is non-blank,
bounded, without NUL; flags are real booleans (``"no"`` is not false); evidence is a list of strings
(a string is not split into characters); history snapshots are item snapshots (or a core memory text).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

import pydantic
from pydantic import AfterValidator, Field, StrictBool, StrictFloat, StrictInt, StrictStr, TypeAdapter

from memrl.errors import ValidationError

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: Largest item text by default (a store may be opened with a smaller or larger ``max_content_chars``).
MAX_CONTENT = 10_000
MAX_METADATA_CHARS = 100_000
MAX_OFFSET = 2**62  # SQLite integers are 64-bit: a larger OFFSET overflows


def _plain(value: str) -> str:
    m = _CONTROL.search(value)
    if m:
        raise ValueError(
            f"contains the control character {m.group(0)!r}; names cannot hold control characters"
        )
    return value


def _text(value: str) -> str:
    if not value.strip():
        raise ValueError("is empty (blank)")
    if "\x00" in value:
        raise ValueError("contains a NUL character")
    return value


def _json_object(value: dict[str, Any]) -> dict[str, Any]:
    try:
        size = len(json.dumps(value, ensure_ascii=False, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise ValueError(f"is not JSON-serialisable ({e})") from None
    if size > MAX_METADATA_CHARS:
        raise ValueError(f"is {size} characters of JSON; at most {MAX_METADATA_CHARS}")
    return value


def Name(max_length: int) -> Any:  # noqa: N802 (a type factory)
    return Annotated[StrictStr, Field(min_length=1, max_length=max_length), AfterValidator(_plain)]


Namespace = Name(200)
MemoryId = Name(64)
Session = Annotated[StrictStr, Field(max_length=200), AfterValidator(_plain)]
EvidenceId = Name(200)
Evidence = Annotated[list[EvidenceId], Field(max_length=100)]
Content = Annotated[StrictStr, Field(min_length=1, max_length=MAX_CONTENT), AfterValidator(_text)]
ItemType = Literal["episodic", "semantic", "procedural"]
#: The type of a new memory when none is given, over REST, MCP and the Python API alike.
DEFAULT_TYPE: ItemType = "semantic"
Metadata = Annotated[dict[Name(200), Any], AfterValidator(_json_object)]
Timestamp = StrictFloat | StrictInt
FilterValue = StrictStr | StrictBool | StrictInt | StrictFloat | None
#: Metadata conditions: key -> value (JSON null matches a null value) or a list of accepted values.
Filters = Annotated[
    dict[Name(200), FilterValue | Annotated[list[FilterValue], Field(max_length=100)]], Field(max_length=20)
]
Offset = Annotated[int, Field(ge=0, le=MAX_OFFSET)]


class _Line(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")


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
    content: Annotated[StrictStr, Field(max_length=100_000)]
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
    kind: Literal["item"]
    seq: StrictInt | None = None


class CoreSnapshot(_Line):
    content: Annotated[StrictStr, Field(max_length=100_000)]


class HistoryLine(_Line):
    kind: Literal["history"]
    seq: StrictInt
    memory_id: Name(64)
    op: Annotated[StrictStr, Field(min_length=1, max_length=40, pattern=r"^[A-Z_]+$")]
    old: ItemSnapshot | CoreSnapshot | None
    new: ItemSnapshot | CoreSnapshot | None
    at: Timestamp
    actor: Annotated[StrictStr, Field(max_length=200)] | None = None
    batch: Annotated[StrictStr, Field(max_length=100)] | None = None
    undone: StrictBool = False

    def misfit(self) -> tuple[str, str] | None:
        """(field, message) when the snapshots do not fit the entry (checked by the import, which names
        the field), else None."""
        from memrl.memory.history import CORE_ID

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
    keys: Annotated[StrictStr, Field(max_length=2000)]


ExportLine = Annotated[
    HeaderLine | NamespaceLine | CoreLine | ItemLine | HistoryLine | KeysLine, Field(discriminator="kind")
]
EXPORT_LINE: TypeAdapter[Any] = TypeAdapter(ExportLine)


_UNION_TAGS = frozenset({"str", "bool", "int", "float", "none", "list[...]", "ItemSnapshot", "CoreSnapshot"})


def describe(e: pydantic.ValidationError, prefix: str = "") -> tuple[str, str]:
    """(path of the first offending field, a one-line message naming each problem) of a pydantic error."""
    problems: dict[str, str] = {}
    for err in e.errors():
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


_ADAPTERS: dict[str, TypeAdapter[Any]] = {}


def check(field: str, value: Any, kind: Any) -> Any:
    """``value`` validated as ``kind`` (one of this module's types); raises ValidationError naming
    ``field``."""
    adapter = _ADAPTERS.get(field + repr(kind))
    if adapter is None:
        adapter = _ADAPTERS[field + repr(kind)] = TypeAdapter(kind)
    try:
        return adapter.validate_python(value)
    except pydantic.ValidationError as e:
        name, message = describe(e, field)
        raise ValidationError(message, field=name) from None

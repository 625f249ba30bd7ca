"""Export a namespace to JSON lines and import it back, losslessly: items (deleted ones too), core memory,
and the whole history (so undo still works after an import).

    lines = list(export_namespace(store, "alice"))          # dicts, one per JSONL line
    import_namespace(store, lines, namespace="alice-copy")  # a new namespace, same ids and history
    write_jsonl(store, "alice", "alice.jsonl"); read_jsonl(store, "alice.jsonl", namespace="bob")

The format (``"format": "memrl-export"``, version 1) is one object per line, each with a ``kind``:
``header`` (first), ``namespace``, ``core`` (when the namespace has core memory), ``item`` (every item,
with its ``deleted`` flag), ``history`` (every change, oldest first, with old/new snapshots, actor, batch
and undone flag), ``keys`` (an item's retrieval keys, :mod:`memrl.memory.keys`). Cached embeddings are not exported: they are recomputed from content on first search.

An import is one transaction: either the whole namespace arrives or nothing changes. It refuses a target
namespace that already exists (unless ``overwrite``) and any malformed line, naming its line number and
field.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from memrl.errors import NotFoundError, ValidationError
from memrl.memory.types import MemoryItem
from memrl.memory.validation import content_hash

FORMAT = "memrl-export"
VERSION = 1

_ITEM_FIELDS = ("id", "type", "content", "metadata", "evidence", "session", "created_at", "updated_at")
_HISTORY_FIELDS = ("seq", "memory_id", "op", "old", "new", "at", "actor", "batch", "undone")


def export_namespace(store: Any, ns: str) -> Iterator[dict[str, Any]]:
    """The lines of an export of ``ns`` (see the module docstring), as dicts. Raises if ``ns`` is unknown."""
    rows = store.read("SELECT name, parent, created_at FROM namespaces WHERE name = ?", (ns,))
    if not rows or ns not in {n["name"] for n in store.namespaces()}:
        raise NotFoundError(f"namespace {ns!r} does not exist")
    yield {
        "kind": "header",
        "format": FORMAT,
        "version": VERSION,
        "namespace": ns,
        "exported_at": time.time(),
    }
    yield {"kind": "namespace", "name": rows[0][0], "parent": rows[0][1], "created_at": rows[0][2]}
    core = store.read("SELECT content, char_limit, updated_at FROM core WHERE namespace = ?", (ns,))
    if core:
        yield {"kind": "core", "content": core[0][0], "char_limit": core[0][1], "updated_at": core[0][2]}
    seqs = dict(store.read("SELECT id, seq FROM memories WHERE namespace = ?", (ns,)))
    for item in store.list(ns, include_deleted=True):
        yield {"kind": "item", **item.to_dict(), "seq": seqs[item.id]}
    for mid, text in store.get_keys(ns).items():
        yield {"kind": "keys", "id": mid, "keys": text}
    for e in store.read(
        "SELECT seq, memory_id, op, old, new, at, actor, batch, undone FROM history WHERE namespace = ? "
        "ORDER BY seq",
        (ns,),
    ):
        yield {
            "kind": "history", "seq": e[0], "memory_id": e[1], "op": e[2],
            "old": None if e[3] is None else json.loads(e[3]), "new": None if e[4] is None else json.loads(e[4]),
            "at": e[5], "actor": e[6], "batch": e[7], "undone": bool(e[8]),
        }  # fmt: skip


def _need(line: dict[str, Any], n: int, fields: Iterable[str]) -> None:
    missing = [f for f in fields if f not in line]
    if missing:
        raise ValidationError(f"import line {n} ({line.get('kind')}): missing field(s) {', '.join(missing)}")


def _renamed(snapshot: Any, ns: str) -> Any:
    return (
        {**snapshot, "namespace": ns} if isinstance(snapshot, dict) and "namespace" in snapshot else snapshot
    )


def parse_lines(lines: Iterable[str | dict[str, Any]]) -> list[dict[str, Any]]:
    """JSON lines (text or already-parsed dicts) to dicts, with a clear error naming a bad line."""
    out = []
    for n, raw in enumerate(lines, 1):
        if isinstance(raw, str):
            if not raw.strip():
                continue
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError as e:
                raise ValidationError(
                    f"import line {n}: not valid JSON ({e.msg} at column {e.colno})"
                ) from None
        if not isinstance(raw, dict) or "kind" not in raw:
            raise ValidationError(f"import line {n}: expected a JSON object with a 'kind' field")
        out.append(raw)
    if not out or out[0].get("kind") != "header" or out[0].get("format") != FORMAT:
        raise ValidationError(f"import: the first line must be the header of a {FORMAT} file")
    if out[0].get("version") != VERSION:
        raise ValidationError(
            f"import: unsupported {FORMAT} version {out[0].get('version')!r} (this is {VERSION})"
        )
    return out


def import_namespace(
    store: Any,
    lines: Iterable[str | dict[str, Any]],
    *,
    namespace: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Import an export into ``namespace`` (default: the exported one); returns where and how much arrived."""
    parsed = parse_lines(lines)
    ns = store._check_namespace(namespace or parsed[0].get("namespace"))
    items, history, core, meta, keys = [], [], None, {}, []
    for n, line in enumerate(parsed, 1):
        kind = line["kind"]
        if kind == "item":
            _need(line, n, (*_ITEM_FIELDS, "deleted"))
            try:
                item = MemoryItem.from_dict({**line, "namespace": ns})
            except (TypeError, ValueError) as e:
                raise ValidationError(f"import line {n} (item): {e}") from None
            store.check_content(item.content)
            store.check_type(item.type)
            store._check_metadata(item.metadata)
            items.append((item, line.get("seq")))
        elif kind == "history":
            _need(line, n, _HISTORY_FIELDS)
            history.append(line)
        elif kind == "core":
            _need(line, n, ("content",))
            core = line
        elif kind == "namespace":
            meta = line
        elif kind == "keys":
            _need(line, n, ("id", "keys"))
            keys.append((n, line))
        elif kind != "header":
            raise ValidationError(f"import line {n}: unknown kind {kind!r}")
    ids = [i.id for i, _ in items]
    if len(set(ids)) != len(ids):
        raise ValidationError("import: an item id appears twice")
    known = set(ids)
    for n, line in keys:
        if line["id"] not in known or not isinstance(line["keys"], str):
            raise ValidationError(f"import line {n} (keys): no item {line['id']!r}, or keys not a string")
    now = time.time()
    with store.transaction(ns) as c:
        if c.execute("SELECT 1 FROM namespaces WHERE name = ?", (ns,)).fetchone():
            if not overwrite and ns in {x["name"] for x in store.namespaces()}:
                raise ValidationError(
                    f"namespace {ns!r} already exists (import with overwrite to replace it)"
                )
            store._drop(ns)
        store._ensure_namespace(ns)
        c.execute(
            "UPDATE namespaces SET parent = ?, created_at = ? WHERE name = ?",
            (meta.get("parent"), meta.get("created_at") or now, ns),
        )
        new_seq: dict[int, int] = {}
        for h in history:
            cur = c.execute(
                "INSERT INTO history (namespace, memory_id, op, old, new, at, actor, batch, undone) "
                "VALUES (?,?,?,?,?,?,?,?,?) RETURNING seq",
                (ns, h["memory_id"], h["op"],
                 None if h["old"] is None else json.dumps(_renamed(h["old"], ns)),
                 None if h["new"] is None else json.dumps(_renamed(h["new"], ns)),
                 h["at"], h["actor"], h["batch"], int(bool(h["undone"]))),
            )  # fmt: skip
            new_seq[h["seq"]] = int(cur.fetchone()[0])
        rids = []
        for item, seq in items:
            rids.append(c.execute(
                "INSERT INTO memories (namespace, id, type, content, content_hash, metadata, evidence, session, "
                "created_at, updated_at, deleted, seq) VALUES (?,?,?,?,?,?,?,?,?,?,?,?) RETURNING rid",
                (ns, item.id, item.type.value, item.content, content_hash(item.content), json.dumps(item.metadata),
                 json.dumps(list(item.evidence)), item.session, item.created_at, item.updated_at,
                 int(item.deleted), new_seq.get(seq, 0)),
            ).fetchone()[0])  # fmt: skip
        store._lex_changed(rids)
        c.executemany(
            "INSERT INTO memory_keys (rid, keys, updated_at) SELECT rid, ?, ? FROM memories "
            "WHERE namespace = ? AND id = ?",
            [(line["keys"], now, ns, line["id"]) for _, line in keys],
        )
        store._keys_changed(rids)
        if core is not None:
            c.execute(
                "INSERT INTO core (namespace, content, char_limit, updated_at) VALUES (?,?,?,?)",
                (
                    ns,
                    core["content"],
                    core.get("char_limit") or store.core_limit,
                    core.get("updated_at") or now,
                ),
            )
    return {"namespace": ns, "items": len(items), "history": len(history), "core": int(core is not None)}


def write_jsonl(store: Any, ns: str, path: str | Path) -> int:
    """Export ``ns`` to a JSONL file; returns the number of lines written."""
    n = 0
    with Path(path).open("w", encoding="utf-8") as f:
        for line in export_namespace(store, ns):
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
            n += 1
    return n


def read_jsonl(
    store: Any, path: str | Path, *, namespace: str | None = None, overwrite: bool = False
) -> dict:
    """Import a JSONL export file (see :func:`import_namespace`)."""
    with Path(path).open(encoding="utf-8") as f:
        return import_namespace(store, f, namespace=namespace, overwrite=overwrite)

"""Export a namespace to JSON lines and import it back, losslessly: items (deleted ones too), core memory,
and the whole history (so undo still works after an import).

    lines = list(export_namespace(store, "alice"))          # dicts, one per JSONL line
    import_namespace(store, lines, namespace="alice-copy")  # a new namespace, same ids and history
    write_jsonl(store, "alice", "alice.jsonl"); read_jsonl(store, "alice.jsonl", namespace="bob")

The format (``"format": "memrl-export"``, version 1) is one object per line, each with a ``kind``:
``header`` (first), ``namespace``, ``core`` (when the namespace has core memory), ``item`` (every item,
with its ``deleted`` flag), ``history`` (every change, oldest first, with old/new snapshots, actor, batch
and undone flag), ``keys`` (an item's retrieval keys, :mod:`memrl.memory.store.keys`). Cached embeddings are not exported: they are recomputed from content on first search.

An import is read line by line (:class:`ImportReader`: each line validated against the one schema of
:mod:`memrl.memory.records.models`, good lines spooled to a temporary file), then written in one transaction:
either the whole namespace arrives or nothing changes. It refuses a target namespace that already exists
(unless ``overwrite``) and, with a report naming each bad line's number, kind and field, any malformed
line (:class:`ImportRefused`). A hand-written file may be minimal: a header and item lines with ``id``,
``type`` and ``content``; an item without history gets one entry (op ``IMPORT``, undoable like a creation).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pydantic

from memrl.errors import ConflictError, NotFoundError, ValidationError
from memrl.memory.records.models import EXPORT_LINE, describe
from memrl.memory.store.history import CORE_ID
from memrl.memory.store.validation import content_hash

FORMAT = "memrl-export"
VERSION = 1


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
    # an item's seq names its latest history line; a clone's items have none in this namespace (a clone's
    # history starts empty): exported without one, they arrive with an IMPORT entry
    seqs = dict(
        store.read(
            "SELECT m.id, h.seq FROM memories m LEFT JOIN history h ON h.namespace = m.namespace AND h.seq = m.seq "
            "WHERE m.namespace = ?",
            (ns,),
        )
    )
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
            "undone_by": int(e[8]) if e[8] and int(e[8]) > 1 else None,
        }  # fmt: skip


class ImportRefused(ValidationError):
    """An import with bad lines: nothing was written. ``lines`` is the report, one
    ``{"line", "kind", "field", "message"}`` per problem (the first :attr:`ImportReader.max_errors`)."""

    def __init__(self, message: str, lines: list[dict[str, Any]]) -> None:
        super().__init__(message, field=lines[0]["field"] if lines else None)
        self.lines = lines


class ImportReader:
    """Reads an export one line at a time (text lines, bytes chunks as they arrive, or parsed dicts),
    validating each against :data:`memrl.memory.records.models.ExportLine` and the store's limits, and spooling
    the good lines to a temporary file, so memory stays small whatever the size. :meth:`finish` checks what
    spans lines (header first, unique ids and sequence numbers, keys and history naming existing items)
    and raises :class:`ImportRefused` with a line-numbered report if anything was wrong; :meth:`write`
    then imports in one transaction."""

    max_errors = 20
    #: Longest line accepted (bytes): far above the longest valid line (a history line's two snapshots of
    #: the largest content and metadata), so a body without newlines is refused as it arrives instead of
    #: being held whole. A store with longer contents allows proportionally longer lines.
    max_line_bytes = 8 << 20

    def __init__(self, store: Any) -> None:
        self.store = store
        self.n = 0
        self.errors: list[dict[str, Any]] = []
        self.errors_dropped = 0  # bad lines past max_errors: counted, not listed
        self.header: dict[str, Any] | None = None
        self.meta: dict[str, Any] = {}
        self.core: dict[str, Any] | None = None
        self.ids: dict[str, int] = {}
        self.seqs: set[int] = set()
        self.counts = {"items": 0, "history": 0, "keys": 0}
        self._refs: list[tuple[int, str, str, str]] = []  # (line, kind, field, item id) to check at the end
        self._item_seqs: list[tuple[int, int]] = []
        self._spool = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115 (closed by close())
        self.max_line_bytes = max(self.max_line_bytes, 16 * getattr(store, "max_content_chars", 0))
        self._partial: list[bytes] = []  # the pieces of the line being received (joined once, when it ends)
        self._partial_len = 0
        self._skipping = False  # inside a line already refused as too long: its bytes are dropped

    def error(self, n: int, kind: str | None, field: str, message: str) -> None:
        if len(self.errors) < self.max_errors:
            self.errors.append({"line": n, "kind": kind, "field": field, "message": message})
        else:
            self.errors_dropped += 1

    def feed_bytes(self, chunk: bytes) -> None:
        """Part of a UTF-8 JSONL body; lines are parsed as soon as they are complete. Each byte is looked at
        once (a line arriving in many chunks is joined once, when it ends), and a line longer than
        :attr:`max_line_bytes` is refused as soon as it is (its remaining bytes are dropped, not held)."""
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            self._piece(chunk[start:end], ended=True)
            start = end + 1
        if start < len(chunk):
            self._piece(chunk[start:], ended=False)

    def _piece(self, piece: bytes, *, ended: bool) -> None:
        if self._skipping:
            self._skipping = not ended
            return
        self._partial_len += len(piece)
        if self._partial_len > self.max_line_bytes:
            self.n += 1
            self.error(self.n, None, "line", f"longer than {self.max_line_bytes} bytes (a line holds one item, "
                       "history entry or core memory; is the file JSON lines?)")  # fmt: skip
            self._partial, self._partial_len, self._skipping = [], 0, not ended
            return
        if not ended:
            self._partial.append(piece)
            return
        raw = b"".join([*self._partial, piece]) if self._partial else piece
        self._partial, self._partial_len = [], 0
        self._feed_raw(raw)

    def _feed_raw(self, raw: bytes) -> None:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            self.n += 1
            return self.error(self.n, None, "line", f"not UTF-8 text (byte {e.start})")
        self.feed(text)

    def feed(self, raw: str | dict[str, Any]) -> None:
        """One line: JSON text (blank lines are skipped but counted) or an already parsed dict."""
        self.n += 1
        n = self.n
        if isinstance(raw, str):
            if not raw.strip():
                return
            try:
                raw = json.loads(raw)
            except (json.JSONDecodeError, RecursionError) as e:
                return self.error(n, None, "line", f"not valid JSON ({getattr(e, 'msg', e)})")
        kind = raw.get("kind") if isinstance(raw, dict) else None
        if self.header is None and kind != "header":
            return self.error(n, kind, "kind", f"the first line must be the header of a {FORMAT} file")
        try:
            line = EXPORT_LINE.validate_python(raw)
        except pydantic.ValidationError as e:
            field, message = describe(e)
            if isinstance(raw, dict) and field == "version" and raw.get("kind") == "header":
                message = f"unsupported {FORMAT} version {raw.get('version')!r} (this is {VERSION})"
            tag = f"{kind}."  # the discriminator's tag leads every path: the report names the kind apart
            field, message = field.removeprefix(tag), message.replace(tag, "")
            return self.error(n, kind, field, message.removeprefix(f"{field}: "))
        self._accept(n, line)

    def _accept(self, n: int, line: Any) -> None:
        kind = line.kind
        if kind == "header":
            if self.header is not None:
                return self.error(n, kind, "kind", "a second header line")
            self.header = line.model_dump()
            return
        if kind == "namespace":
            self.meta = line.model_dump()
            return
        if kind == "core":
            if self.core is not None:
                return self.error(n, kind, "kind", "a second core line")
            if len(line.content) > self.store.core_limit:
                return self.error(n, kind, "content", f"core memory of {len(line.content)} characters; "
                                  f"this store's limit is {self.store.core_limit}")  # fmt: skip
            self.core = line.model_dump()
            return
        if kind == "item":
            if line.id in self.ids:
                return self.error(n, kind, "id", f"id {line.id!r} already on line {self.ids[line.id]}")
            if len(line.content) > self.store.max_content_chars:
                return self.error(n, kind, "content", f"{len(line.content)} characters; this store's limit "
                                  f"is {self.store.max_content_chars}")  # fmt: skip
            self.ids[line.id] = n
            self.counts["items"] += 1
            if line.seq is not None:
                self._item_seqs.append((n, line.seq))
        elif kind == "history":
            misfit = line.misfit()
            if misfit is not None:
                return self.error(n, kind, *misfit)
            if line.seq in self.seqs:
                return self.error(n, kind, "seq", f"sequence number {line.seq} appears twice")
            self.seqs.add(line.seq)
            self.counts["history"] += 1
            if line.memory_id != CORE_ID:
                self._refs.append((n, kind, "memory_id", line.memory_id))
        elif kind == "keys":
            self.counts["keys"] += 1
            self._refs.append((n, kind, "id", line.id))
        self._spool.write(json.dumps(line.model_dump(mode="json"), ensure_ascii=False) + "\n")

    def finish(self) -> dict[str, Any]:
        """Check what spans lines; raise :class:`ImportRefused` if any line was bad. Returns the header."""
        if self._partial:
            raw, self._partial, self._partial_len = b"".join(self._partial), [], 0
            if raw.strip():
                self._feed_raw(raw)
        if self.header is None and not self.errors:
            self.error(1, None, "kind", f"empty: the first line must be the header of a {FORMAT} file")
        for n, kind, field, mid in self._refs if not self.errors else ():  # (else: likely consequences)
            if mid not in self.ids:
                self.error(n, kind, field, f"no item {mid!r} in this export")
        for n, seq in self._item_seqs if not self.errors else ():
            if seq not in self.seqs:
                self.error(n, "item", "seq", f"no history line has sequence number {seq}")
        if self.errors:
            more = self.errors_dropped
            first = self.errors[0]
            where = f"line {first['line']}" + (f" ({first['kind']})" if first["kind"] else "")
            where += f" {first['field']}" if first["field"] != "line" else ""
            raise ImportRefused(
                f"import refused, nothing written: {len(self.errors) + more} bad line(s); {where}: "
                f"{first['message']}",
                self.errors,
            )
        return self.header

    def lines(self) -> Iterator[dict[str, Any]]:
        self._spool.seek(0)
        for text in self._spool:
            yield json.loads(text)

    def write(self, namespace: str | None = None, *, overwrite: bool = False) -> dict[str, Any]:
        """Import what was read into ``namespace`` (default: the exported one), in one transaction."""
        header = self.finish()
        store = self.store
        ns = store._check_namespace(namespace or header["namespace"])
        now = time.time()
        with store.transaction(ns) as c:
            if c.execute("SELECT 1 FROM namespaces WHERE name = ?", (ns,)).fetchone():
                if not overwrite and ns in {x["name"] for x in store.namespaces()}:
                    raise ConflictError(
                        f"namespace {ns!r} already exists (import with overwrite to replace it)"
                    )
                store._drop(ns)
            store._ensure_namespace(ns)
            c.execute(
                "UPDATE namespaces SET parent = ?, created_at = ? WHERE name = ?",
                (self.meta.get("parent"), self.meta.get("created_at") or now, ns),
            )
            new_seq: dict[int, int] = {}
            keys, rids, undone_by, unlogged = [], [], [], []
            for line in self.lines():
                kind = line["kind"]
                if kind == "history":
                    cur = c.execute(
                        "INSERT INTO history (namespace, memory_id, op, old, new, at, actor, batch, undone) "
                        "VALUES (?,?,?,?,?,?,?,?,?) RETURNING seq",
                        (ns, line["memory_id"], line["op"], _snapshot(line["old"], ns), _snapshot(line["new"], ns),
                         line["at"], line["actor"], line["batch"], int(line["undone"])),
                    )  # fmt: skip
                    new_seq[line["seq"]] = int(cur.fetchone()[0])
                    if line.get("undone_by") is not None:
                        undone_by.append((new_seq[line["seq"]], line["undone_by"]))
                elif kind == "item":
                    created = now if line["created_at"] is None else line["created_at"]
                    updated = created if line["updated_at"] is None else line["updated_at"]
                    cur = c.execute(
                        "INSERT INTO memories (namespace, id, type, content, content_hash, metadata, evidence, "
                        "session, created_at, updated_at, deleted, seq) VALUES (?,?,?,?,?,?,?,?,?,?,?,?) "
                        "RETURNING rid",
                        (ns, line["id"], line["type"], line["content"], content_hash(line["content"]),
                         json.dumps(line["metadata"]), json.dumps(line["evidence"]), line["session"],
                         created, updated, int(line["deleted"]), line["seq"] or 0),
                    )  # fmt: skip
                    rids.append(int(cur.fetchone()[0]))
                    if line["seq"] is None:  # hand-written: its arrival becomes its first change
                        unlogged.append(line["id"])
                elif kind == "keys":
                    keys.append(line)
            # an item's seq names a history line of the export: map it to the row that line became
            c.execute("UPDATE memories SET seq = -seq WHERE namespace = ?", (ns,))
            c.executemany(
                "UPDATE memories SET seq = ? WHERE namespace = ? AND seq = ?",
                [(new, ns, -old) for old, new in new_seq.items()],
            )
            c.execute("UPDATE memories SET seq = 0 WHERE namespace = ? AND seq < 0", (ns,))
            for mid in unlogged:
                item = store.get(ns, mid, include_deleted=True)
                seq = store._log(ns, mid, "IMPORT", None, item.to_dict(), None)
                c.execute("UPDATE memories SET seq = ? WHERE namespace = ? AND id = ?", (seq, ns, mid))
            c.executemany(  # an entry remembers which (renumbered) undo reverted it
                "UPDATE history SET undone = ? WHERE seq = ?",
                [(new_seq[by], seq) for seq, by in undone_by if by in new_seq],
            )
            store._lex_changed(rids)
            c.executemany(
                "INSERT INTO memory_keys (rid, keys, updated_at) SELECT rid, ?, ? FROM memories "
                "WHERE namespace = ? AND id = ?",
                [(k["keys"], now, ns, k["id"]) for k in keys if k["keys"].strip()],
            )
            store._keys_changed(rids)
            if self.core is not None:
                c.execute(
                    "INSERT INTO core (namespace, content, char_limit, updated_at) VALUES (?,?,?,?)",
                    (ns, self.core["content"], self.core.get("char_limit") or store.core_limit,
                     self.core.get("updated_at") or now),
                )  # fmt: skip
        return {"namespace": ns, **self.counts, "core": int(self.core is not None), "lines": self.n}

    def close(self) -> None:
        self._spool.close()


def _snapshot(snap: dict[str, Any] | None, ns: str) -> str | None:
    if snap is None:
        return None
    return json.dumps({**snap, "namespace": ns} if "namespace" in snap else snap)


def import_namespace(
    store: Any,
    lines: Iterable[str | dict[str, Any]] | BinaryIO,
    *,
    namespace: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Import an export into ``namespace`` (default: the exported one); returns where and how much
    arrived. ``lines``: text lines, parsed dicts, or a file opened in binary mode (read in chunks, with the
    line limit of :meth:`ImportReader.feed_bytes`: a file without newlines is never held whole). Raises
    :class:`ImportRefused` (a line-numbered report) and writes nothing if a line is bad."""
    reader = ImportReader(store)
    try:
        if hasattr(lines, "read"):
            while chunk := lines.read(1 << 20):
                reader.feed_bytes(chunk)
        else:
            for line in lines:
                reader.feed(line.rstrip("\n") if isinstance(line, str) else line)
        return reader.write(namespace, overwrite=overwrite)
    finally:
        reader.close()


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
    with Path(path).open("rb") as f:
        return import_namespace(store, f, namespace=namespace, overwrite=overwrite)

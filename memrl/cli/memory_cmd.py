"""``memrl memory ...``: add, search, list, get, update, delete, history, undo on a store file; ``remember``
(:mod:`memrl.cli.remember_cmd`) builds memories from a conversation, on a store or a server.

Every command takes ``--db PATH`` (default ``memrl.db``, or ``$MEMRL_DB``), ``--namespace NS`` and
``--json`` (machine-readable output: one JSON document on stdout).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone
from typing import Any

from memrl.cli.common import add_llm_args
from memrl.cli.remember_cmd import add_parser as add_remember
from memrl.errors import ValidationError
from memrl.memory.records import ITEM_TYPES


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--db",
        default=os.environ.get("MEMRL_DB", "memrl.db"),
        help="SQLite file (default: memrl.db) or postgresql:// URL",
    )
    p.add_argument(
        "--namespace", "-n", default="default", help="namespace (user or episode); default: default"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument(
        "--embedder",
        default=os.environ.get("MEMRL_EMBEDDER", "minilm"),
        help="minilm (default, offline), mpnet, hashing[:DIM], openai:MODEL, st:NAME",
    )


def register(sub: argparse._SubParsersAction) -> None:
    mem = sub.add_parser("memory", help="inspect and edit a memory store").add_subparsers(
        dest="action", metavar="ACTION"
    )
    mem.required = True
    types = [t.value for t in ITEM_TYPES]

    p = mem.add_parser("add", help="store a memory")
    p.add_argument("content")
    p.add_argument("--type", default="semantic", choices=types)
    p.add_argument("--metadata", help="JSON object of extra fields")
    p.add_argument("--session")
    p.add_argument("--evidence", nargs="*", default=[], help="source turn ids")
    _common(p)
    p.set_defaults(func=_add)

    p = mem.add_parser("search", help="hybrid search")
    p.add_argument("query")
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--type", action="append", choices=types, help="restrict to a type (repeatable)")
    p.add_argument("--mode", default="hybrid", choices=["hybrid", "dense", "bm25"])
    p.add_argument("--threshold", type=float, help="minimum cosine similarity")
    p.add_argument(
        "--filter", action="append", default=[], metavar="KEY=VALUE", help="metadata equality filter"
    )
    p.add_argument(
        "--keys",
        type=float,
        default=0.0,
        help="weight of the items' retrieval keys (`memory enrich`); 0: off",
    )
    _common(p)
    p.set_defaults(func=_search)

    p = mem.add_parser(
        "enrich",
        help="an LLM writes retrieval keys for the namespace's items (resumable; search them with --keys)",
    )
    p.add_argument("--concurrency", type=int, default=16, help="requests in flight (local: batch size)")
    p.add_argument("--limit", type=int, help="at most this many items in this run (a re-run goes on)")
    add_llm_args(p)
    _common(p)
    p.set_defaults(func=_enrich)

    add_remember(mem, _common)

    p = mem.add_parser("list", help="list memories")
    p.add_argument("--type", action="append", choices=types)
    p.add_argument("--limit", type=int)
    p.add_argument("--deleted", action="store_true", help="include deleted memories")
    _common(p)
    p.set_defaults(func=_list)

    p = mem.add_parser("get", help="show one memory")
    p.add_argument("id")
    _common(p)
    p.set_defaults(func=_get)

    p = mem.add_parser("update", help="replace a memory's content")
    p.add_argument("id")
    p.add_argument("content")
    _common(p)
    p.set_defaults(func=_update)

    p = mem.add_parser("delete", help="delete a memory (recoverable)")
    p.add_argument("id")
    p.add_argument("--reason")
    _common(p)
    p.set_defaults(func=_delete)

    p = mem.add_parser("history", help="changes of a memory (or of the namespace)")
    p.add_argument("id", nargs="?")
    _common(p)
    p.set_defaults(func=_history)

    p = mem.add_parser("undo", help="revert the latest change of a memory (or of the namespace)")
    p.add_argument("id", nargs="?")
    _common(p)
    p.set_defaults(func=_undo)

    p = mem.add_parser("export", help="write a namespace (items, core memory, history) as JSON lines")
    p.add_argument("--output", "-o", help="file to write (default: stdout)")
    _common(p)
    p.set_defaults(func=_export)

    p = mem.add_parser("import", help="read a JSONL export into a new namespace (atomic; history kept)")
    p.add_argument("file", help="a file written by `memrl memory export`")
    p.add_argument("--into", help="target namespace (default: the exported one)")
    p.add_argument("--overwrite", action="store_true", help="replace the target namespace if it exists")
    _common(p)
    p.set_defaults(func=_import)


#: The commands that only read: on a store file that does not exist they say so and create nothing.
_READ_ONLY = ("_search", "_list", "_get", "_history", "_export")


def _open(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from memrl.errors import NotFoundError
    from memrl.memory import Memory, is_postgres_url

    db = str(args.db)
    if (
        args.func.__name__ in _READ_ONLY
        and db != ":memory:"
        and not is_postgres_url(db)
        and not Path(db).exists()
    ):
        raise NotFoundError(
            f"no memory store at {db} (--db): nothing to read; `memrl memory add` creates one"
        )
    # Commands that never embed need no model: a hashing embedder keeps them instant.
    needs_model = args.func in (_add, _search, _update)
    return Memory(args.db, embedder=args.embedder if needs_model else "hashing", namespace=args.namespace)


def _emit(args: argparse.Namespace, data: Any, text: str) -> int:
    if args.json:
        json.dump(data, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        print(text)
    return 0


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _line(item: Any) -> str:
    flag = " [deleted]" if item.deleted else ""
    return f"{item.id}  {item.type.value:<10} {item.content}{flag}"


def _add(args: argparse.Namespace) -> int:
    try:
        meta = json.loads(args.metadata) if args.metadata else {}
    except json.JSONDecodeError as e:
        raise ValidationError(f"--metadata is not valid JSON: {e}") from None
    with _open(args) as m:
        item = m.add(
            args.content,
            type=args.type,
            metadata=meta,
            session=args.session,
            evidence=args.evidence,
            actor="cli",
        )
    return _emit(args, item.to_dict(), item.id)


def _search(args: argparse.Namespace) -> int:
    filters = {}
    for f in args.filter:
        key, sep, value = f.partition("=")
        if not sep:
            raise ValidationError(f"--filter takes KEY=VALUE, got {f!r}")
        filters[key] = value
    with _open(args) as m:
        hits = m.search(
            args.query,
            top_k=args.top_k,
            types=args.type,
            mode=args.mode,
            threshold=args.threshold,
            filters=filters or None,
            keys=args.keys,
        )
    text = "\n".join(f"{h.score:.4f}  {_line(h.item)}" for h in hits) or "(no results)"
    return _emit(args, [h.to_dict() for h in hits], text)


def _enrich(args: argparse.Namespace) -> int:
    from memrl.agents.enrich import EnrichConfig, enrich
    from memrl.cli.common import make_llm

    cfg = EnrichConfig(concurrency=args.concurrency)
    llm = make_llm(args)
    with _open(args) as m:
        stats = m._run(enrich(m.aio, args.namespace, llm, config=cfg, progress=True, limit=args.limit))
    d = stats.to_dict()
    text = (
        f"{d['enriched']} items got keys ({d['calls']} calls, {d['done_before']} had keys already; empty "
        f"{d['empty']}, malformed {d['malformed']}, failed {d['failed']}) in {d['time_s']} s"
    )
    return _emit(args, d, text)


def _list(args: argparse.Namespace) -> int:
    with _open(args) as m:
        items = m.list(types=args.type, limit=args.limit, include_deleted=args.deleted)
    return _emit(args, [i.to_dict() for i in items], "\n".join(_line(i) for i in items) or "(empty)")


def _get(args: argparse.Namespace) -> int:
    with _open(args) as m:
        item = m.get(args.id, include_deleted=True)
    return _emit(args, item.to_dict(), _line(item))


def _update(args: argparse.Namespace) -> int:
    with _open(args) as m:
        item = m.update(args.id, args.content, actor="cli")
    return _emit(args, item.to_dict(), _line(item))


def _delete(args: argparse.Namespace) -> int:
    with _open(args) as m:
        item = m.delete(args.id, reason=args.reason, actor="cli")
    return _emit(args, item.to_dict(), f"deleted {item.id}")


def _history(args: argparse.Namespace) -> int:
    with _open(args) as m:
        entries = m.history(args.id)
    lines = [
        f"#{e.seq} {_when(e.at)} {e.op:<12} {e.memory_id}  {e.old_content!r} -> {e.new_content!r}"
        + (" (undone)" if e.undone else "")
        for e in entries
    ]
    return _emit(args, [e.to_dict() for e in entries], "\n".join(lines) or "(no history)")


def _undo(args: argparse.Namespace) -> int:
    with _open(args) as m:
        entries = m.undo(args.id)
    text = "\n".join(f"undid #{e.seq} {e.op} of {e.memory_id}" for e in entries)
    return _emit(args, [e.to_dict() for e in entries], text)


def _export(args: argparse.Namespace) -> int:
    with _open(args) as m:
        lines = m.export_lines(namespace=args.namespace)
    text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"exported {args.namespace}: {len(lines)} lines to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _import(args: argparse.Namespace) -> int:
    from memrl.memory.store import ImportRefused

    try:
        f = open(args.file, "rb")  # noqa: SIM115 (closed below; read in chunks, never held whole)
    except OSError as e:
        raise ValidationError(f"cannot read {args.file}: {e.strerror}") from None
    with f, _open(args) as m:
        try:
            got = m.import_lines(f, namespace=args.into, overwrite=args.overwrite)
        except ImportRefused as e:  # the whole report, one bad line per row (a line not UTF-8 included)
            for x in e.lines[1:]:
                print(
                    f"{args.file}:{x['line']}: ({x['kind'] or 'line'}) {x['field']}: {x['message']}",
                    file=sys.stderr,
                )
            raise
    text = f"imported {got['items']} items and {got['history']} history entries into {got['namespace']}"
    return _emit(args, got, text)
